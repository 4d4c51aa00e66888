"""How many optimizer steps fit a time budget, from a short probe run of the same model on the same machine.

recipes/gpu/pretrain.sh trains each model for a few seconds first (a probe, beside the model that will
share the GPU with it), then gives the real run the steps that fit its budget, so that its learning-rate
schedule (warm-up, decay) ends where the time does instead of being cut off by train.max_minutes. Two
things are read from the probe's training records (metrics.jsonl, one a step: `step`, `seconds` since
training began and `eval_seconds`, the part of those seconds spent in dev evaluations):
- the speed, in steps a second of training alone (`seconds - eval_seconds`), over the last third of that
  time only: the first steps of a run are slow (memory allocation, kernel selection, and for BERT-Mini on
  WikiText-2 on an H100 about 25 seconds before the speed settles, docs/RESULTS.md), and say little about
  the rest;
- the seconds one dev evaluation takes (the mean of the probe's evaluations), which the run spends
  `--evaluations` times inside its budget: the AWD-LSTM reads WikiText-2's dev set as one stream, and on an
  H100 its 5 evaluations took 43% of a 220-second run.
The steps are the speed times what the evaluations leave of the budget. It prints them and appends what it
measured to a JSON-lines file (the script's OUT/sizing.jsonl, which OUT/manifest.json takes in).
    usage: python recipes/gpu/sizing.py PROBE_RUN SECONDS --stage NAME --record FILE [--evaluations N]
                                        [--at-most N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MIN_STEPS = 2  # a schedule needs room for its warm-up and one evaluation
MEASURED_SHARE = 1 / 3  # the last third of the probe's training time gives its speed


def training_records(run: Path) -> list[tuple[float, float, int]]:
    """(seconds of training alone, seconds of evaluation so far, step) of each training record of the run."""
    records = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("split") == "train":
                evaluating = record.get("eval_seconds", 0.0)
                records.append((record["seconds"] - evaluating, evaluating, record["step"]))
    if len(records) < 2:
        raise SystemExit(f"{metrics}: {len(records)} training records, at least 2 are needed to measure the speed: "
                         f"the probe trained too few steps (give it more time: PROBE_SECONDS of "
                         f"recipes/gpu/pretrain.sh)")
    return records


def steps_per_second(records: list[tuple[float, float, int]]) -> float:
    """Optimizer steps a second of training alone, over the last third of the training time."""
    measured = [record for record in records if record[0] >= records[-1][0] * (1 - MEASURED_SHARE)]
    if len(measured) < 2:  # one record in the last third: measure from the first record instead
        measured = [records[0], records[-1]]
    (first_seconds, _, first_step), (last_seconds, _, last_step) = measured[0], measured[-1]
    return (last_step - first_step) / max(last_seconds - first_seconds, 1e-9)


def seconds_per_evaluation(records: list[tuple[float, float, int]]) -> float | None:
    """The mean time of the probe's dev evaluations (one between two records: the probe logs every step),
    None where it made none."""
    times = [later[1] - earlier[1] for earlier, later in zip(records, records[1:]) if later[1] > earlier[1]]
    return sum(times) / len(times) if times else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", type=Path, help="the probe's run directory")
    parser.add_argument("seconds", type=float, help="the budget of the real run, in seconds, its evaluations included")
    parser.add_argument("--stage", required=True, help="the name of the real run, for the record")
    parser.add_argument("--record", type=Path, required=True, help="JSON-lines file the measurement is appended to")
    parser.add_argument("--evaluations", type=int, default=0, help="dev evaluations the real run makes")
    parser.add_argument("--at-most", type=int, default=0, help="no more steps than this (0: no limit)")
    args = parser.parse_args()
    records = training_records(args.probe)
    rate = steps_per_second(records)
    evaluation = seconds_per_evaluation(records)
    if evaluation is None and args.evaluations:
        print(f"sizing.py: {args.probe} made no dev evaluation, so the {args.evaluations} of {args.stage} are taken "
              f"to cost nothing (give the probe a smaller train.eval_every)", file=sys.stderr)
    training = args.seconds - args.evaluations * (evaluation or 0.0)
    if training <= 0:
        raise SystemExit(f"sizing.py: {args.evaluations} dev evaluations of {evaluation:.1f} s each take more than "
                         f"{args.stage}'s budget of {args.seconds:g} s: give it a larger budget or fewer evaluations")
    steps = max(MIN_STEPS, int(rate * training))
    if args.at_most:
        steps = min(steps, args.at_most)
    with args.record.open("a", encoding="utf-8") as record:
        record.write(json.dumps({
            "stage": args.stage, "probe": args.probe.name, "steps_per_second": round(rate, 3),
            "seconds_per_evaluation": None if evaluation is None else round(evaluation, 3),
            "evaluations": args.evaluations, "budget_seconds": args.seconds, "training_seconds": round(training, 3),
            "steps": steps}) + "\n")
    print(steps)


if __name__ == "__main__":
    main()
