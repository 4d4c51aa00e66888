"""Runs that start from other runs (`model.init_from`): a language model's encoder under a classifier
and a tagger head, the way a user does it, plus every error a user can cause on the way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import write_sentiment_tsv
from textnn.errors import TextnnError
from textnn.registry import task_class
from textnn.resolve import load_config
from textnn.transfer import RUN, Start

LM_CONFIG = """task: language_modeling
data: {{format: text, train: {train}, tokenizer: word, bptt: 8, holdout: 0.1}}
model: {{name: rnn_lm, preset: tiny}}
train: {{epochs: 1, batch_size: 4, lr: 0.01, progress: false, threads: 1}}
"""
CLASSIFIER_CONFIG = """task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{init_from: {lm}{extra}}}
head: {{pooling: last}}
train: {{epochs: 2, batch_size: 16, lr: 0.01, progress: false, threads: 1, bootstrap_samples: 0}}
"""


def cli(root: Path, *args, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=root, env=env, input=input,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("init_from")
    train = write_sentiment_tsv(root / "train.tsv", 160, seed=1)
    dev = write_sentiment_tsv(root / "dev.tsv", 40, seed=2)
    text = root / "text.txt"  # the sentences alone: the language model's training text
    text.write_text("".join(line.split("\t")[0] + "\n" for line in train.read_text().splitlines()[1:]) * 3)
    (root / "lm.yaml").write_text(LM_CONFIG.format(train=text))
    proc = cli(root, "train", root / "lm.yaml", "--run-dir", root / "lm")
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "train": train, "dev": dev, "lm": root / "lm"}


def classifier_config(ws: dict, name: str, extra: str = "") -> Path:
    path = ws["root"] / f"{name}.yaml"
    path.write_text(CLASSIFIER_CONFIG.format(train=ws["train"], dev=ws["dev"], lm=ws["lm"], extra=extra))
    return path


def test_the_model_section_needs_nothing_but_the_starting_run(ws):
    config = load_config(classifier_config(ws, "resolve"))
    lm = load_config(ws["lm"] / "config.yaml")
    assert config.model_name == "rnn_lm" and config.model == lm.model and config.init_from == str(ws["lm"])
    assert (config.data.tokenizer, config.data.lowercase) == (lm.data.tokenizer, lm.data.lowercase)


def test_encoder_weights_vocabulary_and_tokenizer_come_from_the_run(ws, capsys):
    from textnn.experiment import _start_encoder

    config = load_config(classifier_config(ws, "weights"))
    task = task_class("classification").from_data(config)
    assert task.vocab.itos == json.loads((ws["lm"] / "vocab.json").read_text())["tokens"]
    model = task.build_model()
    _start_encoder(model, config.start)
    lm_weights = load_file(str(ws["lm"] / "model.safetensors"))
    own = model.state_dict()
    encoder_keys = [k for k in lm_weights if k.startswith("encoder.")]
    assert encoder_keys and all(torch.equal(own[k], lm_weights[k]) for k in encoder_keys)
    report = capsys.readouterr().err
    assert f"loaded {len(encoder_keys)} encoder tensors" in report
    assert "head.net.1.weight" in report  # new here: the classifier head
    assert "head.decoder" in report  # left out: the language model's output layer


def test_train_a_classifier_from_a_language_model_and_use_it_without_the_language_model(ws):
    run = ws["root"] / "runs" / "from_lm"
    proc = cli(ws["root"], "train", classifier_config(ws, "from_lm"), "--run-dir", run)
    assert proc.returncode == 0, proc.stderr
    assert "init_from" in proc.stderr and "dev: " in proc.stdout
    saved = (run / "config.yaml").read_text()
    assert "init_from:" in saved and "name: rnn_lm" in saved
    shutil.copytree(ws["lm"], ws["root"] / "lm_kept")
    shutil.rmtree(ws["lm"])  # a finished run stands on its own
    try:
        proc = cli(ws["root"], "evaluate", run, "--data", ws["dev"], "--json")
        assert proc.returncode == 0, proc.stderr
        assert 0.0 <= json.loads(proc.stdout)["accuracy"] <= 1.0
        proc = cli(ws["root"], "predict", run, input="good great fine\n")
        assert proc.returncode == 0 and json.loads(proc.stdout)["label"] in ("0", "1"), proc.stderr
    finally:
        shutil.copytree(ws["root"] / "lm_kept", ws["lm"])


def test_a_tagger_can_start_from_the_same_language_model(ws):
    conll = ws["root"] / "tags.conll"
    conll.write_text("".join(f"{w} {'B-POS' if w in ('good', 'great') else 'O'}\n" + ("\n" if i % 5 == 4 else "")
                             for i, w in enumerate("good movie the great plot was good fine a film".split() * 20)))
    config = ws["root"] / "tagger.yaml"
    config.write_text(f"task: tagging\ndata: {{format: conll, train: {conll}, dev: {conll}, tag_scheme: iob2}}\n"
                      f"model: {{init_from: {ws['lm']}}}\nhead: {{output: softmax}}\n"
                      f"train: {{epochs: 1, batch_size: 8, progress: false, threads: 1, bootstrap_samples: 0}}\n")
    proc = cli(ws["root"], "train", config, "--run-dir", ws["root"] / "runs" / "tagger")
    assert proc.returncode == 0, proc.stderr
    assert "span_f1=" in proc.stdout


@pytest.mark.parametrize("extra, words", [
    (", hidden_size: 99", "model.hidden_size=99 differs from the run"),
    (", hidden_size: 99", "(only dropout may change)"),
    (", name: cnn", "model.name='cnn' differs from the run"),
])
def test_values_beside_init_from_must_agree_with_the_run(ws, extra, words):
    proc = cli(ws["root"], "train", classifier_config(ws, "clash", extra), "--run-dir", ws["root"] / "runs" / "clash")
    assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (ws["root"] / "runs" / "clash").exists()


def test_a_dropout_rate_beside_init_from_may_differ_and_the_weights_still_load(ws):
    from textnn.experiment import _start_encoder

    config = load_config(classifier_config(ws, "retune", ", dropout: 0.3"))
    lm = load_config(ws["lm"] / "config.yaml")
    assert config.model.dropout == 0.3 != lm.model.dropout
    assert replace(config.model, dropout=lm.model.dropout) == lm.model  # nothing else moved
    model = task_class("classification").from_data(config).build_model()
    _start_encoder(model, config.start)
    lm_weights = load_file(str(ws["lm"] / "model.safetensors"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in lm_weights.items() if k.startswith("encoder."))


def test_a_tokenization_option_beside_init_from_must_agree(ws):
    proc = cli(ws["root"], "train", classifier_config(ws, "tok"), "data.lowercase=true", "--run-dir",
               ws["root"] / "runs" / "tok")
    lm_lowercase = load_config(ws["lm"] / "config.yaml").data.lowercase
    if lm_lowercase:
        pytest.skip("the language model lower-cases already")
    assert proc.returncode == 2 and "data.lowercase" in proc.stderr, proc.stderr


def test_init_from_names_what_is_not_a_run(ws, tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    for target, words in ((tmp_path / "missing", "no run there"), (hf, "Hugging Face")):
        config = ws["root"] / "bad.yaml"
        config.write_text(CLASSIFIER_CONFIG.format(train=ws["train"], dev=ws["dev"], lm=target, extra=""))
        proc = cli(ws["root"], "train", config)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_a_shape_mismatch_names_the_parameter_and_both_shapes(ws, tmp_path):
    config = load_config(classifier_config(ws, "shapes"))
    model = task_class("classification").from_data(config).build_model()
    weights = load_file(str(ws["lm"] / "model.safetensors"))
    name = "encoder.embedding.weight"
    weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])
    path = tmp_path / "model.safetensors"
    save_file(weights, str(path))
    with pytest.raises(TextnnError) as err:
        Start(tmp_path, RUN, "model.init_from").load_into(model)
    message = str(err.value)
    assert name in message and str(tuple(weights[name].shape)) in message
    assert str(tuple(model.state_dict()[name].shape)) in message


def with_new_words(ws: dict, name: str) -> Path:
    """The classifier's training file with two words the language model never saw: 'zorblax' three
    times, 'quibble' once."""
    lines = ws["train"].read_text().splitlines()
    for i in (1, 2, 3):
        text, label = lines[i].split("\t")
        lines[i] = f"zorblax {text}\t{label}"
    text, label = lines[4].split("\t")
    lines[4] = f"quibble {text}\t{label}"
    path = ws["root"] / f"{name}.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_extend_vocab_adds_the_frequent_new_words_with_rows_at_the_mean(ws, capsys):
    from textnn.experiment import _start_encoder

    config = load_config(classifier_config(ws, "extend"), [f"data.train={with_new_words(ws, 'extend')}",
                                                           "data.extend_vocab=2"])
    task = task_class("classification").from_data(config)
    lm_words = json.loads((ws["lm"] / "vocab.json").read_text())["tokens"]
    assert task.vocab.itos == [*lm_words, "zorblax"]  # 'quibble' is seen once, below the threshold of 2
    assert task.start_vocab_size == len(lm_words)
    model = task.build_model()
    _start_encoder(model, config.start, grown_rows=(task.start_vocab_size, len(task.vocab)))
    lm_embedding = load_file(str(ws["lm"] / "model.safetensors"))["encoder.embedding.weight"]  # [V, E]
    embedding = model.state_dict()["encoder.embedding.weight"]  # [V + 1, E]
    assert torch.equal(embedding[:-1], lm_embedding)
    assert torch.allclose(embedding[-1], lm_embedding.mean(dim=0))
    assert "vocabulary extended from" in capsys.readouterr().err


def test_a_language_model_grows_its_output_layer_with_its_vocabulary(ws):
    from textnn.experiment import _start_encoder

    text = ws["root"] / "new_text.txt"
    text.write_text("zorblax zorblax quibble\n" + (ws["root"] / "text.txt").read_text())  # the end is held out
    (ws["root"] / "lm2.yaml").write_text(LM_CONFIG.format(train=text).replace(
        "model: {name: rnn_lm, preset: tiny}", f"model: {{init_from: {ws['lm']}}}"))
    config = load_config(ws["root"] / "lm2.yaml", ["data.extend_vocab=1"])
    task = task_class("language_modeling").from_data(config)
    lm_words = json.loads((ws["lm"] / "vocab.json").read_text())["tokens"]
    assert task.vocab.itos == [*lm_words, "zorblax", "quibble"]  # most frequent first
    model = task.build_model()
    _start_encoder(model, config.start, with_head=True, grown_rows=(len(lm_words), len(task.vocab)))
    lm_weights = load_file(str(ws["lm"] / "model.safetensors"))
    own = model.state_dict()
    grown = [name for name, tensor in lm_weights.items() if tensor.shape[:1] == (len(lm_words),)]
    assert "head.decoder.bias" in grown and "encoder.embedding.weight" in grown
    for name in grown:
        assert own[name].shape[0] == len(lm_words) + 2
        assert torch.equal(own[name][:len(lm_words)], lm_weights[name])
        assert torch.allclose(own[name][len(lm_words):], lm_weights[name].mean(dim=0).expand_as(own[name][-2:]))


def test_a_classifier_with_an_extended_vocabulary_trains_and_predicts(ws):
    run = ws["root"] / "runs" / "extended"
    proc = cli(ws["root"], "train", classifier_config(ws, "extended"), f"data.train={with_new_words(ws, 'extended')}",
               "data.extend_vocab=2", "--run-dir", run)
    assert proc.returncode == 0, proc.stderr
    assert "zorblax" in json.loads((run / "vocab.json").read_text())["tokens"]
    proc = cli(ws["root"], "predict", run, input="zorblax good great\n")
    assert proc.returncode == 0 and json.loads(proc.stdout)["label"] in ("0", "1"), proc.stderr


@pytest.mark.parametrize("overrides, words", [
    (["model.init_from=", "model.name=rnn", "data.extend_vocab=2"], "none is set"),
    (["data.extend_vocab=-1"], "an integer >= 0"),
])
def test_extend_vocab_is_refused_where_it_cannot_apply(ws, overrides, words):
    proc = cli(ws["root"], "train", classifier_config(ws, "bad_extend"), *overrides, "--run-dir",
               ws["root"] / "runs" / "bad_extend")
    assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (ws["root"] / "runs" / "bad_extend").exists()
