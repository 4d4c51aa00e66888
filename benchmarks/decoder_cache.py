"""Decoding speed: the Transformer's decoder with its caches vs full recomputation at every step.

Autoregressive decoding reads one new target token per step. Two ways to get the decoder's state of
that token, on THE SAME `transformer_mt` model with the same weights, source and target tokens:

- cached (`start` / `step`): the memory's cross-attention keys and values are projected once per
  source sentence (`start`) and each layer keeps its self-attention keys and values, so step t
  costs one position's work (attending over t cached keys);
- recomputed: step t runs the whole decoder (`decode`) on the t + 1 tokens read so far and keeps
  the last position, as a decoder without a cache must; the memory's keys and values are projected
  again at every step.

The encoder runs once for both and is not timed; no output layer either (both would pay it once
per token), so the ratio isolates what the caches save. Printed: target tokens/s of both, the
largest difference between their states (float rounding only: 0 to 1e-5 expected), and
`ratio=<recomputed time / cached time>` for the whole target length.

    python benchmarks/decoder_cache.py                      # "small" preset, 1 CPU thread, ~1 minute
    python benchmarks/decoder_cache.py --lengths 16 32 64 --device cuda --threads 0 --batch 128
"""

# B batch (sentences), S source length, T target length, D model dim

from __future__ import annotations

import argparse
import statistics

import torch

from textnn.models.base import InputSpec
from textnn.models.transformer_mt import PRESETS, TransformerMT
from xl_eval_speed import device_info, pick_clock, sync  # benchmarks/ is on the path when run as a script


@torch.no_grad()
def cached(model: TransformerMT, memory: object, target: torch.Tensor) -> torch.Tensor:
    """States of every target position [B, T, D], one `step` per token."""
    state, states = model.start(memory), []
    for t in range(target.size(1)):
        last, state = model.step(target[:, t:t + 1], state)
        states.append(last)
    return torch.stack(states, dim=1)  # T x [B, D] -> [B, T, D]


@torch.no_grad()
def recomputed(model: TransformerMT, memory: object, target: torch.Tensor) -> torch.Tensor:
    """States of every target position [B, T, D], the whole prefix decoded again for each token."""
    mask = torch.ones_like(target, dtype=torch.bool)
    states = [model.decode(memory, target[:, :t + 1], mask[:, :t + 1]).tokens[:, -1]
              for t in range(target.size(1))]
    return torch.stack(states, dim=1)  # T x [B, D] -> [B, T, D]


def timed(fn, clock, device: torch.device, repeats: int) -> tuple[float, torch.Tensor]:
    """Median seconds of `repeats` calls of fn() after one warm-up call, and its result."""
    out = fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = clock()
        out = fn()
        sync(device)
        times.append(clock() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS), help="transformer_mt preset")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64], help="target lengths T")
    parser.add_argument("--source-length", type=int, default=24, help="source length S (default 24)")
    parser.add_argument("--batch", type=int, default=16, help="sentences per batch B (default 16)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="joint vocabulary size (default 8000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side, median kept (default 3)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (default 1: steadier timings on a shared machine; 0 = torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    spec = InputSpec(vocab_size=args.vocab_size, pad_id=0)
    model = TransformerMT(PRESETS[args.preset].options(), spec, spec).to(device).eval()
    clock, clock_name = pick_clock(device)
    print(f"transformer_mt preset {args.preset!r}, random weights; B {args.batch}, S {args.source_length}; "
          f"{device_info(device)}; timer: {clock_name}")
    source = torch.randint(1, args.vocab_size, (args.batch, args.source_length), device=device)
    with torch.no_grad():
        memory = model.encode(source, torch.ones_like(source, dtype=torch.bool))
    print(f"{'T':>5} {'cached tok/s':>13} {'recomputed tok/s':>17} {'max|dstate|':>12}  ratio")
    for length in args.lengths:
        target = torch.randint(1, args.vocab_size, (args.batch, length), device=device)
        fast, fast_out = timed(lambda: cached(model, memory, target), clock, device, args.repeats)
        slow, slow_out = timed(lambda: recomputed(model, memory, target), clock, device, args.repeats)
        tokens = args.batch * length
        diff = float((fast_out - slow_out).abs().max())
        print(f"{length:>5} {tokens / fast:>13.0f} {tokens / slow:>17.0f} {diff:>12.2e}  ratio={slow / fast:.2f}")


if __name__ == "__main__":
    main()
