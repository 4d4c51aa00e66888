"""What a benchmark ran on, for the line every script prints beside its numbers."""

from __future__ import annotations

import platform
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
