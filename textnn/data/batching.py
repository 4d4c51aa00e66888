"""Batches: length bucketing and padding with bool masks (True = real token)."""

from __future__ import annotations

import dataclasses

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


def token_budget_batches(lengths: list[int], max_tokens: int, shuffle: bool, seed: int = 0,
                         bucket_factor: int = 100) -> list[list[int]]:
    """Batches of about `max_tokens` tokens each, padding included, instead of a fixed sentence count.

    Examples are sorted by length (inside shuffled pools of `bucket_factor` batches' worth, when
    shuffled), then cut greedily: a batch takes examples while rows * longest <= max_tokens, the
    padded size that compute and memory follow (fairseq's --max-tokens; Vaswani et al. 2017 §5.1
    batch "by approximate sequence length", about 25,000 source and target tokens a batch). Short
    sentences so come many to a batch and long ones few, and every batch costs about the same. An
    example longer than the budget forms a batch of its own. Shuffled: the batches are put in a
    random order; the same seed gives the same batches. Not shuffled: sorted over the whole set.
    """
    lengths_arr = np.asarray(lengths)
    order = np.arange(len(lengths))
    if shuffle:
        rng = np.random.default_rng(seed)
        order = rng.permutation(order)
        mean = max(1.0, float(lengths_arr.mean())) if len(lengths) else 1.0
        pool = max(1, int(bucket_factor * max_tokens / mean))  # examples in about bucket_factor batches
        chunks = [order[start:start + pool] for start in range(0, len(order), pool)]
    else:
        chunks = [order]
    batches: list[list[int]] = []
    for chunk in chunks:
        chunk = chunk[np.argsort(lengths_arr[chunk], kind="stable")]
        batch: list[int] = []
        longest = 0
        for index in chunk.tolist():
            longest_with = max(longest, int(lengths_arr[index]))
            if batch and (len(batch) + 1) * longest_with > max_tokens:
                batches.append(batch)
                batch, longest_with = [], int(lengths_arr[index])
            batch.append(index)
            longest = longest_with
        if batch:
            batches.append(batch)
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


class OnDevice:
    """Data that `to(device)` moves as a whole: every tensor field of the dataclass, and every field that is
    itself `OnDevice` (a sub-word view of a batch), is copied to the device; other fields (index lists,
    counts, flags) stay as they are. One rule, so a field added to a batch cannot be forgotten in a `to`."""

    def to(self, device: torch.device):
        moved = {}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, torch.Tensor):
                moved[field.name] = value.to(device, non_blocking=True)
            elif isinstance(value, OnDevice):
                moved[field.name] = value.to(device)
        return dataclasses.replace(self, **moved)  # type: ignore[type-var]


class Batch(OnDevice):
    """What the trainer reads of any task's batch (training/trainer.py): `count`, the loss terms the task's
    summed loss holds (the trainer divides by it), `num_tokens` for throughput, `to(device)`, and `lr_scale`,
    the factor on this step's learning rate (1.0; variable-length BPTT windows set their own).

    A subclass is a dataclass. The defaults read its `index` (the examples' positions in their split: one
    loss term per example) and `mask` (bool, True = real token); a batch whose loss terms are tokens, or
    that counts tokens of more than one sequence, says so by overriding them.
    """

    lr_scale: float = 1.0  # a plain class attribute, not a field: a dataclass subclass may make it one

    @property
    def count(self) -> int:
        return len(self.index)  # type: ignore[attr-defined]

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())  # type: ignore[attr-defined]
