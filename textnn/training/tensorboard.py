"""TensorBoard event files of a run: every number of every metrics.jsonl record, as it is written.

`tensorboard --logdir runs` then shows the training loss, the learning rate (per layer group where
rates differ), throughput and every dev metric of every run against steps, side by side. The run's
metrics.jsonl stays the record textnn itself reads; the event files are a view of it, in
RUN/tensorboard. A resumed run purges the events logged after its checkpoint, so the curves show
the steps that count, as metrics.jsonl does.
"""

from __future__ import annotations

import math
from pathlib import Path

SKIPPED_KEYS = ("split", "step", "epoch")


class TensorBoardLog:
    """A callable that writes one metrics record's numbers as scalars `SPLIT/KEY` at the record's step
    (a `groups` record: `lr/GROUP`). Made by process 0 only; `close` flushes the files."""

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter  # imported only when a run logs to TensorBoard

        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step, flush_secs=10)

    def __call__(self, record: dict) -> None:
        step, split = record.get("step"), record.get("split", "train")
        if not isinstance(step, int):
            return
        if split == "groups":
            for name, group in record.get("groups", {}).items():
                self.writer.add_scalar(f"lr/{name}", group["lr"], step)
            return
        for key, value in record.items():
            if key in SKIPPED_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        self.writer.close()
