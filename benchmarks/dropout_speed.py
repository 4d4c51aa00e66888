"""Speed: textnn's dropout mask (uniform >= p, modules/dropout.py) against torch's (`bernoulli_`), on the CPU.

The same computation either way (each element kept with probability 1 - p, scaled by 1 / (1 - p));
only how the mask is drawn differs. Two measurements, each interleaved and timed with the CPU time of
the one compute thread (so other work on the machine does not count):
  - the operation: dropout forward and backward on a 32 x 64 x 1024 tensor, `F.dropout` against
    textnn's `dropout`;
  - a training step of each family (benchmarks/families.py: forward, loss, backward, optimizer step),
    with textnn's masks and with torch's (`textnn.modules.dropout.DRAW_ON_CPU = False`).
Printed as `ratio=<ours/torch's>` in operations or steps per second: above 1, ours is faster.

    python benchmarks/dropout_speed.py
    python benchmarks/dropout_speed.py --families gpt --steps 2     # a quick check that it runs
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from families import add_step_options, build, family_configs  # benchmarks/families.py
from machine import device_info, pick_clock  # benchmarks/machine.py

from textnn.modules import dropout as textnn_dropout

def per_second(work, repeats: int, clock) -> float:
    started = clock()
    for _ in range(repeats):
        work()
    return repeats / (clock() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_options(parser, "mask")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    clock, clock_name = pick_clock(device)
    print(f"{device_info(device)}; timed with {clock_name}")

    x = torch.randn(32, 64, 1024, requires_grad=True)

    def op(function) -> None:
        function(x, 0.1, True).sum().backward()

    rates = {"torch": [], "ours": []}
    for _ in range(args.repeats):
        rates["torch"].append(per_second(lambda: op(F.dropout), 10, clock))
        rates["ours"].append(per_second(lambda: op(textnn_dropout.dropout), 10, clock))
    ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["torch"])
    print(f"dropout forward + backward, 32 x 64 x 1024, p 0.1: {1e3 / theirs:.1f} ms with torch's, "
          f"{1e3 / ours:.1f} ms with ours, ratio={ours / theirs:.3f}")

    with tempfile.TemporaryDirectory() as tmp:
        configs = family_configs(Path(tmp))
        for name in args.families or list(configs):
            task, model, optimizer = build(configs[name], name)
            batches = task.train_batches(0)[: args.steps]
            model.train()

            def steps() -> None:
                for batch in batches:
                    (task.loss(model, batch) / batch.count).backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)

            steps()  # warm-up
            rates = {"torch": [], "ours": []}
            for _ in range(args.repeats):  # interleaved, so a change in the machine's load hits both
                for ours_draws, key in ((False, "torch"), (True, "ours")):
                    textnn_dropout.DRAW_ON_CPU = ours_draws
                    rates[key].append(per_second(steps, 1, clock) * len(batches))
            ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["torch"])
            print(f"{name:>15}: training steps/s with torch's mask {theirs:.3f}, with ours {ours:.3f}, "
                  f"ratio={ours / theirs:.3f} ({len(batches)} steps x {args.repeats})")


if __name__ == "__main__":
    main()
