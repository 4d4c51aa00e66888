"""The sampling rule: which distribution a sampled token is drawn from.

`decoding.sample` draws every new token with `draw`, from the step's logits reshaped in this order
(as in Hugging Face's `generate`):
- temperature: logits / temperature; below 1 sharpens the distribution, above 1 flattens it (the
  `-temperature` of Karpathy's char-rnn sampler).
- top-k: keep the k highest-scoring tokens (Fan, Lewis & Dauphin 2018, §5.4).
- top-p / nucleus: keep the smallest set of most probable tokens whose probability mass reaches p
  (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", §3.1).
"""

# B batch, V vocabulary size

from __future__ import annotations

import torch


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


def draw(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
         generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(filter(logits / temperature)): [B, V] -> [B].

    With a `generator` the draw comes from it (a seeded local generator leaves torch's global RNG
    untouched); with None from the global RNG.
    """
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)  # [B, V]
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [B, 1] -> [B]
