"""Masked poolings over time and the sentence-pair feature combination.

All poolings take x [B, T, D] and a bool mask [B, T] (True = real token) and return [B, D]; padded
positions never contribute, so a padded batch gives the same result as each row alone. A row with
no real token pools to zeros (sum, mean, max) or to position 0 (last).
"""

from __future__ import annotations

import torch

from textnn.modules.masking import lengths_from_mask


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over real positions: [B, T, D] -> [B, D]. masked_fill (not a multiply) so a NaN/inf at a pad
    position cannot leak into the sum."""
    return x.masked_fill(~mask.unsqueeze(-1), 0.0).sum(dim=1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real positions: [B, T, D] -> [B, D]."""
    count = lengths_from_mask(mask).clamp(min=1).unsqueeze(-1).to(x.dtype)  # [B, 1]
    return masked_sum(x, mask) / count


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over real positions (max-over-time pooling): [B, T, D] -> [B, D]."""
    filled = x.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    pooled = filled.max(dim=1).values
    # A row without any real token would be -inf; make it 0 so it stays finite.
    return torch.where(mask.any(dim=1, keepdim=True), pooled, torch.zeros_like(pooled))


def last_valid(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The state at each row's last real position: [B, T, D] -> [B, D] (right-padded masks)."""
    last = (lengths_from_mask(mask) - 1).clamp(min=0)  # [B]
    index = last.view(-1, 1, 1).expand(-1, 1, x.size(-1))  # [B, 1, D]
    return x.gather(1, index).squeeze(1)  # [B, 1, D] -> [B, D]


def concat_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[h_T; max-pool; mean-pool] over real positions: [B, T, D] -> [B, 3D].

    ULMFiT's concat pooling (Howard & Ruder 2018 §3.3): the last state alone may miss what was said
    early in a long document, so the classifier also reads the max and the mean of all the states.
    """
    return torch.cat([last_valid(x, mask), masked_max(x, mask), masked_mean(x, mask)], dim=-1)


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Features of a sentence pair from its two encodings: [u; v; |u - v|; u * v], [B, D] x2 -> [B, 4D].

    Conneau et al. (2017), "Supervised Learning of Universal Sentence Representations from Natural
    Language Inference Data" (InferSent), §3.1: the element-wise difference and product expose how the
    two sentences relate to a classifier that only sees fixed-size vectors.
    """
    return torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
