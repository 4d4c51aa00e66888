"""Speed: bf16 autocast against float32, for a matrix product and for a training step of each family.

What it answers: on this machine, does `train.precision=bf16` pay, and by how much per family? The
same model, weights and batches run a few training steps (forward, loss, backward, optimizer step)
in float32 and then under bf16 autocast (textnn/training/precision.py), interleaved; printed as
`ratio=<bf16/fp32>` in steps per second, so above 1 means bf16 is faster. The first line says
whether the CPU has native bf16 (AVX512-BF16 or AMX), which is what `train.precision=auto` decides
on. A family whose kernels do not run in bf16 on this machine (oneDNN has no bf16 LSTM without
AVX512) is reported as such, not timed.

Families, each on its task with synthetic data of realistic shape (so nothing needs downloading):
a Kim CNN classifier (SST-2-sized batches), BERT-Mini (4 x 256) classifying 64-piece sentences, a
GPT language model (4 x 256, 128 tokens), the Multi30k Transformer (preset small), and the
AWD-LSTM language model of ULMFiT's stage (a) (preset cpu, 33k words).

    python benchmarks/precision_speed.py                 # one torch thread (CPU time of that thread)
    python benchmarks/precision_speed.py --steps 2 --families cnn   # a quick check that it runs
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from families import add_step_options, build, family_configs  # benchmarks/families.py
from machine import device_info, pick_clock  # benchmarks/machine.py

from textnn.training import precision

def steps_per_second(task, model, optimizer, batches, autocast, clock) -> float:
    model.train()
    started = clock()
    for batch in batches:
        with autocast():
            loss = task.loss(model, batch) / batch.count
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return len(batches) / (clock() - started)


def matmul_gflops(dtype: torch.dtype, clock, size: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    started = clock()
    for _ in range(repeats):
        a @ b
    return 2 * size ** 3 * repeats / (clock() - started) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_options(parser, "precision")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    clock, clock_name = pick_clock(device)
    native = precision.cpu_native_bf16()
    print(f"{device_info(device)}; native bf16 (AVX512-BF16 or AMX): {'yes' if native else 'no'}; "
          f"timed with {clock_name}")
    print(f"train.precision=auto here: {precision.choose('auto', 'cpu', native).describe()}")
    fp32, bf16 = matmul_gflops(torch.float32, clock), matmul_gflops(torch.bfloat16, clock, repeats=2)
    print(f"matmul 1024 x 1024: fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} GFLOP/s, ratio={bf16 / fp32:.3f}")
    bf16_context = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    fp32_context = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        configs = family_configs(Path(tmp))
        for name in args.families or list(configs):
            task, model, optimizer = build(configs[name], name)
            batches = task.train_batches(0)[: args.steps]
            try:
                steps_per_second(task, model, optimizer, batches[:1], bf16_context, clock)
            except RuntimeError as err:
                print(f"{name:>15}: bf16 does not run on this CPU ({str(err).splitlines()[0][:90]})")
                continue
            steps_per_second(task, model, optimizer, batches[:1], fp32_context, clock)  # warm-up
            times = {"fp32": [], "bf16": []}
            for _ in range(args.repeats):  # interleaved, so a change in the machine's load hits both
                times["fp32"].append(steps_per_second(task, model, optimizer, batches, fp32_context, clock))
                times["bf16"].append(steps_per_second(task, model, optimizer, batches, bf16_context, clock))
            f, b = statistics.median(times["fp32"]), statistics.median(times["bf16"])
            print(f"{name:>15}: training steps/s fp32 {f:.3f}, bf16 {b:.3f}, ratio={b / f:.3f} "
                  f"({model.num_parameters():,} parameters, {len(batches)} steps x {args.repeats})")


if __name__ == "__main__":
    main()
