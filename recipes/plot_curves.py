"""Plot metrics of several runs against training time (or steps), for the figures in docs/RESULTS.md.

Reads each run's metrics.jsonl (the records the trainer wrote: split, step, seconds, metrics) and
draws the chosen metric of the chosen split against the seconds of training at that step, one line
per run, so runs with different step speeds compare at equal time; `--x step` draws it against the
optimizer step instead, for runs compared at an equal number of steps. Several metrics (--metric
mlm_accuracy nsp_accuracy) draw one line per run and metric, on one axis.
    usage: python recipes/plot_curves.py RUNS_DIR OUT.png --split dev --metric span_f1 [--runs a b ...] [--x step]
(a run in --runs may also be a path, relative to RUNS_DIR or absolute)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curve(run: Path, split: str, metric: str, x: str = "seconds") -> tuple[list[float], list[float]]:
    """(training seconds, or steps with x="step"; metric values) of a run's records of `split`.

    Dev records carry no `seconds`; they take the seconds of the training record at the same step or
    the last one before it (the trainer logs training every train.log_every steps).
    """
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_seconds = sorted((r["step"], r["seconds"]) for r in records if r["split"] == "train" and "seconds" in r)
    xs, ys = [], []
    for record in records:
        if record["split"] != split or metric not in record:
            continue
        earlier = [seconds for step, seconds in train_seconds if step <= record["step"]]
        if x == "step":
            xs.append(record["step"])
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
    parser.add_argument("--x", choices=["seconds", "step"], default="seconds", help="the x axis (default seconds)")
    args = parser.parse_args()

    root = Path(args.runs_dir)
    names = args.runs or sorted(p.parent.name for p in root.glob("*/metrics.jsonl"))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name in names:
        for metric in args.metric:
            xs, ys = curve(root / name, args.split, metric, args.x)
            label = Path(name).name + (f": {metric}" if len(args.metric) > 1 else "")
            if xs:
                axes.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
    axes.set_xlabel("optimizer step" if args.x == "step" else "seconds since training started (evaluations included)")
    metrics = ", ".join(args.metric)
    axes.set_ylabel(f"{args.split} {metrics}")
    if args.log_y:
        axes.set_yscale("log")
    against = "steps" if args.x == "step" else "training time"
    axes.set_title(args.title or f"{args.split} {metrics} against {against}")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
