"""`textnn train --resume --run-dir RUN` continues the run as it was configured: its own config.yaml with the
overrides it was started with, whatever is (or is not) typed again; a change given on resume is either one a
resume allows, said in one line, or refused. And a run that kept its step checkpoints goes on from the newest
of them when last.safetensors is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv

REPO = Path(__file__).resolve().parents[2]
# 60 examples in batches of 4: 15 steps an epoch
CONFIG = ("task: classification\ndata: {format: tsv, train: train.tsv, dev: train.tsv}\n"
          "model: {name: dan, preset: tiny}\n"
          "train: {epochs: 2, batch_size: 4, eval_every: 5, lr: 0.01, threads: 1, progress: false, "
          "bootstrap_samples: 0, tensorboard: false}\n")


def textnn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def refused(done: subprocess.CompletedProcess, *expected: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


@pytest.fixture
def root(tmp_path) -> Path:
    write_sentiment_tsv(tmp_path / "train.tsv", 60, seed=1)
    (tmp_path / "recipe.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def status(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def checkpoints(run: Path) -> list[str]:
    return sorted(path.name for path in (run / "checkpoint").iterdir())


def test_resume_with_nothing_but_the_run_keeps_every_override_it_started_with(root):
    # started with overrides the recipe does not hold: a step budget, an evaluation schedule, kept checkpoints
    ok(textnn("train", "recipe.yaml", "train.max_steps=10", "train.eval_every=2", "train.keep_checkpoint=all",
              "--run-dir", "run", cwd=root))
    assert status(root / "run")["steps"] == 10
    done = ok(textnn("train", "--resume", "--run-dir", "run", "train.max_steps=14", cwd=root))
    assert "resuming run with train.max_steps=14 (it had 10)" in done.stderr
    assert status(root / "run")["steps"] == 14
    # eval_every=2 held (dev at 12 and 14), and keep_checkpoint=all kept every step checkpoint and checkpoint/
    steps = [record["step"] for record in map(json.loads, (root / "run" / "metrics.jsonl").read_text().splitlines())
             if record["split"] == "dev"]
    assert steps == [2, 4, 6, 8, 10, 12, 14]
    assert checkpoints(root / "run") == ["last.safetensors"] + [f"step-{step:06d}.safetensors"
                                                                for step in range(2, 15, 2)]


def test_resume_with_the_recipe_again_but_not_its_overrides_keeps_the_runs_own(root):
    ok(textnn("train", "recipe.yaml", "train.max_steps=6", "train.eval_every=3", "train.keep_checkpoint=last",
              "--run-dir", "run", cwd=root))
    # the hint's command without the overrides: the run goes on with max_steps 6 (nothing left), not 2 epochs
    done = ok(textnn("train", "recipe.yaml", "--resume", "--run-dir", "run", cwd=root))
    assert ("note: recipe.yaml differs from the run's config in train.eval_every, train.keep_checkpoint, "
            "train.max_steps") in done.stderr
    assert status(root / "run")["steps"] == 6


def test_a_change_a_resume_does_not_allow_is_refused_in_one_line_and_changes_nothing(root):
    ok(textnn("train", "recipe.yaml", "train.max_steps=4", "train.keep_checkpoint=last", "--run-dir", "run", cwd=root))
    before = (root / "run" / "config.yaml").read_text()
    line = refused(textnn("train", "--resume", "--run-dir", "run", "train.lr=0.5", cwd=root),
                   "cannot resume with train.lr=0.5", "started with 0.01", "but for train.device", "model.init_from=")
    assert "train.max_steps" in line
    # the run's own values typed again change nothing, and are no change to refuse
    ok(textnn("train", "--resume", "--run-dir", "run", "train.lr=0.01", "train.max_steps=4", cwd=root))
    assert (root / "run" / "config.yaml").read_text() == before
    refused(textnn("train", "--resume", cwd=root), "--resume: name the run to continue, --run-dir RUN")
    refused(textnn("train", cwd=root), "give a YAML config")


def test_a_run_that_kept_its_step_checkpoints_resumes_from_the_newest_when_last_is_gone(root):
    ok(textnn("train", "recipe.yaml", "train.max_steps=6", "train.eval_every=2", "train.keep_checkpoint=all",
              "--run-dir", "run", cwd=root))
    folder = root / "run" / "checkpoint"
    (folder / "last.safetensors").unlink()
    (folder / "step-000006.safetensors").write_bytes(b"damaged")  # the newest is damaged: the one before it
    done = ok(textnn("train", "--resume", "--run-dir", "run", "train.max_steps=8", cwd=root))
    assert "resuming from step-000004.safetensors, the newest intact step checkpoint" in done.stderr
    assert "step-000006.safetensors" in done.stderr  # the damaged one, passed over in its own line
    assert status(root / "run")["steps"] == 8
    assert (folder / "step-000004.safetensors").is_file() and (folder / "step-000002.safetensors").is_file()
