"""Tokenized-data cache: tokenizing a file once, reusing it while the file and settings are unchanged.

The key is a hash of the file's bytes plus the reader and tokenizer settings, so an edited file or a
changed setting can never serve stale tokens. Entries are JSON (never pickle); a large integer array
(a language-modelling token stream) goes beside its JSON as a `.npy` file read with `allow_pickle=False`.

Preparing a large file (hashing, then reading and tokenizing it or loading its entry) takes seconds to
minutes: it is a stage (textnn/progress.py) that says when it starts and, when it ends, whether the
entry came from the cache and how long it took.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np

from textnn import progress
from textnn.data.fingerprint import digest
from textnn.data.readers import is_large, missing_file
from textnn.files import atomic_write_bytes

FROM_CACHE, COMPUTED, UNCACHED = "read from the cache", "prepared and cached for the next run", "prepared"


def cache_dir() -> Path:
    return Path(os.environ.get("TEXTNN_CACHE", Path.home() / ".cache" / "textnn"))


def file_digest(path: str | Path) -> str:
    """sha256 of a file, or of every file in a directory (sorted by name)."""
    path = Path(path)
    if not path.exists():  # named here, or open() below would end in a traceback before any reader looks
        raise missing_file(path)
    return digest(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])


def cacheable(path: str | Path) -> bool:
    """Whether `path` is a regular file or a directory, whose content can be hashed; a pipe or a device
    (`/dev/zero`) may never end or differ each time it is read, so it is read by the reader alone."""
    path = Path(path)
    if not path.exists():
        raise missing_file(path)
    return path.is_file() or path.is_dir()


def _preparing(path: str | Path) -> ContextManager[progress.Stage]:
    """The stage lines around preparing `path`, when it is large (data/readers.py `is_large`)."""
    return progress.stage(f"prepare {path}", enabled=is_large(path))


def cached(path: str | Path, settings: dict, compute: Callable[[], object], enabled: bool = True) -> object:
    """Return `compute()`, loading it from the cache when this file + settings were seen before."""
    with _preparing(path) as stage:
        value, stage.summary = _cached(path, settings, compute, enabled)
    return value


def _cached(path: str | Path, settings: dict, compute: Callable[[], object], enabled: bool) -> tuple[object, str]:
    """(`cached`'s value, where it came from)."""
    if not enabled or not cacheable(path):
        return compute(), UNCACHED
    key = hashlib.sha256((file_digest(path) + json.dumps(settings, sort_keys=True)).encode()).hexdigest()
    entry = cache_dir() / f"{key}.json"
    if entry.is_file():
        try:
            return json.loads(entry.read_text(encoding="utf-8")), FROM_CACHE
        except (OSError, ValueError):
            pass  # a damaged entry is recomputed and rewritten below
    value = compute()
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(entry, json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except OSError:
        return value, UNCACHED  # a read-only home must not stop training; the cache is only a speed-up
    return value, COMPUTED


def cached_array(path: str | Path, settings: dict, compute: Callable[[], tuple[object, np.ndarray]],
                 enabled: bool = True) -> tuple[object, np.ndarray]:
    """Like `cached`, for a (JSON value, integer array) pair: the array is stored as `.npy`, not JSON.

    A token stream of millions of ids as a JSON list takes seconds to parse; as `.npy` it loads in
    milliseconds. The `.npy` is written first and the JSON last, so a JSON entry on disk means
    both halves are complete.
    """
    with _preparing(path) as stage:
        value, stage.summary = _cached_array(path, settings, compute, enabled)
    return value


def _cached_array(path: str | Path, settings: dict, compute: Callable[[], tuple[object, np.ndarray]],
                  enabled: bool) -> tuple[tuple[object, np.ndarray], str]:
    """(`cached_array`'s pair, where it came from)."""
    if not enabled or not cacheable(path):
        return compute(), UNCACHED
    key = hashlib.sha256((file_digest(path) + json.dumps(settings, sort_keys=True)).encode()).hexdigest()
    meta_file, array_file = cache_dir() / f"{key}.json", cache_dir() / f"{key}.npy"
    if meta_file.is_file() and array_file.is_file():
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            return (meta, np.load(array_file, allow_pickle=False)), FROM_CACHE
        except (OSError, ValueError):
            pass  # a damaged entry is recomputed and rewritten below
    meta, array = compute()
    try:
        meta_file.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
        atomic_write_bytes(array_file, buffer.getvalue())
        atomic_write_bytes(meta_file, json.dumps(meta, ensure_ascii=False).encode("utf-8"))
    except OSError:
        return (meta, array), UNCACHED  # a read-only home must not stop training; the cache is only a speed-up
    return (meta, array), COMPUTED
