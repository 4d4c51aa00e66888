"""Training speed of the WikiText-2 language-model recipes: the full softmax vs the adaptive softmax.

For each recipe (recipes/wikitext2_*.yaml, as written: model, batch, bptt, optimizer), the same
model is built twice, with `head.softmax=full` and with `head.softmax=adaptive` (Grave et al. 2017;
cutoffs 2,000 and 10,000 over the 33,279-word vocabulary, div_value 4), and trained for the same
training windows of WikiText-2 train (the recipe's own batches, in order, carried state included).
Both run in this one process, one after the other, repeated `--rounds` times in alternation so a
burst of other work on a shared machine hits both alike. Printed per recipe: training tokens/s of
each (the median over rounds of the CPU time of the one compute thread), `ratio=<adaptive/full>`
and the parameter counts.

    python benchmarks/lm_softmax.py                        # every recipe, 20 steps x 3 rounds, one thread
    python benchmarks/lm_softmax.py --recipes wikitext2_lstm --steps 50
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import pick_clock  # noqa: E402 (benchmarks/machine.py)
from textnn.resolve import load_config  # noqa: E402
from textnn.tasks.language_modeling import LanguageModelingTask  # noqa: E402
from textnn.training.optim import build_optimizer  # noqa: E402

RECIPES = ["wikitext2_nplm", "wikitext2_lstm", "wikitext2_awd_lstm", "wikitext2_gpt", "wikitext2_transformer_xl"]
ADAPTIVE = ["head.softmax=adaptive", "head.cutoffs=[2000, 10000]", "head.div_value=4"]


def clock() -> float:
    """CPU time of this thread with one torch thread (other processes do not count), else wall-clock."""
    return pick_clock(torch.device("cpu"))[0]()


def train_steps(task: LanguageModelingTask, overrides: list[str], recipe: Path, steps: int, seed: int) -> tuple[float, int]:
    """(training tokens per second over `steps` optimizer steps, parameter count) of a fresh model."""
    config = load_config(str(recipe), overrides)
    task.config = config  # the same data and batches; only the head differs
    task._state = None  # noqa: SLF001: the carried state of the previous model must not leak in
    torch.manual_seed(seed)
    model = task.build_model().train()
    optimizer = build_optimizer(model, config.train, torch.device("cpu"))
    batches = task.train_batches(0)
    tokens, seconds = 0, 0.0
    for index in range(steps):
        batch = batches[index]
        began = clock()
        optimizer.zero_grad(set_to_none=True)
        loss = task.loss(model, batch) / batch.count
        loss.backward()
        optimizer.step()
        seconds += clock() - began
        tokens += batch.num_tokens
    return tokens / seconds, sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=RECIPES, help="recipe names under recipes/ (default: all five)")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per model and round (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating full/adaptive rounds (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, the recipes' setting)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"device: CPU, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
          f"{args.steps} steps x {args.rounds} rounds per model; clock: "
          f"{'thread CPU time' if args.threads == 1 else 'wall-clock time'}")
    print(f"{'recipe':<26} {'full tok/s':>11} {'adaptive tok/s':>15} {'ratio':>7} {'full params':>12} {'adaptive params':>16}")
    for name in args.recipes:
        recipe = REPO / "recipes" / f"{name}.yaml"
        task = LanguageModelingTask.from_data(load_config(str(recipe), []))
        full, adaptive = [], []
        for _ in range(args.rounds):
            full.append(train_steps(task, [], recipe, args.steps, seed=0))
            adaptive.append(train_steps(task, ADAPTIVE, recipe, args.steps, seed=0))
        full_speed = sorted(speed for speed, _ in full)[len(full) // 2]
        adaptive_speed = sorted(speed for speed, _ in adaptive)[len(adaptive) // 2]
        print(f"{name:<26} {full_speed:>11,.0f} {adaptive_speed:>15,.0f} ratio={adaptive_speed / full_speed:>4.2f} "
              f"{full[0][1]:>12,} {adaptive[0][1]:>16,}", flush=True)


if __name__ == "__main__":
    main()
