"""Masks: one convention everywhere (DESIGN.md convention 4): bool, True = real token.

Everything that turns a mask into something else (lengths, word-dropout masks) lives here so that
no model re-derives it differently.
"""

from __future__ import annotations

import torch


def lengths_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Number of real tokens per row: mask [B, T] bool -> lengths [B] long (same device).

    Masks are right-padded (real tokens first), which is what `data.batching` produces and what
    `pack_padded_sequence` and `pooling.last_valid` assume.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"masks are bool tensors (True = real token), got dtype {mask.dtype}")
    return mask.sum(dim=1)


def word_dropout_mask(mask: torch.Tensor, p: float) -> torch.Tensor:
    """Drop each real token independently with probability `p`, never all tokens of a row.

    Word dropout of Iyyer et al. (2015, §3.1): the network sees random subsets of the input words.
    Each token *occurrence* is dropped on its own (a word that occurs twice may lose one copy), as in
    the authors' code (github.com/miyyer/dan, `objective_and_grad`). A row that would lose every token
    keeps all of them instead, again as the authors do: an average over zero words is undefined and
    such a row would carry no signal at all.

    mask [B, T] bool -> [B, T] bool, a subset of `mask`. Uses the global torch RNG (seeded by the trainer).
    """
    if p <= 0.0:
        return mask
    keep = mask & (torch.rand(mask.shape, device=mask.device) >= p)
    emptied = ~keep.any(dim=1, keepdim=True)  # [B, 1]: rows that lost every token
    return torch.where(emptied, mask, keep)
