"""A config cannot escape the runs directory, blow up in memory, hide a duplicated key or flood an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from textnn.errors import TextnnError
from textnn.resolve import load_config

BASE = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv}
model: {name: cnn, preset: tiny}
"""


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["../escape", "../../etc", "/tmp/absolute", "a/b", "..", ".", "a\\b",
                                  "'x\\ty'", "'" + "n" * 300 + "'"])
def test_a_run_name_that_is_not_one_folder_name_is_refused(tmp_path, name):
    with pytest.raises(TextnnError, match="name") as err:
        load_config(write(tmp_path, f"name: {name}\n" + BASE))
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("value", ["123", "[a, b]", "{a: 1}", "true"])
def test_a_run_name_that_is_not_a_string_is_refused(tmp_path, value):
    with pytest.raises(TextnnError, match="name must be a string"):
        load_config(write(tmp_path, f"name: {value}\n" + BASE))


def test_a_name_override_is_checked_too(tmp_path):
    with pytest.raises(TextnnError, match="command line: name"):
        load_config(write(tmp_path, BASE), ["name=../../x"])


def test_the_config_file_name_is_checked_when_it_names_the_run(tmp_path):
    folder = tmp_path / "dir"
    folder.mkdir()
    assert load_config(write(folder, BASE, "plain-name.yaml")).name == "plain-name"
    with pytest.raises(TextnnError, match="file name"):
        load_config(write(folder, BASE, " spaced.yaml"))


# Six levels of nine aliases each: 9**6 = 531,441 strings from a 300-byte value (the "billion laughs").
BOMB = ('[&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"], '
        + ", ".join(f"&{new} [{', '.join([f'*{old}'] * 9)}]" for old, new in zip("abcde", "bcdef")) + "]")


@pytest.mark.parametrize("where", ["name: {bomb}\n", "train: {{epochs: {bomb}}}\n", "model: {{name: cnn, preset: {bomb}}}\n"])
def test_yaml_aliases_are_refused_before_they_expand(tmp_path, where):
    with pytest.raises(TextnnError, match="alias") as err:
        load_config(write(tmp_path, where.format(bomb=BOMB) + BASE.replace("model: {name: cnn, preset: tiny}\n", "")
                          if where.startswith("model") else where.format(bomb=BOMB) + BASE))
    assert len(str(err.value)) < 400


def test_a_key_given_twice_is_an_error_naming_it_and_its_line(tmp_path):
    with pytest.raises(TextnnError, match=r"cfg.yaml:6.*'lr' appears twice"):
        load_config(write(tmp_path, BASE + "train:\n  lr: 0.1\n  lr: 0.2\n"))
    with pytest.raises(TextnnError, match="'task' appears twice"):
        load_config(write(tmp_path, BASE + "task: tagging\n"))


def test_a_tilde_in_a_data_path_means_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(write(tmp_path, BASE.replace("train: train.tsv", "train: ~/data/train.tsv")))
    assert config.data.train == os.path.join(str(tmp_path), "data", "train.tsv")
    config = load_config(write(tmp_path, BASE), ["data.dev=~/dev.tsv"])
    assert config.data.dev == os.path.join(str(tmp_path), "dev.tsv")


def test_a_tilde_in_the_config_path_means_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path, BASE, "home.yaml")
    assert load_config("~/home.yaml").name == "home"


@pytest.mark.parametrize("text,overrides", [
    (BASE + "train: {lr: " + "x" * 100_000 + "}\n", []),
    (BASE + "train: {" + "k" * 100_000 + ": 1}\n", []),
    (BASE + "train: [" + "1, " * 30_000 + "1]\n", []),
    (BASE + "train: {epochs: [" + "1, " * 30_000 + "1]}\n", []),
    ("x" * 100_000 + ": 1\n" + BASE, []),
    (BASE, ["train.lr=" + "y" * 100_000]),
    (BASE, ["train." + "z" * 100_000 + "=1"]),
    (BASE, ["z" * 100_000 + ".lr=1"]),
    (BASE.replace("name: cnn", "name: " + "c" * 100_000), []),
    (BASE.replace("preset: tiny", "preset: " + "p" * 100_000), []),
    (BASE.replace("task: classification", "task: " + "t" * 100_000), []),
])
def test_an_error_quotes_only_a_short_prefix_of_a_huge_value(tmp_path, text, overrides):
    with pytest.raises(TextnnError) as err:
        load_config(write(tmp_path, text), overrides)
    assert len(str(err.value)) < 600, str(err.value)[:300]


@pytest.mark.parametrize("text", ["train: {1: 2}\n", "data: {null: 2}\n", "? [a, b]\n: 1\n", "3: x\n",
                                  "train: {lr: 2020-01-01}\n", "[" * 5000 + "]" * 5000 + "\n"])
def test_odd_yaml_keys_and_values_are_clear_errors(tmp_path, text):
    with pytest.raises(TextnnError):
        load_config(write(tmp_path, BASE + text if not text.startswith("[") else text))


@pytest.mark.parametrize("model", ["[1, 2, 3]", "vvvv", "[[a, b]]"])
def test_a_model_section_that_is_not_a_mapping_is_one_error(tmp_path, model):
    path = tmp_path / "c.yaml"
    path.write_text(f"task: classification\ndata: {{format: tsv}}\nmodel: {model}\n", encoding="utf-8")
    with pytest.raises(TextnnError, match="section 'model' must be a mapping"):
        load_config(path)


def test_deeply_nested_brackets_are_refused_before_yaml_parses_them(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: " + "[" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(TextnnError, match="nest too deeply"):
        load_config(path)


def test_a_file_far_larger_than_any_config_is_refused_before_yaml_scans_it(tmp_path):
    # a megabyte of one spoiled value: YAML's scanner would take seconds on it (minutes under a tracer)
    path = write(tmp_path, "name: x\ntask: classific" + "," * 1_000_000 + "\n" + BASE)
    with pytest.raises(TextnnError, match=r"1,000,\d+ bytes is not a config"):
        load_config(path)


def test_a_config_just_under_the_size_bound_still_loads(tmp_path):
    from textnn.files import MAX_CONFIG_BYTES

    padding = "#" * (MAX_CONFIG_BYTES - len(BASE) - 200) + "\n"  # a long comment: still a config
    config = load_config(write(tmp_path, padding + BASE))
    assert config.model_name == "cnn"
