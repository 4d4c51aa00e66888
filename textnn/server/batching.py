"""A run's worker thread, and the queue in front of it where concurrent requests are gathered into batches.

Every request for a run becomes a `Job` in its `Batcher`'s queue; one thread per run takes jobs from the
queue and computes them, so the model is used by one thread at a time and the event loop never waits on
it. Jobs with the same `key` (a predict request and another with the same options) are computed in one
forward pass: the thread waits for more after the first one arrives, until the jobs of its key hold
`max_batch` items or `max_wait` seconds have passed, whichever comes first (`max_batch` 1: each request
alone). Generations share a key when they can be decoded side by side (greedy or sampled, prompts of one
length, one decoding but the seed: `ServedRun.generation_key`); a job whose key is None (a streamed
generation, beam search) is computed alone, at once.

The queue is bounded: `submit` refuses a job once `queue_size` jobs wait (the server answers 429), never a
backlog without end. A job whose client went away is taken out of the queue (`cancel`), which frees its
place; one already being computed is left to finish, unless it checks `cancelled` itself: a generation
does, token by token, and stops (a streamed one raises `Cancelled`; one of a batch gives `Cancelled` as
its result, while the other jobs of the batch go on). `drain` (the server was told to stop) ends the
waiting for fuller batches: what is queued is computed at once.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Hashable

from textnn.errors import TextnnError


class QueueFull(Exception):
    """The run's queue holds `queue_size` jobs already."""


class Stopping(Exception):
    """The server is stopping: the job was not taken."""


class Cancelled(Exception):
    """Raised inside a computation that checks `Job.cancelled` (a streamed generation) once its client left, or
    given as the result of a job that stopped so while the other jobs of its batch went on."""


@dataclass(eq=False)
class Job:
    """One request's work for a run's thread. `compute(works)` gives one result per work, for the works of
    jobs sharing this job's key (so it is the same function for all of them); `deliver(result, error)` is
    called from the run's thread once, with the result or the exception."""

    work: object
    compute: Callable[[list], list]
    deliver: Callable[[object, BaseException | None], None]
    key: Hashable = None  # jobs with equal keys share a forward pass; None: computed alone, without waiting
    size: int = 1  # items the job adds to a batch (inputs of a predict request)
    arrived: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """The queue and the thread of one run (see the module docstring). `on_batch(size)` is called with the
    items of each batch computed (the server's batch-size histogram), `on_drop()` for each job whose client
    went away before its end: taken out of the queue, or stopped by `Cancelled`."""

    def __init__(self, name: str, max_batch: int, max_wait: float, queue_size: int,
                 on_batch: Callable[[int], None] = lambda size: None, on_drop: Callable[[], None] = lambda: None,
                 threads: int | None = None):
        self.name, self.max_batch, self.max_wait, self.queue_size = name, max_batch, max_wait, queue_size
        self.on_batch, self.on_drop, self.threads = on_batch, on_drop, threads
        self.waiting: list[Job] = []
        self.condition = threading.Condition()
        self.draining = self.stopped = False
        self.thread: threading.Thread | None = None

    @property
    def depth(self) -> int:
        """Jobs waiting to be computed."""
        return len(self.waiting)

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name=f"textnn-serve-{self.name}", daemon=True)
            self.thread.start()

    def submit(self, job: Job) -> None:
        with self.condition:
            if self.stopped:
                raise Stopping(f"run {self.name}: the server is stopping")
            if len(self.waiting) >= self.queue_size:
                raise QueueFull(f"run {self.name}: {len(self.waiting)} requests are waiting already, as many as "
                                f"the queue holds (--queue {self.queue_size}); try again shortly")
            self.waiting.append(job)
            self.condition.notify()

    def cancel(self, job: Job) -> None:
        """The job's client went away: out of the queue if it still waits, and marked for a running computation."""
        job.cancelled.set()
        with self.condition:
            if job in self.waiting:
                self.waiting.remove(job)
                self.condition.notify()
                self.on_drop()

    def drain(self) -> None:
        """Compute what waits at once, without waiting for fuller batches (the server is stopping)."""
        with self.condition:
            self.draining = True
            self.condition.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Take no more jobs, compute those that wait at once, then end the thread."""
        with self.condition:
            self.draining = self.stopped = True
            self.condition.notify()
        if self.thread is not None:
            self.thread.join(timeout)

    # --- the run's thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        import torch

        if self.threads:  # the intra-op thread count is set per calling thread under OpenMP
            torch.set_num_threads(self.threads)
        while (jobs := self._next_batch()) is not None:
            with torch.no_grad():
                self._run(jobs)

    def _next_batch(self) -> list[Job] | None:
        with self.condition:
            while True:
                if not self.waiting:
                    if self.stopped:
                        return None
                    self.condition.wait()
                    continue
                first = self.waiting[0]
                left = first.arrived + self.max_wait - time.monotonic()
                if first.key is not None and not self.draining and left > 0 and self._items(first.key) < self.max_batch:
                    self.condition.wait(left)  # then look again: the first job may have gone, or others come
                    continue
                return self._take(first)

    def _items(self, key: Hashable) -> int:
        return sum(job.size for job in self.waiting if job.key == key)

    def _take(self, first: Job) -> list[Job]:
        """The first job and, in order, those of its key that fit beside it in `max_batch` items."""
        jobs, items = [first], first.size
        if first.key is not None:
            for job in self.waiting[1:]:
                if job.key == first.key and items + job.size <= self.max_batch:
                    jobs.append(job)
                    items += job.size
        for job in jobs:
            self.waiting.remove(job)
        return jobs

    def _run(self, jobs: list[Job]) -> None:
        self.on_batch(sum(job.size for job in jobs))
        try:
            results = jobs[0].compute([job.work for job in jobs])
        except TextnnError as err:
            if len(jobs) > 1:  # one request's input the task refuses: each alone, so that only its own fails
                for job in jobs:
                    self._run([job])
                return
            jobs[0].deliver(None, err)
            return
        except Cancelled as err:
            self.on_drop()
            jobs[0].deliver(None, err)
            return
        except Exception as err:  # a fault of the server, not of a request: said in full on stderr
            traceback.print_exc(file=sys.stderr)
            for job in jobs:
                job.deliver(None, err)
            return
        for job, result in zip(jobs, results):
            if isinstance(result, Cancelled):  # a job of the batch stopped when its client left, the others went on
                self.on_drop()
                job.deliver(None, result)
            else:
                job.deliver(result, None)
