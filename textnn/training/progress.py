"""Evaluation's progress: a bar that counts the batches a model computes.

The bars and stage lines themselves, and `--quiet`, are textnn/progress.py's (the data readers below
this layer use them too); `progress_bar` is named here as well because training, evaluation and
decoding have always imported it from here.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from tqdm import tqdm

from textnn.progress import progress_bar

__all__ = ["counting_batches", "progress_bar"]


@contextlib.contextmanager
def counting_batches(model: torch.nn.Module, desc: str, enabled: bool = True) -> Iterator[tqdm]:
    """A bar that counts the batches `model` computes in the block (one per call of the model itself), with
    their rate: progress for any task's evaluation without the task counting anything."""
    with progress_bar(desc, "batch", enabled=enabled, leave=False) as bar:
        def _count(module, inputs, output) -> None:
            bar.update(1)

        handle = model.register_forward_hook(_count)
        try:
            yield bar
        finally:
            handle.remove()
