"""TensorBoard event files: every number of metrics.jsonl, at its step; off with train.tensorboard=false."""

from __future__ import annotations

import pytest

from tests.conftest import write_sentiment_tsv
from textnn import experiment
from textnn.resolve import config_from_dict


def _config(tmp_path, **train):
    raw = {"task": "classification",
           "data": {"train": str(write_sentiment_tsv(tmp_path / "train.tsv", 64, seed=1)),
                    "dev": str(write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2))},
           "model": {"name": "cbow", "preset": "tiny"},
           "train": {"device": "cpu", "progress": False, "bootstrap_samples": 0, "epochs": 2, "batch_size": 8,
                     "log_every": 2, "eval_every": 4, "threads": 1, **train}}
    return config_from_dict(raw, "tensorboard-test")


def test_the_event_files_hold_the_runs_numbers_at_their_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, _ = experiment.train(_config(tmp_path), tmp_path / "run")
    events = EventAccumulator(str(run.path / "tensorboard"))
    events.Reload()
    records = run.read_metrics()
    for split, key in (("train", "loss"), ("train", "lr"), ("train", "tokens_per_s"), ("dev", "accuracy"),
                       ("dev", "loss")):
        expected = [(r["step"], r[key]) for r in records if r["split"] == split]
        logged = [(e.step, e.value) for e in events.Scalars(f"{split}/{key}")]
        assert expected and [step for step, _ in logged] == [step for step, _ in expected]
        assert [value for _, value in logged] == pytest.approx([value for _, value in expected], rel=1e-6)


def test_no_event_files_when_turned_off(tmp_path):
    run, _ = experiment.train(_config(tmp_path, tensorboard=False), tmp_path / "run")
    assert not (run.path / "tensorboard").exists() and run.read_metrics()
