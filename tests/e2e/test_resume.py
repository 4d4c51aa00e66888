"""A run killed at any step and resumed finishes with exactly the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_sentiment_tsv

# DAN has word dropout and dropout (so the RNG state matters), Adam has moments, the linear schedule
# depends on the step, grad_accum=2 makes the data position land mid-group.
CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{optimizer: adam, lr: 0.01, scheduler: linear, warmup_steps: 5, epochs: 12, batch_size: 4,
         grad_accum: 2, eval_every: 37, checkpoint_every: 1, progress: false, bootstrap_samples: 0{extra}}}
"""
# The same run with parameter groups: one more of DAN's layer groups trains every 20 steps, so a run
# stopped at step 40 or later is resumed with its embeddings still frozen (they join at step 60).
EXTRA = {"adam-linear": "",
         "unfreezing": ", weight_decay: 0.01, no_decay: true, layer_lr_decay: 0.3846, unfreeze: 20,"
                       " unfreeze_unit: step"}


def _cli(*args: str, cache: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TEXTNN_CACHE": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "textnn", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module", params=list(EXTRA))
def setup(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"resume-{request.param}")
    train = write_sentiment_tsv(root / "train.tsv", 200, seed=1)
    dev = write_sentiment_tsv(root / "dev.tsv", 40, seed=2)
    config = root / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev, extra=EXTRA[request.param]))
    reference = _cli("train", str(config), "--run-dir", str(root / "reference"), cache=root / "cache")
    out, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err
    return root, config


def _step_of(checkpoint: Path) -> int:
    from safetensors import safe_open

    try:
        with safe_open(str(checkpoint), framework="pt") as handle:
            return json.loads(handle.metadata()["trainer"])["step"]
    except Exception:  # not written yet
        return -1


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_killed_run_resumes_to_identical_weights(setup, sig):
    root, config = setup
    run_dir = root / f"interrupted-{sig.name}"
    proc = _cli("train", str(config), "--run-dir", str(run_dir), cache=root / "cache")
    checkpoint = run_dir / "checkpoint" / "last.safetensors"
    deadline = time.time() + 120
    while _step_of(checkpoint) < 40 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be interrupted; make the run longer"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    status = json.loads((run_dir / "run.json").read_text())["status"]
    if sig == signal.SIGKILL:
        assert status == "running"  # really died mid-run
    else:
        assert proc.returncode == 130, err
        assert status == "interrupted"
        assert "--resume" in err
    assert not (run_dir / "report.md").exists()

    stopped_at = _step_of(checkpoint)
    total = json.loads((root / "reference" / "run.json").read_text())["steps"]
    assert 0 < stopped_at < total

    resumed = _cli("train", str(config), "--run-dir", str(run_dir), "--resume", cache=root / "cache")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    expected = load_file(str(root / "reference" / "checkpoint" / "last.safetensors"))
    got = load_file(str(checkpoint))
    weights = [k for k in expected if k.startswith("model.")]
    assert weights
    for key in weights:
        assert torch.equal(expected[key], got[key]), key
    for key in [k for k in expected if k.startswith("optim.")]:
        assert torch.equal(expected[key], got[key]), key
    best_expected = load_file(str(root / "reference" / "model.safetensors"))
    best_got = load_file(str(run_dir / "model.safetensors"))
    assert all(torch.equal(best_expected[k], best_got[k]) for k in best_expected)
    reference_dev = [r for r in map(json.loads, (root / "reference" / "metrics.jsonl").read_text().splitlines())
                     if r["split"] == "dev"]
    resumed_dev = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                   if r["split"] == "dev"]
    assert [r["accuracy"] for r in reference_dev] == [r["accuracy"] for r in resumed_dev]


@pytest.mark.parametrize("setup", ["adam-linear"], indirect=True)
def test_resume_refuses_a_changed_config(setup, tmp_path):
    root, config = setup
    proc = _cli("train", str(config), "--run-dir", str(root / "reference"), "--resume", "train.lr=0.5",
                cache=root / "cache")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "train.lr" in err and "new --run-dir" in err
