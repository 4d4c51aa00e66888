"""Hugging Face checkpoint directories a user can get wrong: each is one clear error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from textnn.data.tokenizers import WORDPIECE_SPECIALS
from textnn.errors import TextnnError
from textnn.interop import huggingface
from textnn.resolve import load_config

BERT = {"model_type": "bert", "vocab_size": 12, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 1,
        "intermediate_size": 8, "max_position_embeddings": 16, "type_vocab_size": 2}


def checkpoint(path: Path, config: dict | None = BERT, rows: int = 12, vocab: int = 12, weights: str = "safetensors") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = {"embeddings.word_embeddings.weight": torch.zeros(rows, 4)}
    if weights == "safetensors":
        save_file(tensors, str(path / "model.safetensors"))
    else:
        (path / "pytorch_model.bin").write_bytes(b"not read")
    words = [f"w{i}" for i in range(vocab - len(WORDPIECE_SPECIALS))]
    (path / "vocab.txt").write_text("\n".join([*WORDPIECE_SPECIALS, *words]) + "\n", encoding="utf-8")
    return path


def start(tmp_path: Path, directory: Path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nw1 w2\t1\nw3\t0\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text(f"task: classification\ndata: {{train: {tmp_path / 'train.tsv'}}}\n"
                                     f"model: {{init_from: {directory}}}\n", encoding="utf-8")
    return load_config(tmp_path / "c.yaml")


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_directory_without_config_json(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", config=None)
    with pytest.raises(TextnnError) as err:
        start(tmp_path, directory)
    assert "no config.json" in one_line(err) and str(directory) in one_line(err)


def test_unsupported_architecture_is_named_with_the_supported_list(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", config={**BERT, "model_type": "t5"})
    with pytest.raises(TextnnError) as err:
        start(tmp_path, directory)
    assert "model_type 't5' is not a supported" in one_line(err) and "bert" in one_line(err) and "gpt2" in one_line(err)


def test_pickle_only_checkpoint_is_refused_with_how_to_convert(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", weights="bin")
    with pytest.raises(TextnnError) as err:
        start(tmp_path, directory)
    assert "pytorch_model.bin" in one_line(err) and "safe_serialization=True" in one_line(err)


def test_vocabulary_that_does_not_match_the_embedding(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", rows=12, vocab=10)
    with pytest.raises(TextnnError) as err:
        huggingface.text_pipeline(huggingface.Checkpoint(directory))
    assert "10 tokens" in one_line(err) and "12 rows" in one_line(err)


def test_unsupported_setting_names_the_file_and_key(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", config={**BERT, "position_embedding_type": "relative_key"})
    with pytest.raises(TextnnError) as err:
        start(tmp_path, directory)
    assert "config.json: position_embedding_type='relative_key'" in one_line(err)


def test_a_value_beside_init_from_must_agree_with_the_checkpoint(tmp_path):
    directory = checkpoint(tmp_path / "ckpt")
    config = start(tmp_path, directory)
    assert (config.model_name, config.model.d_model, config.model.pooler, config.data.tokenizer) == ("bert", 4, False, "wordpiece")
    (tmp_path / "c.yaml").write_text(f"task: classification\ndata: {{train: {tmp_path / 'train.tsv'}}}\n"
                                     f"model: {{init_from: {directory}, d_model: 8}}\n", encoding="utf-8")
    with pytest.raises(TextnnError, match="model.d_model=8 differs"):
        load_config(tmp_path / "c.yaml")


def test_dropout_beside_a_checkpoint_may_be_set_anew(tmp_path):
    directory = checkpoint(tmp_path / "ckpt", config={**BERT, "hidden_dropout_prob": 0.1})
    assert start(tmp_path, directory).model.dropout == 0.1
    (tmp_path / "c.yaml").write_text(f"task: classification\ndata: {{train: {tmp_path / 'train.tsv'}}}\n"
                                     f"model: {{init_from: {directory}, dropout: 0.25}}\n", encoding="utf-8")
    assert load_config(tmp_path / "c.yaml").model.dropout == 0.25
