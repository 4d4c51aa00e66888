"""Sampling from an autoregressive model on the step interface shared by every decoder.

A decoder exposes one function, `step_fn(ids [B, T], state) -> (logits [B, V], new_state)`: it reads
the new tokens `ids` given the cache `state` from the previous call (None at the start) and returns
the next-token logits of the LAST position plus the updated cache. An RNN's cache is its recurrent
state (`RNNLM.step`); a Transformer's is its key/value cache. The first call reads the whole prompt,
every later call one token, so generating n tokens costs n steps, not n full forwards.

Decoding rules (applied in this order, as in Hugging Face's `generate`):
- temperature: logits / temperature; below 1 sharpens the distribution, above 1 flattens it (the
  `-temperature` of Karpathy's char-rnn sampler); 0 means greedy argmax.
- top-k: keep the k highest-scoring tokens (Fan, Lewis & Dauphin 2018, §5.4).
- top-p / nucleus: keep the smallest set of most probable tokens whose probability mass reaches p
  (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", §3.1).
"""

# B batch, T prompt length, V vocabulary size, N new tokens

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from textnn.errors import TextnnError

StepFn = Callable[[torch.Tensor, object], tuple[torch.Tensor, object]]


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set the logits of tokens outside the top-k and outside the top-p nucleus to -inf: [B, V] -> [B, V]."""
    if 0 < top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # [B, 1] the k-th largest score
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [B, V]
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs  # [B, V] probability of the better tokens
        # A token is dropped once the tokens ranked above it already hold p; the best one never is.
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _check_args(max_new_tokens: int, temperature: float, top_k: int, top_p: float) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise TextnnError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise TextnnError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
    if not isinstance(top_k, int) or top_k < 0:
        raise TextnnError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise TextnnError(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")


@torch.no_grad()
def sample(step_fn: StepFn, prompt_ids: torch.Tensor | Sequence[int], max_new_tokens: int,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
           stop_ids: Sequence[int] = ()) -> torch.Tensor:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens drawn from `step_fn`'s distribution.

    prompt_ids: a list of ids or a tensor [T] (one sequence) or [B, T] (a batch), on the model's
    device, at least one token each. Returns the prompt followed by the new tokens, with the
    prompt's rank: [T + N] or [B, T + N], N <= max_new_tokens.

    temperature 0 is greedy decoding (argmax, deterministic). With `seed` the draws come from a
    local `torch.Generator`, so the same seed gives the same text and the global RNG is untouched;
    without it they come from torch's global RNG.
    A sequence that emits a token of `stop_ids` is finished: the stop token is kept, and should the
    others go on, its later positions repeat that stop token (cut at the first stop id). Generation
    ends when every sequence has finished or N reaches max_new_tokens.
    """
    _check_args(max_new_tokens, temperature, top_k, top_p)
    ids = torch.as_tensor(prompt_ids, dtype=torch.long)
    single = ids.dim() == 1
    if single:
        ids = ids[None]  # [T] -> [1, T]
    if ids.dim() != 2 or ids.size(1) == 0:
        raise TextnnError(f"the prompt must hold at least one token id per sequence, shape [T] or [B, T]; "
                          f"got shape {tuple(ids.shape)} (start from a begin-of-text or newline token)")
    generator = torch.Generator(device=ids.device).manual_seed(seed) if seed is not None else None
    stops = torch.as_tensor(list(stop_ids), dtype=torch.long, device=ids.device)
    finished = torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device)  # [B]
    fill = torch.zeros(ids.size(0), dtype=torch.long, device=ids.device)  # [B] stop token to repeat

    new: list[torch.Tensor] = []
    tokens, state = ids, None
    for _ in range(max_new_tokens):
        logits, state = step_fn(tokens, state)  # [B, V]
        logits = logits.float()
        if temperature == 0:
            next_ids = logits.argmax(dim=-1)  # [B]
        else:
            probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)  # [B, V]
            next_ids = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [B, 1] -> [B]
        if len(stops):
            next_ids = torch.where(finished, fill, next_ids)
            stopping = torch.isin(next_ids, stops) & ~finished
            fill = torch.where(stopping, next_ids, fill)
            finished |= stopping
        new.append(next_ids)
        if len(stops) and bool(finished.all()):
            break
        tokens = next_ids[:, None]  # [B] -> [B, 1]
    out = torch.cat([ids, torch.stack(new, dim=1)], dim=1) if new else ids  # [B, T + N]
    return out[0] if single else out
