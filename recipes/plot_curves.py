"""Plot metrics of several runs against training time (or steps), for the figures in docs/RESULTS.md.

Reads each run's metrics.jsonl (the records the trainer wrote: split, step, seconds, metrics) and
draws the chosen metric of the chosen split against the seconds of training at that step, one line
per run, so runs with different step speeds compare at equal time; `--x step` draws it against the
optimizer step instead, for runs compared at an equal number of steps, and `--x epoch` against the
passes over the training data, for runs of different batch sizes compared at an equal amount read.
Several metrics (--metric mlm_accuracy nsp_accuracy) draw one line per run and metric, on one axis.
    usage: python recipes/plot_curves.py RUNS_DIR OUT.png --split dev --metric span_f1 [--runs a b ...]
           [--x step|epoch]
(a run in --runs may also be a path, relative to RUNS_DIR or absolute, and may end in =LABEL to name its
line: `--runs runs/bert_long="CPU, batch 32"`; the default label is the run's folder name)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def steps_per_epoch(records: list[dict]) -> float | None:
    """Optimizer steps one pass over the training data took, from the training records: the steps between
    the first records of two epochs logged, over the epochs between them (exact to train.log_every steps
    over that span). The first epoch is left out where two others are logged: its first records are at
    steps 1, 2, 4, ..., before train.log_every, where the other epochs' are on the train.log_every grid.
    None when the records hold fewer than two epochs."""
    first_step: dict[int, int] = {}
    for record in records:
        if record["split"] == "train" and "epoch" in record:
            first_step.setdefault(record["epoch"], record["step"])
    if len(first_step) < 2:
        return None
    later = sorted(epoch for epoch in first_step if epoch > 0)
    low = later[0] if len(later) >= 2 else min(first_step)
    high = max(first_step)
    return (first_step[high] - first_step[low]) / (high - low)


def curve(run: Path, split: str, metric: str, x: str = "seconds") -> tuple[list[float], list[float]]:
    """(training seconds, steps with x="step" or epochs with x="epoch"; metric values) of a run's records
    of `split`.

    Dev records carry no `seconds`; they take the seconds of the training record at the same step or
    the last one before it (the trainer logs training every train.log_every steps). An epoch is
    `steps_per_epoch` steps; a run that logged fewer than two epochs has no epoch axis (empty lists).
    """
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_seconds = sorted((r["step"], r["seconds"]) for r in records if r["split"] == "train" and "seconds" in r)
    epoch_steps = steps_per_epoch(records) if x == "epoch" else None
    if x == "epoch" and epoch_steps is None:
        return [], []
    xs, ys = [], []
    for record in records:
        if record["split"] != split or metric not in record:
            continue
        earlier = [seconds for step, seconds in train_seconds if step <= record["step"]]
        if x == "step":
            xs.append(record["step"])
        elif x == "epoch":
            xs.append(record["step"] / epoch_steps)
        elif record.get("seconds") is not None:
            xs.append(record["seconds"])
        elif earlier:
            xs.append(earlier[-1])
        else:
            continue
        ys.append(record[metric])
    return xs, ys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir")
    parser.add_argument("output")
    parser.add_argument("--split", default="dev", help="train, dev (default)")
    parser.add_argument("--metric", nargs="+", default=["loss"], help="one or more metrics (default loss)")
    parser.add_argument("--runs", nargs="*", help="run names (default: every finished run in RUNS_DIR)")
    parser.add_argument("--log-y", action="store_true", help="logarithmic y axis")
    parser.add_argument("--title", default="")
    parser.add_argument("--x", choices=["seconds", "step", "epoch"], default="seconds",
                        help="the x axis (default seconds)")
    args = parser.parse_args()

    root = Path(args.runs_dir)
    names = args.runs or sorted(p.parent.name for p in root.glob("*/metrics.jsonl"))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name in names:
        path, _, run_label = name.partition("=")
        for metric in args.metric:
            xs, ys = curve(root / path, args.split, metric, args.x)
            label = (run_label or Path(path).name) + (f": {metric}" if len(args.metric) > 1 else "")
            if xs:
                axes.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
            elif args.x == "epoch":
                print(f"{path}: left out, its records hold fewer than two epochs")
    axes.set_xlabel({"step": "optimizer step", "epoch": "epochs of the training data read",
                     "seconds": "seconds since training started (evaluations included)"}[args.x])
    metrics = ", ".join(args.metric)
    axes.set_ylabel(f"{args.split} {metrics}")
    if args.log_y:
        axes.set_yscale("log")
    against = {"step": "steps", "epoch": "epochs", "seconds": "training time"}[args.x]
    axes.set_title(args.title or f"{args.split} {metrics} against {against}")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
