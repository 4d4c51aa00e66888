"""One writer per run directory: a second `textnn train` of a run that a live process writes (fresh or
--resume) stops with one line and changes nothing; the lock of a killed process does not block a resume.

The first training is paused (SIGSTOP) while it holds the lock, so the second one meets it however fast
or slow the machine is, and then let go (SIGCONT) to finish normally.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from textnn.runs import RunDir

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{epochs: 2, batch_size: 8, log_every: 5, checkpoint_every: 1, threads: 1, progress: false, bootstrap_samples: 0}}
"""


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "dan.yaml"
    path.write_text(CONFIG.format(train=write_sentiment_tsv(tmp_path / "train.tsv", 120, seed=1),
                                  dev=write_sentiment_tsv(tmp_path / "dev.tsv", 20, seed=2)), encoding="utf-8")
    return path


def start(config: Path, run: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "textnn", "train", str(config), "--run-dir", str(run), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 240
    while not condition():
        assert proc.poll() is None, f"the training ended before {what}: {proc.communicate()[1]}"
        assert time.time() < deadline, f"no {what} after 240 s"
        time.sleep(0.02)


def holds_lock(run: Path, proc: subprocess.Popen) -> bool:
    lock = RunDir(run).lock_file
    try:
        return str(proc.pid) in lock.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False


def files(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}


def refused_while_paused(config: Path, run: Path, first: subprocess.Popen, *args: str) -> str:
    """Pause `first` once it holds the run's lock, run a second training of the run, let `first` go on;
    the second one's stderr (it changed nothing in the run)."""
    wait_for(lambda: holds_lock(run, first), first, "lock")
    first.send_signal(signal.SIGSTOP)
    try:
        before = files(run)
        second = start(config, run, *args)
        _, err = second.communicate(timeout=300)
        assert second.returncode == 2, err
        assert files(run) == before
    finally:
        first.send_signal(signal.SIGCONT)
    return err


def check_finished(run: Path, proc: subprocess.Popen) -> list[dict]:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["split"] == "train"]
    assert steps == sorted(set(steps))  # one writer: no step logged twice
    assert not RunDir(run).lock_file.exists()  # released on exit
    return records


def test_a_second_fresh_training_of_one_run_dir_stops_and_the_first_finishes(config, tmp_path):
    run = tmp_path / "run"
    first = start(config, run)
    err = refused_while_paused(config, run, first)
    assert err.strip() == (f"error: {run}: another `textnn train` is writing this run (process {first.pid} on "
                           f"{socket.gethostname()}); wait for it to end or stop it (kill {first.pid}), "
                           f"or choose another --run-dir")
    records = check_finished(run, first)
    assert len([r for r in records if r["split"] == "dev"]) == 2  # both epochs, once each


def test_a_killed_runs_lock_does_not_block_resume_and_two_resumes_do_not_both_run(config, tmp_path):
    run = tmp_path / "run"
    killed = start(config, run, "train.epochs=40")
    wait_for(RunDir(run).checkpoint_file.exists, killed, "checkpoint")
    killed.kill()  # SIGKILL: no handler runs; its lock file stays, naming a process that is gone
    killed.communicate(timeout=60)
    assert str(killed.pid) in RunDir(run).lock_file.read_text(encoding="utf-8")

    resumed = start(config, run, "--resume", "train.epochs=2")
    err = refused_while_paused(config, run, resumed, "--resume", "train.epochs=2")
    assert f"process {resumed.pid} on {socket.gethostname()}" in err and len(err.strip().splitlines()) == 1
    records = check_finished(run, resumed)
    assert len([r for r in records if r["split"] == "dev_final"]) == 1
