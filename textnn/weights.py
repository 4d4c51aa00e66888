"""Weights files (safetensors) read for a model: one clear error for a damaged file, shapes checked by name.

Both a run's own weights (training/checkpoint.py `load_weights`) and the weights a run starts from
(transfer.py, model.init_from) are read here, so both refuse a damaged file or a tensor of the wrong
shape with the same message, naming the file, the parameter and both shapes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from textnn.errors import TextnnError


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file, or one error naming it (never a traceback from the library)."""
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for a damaged header or body
        raise TextnnError(f"{path}: not a readable safetensors file ({err}); the file is damaged or not "
                          f"textnn weights: re-train the run") from None


def check_shapes(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path) -> None:
    """Refuse `state` (read from `path`) if a tensor that `model` also has differs from it in shape."""
    own = model.state_dict()
    for name, tensor in state.items():
        if name in own and own[name].shape != tensor.shape:
            raise TextnnError(f"{path}: parameter {name} has shape {tuple(tensor.shape)} there but "
                              f"{tuple(own[name].shape)} in this model; the files do not belong together")
