"""Starting a run from another (`model.init_from`, `data.features_from`): everything read from the start.

A start is either a textnn run directory (config.yaml, tokenizer.json, vocab.json, model.safetensors)
or a Hugging Face checkpoint directory (config.json, model.safetensors, vocabulary files; read by
interop/huggingface.py). `start_kind` alone decides which; everything else here asks it. A Hugging
Face model id (`bert-base-uncased`, `sentence-transformers/all-MiniLM-L6-v2`) names the checkpoint
directory the local Hugging Face cache holds for it (`resolve_start`); nothing is downloaded:

- `read_start_config`: the config sections the new run inherits (config.py resolves them);
- `read_start_pipeline`: the tokenizer and vocabulary the start read its text with (the tasks' text
  set-up starts from them);
- `read_start_weights` / `load_start_weights`: the start's weights under our parameter names, and
  loading them into a new model by name (experiment.py does that once, before training).

This module sits with the readers below config.py, so that config, the tasks and experiment all use it
without an import pointing up; it reads files and fills models, and decides nothing about a task.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.files import read_yaml
from textnn.interop import huggingface
from textnn.weights import check_shapes, read_weights

RUN = "run"  # a directory `textnn train` wrote
HUGGING_FACE = "huggingface"  # a Hugging Face checkpoint directory


def start_kind(path: str | Path) -> str:
    """What the directory `path` is as a start: RUN (it holds config.yaml), HUGGING_FACE (config.json and
    no config.yaml), or "" (neither: no start there).

    config.yaml decides first: a textnn run is never read as a checkpoint, whatever else lies beside it.
    """
    path = Path(path)
    if (path / "config.yaml").is_file():
        return RUN
    if (path / "config.json").is_file():
        return HUGGING_FACE
    return ""


# A Hugging Face model id: NAME or ORG/NAME, each part letters, digits, '.', '_' or '-'.
HUB_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def hub_cache() -> Path:
    """The folder the Hugging Face libraries keep downloaded models in, found as they find it:
    $HF_HUB_CACHE (or its older name $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache_home / "huggingface" / "hub"


def cached_snapshot(model_id: str, cache: Path) -> Path | None:
    """The checkpoint directory of `model_id` in the hub cache `cache`, or None when it is not there.

    The cache keeps a model in models--ORG--NAME/: snapshots/<commit>/ holds its files (links into
    blobs/), refs/main names the commit a plain download fetched. That snapshot is taken when it is a
    checkpoint (it holds config.json); otherwise the newest snapshot that is one.
    """
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    main = repo / "refs" / "main"
    if main.is_file():
        pinned = snapshots / main.read_text(encoding="utf-8").strip()
        if start_kind(pinned) == HUGGING_FACE:
            return pinned
    if not snapshots.is_dir():
        return None
    usable = [folder for folder in snapshots.iterdir() if start_kind(folder) == HUGGING_FACE]
    return max(usable, key=lambda folder: folder.stat().st_mtime) if usable else None


def hub_download(model_id: str) -> str:
    """The command that puts `model_id` in the hub cache, as the user's huggingface_hub spells it:
    `hf download` from 0.34 on (1.0 removed the older `huggingface-cli`), `huggingface-cli download`
    before; without huggingface_hub, the install that brings `hf` first."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("huggingface_hub")
    except PackageNotFoundError:
        return f"`pip install huggingface_hub`, then `hf download {model_id}`"
    release = tuple(int(part) for part in re.findall(r"\d+", installed)[:2])
    return f"`{'huggingface-cli' if release < (0, 34) else 'hf'} download {model_id}`"


def resolve_start(value: str, origin: str, key: str = "model.init_from") -> str:
    """The directory that `key: value` (model.init_from, data.features_from) names: `value` itself when it is
    a directory or does not read as a model id (the readers below name what is wrong with it); else, for a
    Hugging Face model id, its checkpoint directory in the local Hugging Face cache. An id the cache lacks
    is one error that says where it looked and how to download the model; nothing is fetched while a run
    starts."""
    if Path(value).is_dir() or not HUB_MODEL_ID.fullmatch(value):
        return value
    cache = hub_cache()
    snapshot = cached_snapshot(value, cache)
    if snapshot is not None:
        return str(snapshot)
    raise TextnnError(f"{origin}: {key}={value}: no directory {value} here, and no Hugging Face model "
                      f"{value} in the local cache (looked in {cache / ('models--' + value.replace('/', '--'))}); "
                      f"download it first with {hub_download(value)} (it goes to that cache; "
                      f"HF_HOME or HF_HUB_CACHE move it), or give a run or checkpoint directory")


def read_start_config(path: str | Path, origin: str) -> dict:
    """The raw config of the start in `path`: a run's saved config.yaml, or for a Hugging Face checkpoint
    the sections (model, data) its config.json and vocabulary give. `origin` names the config that asks,
    for its errors."""
    kind = start_kind(path)
    run = Path(path)
    if kind == HUGGING_FACE:
        return huggingface.start_config(run, origin)
    if kind != RUN:
        raise TextnnError(f"{origin}: model.init_from={path}: no run there (no config.yaml) and no Hugging Face "
                          f"checkpoint (no config.json); give the directory `textnn train` wrote or a checkpoint "
                          f"directory")
    if not (run / "model.safetensors").is_file():
        raise TextnnError(f"{origin}: model.init_from={path}: the run has no model.safetensors; "
                          f"train it to the end first")
    return read_yaml(run / "config.yaml")


def read_start_pipeline(path: str | Path) -> tuple[Tokenizer, Vocab]:
    """The tokenizer and vocabulary the start in `path` reads text with: a Hugging Face checkpoint's
    vocabulary files, or a run's tokenizer.json and vocab.json."""
    path = Path(path)
    if start_kind(path) == HUGGING_FACE:
        return huggingface.text_pipeline(path)
    return Tokenizer.load(path / "tokenizer.json"), Vocab.load(path / "vocab.json")


def read_start_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The start's weights under our parameter names: a run's model.safetensors as saved (`encoder.*`,
    `head.*`), a Hugging Face checkpoint's encoder renamed to ours (`encoder.*`)."""
    path = Path(path)
    if start_kind(path) == HUGGING_FACE:
        return huggingface.encoder_state(path)
    return read_weights(path / "model.safetensors")


def load_start_weights(model: torch.nn.Module, path: str | Path, with_head: bool = False,
                       grown_rows: tuple[int, int] | None = None) -> dict[str, list[str]]:
    """Load the `encoder.*` weights of the start in `path` into `model`, and its `head.*` weights too
    `with_head` (a language model started from a language model, pre-training from pre-training).

    Loading is by parameter name. Returns what was loaded, what is new here (the head, and any
    encoder parameter the start lacks) and what was left out (its head). A shape mismatch is an
    error naming the parameter and both shapes, except, with `grown_rows` = (old, new) (a
    vocabulary extended by data.extend_vocab), a tensor of `old` rows where the model has `new`:
    its rows are kept and the added ones start at their mean (a new word's embedding, output row
    and bias start as the average word's, as in Howard & Ruder's ULMFiT code).
    """
    path = Path(path)
    source = path / "model.safetensors" if start_kind(path) != HUGGING_FACE else path
    state = read_start_weights(path)
    if not any(name.startswith("encoder.") for name in state):
        raise TextnnError(f"{source}: holds no encoder weights (no parameter named encoder.*); it was written by "
                          f"an older textnn or is not a textnn run")
    kept = ("encoder.", "head.") if with_head else ("encoder.",)
    start_state = {name: tensor for name, tensor in state.items() if name.startswith(kept)}
    if grown_rows is not None:
        start_state = _grow_rows(model, start_state, *grown_rows)
    check_shapes(model, start_state, source)
    own = model.state_dict()
    loaded = sorted(name for name in start_state if name in own)
    model.load_state_dict({name: start_state[name] for name in loaded}, strict=False)
    return {"loaded": loaded, "new": sorted(name for name in own if name not in start_state),
            "left_out": sorted(name for name in state if name not in own or name not in start_state)}


def _grow_rows(model: torch.nn.Module, state: dict[str, torch.Tensor], old: int, new: int) -> dict[str, torch.Tensor]:
    """`state` with every tensor of `old` rows that has `new` rows in `model` extended by rows at its mean."""
    own = model.state_dict()
    grown = dict(state)
    for name, tensor in state.items():
        if name in own and tensor.shape[:1] == (old,) and own[name].shape == (new, *tensor.shape[1:]):
            mean = tensor.float().mean(dim=0, keepdim=True).to(tensor.dtype)  # [1, ...]
            grown[name] = torch.cat([tensor, mean.expand(new - old, *tensor.shape[1:])])  # [new, ...]
    return grown
