"""Does torch.compile pay on the CPU? Per family: compile time, steady training speed, and agreement.

For each family of benchmarks/families.py the same initial weights train `--steps` steps twice on
the same batches: eagerly, and through `torch.compile(model)` as `train.compile=true` does (the
trainer compiles the model the task calls). Printed per family: the eager and compiled steady
speeds (steps/s after the first steps, CPU time of the one compute thread) as `ratio=<compiled/eager>`,
the compile time (the first two compiled steps' wall time, and the later steps' time, beyond
their steady cost: recompilations for new batch shapes count), the largest difference
of the per-step training losses (the goal is <= 1e-3; the models run in eval mode, dropout off, for
this comparison, since compiled and eager code draw their dropout masks differently; gradients and
updates are as in training), and what a 10-minute run gets: the steps it
makes in 600 s with the compile time counted, compiled against eager.

    python benchmarks/compile_speed.py                  # every family, 50 steps each
    python benchmarks/compile_speed.py --families cnn --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from families import build, family_configs  # benchmarks/families.py
from machine import device_info  # benchmarks/machine.py


def run(task, model, optimizer, batches) -> tuple[list[float], list[float], float]:
    """(loss per step, CPU seconds of this thread per step, wall seconds of the first two steps)."""
    losses, seconds = [], []
    wall = time.perf_counter()
    for index, batch in enumerate(batches):
        started = time.thread_time()
        loss = task.loss(model, batch) / batch.count
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.thread_time() - started)
        losses.append(float(loss.detach()))
        if index == 1:
            first_two = time.perf_counter() - wall
    return losses, seconds, first_two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--families", nargs="*", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{device_info(torch.device('cpu'))}; CPU time of the one compute thread")
    with tempfile.TemporaryDirectory() as tmp:
        configs = family_configs(Path(tmp))
        for name in args.families or list(configs):
            raw = configs[name]
            results = {}
            for mode in ("eager", "compiled"):
                task, model, optimizer = build(raw, name)
                model.eval()  # dropout off: the same deterministic function in both modes
                epoch = task.train_batches(0)
                batches = [epoch[i % len(epoch)] for i in range(args.steps)]  # round again if the epoch is short
                forward = torch.compile(model) if mode == "compiled" else model
                try:
                    results[mode] = run(task, forward, optimizer, batches)
                except Exception as err:  # noqa: BLE001 (a compiler failure is a result to report)
                    print(f"{name:>15}: torch.compile failed: {type(err).__name__}: {str(err).splitlines()[0][:100]}")
                    break
            if len(results) < 2:
                continue
            (eager_loss, eager_s, _), (comp_loss, comp_s, comp_first) = results["eager"], results["compiled"]
            steady = max(2, args.steps // 5)  # the first fifth may still compile (new shapes) or warm up
            eager_rate = 1 / statistics.median(eager_s[steady:])
            comp_rate = 1 / statistics.median(comp_s[steady:])
            # wall time: the compiler's C++ builds run in worker processes; later recompilations for new
            # batch shapes show in this thread's time of the steps after the first two
            compile_s = comp_first - 2 / comp_rate + sum(comp_s[2:]) - (len(comp_s) - 2) / comp_rate
            in_ten = max(0.0, 600 - compile_s) * comp_rate / (600 * eager_rate)
            diff = max(abs(a - b) for a, b in zip(eager_loss, comp_loss))
            print(f"{name:>15}: eager {eager_rate:.2f} steps/s, compiled {comp_rate:.2f}, ratio={comp_rate / eager_rate:.3f}; "
                  f"compile {compile_s:.0f} s; 10-minute run {in_ten:.2f}x the eager steps; max |loss diff| {diff:.1e}")


if __name__ == "__main__":
    main()
