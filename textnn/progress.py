"""Progress for the work a person waits on, in one look, and the one switch that silences all of it.

Two forms:
- `progress_bar`: a tqdm bar over a loop that runs for a long time (training steps, evaluation batches,
  decoded sentences). On a terminal it is redrawn five times a second; in a log (stderr not a terminal)
  at most every ten seconds, so a long job leaves a line now and then instead of thousands.
- `stage`: a piece of work that comes before the loop (training a tokenizer, reading word vectors,
  preparing a large data file). It writes one line when it starts and one when it ends, with its
  counts and seconds, so a log holds two lines a stage; on a terminal a bar runs between the two
  while the stage counts what it reads (or the library's own bar, where `own_bar_allowed` allows one).

`set_quiet(True)` (`textnn --quiet`) turns every bar and every stage line off, whoever asks for one:
the command line sets it once and no caller passes it on. Errors, warnings and results are not
progress and still print. Under torchrun process 0 alone shows progress.

Lowest layer: callers from the data readers up to the trainer use it, so it imports nothing of textnn.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Iterator

from tqdm import tqdm

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Turn all progress off (True) or back on (False) for the rest of the process."""
    global _quiet
    _quiet = quiet


def own_bar_allowed() -> bool:
    """Whether a library that draws its own bar (the `tokenizers` trainers) should draw it now: on a
    terminal, with progress on, on process 0; a log gets the stage lines around it alone."""
    return _shown(True) and _terminal()


def _process_zero() -> bool:
    """Whether this process is the one that prints under torchrun: rank 0 of the process group once one
    is joined, before that the RANK torchrun sets (training/distributed.py's `is_main` states the same
    rule for the layers above; this layer is below it)."""
    distributed = sys.modules.get("torch.distributed")  # never imported: no process group exists
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank() == 0
    launched = all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    return not launched or int(os.environ["RANK"]) == 0


def _shown(enabled: bool) -> bool:
    return enabled and not _quiet and _process_zero()


def _terminal() -> bool:
    return sys.stderr.isatty()


def progress_bar(desc: str, unit: str, total: int | None = None, enabled: bool = True, initial: int = 0,
                 leave: bool = True, unit_scale: bool = False, delay: float = 0.0) -> tqdm:
    """A tqdm bar on stderr (`total` None: a count and a rate, no end known; `unit_scale`: 1.2M for
    1,200,000, and bytes in KiB/MiB when `unit` is "B"; `delay`: drawn only once that many seconds passed)."""
    return tqdm(total=total, initial=initial, disable=not _shown(enabled), desc=desc, unit=unit,
                unit_scale=unit_scale, unit_divisor=1024 if unit == "B" else 1000, file=sys.stderr,
                dynamic_ncols=True, mininterval=0.2 if _terminal() else 10.0, leave=leave, delay=delay)


def counted(items: Iterator[str], desc: str, unit: str) -> Iterator[str]:
    """`items` as they come, counted by a bar with their rate (no end known: a command's output lines while
    its input still arrives). In a log, drawn only once it has run ten seconds: a quick command leaves nothing."""
    with progress_bar(desc, unit, leave=False, delay=0.0 if _terminal() else 10.0) as bar:
        for item in items:
            yield item
            bar.update(1)


@contextlib.contextmanager
def beside_bars() -> Iterator[None]:
    """Write to standard output with the bars on stderr cleared first and drawn again after, so that on a
    terminal an output line never lands in the middle of a bar (a log keeps each in lines of its own)."""
    with tqdm.external_write_mode(file=sys.stdout) if _terminal() else contextlib.nullcontext():
        yield


class Stage:
    """What a running stage has counted, and what its end line says (`summary`; by default the count)."""

    def __init__(self, unit: str, bar: tqdm | None) -> None:
        self.unit = unit
        self.count = 0
        self.summary = ""
        self._bar = bar

    def update(self, n: int = 1) -> None:
        self.count += n
        if self._bar is not None:
            self._bar.update(n)

    def end_line(self) -> str:
        if self.summary:
            return self.summary
        return f"{self.count:,} {self.unit}{'' if self.count == 1 else 's'}" if self.unit else "done"


@contextlib.contextmanager
def stage(desc: str, unit: str = "", total: int | None = None, enabled: bool = True,
          unit_scale: bool = False) -> Iterator[Stage]:
    """One piece of work before training: "DESC ..." on stderr when it starts, "DESC: SUMMARY in 2.1s"
    when it ends (not when it fails: the error says why). On a terminal, when the stage counts `unit`s
    (`Stage.update`), a bar over them runs in between; it is gone when the end line comes. Nothing at
    all when `enabled` is False, under `set_quiet(True)`, or on a process other than 0."""
    if not _shown(enabled):
        yield Stage(unit, None)
        return
    print(f"{desc} ...", file=sys.stderr, flush=True)
    bar = progress_bar(desc, unit, total=total, leave=False, unit_scale=unit_scale) if unit and _terminal() else None
    counted = Stage(unit, bar)
    start = time.perf_counter()
    try:
        yield counted
    finally:
        if bar is not None:
            bar.close()
    print(f"{desc}: {counted.end_line()} in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
