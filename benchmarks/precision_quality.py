"""Quality: bf16 autocast against float32 at equal steps, for five families on their recipes' real data.

What it answers: does `train.precision=bf16` (the default where the CPU multiplies bf16 natively)
change what a run learns? For each family, its recipe is trained by the CLI, one run at a time,
`textnn train RECIPE train.precision=fp32|bf16 train.seed=S train.max_steps=N ...`, for seeds 1, 2, 3
and the same N in both precisions, with the one dev evaluation at the end. Each run's dev metric,
steps and training seconds are read from its run.json, and its precision from run.json's
`precision_legs` (the last leg's), so a run that trained in another precision than asked is an
error, not a mislabelled row. The table gives each precision's mean (min-max) over the seeds, the
paired difference bf16 - fp32 of each seed and its mean, and the seconds of training per run; for a
family scored by accuracy, a second row gives its dev loss, which shows a difference too small to move
a prediction.

Families and budgets (N chosen so a run takes well under a minute and a half on one thread of a shared
2-core CPU, evaluation included):
a Kim CNN on SST-2 (sst2_cnn_rand), the 2 x 128 BERT on SST-2 from scratch (sst2_bert_scratch), the
character GPT on Tiny Shakespeare (tinyshakespeare_gpt), the Multi30k Transformer (multi30k_transformer,
1,000-token batches, 20 warm-up steps, dev perplexity: greedy decoding of a barely trained model is most of
a BLEU evaluation's time) and the AWD-LSTM WikiText-2 language model (wikitext2_awd_lstm, dev = the
first 350 lines of valid.txt, about 16k words, no test). Short runs: the numbers compare precisions,
not the recipes' results.

    python benchmarks/precision_quality.py --runs /tmp/pq --out /tmp/pq/table.json   # 30 runs, ~40 min
    python benchmarks/precision_quality.py --runs /tmp/pq --families cnn --seeds 1 --steps cnn=20   # a check

A finished run whose run.json matches (steps, precision) is read again rather than retrained, so a grid
cut short goes on where it stopped when the same command is run again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SHARED = "../shared/data"


@dataclass(frozen=True)
class Family:
    recipe: str
    steps: int
    metric: str
    higher_is_better: bool
    overrides: tuple[str, ...] = field(default=())


FAMILIES = {
    "cnn": Family("sst2_cnn_rand", 800, "accuracy", True),
    "bert": Family("sst2_bert_scratch", 600, "accuracy", True),
    "gpt": Family("tinyshakespeare_gpt", 400, "loss", False),
    "transformer_mt": Family("multi30k_transformer", 40, "perplexity", False,
                             ("data.batch_tokens=1000", "train.warmup_steps=20", "train.metric=perplexity")),
    "awd_lstm": Family("wikitext2_awd_lstm", 40, "perplexity", False, ("data.test=",)),
}
AWD_DEV_LINES = 350  # WikiText-2 valid.txt is 217k words: a full pass costs more than the training here


def data_overrides(name: str, family: Family, data: Path, runs: Path) -> list[str]:
    """The recipe's data paths under ../shared/data moved to `data` (the recipes name them relative to the
    main checkout); for the AWD-LSTM, a shorter dev file written into `runs`."""
    recipe = yaml.safe_load((REPO / "recipes" / f"{family.recipe}.yaml").read_text(encoding="utf-8"))
    moved = [f"data.{key}={data / value[len(SHARED) + 1:]}" for key, value in recipe["data"].items()
             if isinstance(value, str) and value.startswith(SHARED + "/")]
    if name == "awd_lstm":
        dev = runs / f"wikitext2_valid_first{AWD_DEV_LINES}.txt"
        lines = (data / "wikitext2" / "valid.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        dev.write_text("".join(lines[:AWD_DEV_LINES]), encoding="utf-8")
        moved.append(f"data.dev={dev}")
    return moved


def read_run(run_dir: Path, steps: int, precision: str) -> dict | None:
    """The finished run's numbers, or None when it is absent or unfinished; an error when it trained in
    another precision or for another number of steps than asked."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if info.get("status") != "finished":
        return None
    legs = info.get("precision_legs") or []
    trained_in = legs[-1].get("precision") if legs else None
    if trained_in != precision or info.get("steps") != steps:
        raise SystemExit(f"{run_dir}: trained {info.get('steps')} steps in {trained_in}, not {steps} in "
                         f"{precision}; remove it or give another --runs")
    return {"dev": info["dev"], "train_seconds": info["train_seconds"], "steps": info["steps"]}


def train(name: str, family: Family, precision: str, seed: int, steps: int, moved: list[str],
          runs: Path, threads: int) -> dict:
    run_dir = runs / name / f"{precision}_seed{seed}"
    found = read_run(run_dir, steps, precision)
    if found is not None:
        return {**found, "wall_seconds": None}
    command = [sys.executable, "-m", "textnn", "train", str(REPO / "recipes" / f"{family.recipe}.yaml"), *moved,
               *family.overrides, f"train.precision={precision}", f"train.seed={seed}", f"train.max_steps={steps}",
               f"train.threads={threads}", "train.eval_every=0", "train.max_minutes=0", "train.epochs=100",
               "train.bootstrap_samples=0", "train.progress=false", "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    (runs / name / f"{precision}_seed{seed}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise SystemExit(f"{name} {precision} seed {seed} failed:\n{done.stderr[-2000:]}")
    found = read_run(run_dir, steps, precision)
    if found is None:
        raise SystemExit(f"{run_dir}: the run did not finish; see {run_dir}.log")
    return {**found, "wall_seconds": round(wall, 1)}


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def summary(name: str, family: Family, metric: str, steps: int, runs: dict) -> dict:
    seeds = sorted(set(runs["fp32"]) & set(runs["bf16"]))
    row = {"family": name, "recipe": family.recipe, "steps": steps, "metric": metric,
           "higher_is_better": family.higher_is_better if metric == family.metric else False, "seeds": seeds,
           "runs": runs}
    if seeds:
        fp32 = [runs["fp32"][s]["dev"][metric] for s in seeds]
        bf16 = [runs["bf16"][s]["dev"][metric] for s in seeds]
        row.update(fp32=fp32, bf16=bf16, difference=[b - f for b, f in zip(bf16, fp32)],
                   train_seconds={p: statistics.mean(runs[p][s]["train_seconds"] for s in seeds) for p in runs})
    return row


def print_table(rows: list[dict]) -> None:
    print("| family | steps | dev metric | fp32 mean (min-max) | bf16 mean (min-max) | bf16 - fp32 per seed | "
          "mean difference | train s/run fp32, bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if not row["seeds"]:
            continue
        better = "higher" if row["higher_is_better"] else "lower"
        per_seed = ", ".join(f"{d:+.4f}" for d in row["difference"])
        seconds = row["train_seconds"]
        print(f"| {row['family']} | {row['steps']} | {row['metric']} ({better} is better) | {spread(row['fp32'])} | "
              f"{spread(row['bf16'])} | {per_seed} (seeds {', '.join(map(str, row['seeds']))}) | "
              f"{statistics.mean(row['difference']):+.4f} | {seconds['fp32']:.1f}, {seconds['bf16']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="folder for the runs (outside the repository)")
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    parser.add_argument("--data", type=Path, default=REPO / SHARED, help="the data folder (default ../shared/data)")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", nargs="*", default=[], metavar="FAMILY=N", help="another N for a family")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run (train.threads)")
    args = parser.parse_args()
    steps = {name: family.steps for name, family in FAMILIES.items()}
    steps.update({k: int(v) for k, v in (item.split("=", 1) for item in args.steps)})
    args.runs = args.runs.resolve()
    args.runs.mkdir(parents=True, exist_ok=True)
    moved = {name: data_overrides(name, FAMILIES[name], args.data.resolve(), args.runs) for name in args.families}
    results = {name: {"fp32": {}, "bf16": {}} for name in args.families}
    # seeds outermost, the two precisions of a seed back to back: a grid cut short still has every
    # family paired, and a change in the machine's load hits both precisions alike
    for seed in args.seeds:
        for name in args.families:
            for precision in ("fp32", "bf16"):
                family = FAMILIES[name]
                run = train(name, family, precision, seed, steps[name], moved[name], args.runs, args.threads)
                results[name][precision][seed] = run
                print(f"{name} seed {seed} {precision}: {family.metric}={run['dev'][family.metric]:.4f} "
                      f"({run['steps']} steps, {run['train_seconds']:.1f} s training, "
                      f"{'read again' if run['wall_seconds'] is None else str(run['wall_seconds']) + ' s wall'})", flush=True)
    # the dev loss beside an accuracy: two precisions can agree on every prediction and still differ
    rows = [summary(name, FAMILIES[name], metric, steps[name], results[name]) for name in args.families
            for metric in dict.fromkeys([FAMILIES[name].metric, "loss"])]
    print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
