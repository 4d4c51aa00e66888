"""Atomic, pickle-free checkpoints.

A checkpoint is ONE safetensors file: model weights (`model.*`), optimizer tensors (`optim.*`), RNG
states (`rng.*`) and the state a task carries from one batch to the next (`carried.<process>.<i>`: a
stateful language model's recurrent state or Transformer-XL memory, one per training process) as
tensors, and everything else (trainer position, optimizer hyper-parameters,
Python/NumPy RNG states) as JSON in the file's metadata. One file means one atomic rename: a run
killed at any moment leaves either the previous checkpoint or the new one, never half of each (the
write is files.py's: temp file, fsync, rename).
Loading never executes code (no pickle anywhere).

`checkpoint/last.safetensors` is the one `--resume` reads. With train.keep_checkpoint=all every checkpoint
written is also kept as `checkpoint/step-NNNNNN.safetensors` (`keep_step_checkpoint`), a second name of the
same file where the file system allows (a hard link: no second copy is written), never removed.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from textnn.errors import TextnnError
from textnn.files import atomic_link, atomic_write_bytes
from textnn.weights import check_shapes, read_weights


def _plain_tensors(state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    # safetensors refuses tensors that share memory (tied embeddings); a contiguous copy each is safe.
    return {prefix + k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def save_weights(model: torch.nn.Module, path: str | Path) -> None:
    """The model's weights alone, as safetensors (what `model.safetensors` in a run holds)."""
    atomic_write_bytes(path, save(_plain_tensors(model.state_dict())))


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    path = Path(path)
    if not path.is_file():
        raise TextnnError(f"{path}: no weights file; is this a finished textnn run directory?")
    state = read_weights(path)
    check_shapes(model, state, path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise TextnnError(f"{path}: weights do not fit the model built from config.yaml "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def _rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    version, py_state, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return tensors, {"python": [version, list(py_state), gauss],
                     "numpy": [np_name, np_keys.tolist(), np_pos, np_has_gauss, np_gauss]}


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda_states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states)
    version, py_state, gauss = meta["python"]
    random.setstate((version, tuple(py_state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def pack_state(state: object, prefix: str, tensors: dict[str, torch.Tensor]) -> object:
    """A carried state (None, a tensor, or tuples / lists of them) as a JSON layout; its tensors go into
    `tensors` as `prefix`0, `prefix`1, ... `unpack_state` rebuilds the state from the two."""
    numbers = itertools.count()

    def pack(item: object) -> object:
        if item is None:
            return None
        if isinstance(item, torch.Tensor):
            key = f"{prefix}{next(numbers)}"
            tensors[key] = item.detach().to("cpu").contiguous().clone()
            return {"tensor": key}
        if isinstance(item, (tuple, list)):
            return {type(item).__name__: [pack(part) for part in item]}
        raise TypeError(f"a carried state holds tensors, tuples and lists, not {type(item).__name__}")

    return pack(state)


def unpack_state(layout: object, tensors: dict[str, torch.Tensor], device: torch.device) -> object:
    if layout is None:
        return None
    if "tensor" in layout:
        return tensors[layout["tensor"]].to(device)
    kind, items = next(iter(layout.items()))
    return {"tuple": tuple, "list": list}[kind](unpack_state(item, tensors, device) for item in items)


def save_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    trainer_state: dict, carried: list[object] | None = None) -> None:
    """Model + optimizer + RNG + trainer state in one atomically written safetensors file.

    `carried`: the state each training process carries into its next batch (`Task.carried_state`),
    in process order; None or all None for tasks whose batches start afresh.
    """
    tensors = _plain_tensors(model.state_dict(), "model.")
    carried_layout = [pack_state(state, f"carried.{process}.", tensors)
                      for process, state in enumerate(carried or [])]
    optim_state = optimizer.state_dict()
    scalars: dict[str, dict] = {}
    for index, per_param in optim_state["state"].items():
        for name, value in per_param.items():
            if torch.is_tensor(value):
                tensors[f"optim.{index}.{name}"] = value.detach().to("cpu").contiguous().clone()
            else:
                scalars.setdefault(str(index), {})[name] = value
    rng_tensors, rng_meta = _rng_state()
    tensors.update(rng_tensors)
    metadata = {
        "trainer": json.dumps(trainer_state),
        "optim_groups": json.dumps(optim_state["param_groups"]),
        "optim_scalars": json.dumps(scalars),
        "rng": json.dumps(rng_meta),
        "carried": json.dumps(carried_layout),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, save(tensors, metadata=metadata))


def step_checkpoint_file(folder: str | Path, step: int) -> Path:
    """Where train.keep_checkpoint=all keeps the checkpoint of `step` (zero-padded: names sort by step)."""
    return Path(folder) / f"step-{step:06d}.safetensors"


def keep_step_checkpoint(path: str | Path, step: int) -> Path:
    """Keep the checkpoint just written at `path` as `step_checkpoint_file(its folder, step)`; returns that.

    A hard link names the same file twice without writing it again (files.atomic_link). Each later
    checkpoint replaces `path` by a rename, never by writing into it, so the kept name goes on holding
    this one; a checkpoint written again at the same step (the end of a run, after one at its last step)
    replaces the kept one whole.
    """
    kept = step_checkpoint_file(Path(path).parent, step)
    atomic_link(path, kept, "kept checkpoint")
    return kept


def load_carried_state(path: str | Path, process: int, device: torch.device) -> object:
    """The state process `process` carried into its next batch when the checkpoint was written (None
    when it carried none, or for a checkpoint written before carried states were saved)."""
    with safe_open(str(path), framework="pt") as handle:
        layouts = json.loads((handle.metadata() or {}).get("carried", "[]"))
        if process >= len(layouts):
            return None
        prefix = f"carried.{process}."
        tensors = {key: handle.get_tensor(key) for key in handle.keys() if key.startswith(prefix)}
    return unpack_state(layouts[process], tensors, device)


CHECKPOINT_METADATA = ("trainer", "optim_groups", "optim_scalars", "rng")


def _damaged(path: Path, what: str) -> TextnnError:
    return TextnnError(f"{path}: {what}; the checkpoint is damaged or from another run, so --resume cannot use it "
                       f"(the run's model.safetensors is untouched: evaluate it, or train again with a new --run-dir)")


def _checkpoint_header(path: Path) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """A checkpoint's JSON metadata (parsed) and tensor shapes, read from its header alone (no tensor data).

    safetensors checks that the header's offsets cover the file exactly, so a truncated file fails here.
    """
    if not path.is_file():
        raise TextnnError(f"{path}: no checkpoint to resume from; start without --resume")
    try:
        with safe_open(str(path), framework="pt") as handle:
            raw = handle.metadata() or {}
            shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except Exception as err:  # safetensors raises its own error types for a damaged header or body
        raise _damaged(path, f"not a readable safetensors file ({str(err)[:80]})") from None
    missing = [key for key in CHECKPOINT_METADATA if key not in raw]
    if missing:
        raise _damaged(path, f"no {missing[0]} record in its metadata")
    try:
        metadata = {key: json.loads(raw[key]) for key in CHECKPOINT_METADATA}
    except json.JSONDecodeError as err:
        raise _damaged(path, f"its metadata is not valid JSON ({err.msg})") from None
    if not isinstance(metadata["trainer"], dict):
        raise _damaged(path, "its trainer record is not a JSON object")
    return metadata, shapes


def read_trainer_state(path: str | Path) -> dict:
    """The trainer state of a checkpoint (step, epoch, ...) alone, without loading any tensor."""
    return _checkpoint_header(Path(path))[0]["trainer"]


def check_checkpoint(path: str | Path, model: torch.nn.Module) -> None:
    """Refuse, before anything is written, a checkpoint that is truncated, damaged or holds another model.

    Reads the header only: every model tensor must be there with this model's shape (the mismatch named
    with both shapes), and the metadata `load_checkpoint` needs must parse.
    """
    path = Path(path)
    _, shapes = _checkpoint_header(path)
    own = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    saved = {name[len("model."):]: shape for name, shape in shapes.items() if name.startswith("model.")}
    for name, shape in own.items():
        if name not in saved:
            raise _damaged(path, f"no tensor for parameter {name} of this model")
        if saved[name] != shape:
            raise _damaged(path, f"parameter {name} has shape {saved[name]} there but {shape} in this model")
    extra = sorted(set(saved) - set(own))
    if extra:
        raise _damaged(path, f"parameter {extra[0]} is not in this model ({len(extra)} such)")
    if "rng.torch" not in shapes:
        raise _damaged(path, "no random-number state (rng.torch)")


def _check_groups(path: Path, saved: list[dict], current: list[dict]) -> None:
    """Refuse a checkpoint whose optimizer groups are not this optimizer's (names and sizes, in order)."""
    def layout(groups: list[dict]) -> list[tuple]:
        return [(group.get("name", f"group {i}"), len(group["params"])) for i, group in enumerate(groups)]

    if layout(saved) != layout(current):
        shown = lambda groups: ", ".join(f"{name} ({n})" for name, n in layout(groups))  # noqa: E731
        raise TextnnError(f"{path}: the checkpoint's optimizer groups [{shown(saved)}] are not this model's "
                          f"[{shown(current)}] (the model's layer groups changed since it was written); "
                          f"start a new run with a new --run-dir")


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Restore model, optimizer and RNG states in place; return the trainer state dict."""
    path = Path(path)
    if not path.is_file():
        raise TextnnError(f"{path}: no checkpoint to resume from; start without --resume")
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    tensors = load_file(str(path))
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    device = next(model.parameters()).device
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            # Adam keeps `step` on the CPU; moments live with the parameters.
            state.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
    for index, values in json.loads(metadata["optim_scalars"]).items():
        state.setdefault(int(index), {}).update(values)
    groups = json.loads(metadata["optim_groups"])
    _check_groups(path, groups, optimizer.param_groups)
    for saved, current in zip(groups, optimizer.param_groups):
        for key, value in saved.items():  # JSON has no tuples: Adam's betas come back as they went in
            if isinstance(current.get(key), tuple) and isinstance(value, list):
                saved[key] = tuple(value)
    # Each group's hyper-parameters (lr, weight_decay, lr_scale, depth, NT-ASGD's trigger state)
    # come back from the checkpoint; the parameters they apply to are the optimizer's own, in order.
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    _set_rng_state({k: v for k, v in tensors.items() if k.startswith("rng.")}, json.loads(metadata["rng"]))
    return json.loads(metadata["trainer"])
