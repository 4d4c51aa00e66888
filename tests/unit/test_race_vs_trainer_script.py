"""benchmarks/race_vs_trainer.py: both sides' timers leave every evaluation out in the same way, and the
race runs end to end on a tiny random BERT and toy data."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FILLER, NEGATIVE, POSITIVE, write_sentiment_tsv

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "race_vs_trainer.py"


def load_script():
    spec = importlib.util.spec_from_file_location("race_vs_trainer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


race = load_script()
STEP, EVALUATION = 1.0, 100.0  # a synthetic timeline: each step takes 1 s, each evaluation 100 s
ACCURACY = {2: 0.5, 4: 0.9, 6: 0.8}  # the evaluations after steps 2, 4 and 6


def our_trainer_rows() -> list[dict]:
    """metrics.jsonl as textnn's trainer writes it on the timeline (log_every 1): a train record after each
    step, before that step's evaluation; `seconds` counts the evaluations before it, `eval_seconds` them alone."""
    rows, now, in_evaluations = [], 0.0, 0.0
    for step in range(1, 7):
        now += STEP
        rows.append({"split": "train", "step": step, "loss": 0.5, "seconds": now, "eval_seconds": in_evaluations})
        if step in ACCURACY:
            now += EVALUATION
            in_evaluations += EVALUATION
            rows.append({"split": "dev", "step": step, "accuracy": ACCURACY[step], "loss": 0.3})
    return rows


def trainer_clock_rows() -> tuple[list[dict], float]:
    """What the Trainer side's callback records on the same timeline: on_step_end after each step,
    on_evaluate once an evaluation's result is in."""
    now = 1000.0  # the clock's origin is arbitrary
    clock = race.EvalClock(now)
    for step in range(1, 7):
        now += STEP
        clock.end_step(now)
        if step in ACCURACY:
            now += EVALUATION
            clock.evaluated(step, ACCURACY[step], now)
    return clock.rows, clock.eval_seconds


def test_both_sides_read_the_training_time_without_any_evaluation():
    expected = [race.Reading(2, 2.0, 0.5), race.Reading(4, 4.0, 0.9), race.Reading(6, 6.0, 0.8)]
    ours = race.readings(our_trainer_rows())
    rows, eval_seconds = trainer_clock_rows()
    theirs = race.readings(rows)
    assert ours == theirs == expected  # the evaluation at the target's step is left out too
    assert eval_seconds == 3 * EVALUATION
    assert race.first_reaching(ours, 0.85) == race.Reading(4, 4.0, 0.9)
    assert race.first_reaching(ours, 0.95) is None
    assert race.steps_per_second(ours) == race.steps_per_second(theirs) == 1 / STEP


def test_a_dev_record_without_a_train_record_at_its_step_is_refused():
    rows = [r for r in our_trainer_rows() if not (r["split"] == "train" and r["step"] == 4)]
    with pytest.raises(SystemExit, match="no train record at step 4"):
        race.readings(rows)


def run_of(side: str, seconds_a_step: float, accuracies: list[float]) -> "race.Run":
    found = [race.Reading(100 * (i + 1), 100 * (i + 1) * seconds_a_step, a) for i, a in enumerate(accuracies)]
    return race.Run(side, found, eval_seconds=5.0 * len(found))


def test_medians_ranges_and_ratios_over_the_runs():
    ours = race.summarize([run_of("textnn", s, a) for s, a in
                           ((0.5, [0.8, 0.86]), (0.4, [0.86, 0.9]), (0.6, [0.8, 0.86]))], 0.85)
    assert ours["steps_per_s"] == (2.0, 1 / 0.6, 2.5)
    assert ours["seconds"] == (100.0, 40.0, 120.0) and ours["step"] == (200.0, 100.0, 200.0)
    assert ours["reached"] == ours["runs"] == 3
    theirs = race.summarize([run_of("transformers Trainer", s, [0.8, 0.86]) for s in (1.0, 1.0, 1.0)], 0.85)
    steps, seconds = race.ratios(ours, theirs)
    assert steps == pytest.approx(2.0) and seconds == pytest.approx(2.0)
    short = race.summarize([run_of("transformers Trainer", 1.0, a) for a in ([0.8, 0.86], [0.8, 0.84])], 0.85)
    assert short["reached"] == 1 and short["seconds"] == (200.0, 200.0, 200.0)
    assert race.ratios(ours, short)[1] is None  # no ratio to a target one side missed in a run


def test_steps_must_end_on_an_evaluation(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "5", "--eval-every", "2", "--data", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--steps 5 must be a multiple of --eval-every 2" in done.stderr


def tiny_bert(path: Path) -> Path:
    """A random 2-layer BERT whose vocabulary holds the toy data's words."""
    import torch
    import transformers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(FILLER + POSITIVE + NEGATIVE))]
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=128)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def test_the_race_runs_both_sides_interleaved(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (pip install accelerate)")
    data = tmp_path / "data"
    data.mkdir()
    write_sentiment_tsv(data / "train.tsv", 64, seed=1)
    write_sentiment_tsv(data / "dev.tsv", 16, seed=2)
    command = [sys.executable, str(SCRIPT), "--steps", "4", "--warmup", "1", "--eval-every", "2", "--target", "0",
               "--repeats", "2", "--data", str(data), "--checkpoint", str(tiny_bert(tmp_path / "bert"))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    finished = [line.split("] ")[1].split(" done")[0] for line in out.splitlines() if " done (" in line]
    assert finished == ["textnn", "transformers Trainer"] * 2
    seeds = [line.split(":")[0] for line in out.splitlines() if ", seed " in line]
    assert seeds == ["textnn, seed 1", "transformers Trainer, seed 1", "textnn, seed 2", "transformers Trainer, seed 2"]
    for side in race.SIDES:  # target 0: reached at the first evaluation, step 2, in every run
        summary = next(line for line in out.splitlines() if line.strip().startswith(side + " ") and "[" in line)
        assert "step at 0% 2 [2-2] (reached in 2 of 2)" in summary, summary
    assert "steps/s ratio=" in out and "time to 0% ratio=" in out
