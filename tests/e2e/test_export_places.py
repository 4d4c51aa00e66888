"""`textnn export RUN DIR` writes a new directory or nothing: an existing non-empty directory, a file, the run
itself or a folder inside it is refused with one line before any work; a failure halfway (here a size
limit) leaves neither the directory nor its temporary beside it."""

from __future__ import annotations

import pytest

from tests.e2e.test_streams_and_places import one_line_error, textnn
from textnn.cli import main

LM = ("task: language_modeling\ndata: {{format: text, train: {text}, tokenizer: bpe, bpe_vocab_size: 300, bptt: 8, "
      "holdout: 0.1}}\nmodel: {{name: gpt, preset: tiny}}\n"
      "train: {{max_steps: 2, batch_size: 4, progress: false, threads: 1, bootstrap_samples: 0}}\n")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\na model reads text one token at a time\n" * 30)
    (root / "lm.yaml").write_text(LM.format(text=text), encoding="utf-8")
    assert main(["train", str(root / "lm.yaml"), "--run-dir", str(root / "lm")]) == 0
    return root / "lm"


def files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("target", ["run", "inside-run", "non-empty", "file"])
def test_export_refuses_a_place_that_holds_something(run, tmp_path, target):
    place = {"run": run, "inside-run": run / "hf", "non-empty": tmp_path / "hf", "file": tmp_path / "hf.txt"}[target]
    if target == "non-empty":
        place.mkdir()
        (place / "notes.txt").write_text("mine")
    if target == "file":
        place.write_text("mine")
    before, beside = files(run), files(tmp_path)
    proc = textnn("export", str(run), str(place))
    expected = {"run": "the run directory", "inside-run": "the run directory", "non-empty": "not empty",
                "file": "a file"}[target]
    one_line_error(proc, str(place), expected)
    assert files(run) == before and files(tmp_path) == beside
    assert not (run / "hf").exists()


def test_export_into_an_empty_directory_and_a_failure_halfway_leaves_nothing(run, tmp_path):
    (tmp_path / "empty").mkdir()
    proc = textnn("export", str(run), str(tmp_path / "empty"))
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (tmp_path / "empty").iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}

    proc = textnn("export", str(run), str(tmp_path / "cut"), limit_bytes=4096)  # the weights are larger
    one_line_error(proc, str(tmp_path / "cut"), "size limit")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # neither the export nor its temporary


def test_export_to_a_link_to_an_empty_directory_fills_the_directory_it_names(run, tmp_path):
    (tmp_path / "disk").mkdir()
    (tmp_path / "hf").symlink_to(tmp_path / "disk")
    proc = textnn("export", str(run), str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "hf").is_symlink()
    assert {p.name for p in (tmp_path / "disk").iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_export_to_a_link_to_nothing_is_refused_before_any_work(run, tmp_path):
    (tmp_path / "hf").symlink_to(tmp_path / "gone")
    proc = textnn("export", str(run), str(tmp_path / "hf"))
    one_line_error(proc, str(tmp_path / "hf"), "a symbolic link to nothing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
