"""A run's files are written by replace (a temporary file renamed over the name), so a symbolic link put
in a run's place for report.md, loss.png or a confusion matrix is replaced, and the file it points to
outside the run is never written (docs/RELIABILITY.md, "Hostile use", item 19); metrics.jsonl too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv

REPO = Path(__file__).resolve().parents[2]
CONFIG = ("task: classification\ndata: {format: tsv, train: train.tsv, dev: train.tsv}\n"
          "model: {name: dan, preset: tiny}\n"
          "train: {max_steps: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, "
          "keep_checkpoint: last}\n")


def textnn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    (tmp_path / "config.yaml").write_text(CONFIG, encoding="utf-8")
    done = textnn("train", "config.yaml", "--run-dir", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.mark.parametrize("name", ["report.md", "loss.png", "confusion_dev.png"])
def test_resume_replaces_a_linked_report_file_and_leaves_its_target_alone(trained, name):
    outside = trained / f"outside-{name}"
    outside.write_text("a file of the user's, outside the run\n", encoding="utf-8")
    linked = trained / "run" / name
    assert linked.is_file(), f"the run has no {name} to replace by a link"
    linked.unlink()
    linked.symlink_to(outside)
    done = textnn("train", "config.yaml", "--run-dir", "run", "--resume", cwd=trained)
    assert done.returncode == 0, done.stderr
    assert outside.read_text(encoding="utf-8") == "a file of the user's, outside the run\n"
    assert not linked.is_symlink() and linked.stat().st_size > 0  # the run's own file is back in its place


def test_a_linked_metrics_file_is_replaced_on_resume_and_its_target_is_not_appended_to(tmp_path):
    """An interrupted run whose metrics.jsonl was replaced by a link: the resume cuts the file back to the
    checkpoint by replace, and appends to the run's own file from there."""
    write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    long_run = CONFIG.replace("max_steps: 2", "max_steps: 0, epochs: 300, log_every: 1, eval_every: 0")
    (tmp_path / "config.yaml").write_text(long_run, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    training = subprocess.Popen([sys.executable, "-m", "textnn", "train", "config.yaml", "--run-dir", "run"],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.read_text(encoding="utf-8").count("\n") >= 3):
        assert training.poll() is None and time.monotonic() < deadline, training.stderr.read()
        time.sleep(0.05)
    training.send_signal(signal.SIGINT)
    training.communicate(timeout=120)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("", encoding="utf-8")
    metrics.unlink()
    metrics.symlink_to(outside)
    done = textnn("train", "config.yaml", "--run-dir", "run", "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert outside.read_text(encoding="utf-8") == ""
    assert not metrics.is_symlink() and metrics.read_text(encoding="utf-8").count("\n") >= 3
