"""Evaluation speed: Transformer-XL with its memory vs a vanilla Transformer at the same context length.

Dai et al. (2019, §3.2 and the evaluation-speed table of §4) compare two ways to give every
predicted token an attention length of L tokens:

- vanilla (Al-Rfou et al. 2018's evaluation): slide a window of L tokens one position at a time
  and predict only its last token, recomputing the whole window for every prediction;
- Transformer-XL: read the stream one segment of T tokens at a time with a memory of L cached
  positions per layer and `same_length`, so every position attends to exactly its last L positions.

Here both are THE SAME model with the same weights: the vanilla evaluation is the Transformer-XL
run with no memory over each window (the encoder's states of `window` with no memory, the output
layer applied to the last position only). Per window that is exactly a vanilla Transformer's arithmetic, so the ratio
isolates what the memory saves: the recomputation. Both run in this one process on the same token
stream (WikiText-2 valid when ../shared/data is present, else random ids), and both are timed in
the steady state, on predictions whose context is a full L tokens.

Printed for each L: tokens/s of both (from the median seconds per predicted token over XL's
segments and over the vanilla batches, robust to other work on a shared machine), `ratio=<vanilla
time / xl time>` per predicted token, and two loss checks. (1) Identical context: for the first L predictions both see exactly every
earlier token (XL's memory is not full yet; the vanilla pass covers the prefix), so their per-token
losses must agree to float precision: `max|dloss|`. (2) Beyond that, XL's lower layers see further
back than a window's, so the mean losses differ slightly; with `--run` (a trained transformer_xl
run) that difference is meaningful, with random weights both sit near ln V.

    python benchmarks/xl_eval_speed.py                       # CPU defaults: under a minute, one thread
    python benchmarks/xl_eval_speed.py --lengths 512 1024 2048 --tokens 20000 --vanilla-tokens 2000 --device cuda
    python benchmarks/xl_eval_speed.py --run runs/wikitext2_transformer_xl
"""

# N stream length, L attention length, T segment length, W windows per vanilla batch, V vocabulary, D model dim

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine import device_info, pick_clock  # noqa: E402 (benchmarks/machine.py)
from textnn.models.transformer_xl import PRESETS  # noqa: E402
from textnn.tasks.language_modeling import LanguageModel, language_model  # noqa: E402

VALID = REPO.parent / "shared" / "data" / "wikitext2" / "valid.txt"
WIKITEXT2_VOCAB = 33279  # whitespace tokens of WikiText-2 train + <pad>, <unk>, <eos> (the recipe's vocabulary)


def read_stream(tokens: int, vocab_size: int, seed: int) -> tuple[torch.Tensor, str]:
    """The first `tokens` ids of WikiText-2 valid (words + <eos> per line, ids by first appearance),
    or random ids when the file is absent. Returns (ids [N], a description of the source)."""
    if VALID.is_file():
        table: dict[str, int] = {}
        ids: list[int] = []
        with VALID.open(encoding="utf-8") as handle:
            for line in handle:
                for word in (*line.split(), "<eos>"):
                    ids.append(table.setdefault(word, len(table) + 1) % vocab_size)  # 0 is padding
                if len(ids) >= tokens:
                    return torch.tensor(ids[:tokens]), f"WikiText-2 valid, first {tokens} tokens"
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab_size, (tokens,), generator=generator), f"{tokens} random ids"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCK = time.perf_counter


def nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood: logits [P, V], targets [P] -> [P] (float32)."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@torch.inference_mode()
def xl_pass(model: LanguageModel, stream: torch.Tensor, segment: int,
            timed_from: int) -> tuple[torch.Tensor, float, int]:
    """Read the stream in segments with the memory; per-token losses of targets stream[1:].

    Returns (losses [N-1], median seconds per predicted token over the segments that start at or
    after `timed_from`, predictions in those segments). The memory must be full before timing
    starts: earlier segments attend to fewer keys and would flatter the steady-state speed. The
    median over segments keeps a burst of another process's work out of the number.
    """
    device = stream.device
    inputs, targets = stream[:-1], stream[1:]
    losses, state, per_token, timed = [], None, [], 0
    for start in range(0, len(inputs), segment):
        ids = inputs[start:start + segment][None]  # [1, T]
        sync(device)
        began = CLOCK()
        out = model(ids, state)
        state = out.state
        loss = nll(out.logits[0], targets[start:start + segment])  # [T]
        sync(device)
        if start >= timed_from:
            per_token.append((CLOCK() - began) / ids.size(1))
            timed += ids.size(1)
        losses.append(loss)
    return torch.cat(losses), median(per_token), timed


@torch.inference_mode()
def vanilla_pass(model: LanguageModel, stream: torch.Tensor, length: int, count: int,
                 batch: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Al-Rfou et al.'s evaluation with the same weights and no memory.

    The first `length` predictions come from one causal pass over stream[:L] (each sees its whole
    prefix). Then each of the next `count` tokens stream[t+1], t >= L, is predicted from the window
    stream[t-L+1 : t+1] alone, `batch` windows per forward; only these are timed.
    Returns (losses of the first L targets [L], losses of the next `count` targets [count],
    median seconds per predicted token over the batches).
    """
    device = stream.device
    head = model(stream[None, :length]).logits[0]  # [L, V]
    first = nll(head, stream[1:length + 1])
    windows = stream[:length + count].unfold(0, length, 1)[1:]  # [count + 1, L] -> [count, L]; row k ends at L+k
    targets = stream[length + 1:length + count + 1]  # [count]
    losses, per_token = [], []
    for start in range(0, count, batch):
        sync(device)
        began = CLOCK()
        hidden = model.encoder(windows[start:start + batch], None).tokens  # [W, L, D]
        losses.append(nll(model.head(hidden[:, -1]), targets[start:start + batch]))  # [W]
        sync(device)
        per_token.append((CLOCK() - began) / len(losses[-1]))
    return first, torch.cat(losses), median(per_token)


def load_model(args: argparse.Namespace, device: torch.device) -> tuple[LanguageModel, torch.Tensor, str]:
    """A trained run's model and its own encoding of WikiText-2 valid, or a seeded random model."""
    if args.run:
        from textnn.experiment import load_run

        config, task, model = load_run(args.run, device=str(device))
        if config.model_name != "transformer_xl":
            sys.exit(f"{args.run}: a {config.model_name} run; this benchmark needs a transformer_xl run")
        ids = task.encode_file(str(VALID)).ids[:args.tokens]
        return model, ids.to(device), f"{args.run} on WikiText-2 valid, first {len(ids)} tokens"
    torch.manual_seed(args.seed)
    cfg = PRESETS[args.preset].options()
    model = language_model("transformer_xl", cfg, args.vocab_size)
    stream, source = read_stream(args.tokens, args.vocab_size, args.seed)
    return model.to(device).eval(), stream.to(device), source + f", random {args.preset} weights"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512],
                        help="attention lengths L to compare (default 64 128 256 512)")
    parser.add_argument("--tokens", type=int, default=3000, help="stream length N read by XL (default 3000)")
    parser.add_argument("--vanilla-tokens", type=int, default=256,
                        help="steady-state predictions timed for the vanilla evaluation per L (default 256)")
    parser.add_argument("--segment", type=int, default=64, help="XL segment length T (default 64)")
    parser.add_argument("--batch", type=int, default=16, help="windows per vanilla forward (default 16)")
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS), help="model size (default small)")
    parser.add_argument("--vocab-size", type=int, default=WIKITEXT2_VOCAB, help="vocabulary of the random model")
    parser.add_argument("--run", default="", help="a trained transformer_xl run directory instead of random weights")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (default 1: steadier timings on a shared machine; 0 = torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    global CLOCK
    CLOCK, clock_name = pick_clock(device)

    model, stream, source = load_model(args, device)
    encoder = model.encoder
    base_cfg = encoder.cfg
    print(f"device: {device_info(device)}; timed with {clock_name}")
    print(f"data: {source}")
    print(f"model: {base_cfg.n_layers} layers, D {base_cfg.d_model}, {base_cfg.n_heads} heads x {base_cfg.d_head}, "
          f"F {base_cfg.d_ff}, V {model.head.decoder.out_features}, {model.num_parameters():,} parameters; "
          f"XL segment T={args.segment}, "
          f"1 stream; vanilla: {args.batch} windows per forward")
    for length in args.lengths:
        if len(stream) < 2 * length + args.vanilla_tokens + 1:
            print(f"L={length}: skipped, needs --tokens >= {2 * length + args.vanilla_tokens + 1}")
            continue
        # XL attends to exactly the last L positions at every layer (memory L, same_length); no clamp.
        encoder.cfg = dataclasses.replace(base_cfg, eval_mem_len=length, same_length=True, clamp_len=0)
        count = args.vanilla_tokens
        xl_losses, xl_time, xl_tokens = xl_pass(model, stream, args.segment, timed_from=length)
        first, later, vanilla_time = vanilla_pass(model, stream, length, count, args.batch)
        xl_speed, vanilla_speed = 1.0 / xl_time, 1.0 / vanilla_time  # tokens per second
        same_context = (xl_losses[:length] - first).abs().max().item()
        xl_later = xl_losses[length:length + count]  # the targets the vanilla windows predicted
        print(f"L={length:<5} xl: {xl_speed:8.0f} tok/s ({xl_tokens} tokens)  vanilla: {vanilla_speed:7.1f} tok/s "
              f"({count} tokens)  ratio={xl_speed / vanilla_speed:.1f}")
        print(f"        identical context (first {length} targets): max|dloss|={same_context:.1e};  "
              f"longer XL context (next {count}): mean loss xl={xl_later.mean().item():.4f} "
              f"vanilla={later.mean().item():.4f}, mean|dloss|={(xl_later - later).abs().mean().item():.1e}")
    encoder.cfg = base_cfg


if __name__ == "__main__":
    main()
