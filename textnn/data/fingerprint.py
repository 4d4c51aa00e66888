"""Fingerprints of data files, so that `--resume` goes on with the data a run started with.

A resumed run reads its data files again, rebuilds its vocabulary and batches from them and goes on
from the checkpoint's place in them. A file edited in between would make the steps after the resume
train on other examples than those before (or make the vocabulary no longer fit the weights), and
nothing would say so. So a run records a fingerprint of each file when it starts, and a resume
compares.

A fingerprint is the size, the modification time (ns) and the sha256 of the whole content. A data
path may name several files: a directory (one file per class) or the common prefix of a parallel
corpus (PREFIX.de and PREFIX.en); then it is the files' number and total size, the latest
modification time, and one sha256 over their names and contents.
Why the whole content and not, say, its first and last MiB: the edit a user makes in place (a label
corrected, a word replaced by one of the same length) keeps the size and may lie anywhere. Hashing
runs at hundreds of MB a second, far faster than reading and tokenizing the same file, which every
run start does anyway (the tokenized-data cache, when on, hashes the file whole too). On resume a file whose size
and modification time are both unchanged is taken as unchanged without being read again, as make and
rsync do; one that was touched or copied (a new time) is hashed again, and only a different content
refuses the resume.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path


def data_files(path: str | Path) -> list[Path]:
    """The files a data path names: itself, the files under a directory, or those of a prefix
    (PREFIX.*); none if there are none."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    if path.is_file():
        return [path]
    return sorted(p for p in path.parent.glob(f"{path.name}.*") if p.is_file())


def fingerprint(path: str | Path) -> dict:
    """{"files", "size", "mtime_ns", "sha256"} of the files a data path names."""
    files = data_files(path)
    count, size, mtime = _measure(files)
    return {"files": count, "size": size, "mtime_ns": mtime, "sha256": digest(files)}


def change(path: str | Path, recorded: dict) -> str | None:
    """What differs between the file at `path` now and its `recorded` fingerprint, in words; None if
    nothing does."""
    files = data_files(path)
    if not files:
        return "it is gone"
    count, size, mtime = _measure(files)
    if count != recorded["files"]:
        return f"{count:,} files, were {recorded['files']:,}"
    if size != recorded["size"]:
        return f"{size:,} bytes, were {recorded['size']:,}, modified {_when(mtime)}"
    if mtime == recorded["mtime_ns"]:
        return None  # same size, same time: unchanged (not read again)
    if digest(files) != recorded["sha256"]:
        return f"the same size, {size:,} bytes, but other content, modified {_when(mtime)}"
    return None  # touched or copied, same content


def _measure(files: list[Path]) -> tuple[int, int, int]:
    """(number of files, their total size, the latest modification time in ns)."""
    stats = [file.stat() for file in files]
    return len(files), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)


def digest(files: list[Path]) -> str:
    """sha256 over the names and contents of `files`, read 1 MiB at a time (also the data cache's key)."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _when(mtime_ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime_ns / 1e9))
