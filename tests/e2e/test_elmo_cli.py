"""ELMo through the real CLI: `textnn train` a tiny biLM on a text file, then a tagger and the BiLSTM and
CNN classifiers that read its frozen layers (data.features_from), and the scalar mix they learned read
back from their runs. Every number asserted comes from what the commands wrote."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import FILLER, NEGATIVE, POSITIVE, write_sentiment_tsv

NAMES = ["John", "Mary", "Paris", "London", "Reuters", "Acme"]
CONLL_SENTENCES = [
    [("John", "I-PER"), ("visited", "O"), ("Paris", "I-LOC"), (".", "O")],
    [("Reuters", "I-ORG"), ("said", "O"), ("Mary", "I-PER"), ("left", "O"), ("London", "I-LOC"), (".", "O")],
    [("Acme", "I-ORG"), ("shares", "O"), ("fell", "O"), (".", "O")],
]


def textnn(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TEXTNN_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=300, env=env)


def metrics(run: Path, split: str) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in records if r["split"] == split][-1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A tiny ELMo run (runs/elmo) trained on text that holds the words of the tagging and sentiment files."""
    root = tmp_path_factory.mktemp("elmo")
    rng = random.Random(0)
    vocabulary = FILLER + POSITIVE + NEGATIVE + NAMES + "visited said left shares fell .".split()
    lines = [" ".join(rng.choices(vocabulary, k=rng.randint(3, 9))) for _ in range(200)]
    (root / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "dev.txt").write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
    conll = "\n\n".join("\n".join(f"{w} X X {t}" for w, t in s) for s in CONLL_SENTENCES * 4) + "\n\n"
    (root / "ner.txt").write_text(conll, encoding="utf-8")
    write_sentiment_tsv(root / "train.tsv", 60, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 20, seed=2)
    (root / "elmo.yaml").write_text(
        "task: language_modeling\n"
        "data: {format: text, train: text.txt, dev: dev.txt, tokenizer: whitespace, bptt: 8}\n"
        "model: {name: elmo, preset: tiny}\n"
        "train: {batch_size: 4, epochs: 1, max_steps: 30, eval_every: 0, progress: false, device: cpu}\n",
        encoding="utf-8")
    proc = textnn("train", "elmo.yaml", "--run-dir", "runs/elmo", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_the_bilm_run_reports_each_directions_perplexity(workspace):
    dev = metrics(workspace / "runs" / "elmo", "dev_final")
    forward, backward = dev["forward_perplexity"], dev["backward_perplexity"]
    assert all(math.isfinite(v) and v > 1 for v in (forward, backward)) and forward != backward
    assert dev["perplexity"] == pytest.approx(math.sqrt(forward * backward))
    proc = textnn("evaluate", "runs/elmo", "--data", "dev.txt", cwd=workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "forward_perplexity" in proc.stdout and "backward_perplexity" in proc.stdout
    proc = textnn("generate", "runs/elmo", "--prompt", "the", cwd=workspace)  # not a left-to-right decoder
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


def _feature_run(workspace: Path, name: str, task_yaml: str) -> Path:
    (workspace / f"{name}.yaml").write_text(task_yaml, encoding="utf-8")
    proc = textnn("train", f"{name}.yaml", "--run-dir", f"runs/{name}", cwd=workspace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = workspace / "runs" / name
    # the frozen encoder is the biLM run's encoder, unchanged by training
    elmo = load_file(str(workspace / "runs" / "elmo" / "model.safetensors"))
    model = load_file(str(run / "model.safetensors"))
    frozen = {k[len("frozen.encoder."):]: v for k, v in model.items() if k.startswith("frozen.encoder.")}
    assert frozen and all((elmo[f"encoder.{k}"] == v).all() for k, v in frozen.items())
    return run


def _assert_trained_mix(run: Path) -> None:
    from textnn.tasks.features import mix_weights

    mix = mix_weights(run)
    assert len(mix["weights"]) == 3 and sum(mix["weights"]) == pytest.approx(1.0)  # token layer + 2 LSTM layers
    assert max(mix["weights"]) - min(mix["weights"]) > 1e-4  # learned: no longer the even start
    assert math.isfinite(mix["gamma"]) and mix["gamma"] != 1.0


def test_a_tagger_reads_elmo_features_and_learns_a_scalar_mix(workspace):
    run = _feature_run(workspace, "tagger", (
        "task: tagging\n"
        "data: {train: ner.txt, dev: ner.txt, features_from: runs/elmo, features_layers: mix, "
        "features_dropout: 0.1, features_layer_norm: true}\n"
        "model: {name: rnn_tagger, preset: tiny}\n"
        "train: {batch_size: 2, epochs: 3, lr: 0.01, progress: false, device: cpu, bootstrap_samples: 0}\n"))
    _assert_trained_mix(run)
    assert "span_f1" in metrics(run, "dev_final")
    proc = textnn("predict", "runs/tagger", cwd=workspace, stdin="John visited London .\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[0])["tokens"] == ["John", "visited", "London", "."]


@pytest.mark.parametrize("model", ["rnn", "cnn"])
def test_a_classifier_reads_elmo_features_and_learns_a_scalar_mix(workspace, model):
    run = _feature_run(workspace, f"sentiment_{model}", (
        "task: classification\n"
        "data: {train: train.tsv, dev: dev.tsv, features_from: runs/elmo, features_layers: mix, "
        "features_dropout: 0.1}\n"
        f"model: {{name: {model}, preset: tiny}}\n"
        "train: {batch_size: 8, epochs: 3, lr: 0.01, progress: false, device: cpu, bootstrap_samples: 0}\n"))
    _assert_trained_mix(run)
    assert "accuracy" in metrics(run, "dev_final")
    proc = textnn("predict", f"runs/sentiment_{model}", cwd=workspace, stdin="a good film\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["label"] in {"0", "1"}


def test_a_classifier_refuses_features_from_a_model_that_takes_none(workspace):
    (workspace / "bow.yaml").write_text(
        "task: classification\n"
        "data: {train: train.tsv, features_from: runs/elmo}\nmodel: {name: bow}\n", encoding="utf-8")
    proc = textnn("train", "bow.yaml", "--run-dir", "runs/bow", cwd=workspace)
    assert proc.returncode != 0 and "data.features_from" in proc.stderr and "Traceback" not in proc.stderr
