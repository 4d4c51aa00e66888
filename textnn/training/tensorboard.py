"""TensorBoard event files of a run: every number of every metrics.jsonl record, as it is written.

`tensorboard --logdir runs` then shows the training loss, the learning rate (per layer group where
rates differ), throughput and every dev metric of every run against steps, side by side. The run's
metrics.jsonl stays the record textnn itself reads; the event files are a view of it, in
RUN/tensorboard. A resumed run purges the events logged after its checkpoint, so the curves show
the steps that count, as metrics.jsonl does.

The view is a side output: a folder that cannot be written (full, read-only, a file in its place)
costs a warning, once, and training goes on without it. So the events are written here, in the
training thread, with TensorBoard's record format and protocol buffers: torch's SummaryWriter writes
from a thread of its own, whose error is a traceback on the terminal and then an exception at the
next scalar, which stopped training.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import time
from pathlib import Path
from typing import Callable

SKIPPED_KEYS = ("split", "step", "epoch")
_file_numbers = itertools.count()  # two logs opened by one process in one second get two files


class TensorBoardLog:
    """A callable that writes one metrics record's numbers as scalars `SPLIT/KEY` at the record's step
    (a `groups` record: `lr/GROUP`). Made by process 0 only; `close` closes the file. The first error
    writing it is passed to `warn` as one line, and the log is off from then on."""

    def __init__(self, log_dir: Path, warn: Callable[[str], None], purge_step: int | None = None):
        # imported only when a run logs to TensorBoard
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        self.log_dir, self.warn = log_dir, warn
        self._file = None
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_file_numbers)}")
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._file = open(log_dir / name, "xb")
            self._records = RecordWriter(self._file)
            self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
            if purge_step is not None:  # TensorBoard hides the events at this step and after from earlier files
                self._write(Event(wall_time=time.time(), step=purge_step,
                                  session_log=SessionLog(status=SessionLog.START)))
        except OSError as err:
            self._give_up(err)

    def __call__(self, record: dict) -> None:
        step, split = record.get("step"), record.get("split", "train")
        if self._file is None or not isinstance(step, int):
            return
        if split == "groups":
            scalars = {f"lr/{name}": group["lr"] for name, group in record.get("groups", {}).items()}
        else:
            scalars = {f"{split}/{key}": value for key, value in record.items()
                       if key not in SKIPPED_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool)
                       and math.isfinite(value)}
        values = [self._summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        try:
            self._write(self._event(wall_time=time.time(), step=step, summary=self._summary(value=values)))
        except OSError as err:
            self._give_up(err)

    def _write(self, event) -> None:
        """One event, flushed: `tensorboard` shows it while the run trains."""
        self._records.write(event.SerializeToString())
        self._file.flush()

    def _give_up(self, err: OSError) -> None:
        self.warn(f"warning: {self.log_dir}: cannot write TensorBoard's event files ({err.strerror or err}); "
                  f"training goes on without them (metrics.jsonl has every number; train.tensorboard=false "
                  f"turns them off)")
        self.close()

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError:  # a full disk refuses the last buffered bytes too; the warning was said
                pass
