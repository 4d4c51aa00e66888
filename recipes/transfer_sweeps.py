"""Paired transfer curves under the selection protocol: does a model that starts from pre-training beat the
same model trained from scratch, when both get the same learning-rate search, both select on a validation
share of train, and both are read once on dev?

For a task, a pair (pre-trained side, scratch side) and a number of labelled rows N, each side is one
`textnn sweep` (runs/.../<pair>_<side>_<N>/): a grid over the pair's learning rates, every rate trained at
every seed on the same N rows (data.train_subset, drawn with the seed: at a seed both sides see the same
rows), each run keeping its weights by the validation score (data.validation_split of train, drawn with
the seed). The side's rate is the one with the best mean validation score over the seeds; its runs' dev
sets were evaluated once, on the kept weights, and are read back sentence by sentence (`textnn predict
RUN DEV`). The report gives per N each side's mean dev score and the paired difference, pre-trained minus
scratch at the same seed, with a 95% interval from a bootstrap that resamples the seeds and the dev
sentences together (`paired_interval`).

    python recipes/transfer_sweeps.py run runs/transfer_paired --task sst2 --pair glove
    python recipes/transfer_sweeps.py run runs/transfer_paired --task sst2 --pair ulmfit --start ulmfit=RUN
    python recipes/transfer_sweeps.py report runs/transfer_paired --plot docs/img/transfer_paired.png

`run` options: --sizes (default 100 300 1000), --seeds (default 1 2 3 4 5), --dry-run (print the sweep
files, train nothing), --threads, --precision (default fp32, the same numbers on either kind of CPU). Sizes above 1,000 rows use their first three seeds (the spread there
is small and the runs are long). A sweep that finished is reused; one that was stopped goes on where it
was (textnn sweep resumes). Pairs whose pre-trained side starts from one of our own runs (ulmfit: the
language model of recipes/sst2_ulmfit_lm.yaml; bert: a BERT-Mini pre-training run) need it with --start.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
VALIDATION_SHARE = 0.05  # of the whole training file: SST-2 3,367 rows, CoLA 427
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Side:
    label: str
    recipe: str  # relative to the repository
    overrides: tuple[str, ...] = ()  # "{start}" is replaced by the pair's --start run


@dataclass(frozen=True)
class Pair:
    pretrained: Side
    scratch: Side
    rates: tuple[float, ...]  # the learning rates both sides are searched over
    start: str = ""  # the --start NAME=RUN the pre-trained side needs ("" none)


@dataclass(frozen=True)
class Task:
    metric: str  # what the runs select on and the report reads: accuracy or mcc
    dev: str
    dev_header: bool
    label_column: int  # of the dev file (0-based)
    train_rows: int


TASKS = {
    "sst2": Task("accuracy", "../shared/data/sst2/dev.tsv", True, 1, 67_349),
    "cola": Task("mcc", "../shared/data/glue/CoLA/dev.tsv", False, 1, 8_551),
}
NO_VECTORS = ("data.vectors=", "data.vectors_vocab=false")
# The AWD-LSTM classifiers' dropouts, as fastai's text_classifier_learner gives them (drop_mult 0.5)
FASTAI_DROPOUTS = ("model.dropout=0.2", "model.dropout_hidden=0.15", "model.dropout_input=0.2",
                   "model.dropout_embedding=0.025", "model.weight_drop=0.25", "head.dropout=0.2")
# Both BERTs read the mean of the token states: masked-LM pre-training without next-sentence prediction
# never trains [CLS] or the pooler over it (docs/RESULTS.md)
MEAN_POOLED = ("head.sentence=pooled", "head.pooling=mean")
PAIRS = {
    ("sst2", "glove"): Pair(Side("BiLSTM on GloVe", "recipes/sst2_bilstm.yaml"),
                            Side("BiLSTM, random embeddings", "recipes/sst2_bilstm.yaml", NO_VECTORS),
                            (3e-4, 1e-3, 3e-3)),
    ("cola", "glove"): Pair(Side("BiLSTM on GloVe", "recipes/cola_bilstm.yaml"),
                            Side("BiLSTM, random embeddings", "recipes/cola_bilstm.yaml", NO_VECTORS),
                            (3e-4, 1e-3, 3e-3)),
    ("sst2", "ulmfit"): Pair(Side("ULMFiT, one rate", "recipes/sst2_ulmfit.yaml",
                                  ("model.init_from={start}", "train.unfreeze=0", "train.layer_lr_decay=1",
                                   *FASTAI_DROPOUTS)),
                             Side("AWD-LSTM from scratch", "recipes/sst2_ulmfit.yaml",
                                  ("model.init_from=", "model.name=awd_lstm", "model.preset=cpu", "data.tokenizer=word",
                                   "data.lowercase=true", "train.unfreeze=0", "train.layer_lr_decay=1",
                                   *FASTAI_DROPOUTS)),
                             (1e-3, 3e-3, 1e-2), start="ulmfit"),
    ("sst2", "bert"): Pair(Side("BERT-Mini, our pre-training", "recipes/sst2_bert_from_pretrain.yaml",
                                ("model.init_from={start}", *MEAN_POOLED)),
                           Side("BERT-Mini from scratch", "recipes/sst2_bert_scratch.yaml",
                                ("model.preset=mini", "model.n_layers=4", "model.d_model=256", "model.n_heads=4",
                                 *MEAN_POOLED)),
                           (1e-4, 3e-4, 1e-3), start="bert"),
}


def steps_for(size: int) -> int:
    """Training steps for N labelled rows: a small set is read many times, a large one about once."""
    return 150 if size <= 100 else 250 if size <= 300 else 400 if size <= 1000 else 600 if size <= 3000 else 2000


def sweep_file(task: str, pair_name: str, side_name: str, side: Side, size: int, seeds: list[int],
               pair: Pair, start: str, threads: int, precision: str) -> dict:
    recipe = yaml.safe_load((REPO / side.recipe).read_text(encoding="utf-8"))
    batch = int((recipe.get("train") or {}).get("batch_size", 32))
    rows = min(size, TASKS[task].train_rows)
    steps = steps_for(size)
    epochs = math.ceil(steps / math.ceil(rows / batch))
    overrides = [item.replace("{start}", start) for item in side.overrides]
    overrides += [f"data.validation_split={VALIDATION_SHARE}", f"train.max_steps={steps}", f"train.epochs={epochs}",
                  f"train.eval_every={steps // 4}", f"train.warmup_steps={steps // 10}", "train.max_minutes=0",
                  "train.progress=false", f"train.threads={threads}", f"train.precision={precision}"]
    if size < TASKS[task].train_rows:
        overrides.append(f"data.train_subset={size}")
    return {"name": f"{pair_name}_{side_name}_{size}", "recipe": str(REPO / side.recipe), "overrides": overrides,
            "space": {"train.lr": {"values": list(pair.rates)}}, "sampler": "grid",
            "metric": TASKS[task].metric, "seeds": seeds, "prune": False}


def run(args: argparse.Namespace) -> None:
    pair = PAIRS.get((args.task, args.pair))
    if pair is None:
        raise SystemExit(f"no pair {args.pair!r} for task {args.task!r}; pairs: "
                         f"{', '.join(f'{t}/{p}' for t, p in PAIRS)}")
    starts = dict(item.split("=", 1) for item in args.start)
    if pair.start and pair.start not in starts:
        raise SystemExit(f"pair {args.pair} starts from a run of ours: give --start {pair.start}=RUN")
    out = Path(args.out) / args.task
    for size in args.sizes:
        seeds = args.seeds if size <= 1000 else args.seeds[:3]
        for side_name, side in (("pretrained", pair.pretrained), ("scratch", pair.scratch)):
            spec = sweep_file(args.task, args.pair, side_name, side, size, seeds, pair, starts.get(pair.start, ""),
                              args.threads, args.precision)
            folder = out / spec["name"]
            path = out / "sweeps" / f"{spec['name']}.yaml"
            if args.dry_run:
                print(f"# {path}\n{yaml.safe_dump(spec, sort_keys=False)}")
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
            if finished(folder):
                print(f"{folder}: finished already, reused", file=sys.stderr)
                continue
            command = [sys.executable, "-m", "textnn", "sweep", str(path), "--sweep-dir", str(folder)]
            print("$ " + " ".join(shlex.quote(c) for c in command), file=sys.stderr)
            subprocess.run(command, check=True, cwd=REPO)


# ------------------------------------------------------------------------------------------- reading back

def gold_labels(task: Task) -> list[str]:
    with open(REPO / task.dev, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [row[task.label_column] for row in (rows[1:] if task.dev_header else rows)]


def predictions(run: Path, task: Task, cache: Path) -> list[str]:
    """The run's label for every dev sentence, in file order (`textnn predict RUN DEV`, kept in cache)."""
    target = cache / f"{run.parent.parent.name}_{run.parent.name}_{run.name}.jsonl"
    if not target.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "textnn", "predict", str(run), str(REPO / task.dev), "-o", str(target),
                        "--precision", "fp32", "-q"], check=True, cwd=REPO)
    return [json.loads(line)["label"] for line in target.read_text(encoding="utf-8").splitlines()]


def finished(folder: Path) -> bool:
    """Whether the sweep in `folder` has used its whole budget (sweep.json, as `textnn sweep` writes it)."""
    if not (folder / "sweep.json").is_file():
        return False
    summary = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    return summary["complete"] + summary["pruned"] >= summary["trials"]


def best_runs(folder: Path) -> tuple[float, list[Path]]:
    """The best complete trial of a sweep: its learning rate and its runs, one per seed."""
    summary = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    best = next(row for row in summary["ranking"] if row["trial"] == summary["best"]["trial"])
    return best["params"]["train.lr"], [folder / run for run in best["runs"]]


def scores(gold: np.ndarray, predicted: np.ndarray, metric: str) -> np.ndarray:
    """The metric of each row of `predicted` [..., N] against `gold` [..., N] (accuracy or Matthews'
    correlation of the positive class "1"), in percent."""
    if metric == "accuracy":
        return 100 * (gold == predicted).mean(-1)
    tp = ((gold == 1) & (predicted == 1)).sum(-1).astype(float)
    tn = ((gold == 0) & (predicted == 0)).sum(-1).astype(float)
    fp = ((gold == 0) & (predicted == 1)).sum(-1).astype(float)
    fn = ((gold == 1) & (predicted == 0)).sum(-1).astype(float)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 100 * np.where(denominator > 0, (tp * tn - fp * fn) / np.where(denominator > 0, denominator, 1), 0.0)


def paired_interval(gold: np.ndarray, pretrained: np.ndarray, scratch: np.ndarray, metric: str,
                    samples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of the paired difference pre-trained minus scratch, over seeds, with its 95%
    percentile interval: each resample draws the seeds (rows of `pretrained` and `scratch` [S, N], paired)
    and the dev sentences (columns, and `gold` [N]) with replacement, and recomputes the mean difference."""
    difference = scores(gold, pretrained, metric) - scores(gold, scratch, metric)  # [S]
    rng = np.random.default_rng(seed)
    count, n = pretrained.shape
    draws = []
    for _ in range(samples):
        rows = rng.integers(0, count, count)
        sentences = rng.integers(0, n, n)
        draws.append(float((scores(gold[sentences], pretrained[rows][:, sentences], metric)
                            - scores(gold[sentences], scratch[rows][:, sentences], metric)).mean()))
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(difference.mean()), float(low), float(high)


def report(args: argparse.Namespace) -> None:
    rows_out, plotted = [], {}
    for task_name, task in TASKS.items():
        folder = Path(args.out) / task_name
        if not folder.is_dir():
            continue
        gold_text = gold_labels(task)
        gold = np.asarray([int(label) for label in gold_text])
        for (pair_task, pair_name), pair in PAIRS.items():
            if pair_task != task_name:
                continue
            sizes = sorted({int(p.name.rsplit("_", 1)[1]) for p in folder.glob(f"{pair_name}_pretrained_*")
                            if (p / "sweep.json").is_file()})
            for size in sizes:
                sides = {}
                for side in ("pretrained", "scratch"):
                    sweep = folder / f"{pair_name}_{side}_{size}"
                    if not finished(sweep):
                        break
                    rate, runs = best_runs(sweep)
                    cache = Path(args.out) / "predictions" / task_name
                    labels = np.asarray([[int(x) for x in predictions(run, task, cache)] for run in runs])  # [S, N]
                    sides[side] = (rate, labels, [json.loads((run / "run.json").read_text())["dev"][task.metric]
                                                  for run in runs])
                if len(sides) < 2:
                    continue
                (rate_p, pre, reported_p), (rate_s, scr, reported_s) = sides["pretrained"], sides["scratch"]
                own_p, own_s = scores(gold, pre, task.metric), scores(gold, scr, task.metric)
                # the runs' own dev numbers and these recomputed ones are one measurement: say so if not
                for own, reported in ((own_p, reported_p), (own_s, reported_s)):
                    if not np.allclose(own, 100 * np.asarray(reported), atol=0.06):
                        print(f"warning: {task_name} {pair_name} {size}: dev recomputed from the predictions "
                              f"{own} differs from run.json's {reported}", file=sys.stderr)
                mean, low, high = paired_interval(gold, pre, scr, task.metric)
                rows_out.append((task_name, pair_name, size, len(pre), pair.pretrained.label, own_p, rate_p,
                                 pair.scratch.label, own_s, rate_s, mean, low, high))
                plotted.setdefault((task_name, pair_name), []).append((size, own_p, own_s, mean, low, high))
    if not rows_out:
        raise SystemExit(f"{args.out}: no finished pair of sweeps")
    print("| task | pair | labelled rows | seeds | pre-trained: mean (range), lr | scratch: mean (range), lr | "
          "difference (95% interval) |")
    print("|---|---|---|---|---|---|---|")
    for task_name, pair_name, size, seeds, _, own_p, rate_p, _, own_s, rate_s, mean, low, high in rows_out:
        print(f"| {task_name} ({TASKS[task_name].metric}) | {pair_name} | {size:,} | {seeds} | "
              f"{own_p.mean():.1f} ({own_p.min():.1f}-{own_p.max():.1f}), {rate_p:g} | "
              f"{own_s.mean():.1f} ({own_s.min():.1f}-{own_s.max():.1f}), {rate_s:g} | "
              f"**{mean:+.1f}** ({low:+.1f} to {high:+.1f}) |")
    if args.plot:
        plot(plotted, Path(args.plot))


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
    for axis, ((task_name, pair_name), points) in zip(axes[0], sorted(curves.items())):
        points.sort()
        sizes = [p[0] for p in points]
        pair = PAIRS[(task_name, pair_name)]
        for index, (label, style) in enumerate(((pair.pretrained.label, "-o"), (pair.scratch.label, "--s"))):
            means = [p[1 + index].mean() for p in points]
            axis.plot(sizes, means, style, label=label)
            axis.fill_between(sizes, [p[1 + index].min() for p in points], [p[1 + index].max() for p in points],
                              alpha=0.15)
        twin = axis.twinx()
        twin.errorbar(sizes, [p[3] for p in points], yerr=[[p[3] - p[4] for p in points], [p[5] - p[3] for p in points]],
                      fmt="k^", capsize=3, label="difference (95% interval)")
        twin.axhline(0, color="grey", linewidth=0.5)
        twin.set_ylabel("pre-trained minus scratch (points)")
        axis.set_xscale("log")
        axis.set_xlabel("labelled training rows")
        axis.set_ylabel(f"dev {TASKS[task_name].metric} (%)")
        axis.set_title(f"{task_name}: {pair_name}")
        handles = axis.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        axis.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    print(f"wrote {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run the sweeps of one pair on one task")
    p.add_argument("out")
    p.add_argument("--task", choices=sorted(TASKS), default="sst2")
    p.add_argument("--pair", default="glove")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--start", action="append", default=[], help="NAME=RUN: the run a pre-trained side starts from")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", default="fp32", help="train.precision of every run (fp32: the same numbers on "
                                                       "every CPU; auto picks bf16 where it is native)")
    p.add_argument("--dry-run", action="store_true")
    p = commands.add_parser("report", help="the table (and --plot PNG) of every finished pair under OUT")
    p.add_argument("out")
    p.add_argument("--plot", default="")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
