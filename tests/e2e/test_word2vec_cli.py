"""word2vec through the real CLI: train, evaluate on analogy and similarity files, neighbors, analogy."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from textnn.interop.vectors import read_vectors

FRUIT = "apple banana cherry grape lemon mango melon peach".split()
TOOLS = "bolt gear lever nut piston pulley rivet screw".split()

CONFIG = """\
task: embeddings
data: {{format: text, train: {train}, min_freq: 2, dev: {dev}}}
model: {{name: word2vec, architecture: skipgram, loss: negative, dim: 20, window: 3, sample: 0, alpha: 0.05,
         batch_words: 256}}
train: {{epochs: 2, threads: 1, progress: false, log_every: 5}}
"""


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        rng = random.Random(0)
        lines = [" ".join(rng.choices(FRUIT if rng.random() < 0.5 else TOOLS, k=rng.randint(4, 9)))
                 for _ in range(1500)]
        lines.append("once")  # below min_freq: dropped and counted, never a vector
        (root / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (root / "questions.txt").write_text(": fruit\napple banana cherry grape\n: gram-tools\nbolt gear nut lever\n"
                                            "bolt gear unknownword lever\n", encoding="utf-8")
        (root / "pairs.tsv").write_text("# word1\tword2\tscore\napple\tbanana\t9\napple\tbolt\t1\ngear\tnut\t8\n"
                                        "peach\tscrew\t0.5\napple\tnotaword\t5\n", encoding="utf-8")
        (root / "w2v.yaml").write_text(CONFIG.format(train=root / "corpus.txt", dev=root / "questions.txt"),
                                       encoding="utf-8")
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Workspace, Path]:
    ws = Workspace(tmp_path_factory.mktemp("w2v"))
    result = ws.cli("train", "w2v.yaml", "--run-dir", "run")
    assert result.returncode == 0, result.stderr
    return ws, ws.root / "run"


def test_train_writes_a_run_with_both_vector_files(trained) -> None:
    ws, run = trained
    for name in ("config.yaml", "run.json", "metrics.jsonl", "report.md", "model.safetensors", "vocab.json",
                 "vectors.txt", "vectors.bin"):
        assert (run / name).is_file(), name
    assert not (run / "checkpoint").exists()  # train.keep_checkpoint=none: removed once the run finished
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "finished" and status["stopped"] == "completed"
    assert status["dropped_words"] == 1 and status["vocabulary"] == 16  # "once", counted
    words, vectors = read_vectors(run / "vectors.bin")
    assert sorted(words) == sorted(FRUIT + TOOLS)  # "once" fell below min_freq
    assert vectors.shape == (16, 20)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["split"] == "train" for r in records)
    final = [r for r in records if r["split"] == "dev_final"]
    assert final and final[0]["answered"] == 2 and final[0]["questions"] == 3
    assert "3CosAdd" in (run / "report.md").read_text()


def test_evaluate_dispatches_on_the_file(trained) -> None:
    ws, run = trained
    analogy = ws.cli("evaluate", run, "--data", "questions.txt", "--json")
    assert analogy.returncode == 0, analogy.stderr
    metrics = json.loads(analogy.stdout)
    assert metrics["kind"] == "analogy" and metrics["coverage"] == pytest.approx(2 / 3)
    assert set(metrics["sections"]) == {"fruit", "gram-tools"}
    similarity = ws.cli("evaluate", run, "--data", "pairs.tsv", "--json")
    metrics = json.loads(similarity.stdout)
    assert metrics["kind"] == "similarity" and metrics["missing"] == 1 and metrics["pairs"] == 5
    assert metrics["spearman"] > 0  # the same-topic pairs were given the high scores
    text = ws.cli("evaluate", run, "--data", "questions.txt")
    assert "semantic" in text.stdout and "coverage" in text.stdout


def test_evaluate_on_a_missing_file_says_where_analogy_questions_come_from(trained) -> None:
    ws, run = trained
    missing = ws.cli("evaluate", run, "--data", "questions-words.txt")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr.startswith("error: questions-words.txt: file does not exist"), missing.stderr
    assert "github.com/tmikolov/word2vec" in missing.stderr and "datapath('questions-words.txt')" in missing.stderr


def test_neighbors_and_analogy_commands(trained) -> None:
    ws, run = trained
    result = ws.cli("neighbors", run, "apple", "gear", "-k", "3")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["apple"].split()[0] in FRUIT and lines["gear"].split()[0] in TOOLS
    assert len(lines["apple"].split()) == 6  # three words, each with its score
    result = ws.cli("analogy", run, "apple", "banana", "bolt", "-k", "2")
    assert result.returncode == 0 and result.stdout.startswith("apple : banana :: bolt : ")
    missing = ws.cli("neighbors", run, "notaword")
    assert missing.returncode == 2 and "'notaword' is not in the vocabulary" in missing.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    result = ws.cli("train", "w2v.yaml", "data.train=empty.txt", "data.dev=", "--run-dir", "empty_run")
    assert result.returncode == 2 and "the corpus is empty" in result.stderr
    assert not (tmp_path / "empty_run").exists()
    (tmp_path / "bad.txt").write_text(": s\na b c d\nx y\n", encoding="utf-8")
    result = ws.cli("train", "w2v.yaml", "data.dev=bad.txt", "--run-dir", "bad_run")
    assert result.returncode == 2 and "bad.txt:3" in result.stderr


def test_a_run_stopped_by_max_steps_goes_on_with_a_larger_one_to_the_same_vectors(tmp_path: Path) -> None:
    """word2vec evaluates only at the end and its learning rate decays over the corpus words, not the
    steps: a run stopped by train.max_steps continues with a larger one (--resume) exactly as a run
    given that budget from the start; resumed again with the same budget, it trains no further step."""
    ws = Workspace(tmp_path)
    keep = "train.keep_checkpoint=last"
    for args in (["--run-dir", "short", "train.max_steps=4", keep],
                 ["--run-dir", "short", "--resume", "train.max_steps=9", keep],
                 ["--run-dir", "long", "train.max_steps=9", keep]):
        result = ws.cli("train", "w2v.yaml", *args)
        assert result.returncode == 0, result.stderr
    again = ws.cli("train", "w2v.yaml", "--run-dir", "short", "--resume", "train.max_steps=9", keep)
    assert again.returncode == 0 and "resuming short at step 9" in again.stderr  # with nothing left to do
    status = json.loads((tmp_path / "short" / "run.json").read_text())
    assert status["steps"] == 9 and status["stopped"] == "max_steps"
    assert (tmp_path / "short" / "vectors.bin").read_bytes() == (tmp_path / "long" / "vectors.bin").read_bytes()
