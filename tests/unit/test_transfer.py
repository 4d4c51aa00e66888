"""transfer.start_kind: the one place that tells a textnn run from a Hugging Face checkpoint directory."""

from __future__ import annotations

import pytest

from textnn.transfer import HUGGING_FACE, RUN, start_kind


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
