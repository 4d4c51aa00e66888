"""`--resume` with a new budget (train.epochs, max_steps, max_minutes): the run goes on exactly as if it
had been started with that budget, or the command refuses with one line and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_sentiment_tsv
from textnn.cli import main

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}, test: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{optimizer: adam, lr: 0.01, batch_size: 8, log_every: 2, progress: false, bootstrap_samples: 0,
         threads: 1, keep_checkpoint: last{extra}}}
"""


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train = write_sentiment_tsv(tmp_path / "train.tsv", 48, seed=1)  # 6 batches an epoch
    dev = write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2)

    def config(extra: str = "") -> str:
        path = tmp_path / f"config{len(list(tmp_path.glob('config*.yaml')))}.yaml"
        path.write_text(CONFIG.format(train=train, dev=dev, extra=extra), encoding="utf-8")
        return str(path)

    return tmp_path, config


def train(config: str, run: Path, *overrides: str, resume: bool = False) -> int:
    return main(["train", config, "--run-dir", str(run), *(["--resume"] if resume else []), *overrides])


def records(run: Path) -> list[tuple]:
    """metrics.jsonl without the timings, which differ from run to run."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["split"], r["step"], r.get("loss"), r.get("accuracy"), r.get("last")) for r in rows]


def test_a_larger_budget_continues_a_constant_schedule_exactly(files, capsys):
    root, config = files
    constant = config(", scheduler: constant")
    assert train(constant, root / "short", "train.epochs=2") == 0
    assert train(constant, root / "short", "train.epochs=4", resume=True) == 0
    assert train(constant, root / "long", "train.epochs=4") == 0
    short, long = (load_file(str(root / name / "checkpoint" / "last.safetensors")) for name in ("short", "long"))
    assert [k for k in long if k.startswith("model.")] and long.keys() == short.keys()
    for key in [k for k in long if k.startswith(("model.", "optim."))]:
        assert torch.equal(short[key], long[key]), key
    assert records(root / "short") == records(root / "long")  # the first run's final results are not kept
    assert [split for split, *_ in records(root / "long")].count("test") == 1


def test_a_larger_budget_drops_the_record_of_the_steps_that_ended_the_run(files, capsys):
    """A run whose last step is not one train.log_every logs writes that step's loss at its end, marked
    `last`; a resume with a larger budget drops it with the run's other final records, so that the run
    writes what a run started with that budget writes."""
    root, config = files
    constant = config(", scheduler: constant")
    assert train(constant, root / "short", "train.epochs=2", "train.log_every=5") == 0  # 12 steps
    train_rows = [(step, last) for split, step, _, _, last in records(root / "short") if split == "train"]
    assert train_rows == [(1, None), (2, None), (4, None), (5, None), (10, None), (12, True)]
    assert train(constant, root / "short", "train.epochs=4", resume=True) == 0
    assert train(constant, root / "long", "train.epochs=4", "train.log_every=5") == 0
    assert records(root / "short") == records(root / "long")
    assert [(step, last) for split, step, _, _, last in records(root / "long") if split == "train"] == [
        (1, None), (2, None), (4, None), (5, None), (10, None), (15, None), (20, None), (24, True)]


@pytest.mark.parametrize("first,resumed,reason", [
    # the linear schedule decays to 0 over the planned steps: 12 -> 24 would change every later rate
    (["train.scheduler=linear", "train.epochs=2"], ["train.epochs=4"], "linear schedule spans the planned steps"),
    # stopped at step 9 (mid-epoch) and evaluated there; a longer run evaluates at epoch ends only
    (["train.epochs=3", "train.max_steps=9"], ["train.max_steps=15"], "dev evaluation outside its schedule"),
    (["train.epochs=3"], ["train.epochs=1"], "already past that budget"),
    # another change is refused for itself, before any budget is looked at
    (["train.epochs=2"], ["train.batch_size=4", "train.epochs=4"], "the run was started with 8"),
])
def test_a_budget_the_run_cannot_honour_exactly_is_refused_and_nothing_changes(files, capsys, first, resumed,
                                                                                  reason):
    root, config = files
    path = config()
    assert train(path, root / "run", *first) == 0
    before = {p: p.read_bytes() for p in (root / "run").rglob("*") if p.is_file()}
    capsys.readouterr()
    assert train(path, root / "run", *first, *resumed, resume=True) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    key, value = resumed[0].split("=")
    assert f"cannot resume with {key}={value}" in err[0] and reason in err[0] and "--run-dir" in err[0]
    assert {p: p.read_bytes() for p in (root / "run").rglob("*") if p.is_file()} == before


def test_extend_continues_a_run_stopped_off_its_schedule_and_says_so(files, capsys):
    """A run stopped by max_steps mid-epoch was evaluated there, outside its schedule; plain --resume
    refuses a larger budget (above), --extend goes on with that evaluation kept and says so."""
    root, config = files
    path = config()
    assert train(path, root / "run", "train.epochs=3", "train.max_steps=9") == 0
    capsys.readouterr()
    assert main(["train", path, "--run-dir", str(root / "run"), "--extend", "train.epochs=3",
                 "train.max_steps=15"]) == 2
    assert "--extend continues a run: pass --resume" in capsys.readouterr().err
    assert main(["train", path, "--run-dir", str(root / "run"), "--resume", "--extend", "train.epochs=3",
                 "train.max_steps=15"]) == 0
    err = capsys.readouterr().err
    assert "extending with train.max_steps=15 (was 9)" in err and "dev evaluation outside its schedule" in err
    status = json.loads((root / "run" / "run.json").read_text())
    assert status["status"] == "finished" and status["steps"] == 15 and status["stopped"] == "max_steps"
    dev_steps = [step for split, step, *_ in records(root / "run") if split == "dev"]
    assert dev_steps == [6, 9, 12, 15]  # epoch ends (6 steps an epoch), the kept one at 9, the new end at 15
