"""Starting a run from another (`model.init_from`, `data.features_from`): everything read from the start.

A start is either a textnn run directory (config.yaml, tokenizer.json, vocab.json, model.safetensors)
or a Hugging Face checkpoint directory (config.json, model.safetensors, vocabulary files; read by
interop/huggingface.py). A Hugging Face model id (`bert-base-uncased`,
`sentence-transformers/all-MiniLM-L6-v2`) names the checkpoint directory the local Hugging Face cache
holds for it (`resolve_start`); nothing is downloaded.

`open_start` opens a start once, as a `Start`: its kind is decided there (`start_kind`, asked nowhere
else), and its config, text pipeline and weights are read when first asked for, once. config.py opens
the start of `model.init_from` while it resolves a config and carries it with the result
(`Config.start`), so the tasks and experiment.py read what they need from that one object.

This module sits with the readers below config.py, so that config, the tasks and experiment all use it
without an import pointing up; it reads files and fills models, and decides nothing about a task.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
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


class Start:
    """One start (a run or a Hugging Face checkpoint directory), opened once by `open_start`: its kind is
    decided there, and each of its files is read the first time it is asked for and kept:

    - `config`: the raw config sections the new run inherits (config.py resolves them);
    - `pipeline`: the tokenizer and vocabulary the start read its text with (the tasks' text set-up
      starts from them);
    - `weights`: the start's tensors under our parameter names; `load_into` loads them into a new model
      by name (experiment.py does that once, before training).
    """

    def __init__(self, path: Path, kind: str, key: str) -> None:
        self.path = path
        self.kind = kind  # RUN or HUGGING_FACE
        self.key = key  # the config key that names it: model.init_from or data.features_from
        self._checkpoint = huggingface.Checkpoint(path) if kind == HUGGING_FACE else None

    @property
    def is_run(self) -> bool:
        return self.kind == RUN

    def file(self, name: str) -> Path | None:
        """A file a textnn run saved beside its weights (chars.json, ...), or None (absent, or a checkpoint)."""
        file = self.path / name
        return file if self.is_run and file.is_file() else None

    @cached_property
    def config(self) -> dict:
        """The raw config of the start: a run's saved config.yaml, or for a Hugging Face checkpoint the
        sections (model, data) its config.json and vocabulary give."""
        if self._checkpoint is not None:
            return huggingface.start_config(self._checkpoint, self.key)
        return read_yaml(self.path / "config.yaml")

    @cached_property
    def pipeline(self) -> tuple[Tokenizer, Vocab]:
        """The tokenizer and vocabulary the start reads text with: a Hugging Face checkpoint's vocabulary
        files, or a run's tokenizer.json and vocab.json."""
        if self._checkpoint is not None:
            return huggingface.text_pipeline(self._checkpoint)
        return Tokenizer.load(self.path / "tokenizer.json"), Vocab.load(self.path / "vocab.json")

    @cached_property
    def weights(self) -> dict[str, torch.Tensor]:
        """The start's weights under our parameter names: a run's model.safetensors as saved (`encoder.*`,
        `head.*`), a Hugging Face checkpoint's encoder renamed to ours (`encoder.*`)."""
        if self._checkpoint is not None:
            return huggingface.encoder_state(self._checkpoint)
        return read_weights(self.path / "model.safetensors")

    def load_into(self, model: torch.nn.Module, with_head: bool = False,
                  grown_rows: tuple[int, int] | None = None) -> dict[str, list[str]]:
        """Load the start's `encoder.*` weights into `model`, and its `head.*` weights too `with_head` (a
        language model started from a language model, pre-training from pre-training).

        Loading is by parameter name. Returns what was loaded, what is new here (the head, and any
        encoder parameter the start lacks) and what was left out (its head). A shape mismatch is an
        error naming the parameter and both shapes, except, with `grown_rows` = (old, new) (a
        vocabulary extended by data.extend_vocab), a tensor of `old` rows where the model has `new`:
        its rows are kept and the added ones start at their mean (a new word's embedding, output row
        and bias start as the average word's, as in Howard & Ruder's ULMFiT code).
        """
        source = self.path / "model.safetensors" if self.is_run else self.path
        state = self.weights
        if not any(name.startswith("encoder.") for name in state):
            raise TextnnError(f"{source}: holds no encoder weights (no parameter named encoder.*); it was written "
                              f"by an older textnn or is not a textnn run")
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


def open_start(value: str | Path, origin: str, key: str = "model.init_from") -> Start:
    """The start that `key: value` names (a run or checkpoint directory, or a Hugging Face model id in the
    local cache: `resolve_start`), opened: its kind decided once here, its files read when first asked.
    One clear error when there is no start there, or a run with no weights."""
    path = Path(resolve_start(str(value), origin, key))
    kind = start_kind(path)
    if not kind:
        raise TextnnError(f"{origin}: {key}={value}: no run there (no config.yaml) and no Hugging Face "
                          f"checkpoint (no config.json); give the directory `textnn train` wrote or a checkpoint "
                          f"directory")
    if kind == RUN and not (path / "model.safetensors").is_file():
        raise TextnnError(f"{origin}: {key}={value}: the run has no model.safetensors; train it to the end first")
    return Start(path, kind, key)


def _grow_rows(model: torch.nn.Module, state: dict[str, torch.Tensor], old: int, new: int) -> dict[str, torch.Tensor]:
    """`state` with every tensor of `old` rows that has `new` rows in `model` extended by rows at its mean."""
    own = model.state_dict()
    grown = dict(state)
    for name, tensor in state.items():
        if name in own and tensor.shape[:1] == (old,) and own[name].shape == (new, *tensor.shape[1:]):
            mean = tensor.float().mean(dim=0, keepdim=True).to(tensor.dtype)  # [1, ...]
            grown[name] = torch.cat([tensor, mean.expand(new - old, *tensor.shape[1:])])  # [new, ...]
    return grown
