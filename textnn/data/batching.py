"""Batches: length bucketing and padding with bool masks (True = real token)."""

from __future__ import annotations

import numpy as np
import torch


def bucket_batches(lengths: list[int], batch_size: int, shuffle: bool, seed: int = 0,
                   bucket_factor: int = 50) -> list[list[int]]:
    """Group example indices into batches of similar length so little compute is spent on padding.

    Shuffled: examples are shuffled, cut into pools of `bucket_factor * batch_size`, sorted by length
    inside each pool, batched, and the batches shuffled. The same seed gives the same batches, which
    is what lets a resumed run skip exactly the batches it already trained on.
    Not shuffled: sorted by length over the whole set (evaluation order is restored by the caller).
    """
    order = np.arange(len(lengths))
    lengths_arr = np.asarray(lengths)
    if not shuffle:
        order = order[np.argsort(lengths_arr, kind="stable")]
        return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(seed)
    order = rng.permutation(order)
    pool = batch_size * bucket_factor
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start:start + pool]
        chunk = chunk[np.argsort(lengths_arr[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size].tolist() for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def pad(sequences: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to one length: ids [B, T] long and mask [B, T] bool (True = real token)."""
    longest = max(1, max((len(s) for s in sequences), default=1))
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = True
    return ids, mask
