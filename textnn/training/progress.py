"""Progress bars for the work a person waits on: training, evaluation, decoding. One look for all.

A bar writes to stderr, from process 0 alone under torchrun, when its run's `train.progress` is on.
On a terminal it is redrawn five times a second; in a log (stderr not a terminal) at most every ten
seconds, so a long job leaves a line now and then instead of thousands.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import torch
from tqdm import tqdm

from textnn.training import distributed


def progress_bar(desc: str, unit: str, total: int | None = None, enabled: bool = True, initial: int = 0,
                 leave: bool = True) -> tqdm:
    """A tqdm bar on stderr (`total` None: a count and a rate, no end known)."""
    return tqdm(total=total, initial=initial, disable=not enabled or not distributed.is_main(), desc=desc, unit=unit,
                file=sys.stderr, dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 10.0, leave=leave)


@contextlib.contextmanager
def counting_batches(model: torch.nn.Module, desc: str, enabled: bool = True) -> Iterator[tqdm]:
    """A bar that counts the batches `model` computes in the block (one per call of the model itself), with
    their rate: progress for any task's evaluation without the task counting anything."""
    with progress_bar(desc, "batch", enabled=enabled, leave=False) as bar:
        handle = model.register_forward_hook(lambda module, inputs, output: bar.update(1))
        try:
            yield bar
        finally:
            handle.remove()
