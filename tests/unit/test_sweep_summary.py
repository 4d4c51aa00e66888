"""What `textnn sweep` prints at its end (textnn/sweep.py `summary_lines`): a trial still running in another
process sharing the study is counted as such, and the best so far is not announced as the best."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from textnn.sweep import SweepResult, TrialRow, summary_lines


def result(states: list[str]) -> SweepResult:
    sweep = SimpleNamespace(space=[SimpleNamespace(key="train.lr")], metric="accuracy", trials=len(states),
                            name="study", seeds=[1, 2], command=lambda params, seed: f"textnn train r.yaml "
                            f"train.lr={params['train.lr']} train.seed={seed}")
    rows = [TrialRow(number, state, 0.9 - number / 10 if state == "COMPLETE" else None, {"train.lr": 10.0 ** -number},
                     []) for number, state in enumerate(states)]
    return SweepResult(sweep=sweep, folder=Path("sweeps/study"), storage="sqlite:///study.db", rows=rows)


def test_a_finished_study_names_its_best_trial():
    lines = summary_lines(result(["COMPLETE", "COMPLETE", "PRUNED"]))
    assert "3 of 3 trials done (2 complete, 1 pruned), 0 failed; study study" in lines[-3]
    assert "running" not in lines[-3]
    assert lines[-2].startswith("best: trial 0, validation accuracy 0.9000 (mean over seeds 1, 2): train.lr=1")
    assert lines[-1] == "reproduce: textnn train r.yaml train.lr=1.0 train.seed=1"


def test_a_trial_running_in_another_process_is_counted_and_the_best_is_only_so_far():
    lines = summary_lines(result(["COMPLETE", "RUNNING", "COMPLETE"]))
    assert "2 of 3 trials done (2 complete, 0 pruned), 0 failed, 1 marked running by another process" in lines[-3]
    assert lines[-2].startswith("best so far: trial 0, validation accuracy 0.9000")
    assert any(line.startswith("1 ") and "RUNNING" in line for line in lines)  # the table shows it
