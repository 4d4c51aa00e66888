"""train.keep_checkpoint=all: every checkpoint a run writes is kept by its step, beside the latest that --resume
reads, and never removed (`none` and `last` are covered where the run's disk use is tested)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_sentiment_tsv
from textnn.config import TrainConfig
from textnn.errors import TextnnError

REPO = Path(__file__).resolve().parents[2]
# 60 examples in batches of 4: 15 steps an epoch, so every checkpoint below is one of checkpoint_every / eval_every
CONFIG = ("task: classification\ndata: {format: tsv, train: train.tsv, dev: train.tsv}\n"
          "model: {name: dan, preset: tiny}\n"
          "train: {max_steps: 6, batch_size: 4, eval_every: 2, checkpoint_every: 2, keep_checkpoint: all, lr: 0.01, "
          "threads: 1, progress: false, bootstrap_samples: 0, tensorboard: false}\n")


def textnn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def model_tensors(path: Path) -> dict[str, torch.Tensor]:
    return {name[len("model."):]: tensor for name, tensor in load_file(str(path)).items() if name.startswith("model.")}


def test_every_checkpoint_is_kept_by_step_and_resume_goes_on_from_the_latest(tmp_path):
    from textnn.experiment import load_run

    write_sentiment_tsv(tmp_path / "train.tsv", 60, seed=1)
    (tmp_path / "config.yaml").write_text(CONFIG, encoding="utf-8")
    done = textnn("train", "config.yaml", "--run-dir", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "run" / "checkpoint"
    names = ["step-000002.safetensors", "step-000004.safetensors", "step-000006.safetensors"]
    assert sorted(path.name for path in folder.iterdir()) == ["last.safetensors", *names]
    assert (folder / "last.safetensors").read_bytes() == (folder / names[-1]).read_bytes()

    _, _, model = load_run(tmp_path / "run")
    kept = [model_tensors(folder / name) for name in names]
    for weights in kept:  # each holds the whole model: it loads into the run's model as it is
        model.load_state_dict(weights, strict=True)
    for earlier, later in zip(kept, kept[1:]):  # and each is the model of its own step
        assert any(not torch.equal(earlier[name], later[name]) for name in earlier)

    from textnn.runs import summaries

    files = [path for path in (tmp_path / "run").rglob("*") if path.is_file()]
    newest = (folder / names[-1]).stat().st_size
    assert summaries(tmp_path)[0]["bytes"] == sum(path.stat().st_size for path in files) - newest  # counted once

    before = {name: (folder / name).read_bytes() for name in names}
    done = textnn("train", "config.yaml", "--run-dir", "run", "--resume", "train.max_steps=8", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming" in done.stderr and "at step 6" in done.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["last.safetensors", *names, "step-000008.safetensors"]
    assert all((folder / name).read_bytes() == data for name, data in before.items())  # never rewritten


def test_keep_checkpoint_takes_all_and_names_every_value_when_wrong():
    assert TrainConfig(keep_checkpoint="all").keep_checkpoint == "all"
    with pytest.raises(TextnnError, match="none, last or all"):
        TrainConfig(keep_checkpoint="every")


def test_a_file_system_without_hard_links_gets_a_copy(tmp_path, monkeypatch):
    from textnn.files import atomic_link

    source = tmp_path / "last.safetensors"
    source.write_bytes(b"checkpoint")

    def no_links(*args):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    atomic_link(source, tmp_path / "step-000001.safetensors")
    assert (tmp_path / "step-000001.safetensors").read_bytes() == b"checkpoint"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["last.safetensors", "step-000001.safetensors"]
