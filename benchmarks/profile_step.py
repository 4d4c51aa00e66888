"""Where a training step's time goes: torch.profiler over a few steps of each family, the top operators.

One torch thread, the families of benchmarks/families.py, a warm-up step, then `--steps` profiled
steps (forward, loss, backward, optimizer step). Printed per family: the total profiled CPU time per
step and the operators with the most self CPU time (the time inside the operator itself, not in the
operators it calls), with their share. This is the "before" and "after" picture for a speed change.

    python benchmarks/profile_step.py                      # every family
    python benchmarks/profile_step.py --families gpt --top 15
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from families import build, family_configs  # benchmarks/families.py
from machine import device_info  # benchmarks/machine.py
from torch.profiler import ProfilerActivity, profile


def train_steps(task, model, optimizer, batches) -> None:
    model.train()
    for batch in batches:
        loss = task.loss(model, batch) / batch.count
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="profiled training steps per family")
    parser.add_argument("--top", type=int, default=10, help="operators listed per family")
    parser.add_argument("--families", nargs="*", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(device_info(torch.device("cpu")))
    with tempfile.TemporaryDirectory() as tmp:
        configs = family_configs(Path(tmp))
        for name in args.families or list(configs):
            task, model, optimizer = build(configs[name], name)
            batches = task.train_batches(0)[: args.steps + 1]
            train_steps(task, model, optimizer, batches[:1])  # warm-up: allocations, first-call costs
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                train_steps(task, model, optimizer, batches[1:])
            events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
            total = sum(e.self_cpu_time_total for e in events)  # microseconds over all profiled steps
            print(f"\n{name}: {total / 1e3 / args.steps:.1f} ms of CPU per step ({args.steps} steps profiled)")
            print(f"  {'operator':<44} {'self ms/step':>12} {'share':>6} {'calls/step':>10}")
            for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]:
                print(f"  {e.key[:44]:<44} {e.self_cpu_time_total / 1e3 / args.steps:>12.2f} "
                      f"{e.self_cpu_time_total / total:>6.1%} {e.count / args.steps:>10.0f}")


if __name__ == "__main__":
    main()
