"""What a benchmark ran on, for the line every script prints beside its numbers, and the clock it times with."""

from __future__ import annotations

import platform
import statistics
import time
from typing import Callable
from pathlib import Path

import torch


def device_info(device: torch.device | None = None) -> str:
    """The GPU's name, or the CPU's model name and torch's thread count; with the torch version."""
    if device is not None and device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"


def pick_clock(device: torch.device):
    """(timer, its name): the CPU time of this thread when torch computes on it alone (the CPU with one
    torch thread), so other processes on a shared machine do not count; wall-clock time otherwise
    (a GPU, or several CPU threads)."""
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time, "CPU time of the one compute thread"
    return time.perf_counter, "wall-clock time"


def time_pass(fn, device: torch.device) -> float:
    """Seconds of one call of `fn` by `pick_clock`'s clock, the GPU's queue drained before and after."""
    clock = pick_clock(device)[0]
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = clock()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return clock() - start


def interleaved_medians(runs: dict[str, Callable[[], None]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds of each callable over `repeats` rounds in which they take turns (so a change in the
    machine's load hits all of them); a first round warms them up and is not counted."""
    times: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(repeats + 1):
        for key, run in runs.items():
            times[key].append(time_pass(run, device))
    return {key: statistics.median(values[1:]) for key, values in times.items()}
