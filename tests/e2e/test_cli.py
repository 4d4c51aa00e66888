"""The real CLI, as a user runs it: `python -m textnn ...` in a subprocess on small files in tmp dirs.

Every number asserted is read back from what the commands wrote (run.json, metrics.jsonl,
model.safetensors) or computed from the fixture files; nothing is copied from an earlier output.
Runs are shared through module-scoped fixtures because each process pays torch's import time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import write_sentiment_tsv

FAMILIES = ("bow", "cbow", "deep_cbow", "dan", "cnn", "rnn")
RUN_FILES = {"config.yaml", "model.safetensors", "vocab.json", "labels.json", "tokenizer.json",
             "metrics.jsonl", "report.md", "loss.png", "run.json"}
BATCH_SIZE = 16
N_TRAIN, N_DEV = 300, 80

# Tiny model, one CPU thread (the machine's cores are shared), no progress bar, a cheap bootstrap.
CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, {dev_line}text_pair_column: "{pair}"}}
model: {{name: {model}, preset: tiny}}
train: {{optimizer: adam, lr: 0.03, epochs: 4, batch_size: %d, log_every: 10, threads: 1, progress: false,
         bootstrap_samples: 200}}
""" % BATCH_SIZE


class Workspace:
    """A tmp directory with toy data, config files, and a runner for the CLI with an isolated cache."""

    def __init__(self, root: Path):
        self.root = root
        self.train = write_sentiment_tsv(root / "train.tsv", N_TRAIN, seed=1)
        self.dev = write_sentiment_tsv(root / "dev.tsv", N_DEV, seed=2)
        self.pair_train = write_sentiment_tsv(root / "pair_train.tsv", N_TRAIN, seed=3, pair=True)
        # Module-scoped fixtures run before conftest's autouse cache fixture, so set the cache here.
        self.env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
                    "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def config(self, name: str, model: str, pair: bool = False) -> Path:
        """<name>.yaml: the toy single-sentence train + dev files, or (pair=True) the pair train file alone."""
        path = self.root / f"{name}.yaml"
        path.write_text(CONFIG.format(train=self.pair_train if pair else self.train,
                                      dev_line="" if pair else f"dev: {self.dev}, ",
                                      pair="sentence2" if pair else "", model=model), encoding="utf-8")
        return path

    def cli(self, *args, input: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              input=input, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("cli"))


@pytest.fixture(scope="module")
def families(ws):
    """One `textnn compare` over a config per classifier family (epochs: 4 in the files, 2 by --set).

    compare trains each config exactly as `textnn train` does (the same library call) in one process,
    so the six families cost one torch start-up instead of six.
    """
    configs = [ws.config(f"family_{model}", model) for model in FAMILIES]
    markdown = ws.root / "compare.md"
    proc = ws.cli("compare", *configs, "--set", "train.epochs=2", "--output-dir", ws.root / "compare",
                  "--markdown", markdown)
    assert proc.returncode == 0, proc.stderr
    return proc, markdown, {model: ws.root / "compare" / f"family_{model}" for model in FAMILIES}


def read_tsv(path: Path) -> list[dict]:
    header, *rows = path.read_text(encoding="utf-8").splitlines()
    return [dict(zip(header.split("\t"), row.split("\t"))) for row in rows]


def chance(path: Path) -> float:
    """Accuracy of always answering the most frequent label of the file (at least 0.5 for two classes)."""
    counts = Counter(row["label"] for row in read_tsv(path))
    return max(counts.values()) / sum(counts.values())


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def metrics(run_dir: Path, split: str) -> list[dict]:
    records = map(json.loads, (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines())
    return [r for r in records if r["split"] == split]


def assert_learned(run_dir: Path, dev_file: Path) -> float:
    """The run finished, and its dev accuracy (run.json and metrics.jsonl agree) is far above chance."""
    state = status(run_dir)
    assert state["status"] == "finished"
    accuracy = state["dev"]["accuracy"]
    assert accuracy >= chance(dev_file) + 0.25, (accuracy, chance(dev_file))
    assert metrics(run_dir, "dev_final")[-1]["accuracy"] == accuracy
    return accuracy


# ------------------------------------------------------------------------------------------------ train


@pytest.mark.parametrize("model", FAMILIES)
def test_each_family_learns_and_writes_the_run(ws, families, model):
    _, _, runs = families
    run_dir = runs[model]
    assert RUN_FILES <= {p.name for p in run_dir.iterdir()}
    assert_learned(run_dir, ws.dev)

    saved = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    assert saved["model"]["name"] == model and saved["model"]["preset"] == "tiny"
    assert json.loads((run_dir / "labels.json").read_text()) == sorted({r["label"] for r in read_tsv(ws.train)})
    vocab = json.loads((run_dir / "vocab.json").read_text())["tokens"]
    assert {"good", "awful", "movie"} <= set(vocab)
    weights = load_file(str(run_dir / "model.safetensors"))
    assert weights and all(torch.isfinite(t).all() for t in weights.values())
    # one dev evaluation per epoch, and a training loss that went down
    assert len(metrics(run_dir, "dev")) == saved["train"]["epochs"] == 2
    train_losses = [r["loss"] for r in metrics(run_dir, "train")]
    assert len(train_losses) >= 2 and train_losses[-1] < train_losses[0]
    assert "accuracy" in (run_dir / "report.md").read_text(encoding="utf-8")


def test_compare_tabulates_every_config_and_writes_markdown(ws, families):
    proc, markdown, runs = families
    table = markdown.read_text(encoding="utf-8").strip().splitlines()
    assert table[0].startswith("| config |") and set(table[1]) <= set("|-")
    assert len(table) == 2 + len(FAMILIES)
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    for model, run_dir in runs.items():
        assert status(run_dir)["steps"] == 2 * steps_per_epoch  # --set train.epochs=2 reached every config
        accuracy = f"accuracy {100 * status(run_dir)['dev']['accuracy']:.2f}"
        printed = [line for line in proc.stdout.splitlines() if line.startswith(run_dir.name + " ")]
        assert len(printed) == 1 and model in printed[0].split() and accuracy in printed[0]
        rows = [line for line in table if line.startswith(f"| {run_dir.name} |")]
        assert len(rows) == 1 and f"| {model} |" in rows[0] and accuracy in rows[0]


def test_sentence_pair_config_trains_with_kfold_instead_of_a_dev_file(ws):
    # two features in one run (each torch start-up costs seconds): text_pair_column, and
    # data.kfold=5 data.fold=2 holding out a fifth of train as dev when there is no dev file
    run_dir = ws.root / "runs" / "pair_kfold"
    config = ws.config("pair_kfold", "cbow", pair=True)
    proc = ws.cli("train", config, "--run-dir", run_dir, "data.kfold=5", "data.fold=2")
    assert proc.returncode == 0, proc.stderr
    assert RUN_FILES <= {p.name for p in run_dir.iterdir()}
    state = status(run_dir)
    assert state["dev"]["examples"] == N_TRAIN // 5  # fold 2 of 5 is held out ...
    steps_per_epoch = math.ceil((N_TRAIN - N_TRAIN // 5) / BATCH_SIZE)  # ... and the other four are trained on
    assert state["steps"] == 4 * steps_per_epoch
    accuracy = assert_learned(run_dir, ws.pair_train)
    assert len(metrics(run_dir, "dev")) == 4
    assert f"accuracy={accuracy:.4f}" in proc.stdout  # the summary `train` prints at the end
    assert str(run_dir) in proc.stdout.splitlines()[-1]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]
    assert (saved["text_pair_column"], saved["kfold"], saved["fold"], saved["dev"]) == ("sentence2", 5, 2, "")


def test_train_into_an_existing_run_dir_fails_and_keeps_the_old_run(ws, families):
    run_dir = families[2]["bow"]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = ws.cli("train", ws.config("bow", "bow"), "--run-dir", run_dir, "train.epochs=1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and str(run_dir) in lines[0]
    assert "--resume" in lines[0]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


# ------------------------------------------------------------------------------------------------ evaluate


def test_evaluate_prints_accuracy_and_confidence_interval(ws, families):
    run_dir = families[2]["cnn"]
    proc = ws.cli("evaluate", run_dir, "--data", ws.dev, "--bootstrap", "200")
    assert proc.returncode == 0, proc.stderr
    values = dict(re.findall(r"^\s*(\w+): ([0-9.]+)$", proc.stdout, flags=re.M))
    accuracy, low, high = (float(values[k]) for k in ("accuracy", "accuracy_ci_low", "accuracy_ci_high"))
    assert 0.0 <= low <= accuracy <= high <= 1.0
    assert accuracy == pytest.approx(status(run_dir)["dev"]["accuracy"], abs=5e-5)  # printed with 4 decimals
    assert int(values["examples"]) == N_DEV
    # a header of the class labels, then a row per gold label: its label, then the counts
    header, *rows = proc.stdout.split("predicted):\n")[1].splitlines()
    assert header.split() == ["0", "1"]
    matrix = [[int(n) for n in line.split()[1:]] for line in rows]
    assert sum(map(sum, matrix)) == N_DEV
    assert sum(matrix[i][i] for i in range(len(matrix))) == round(accuracy * N_DEV)


def test_evaluate_json_equals_the_dev_metrics_recorded_by_training(ws, families):
    run_dir = families[2]["cnn"]
    proc = ws.cli("evaluate", run_dir, "--data", ws.dev, "--json", "--bootstrap", "200")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    recorded = status(run_dir)["dev"]
    assert got["accuracy"] == recorded["accuracy"]
    assert got["examples"] == recorded["examples"] == N_DEV
    # the loss pins the exact weights (the best checkpoint), which accuracy alone may not
    assert got["loss"] == pytest.approx(recorded["loss"], rel=1e-5)
    # same data, resamples and seed as training's bootstrap: the same interval
    assert (got["accuracy_ci_low"], got["accuracy_ci_high"]) == (recorded["accuracy_ci_low"],
                                                                 recorded["accuracy_ci_high"])


# ------------------------------------------------------------------------------------------------ predict


def check_predictions(rows: list[dict], texts: list[str], labels: list[str]) -> None:
    assert [row["text"] for row in rows] == texts
    for row in rows:
        probs = row["probabilities"]
        assert sorted(probs) == sorted(labels)
        assert all(0.0 <= p <= 1.0 for p in probs.values())
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
        assert row["label"] == max(probs, key=probs.get)


def test_predict_file_gives_one_line_per_input_and_agrees_with_evaluate(ws, families):
    run_dir = families[2]["cnn"]
    rows = read_tsv(ws.dev)
    texts = [row["sentence"] for row in rows]
    input_file = ws.root / "to_label.txt"
    # a blank line has its own output line, marked empty, so that line N answers line N
    input_file.write_text("\n".join(texts[:5] + [""] + texts[5:]) + "\n", encoding="utf-8")
    proc = ws.cli("predict", run_dir, input_file)
    assert proc.returncode == 0, proc.stderr
    predictions = [json.loads(line) for line in proc.stdout.splitlines()]
    assert predictions.pop(5) == {"text": None, "label": None, "probabilities": None, "empty": True}
    labels = json.loads((run_dir / "labels.json").read_text())
    check_predictions(predictions, texts, labels)
    correct = sum(p["label"] == row["label"] for p, row in zip(predictions, rows))
    assert correct / len(rows) == status(run_dir)["dev"]["accuracy"]


def test_predict_reads_standard_input(ws, families):
    run_dir = families[2]["cnn"]
    texts = ["a great and excellent film", "the plot was awful and terrible", "the movie"]
    proc = ws.cli("predict", run_dir, input="\n".join(texts) + "\n")
    assert proc.returncode == 0, proc.stderr
    predictions = [json.loads(line) for line in proc.stdout.splitlines()]
    check_predictions(predictions, texts, json.loads((run_dir / "labels.json").read_text()))
    # the toy data's label words decide these two (the fixture labels positive 1, negative 0)
    assert [p["label"] for p in predictions[:2]] == ["1", "0"]


# ------------------------------------------------------------------------------------------------ explain


def _field_lines(cls, section: str) -> list[tuple[str, str]]:
    return [(f"{section}.{f.name}", f.metadata["doc"]) for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("section", ["", "train", "cnn"])
def test_explain_lists_options_with_docs(ws, section):
    from textnn import registry
    from textnn.config import DataConfig, TrainConfig

    proc = ws.cli("explain", *([section] if section else []))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    wanted_models = list(registry.ENCODERS) if section == "" else [section] if section in registry.ENCODERS else []
    expected = []
    if section in ("", "data"):
        expected += _field_lines(DataConfig, "data")
    if section in ("", "train"):
        expected += _field_lines(TrainConfig, "train")
    for name in wanted_models:
        assert any(line.startswith(f"[model] name: {name} ") for line in lines), name
        expected += _field_lines(registry.model_entry(name)[0], "model")
    assert expected
    for key, doc in expected:  # each option on a line of its own, with its doc
        assert any(line.split()[:1] == [key] and line.rstrip().endswith(doc) for line in lines), key
    if section == "train":
        assert not any(line.strip().startswith(("data.", "model.")) for line in lines)
    if section == "cnn":
        assert sum(line.startswith("[model]") for line in lines) == 1


# ------------------------------------------------------------------------------------------------ features


def test_pretrained_vectors_static_cnn_keeps_the_file_vectors(ws):
    dim = 8
    rng = np.random.default_rng(7)
    words = ["good", "awful", "movie", "plot", "zebra-not-in-data"]
    vectors = {w: np.round(rng.uniform(-1, 1, dim), 4) for w in words}
    glove = ws.root / "glove.8d.txt"
    glove.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()), encoding="utf-8")
    run_dir = ws.root / "runs" / "vectors"
    proc = ws.cli("train", ws.config("vectors", "cnn"), "--run-dir", run_dir, "model.mode=static",
                  f"model.embedding_dim={dim}", f"data.vectors={glove}")
    assert proc.returncode == 0, proc.stderr

    vocab = json.loads((run_dir / "vocab.json").read_text())["tokens"]
    in_vocab = [w for w in words if w in vocab]
    assert len(in_vocab) == 4  # all but the made-up word occur in the training data
    coverage = re.search(r"^vectors .*: (\d+) of (\d+) vocabulary tokens found", proc.stderr, flags=re.M)
    assert coverage, proc.stderr
    assert (int(coverage[1]), int(coverage[2])) == (len(in_vocab), len(vocab))

    embedding = load_file(str(run_dir / "model.safetensors"))["encoder.embedding.weight"]
    assert embedding.shape == (len(vocab), dim)
    for word in in_vocab:  # static mode: after training, still exactly the file's vectors
        torch.testing.assert_close(embedding[vocab.index(word)], torch.tensor(vectors[word], dtype=torch.float32),
                                   rtol=0, atol=1e-7)
    assert not embedding[vocab.index("the")].eq(0).all()  # a word not in the file got a random vector
    assert status(run_dir)["status"] == "finished"


def test_early_stopping_stops_before_the_last_epoch_when_dev_plateaus(ws):
    run_dir = ws.root / "runs" / "early"
    # A learning rate of 1e-9 leaves the predictions unchanged, so dev accuracy is flat from epoch 1.
    proc = ws.cli("train", ws.config("early", "deep_cbow"), "--run-dir", run_dir, "train.optimizer=sgd",
                  "train.lr=1e-9", "train.epochs=10", "train.patience=2")
    assert proc.returncode == 0, proc.stderr
    state = status(run_dir)
    assert state["stopped"] == "early_stopping" and state["status"] == "finished"
    evaluations = metrics(run_dir, "dev")
    assert len(evaluations) == 3  # the first (best), then two without improvement
    assert len({r["accuracy"] for r in evaluations}) == 1
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    assert state["steps"] == 3 * steps_per_epoch < 10 * steps_per_epoch
    assert state["best_step"] == evaluations[0]["step"]
    assert (run_dir / "model.safetensors").is_file() and (run_dir / "report.md").is_file()


def test_max_steps_stops_training(ws):
    run_dir = ws.root / "runs" / "max_steps"
    proc = ws.cli("train", ws.config("max_steps", "cbow"), "--run-dir", run_dir, "train.epochs=10",
                  "train.max_steps=7", "train.log_every=1")
    assert proc.returncode == 0, proc.stderr
    state = status(run_dir)
    assert state["steps"] == 7 and state["stopped"] == "max_steps" and state["status"] == "finished"
    assert [r["step"] for r in metrics(run_dir, "train")] == list(range(1, 8))
    assert (run_dir / "model.safetensors").is_file()
    assert "7 steps" in proc.stdout


def test_a_run_shorter_than_log_every_with_no_dev_set_still_plots_its_loss(ws):
    """No dev set and fewer steps than train.log_every: the training loss of steps 1 and 2 is logged all
    the same (the powers of two before the first log_every steps, and the last step), so the report has
    its loss curve."""
    run_dir = ws.root / "runs" / "short-no-dev"
    proc = ws.cli("train", ws.config("short", "bow", pair=True), "--run-dir", run_dir,
                  "train.max_steps=2", "train.log_every=50", "data.kfold=0")
    assert proc.returncode == 0, proc.stderr
    assert status(run_dir)["status"] == "finished"
    assert [r["step"] for r in metrics(run_dir, "train")] == [1, 2]
    records = map(json.loads, (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines())
    assert {r["split"] for r in records} == {"train"}  # no dev set: nothing else
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "steps: 2" in report and "![loss curve](loss.png)" in report
    assert (run_dir / "loss.png").is_file()
