"""How many optimizer steps fit a time budget, from a short probe run of the same model on the same machine.

recipes/gpu/pretrain.sh trains each model for a few seconds first (a probe, beside the model that will
share the GPU with it), then gives the real run the steps that fit its budget, so that its learning-rate
schedule (warm-up, decay) ends where the time does instead of being cut off by train.max_minutes. The
speed is read from the probe's training records (metrics.jsonl: `step` and `seconds` since training
began), over their second half only: the first steps of a run are slow (memory allocation, kernel
selection) and say little about the rest. It prints the number of steps and appends what it measured to
a JSON-lines file (the script's OUT/sizing.jsonl, which OUT/manifest.json takes in).
    usage: python recipes/gpu/sizing.py PROBE_RUN SECONDS --stage NAME --record FILE [--at-most N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MIN_STEPS = 2  # a schedule needs room for its warm-up and one evaluation


def steps_per_second(run: Path) -> float:
    """Optimizer steps a second over the second half of the run's training records."""
    records = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("split") == "train":
                records.append((record["seconds"], record["step"]))
    if len(records) < 2:
        raise SystemExit(f"{metrics}: {len(records)} training records, at least 2 are needed to measure the speed: "
                         f"the probe trained too few steps (give it more time: PROBE_SECONDS of "
                         f"recipes/gpu/pretrain.sh)")
    half = [record for record in records if record[0] >= records[-1][0] / 2]
    (first_seconds, first_step), (last_seconds, last_step) = half[0], half[-1]
    if len(half) < 2:  # one record in the second half: measure from the first record instead
        first_seconds, first_step = records[0]
    return (last_step - first_step) / max(last_seconds - first_seconds, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", type=Path, help="the probe's run directory")
    parser.add_argument("seconds", type=float, help="the budget of the real run, in seconds of training")
    parser.add_argument("--stage", required=True, help="the name of the real run, for the record")
    parser.add_argument("--record", type=Path, required=True, help="JSON-lines file the measurement is appended to")
    parser.add_argument("--at-most", type=int, default=0, help="no more steps than this (0: no limit)")
    args = parser.parse_args()
    rate = steps_per_second(args.probe)
    steps = max(MIN_STEPS, int(rate * args.seconds))
    if args.at_most:
        steps = min(steps, args.at_most)
    with args.record.open("a", encoding="utf-8") as record:
        record.write(json.dumps({"stage": args.stage, "probe": args.probe.name, "steps_per_second": round(rate, 3),
                                 "budget_seconds": args.seconds, "steps": steps}) + "\n")
    print(steps)


if __name__ == "__main__":
    main()
