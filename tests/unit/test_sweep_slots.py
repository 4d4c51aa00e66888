"""A sweep's slots (textnn/sweep.py `Slots`): a slot is one process's until it is done or given back, a live
holder keeps it, and the slot of a process that is gone (its pid, on this host; its heartbeat, anywhere) is taken
over by the next process that looks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("optuna", reason="textnn sweep needs Optuna (pip install 'textnn[sweep]')")

from textnn.runs import STALE_SECONDS  # noqa: E402
from textnn.sweep import Slots  # noqa: E402


def worker(tmp_path, name: str = "") -> Slots:
    slots = Slots(f"sqlite:///{tmp_path / 'study.db'}", {}, "study")
    if name:
        slots.worker = name
    return slots


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_slot_is_one_process_s_until_it_is_done_or_given_back(tmp_path):
    first, second = worker(tmp_path), worker(tmp_path)  # two live processes (this one, under two names)
    assert first.take(2, set()) == 0
    assert second.take(2, set()) == 1  # slot 0 is held by a live process
    assert first.take(2, set()) is None and second.take(2, set()) is None
    first.finish(0)
    second.release(1)
    assert second.take(2, set()) == 1  # given back: free again; done: never again
    assert first.take(3, {2}) is None  # a slot this process passes over
    assert first.take(3, set()) == 2  # a larger budget: more slots
    assert first.rows()[0].done and not first.rows()[2].done
    second.finish(2)  # not its slot: nothing changes
    assert not first.rows()[2].done


def test_the_slot_of_a_process_that_is_gone_is_taken_over(tmp_path):
    gone = worker(tmp_path, f"{socket.gethostname()}:{dead_pid()}:0000")
    live = worker(tmp_path, f"elsewhere:{dead_pid()}:1111")  # another host's pid says nothing here
    assert live.take(2, set()) == 0 and gone.take(2, set()) == 1
    taker = worker(tmp_path)
    assert taker.take(2, set()) == 1 and taker.rows()[1].worker == taker.worker
    assert worker(tmp_path).take(2, set()) is None  # slot 0's holder beats, slot 1 is taken


def test_a_silent_holder_loses_its_slot_after_stale_seconds(tmp_path):
    elsewhere = worker(tmp_path, "elsewhere:123:2222")
    assert elsewhere.take(1, set()) == 0
    assert worker(tmp_path).take(1, set()) is None
    with elsewhere.engine.begin() as connection:
        connection.execute(elsewhere.table.update().values(heartbeat=time.time() - STALE_SECONDS - 60))
    taker = worker(tmp_path)
    assert taker.take(1, set()) == 0 and taker.rows()[0].worker == taker.worker
    elsewhere.finish(0)  # it is no longer the holder: its late word changes nothing
    assert not elsewhere.rows()[0].done
