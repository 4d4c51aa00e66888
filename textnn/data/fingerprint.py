"""Fingerprints of data files, so that `--resume` goes on with the data a run started with.

A resumed run reads its data files again, rebuilds its vocabulary and batches from them and goes on
from the checkpoint's place in them. A file edited in between would make the steps after the resume
train on other examples than those before (or make the vocabulary no longer fit the weights), and
nothing would say so. So a run records a fingerprint of its data when it starts, and a resume
compares.

The fingerprint of a data path lists exactly the files its reader reads (the task says which: the file
itself, the class files of a folder, the two sides of a parallel corpus), each by name, size,
modification time, status-change time and the sha256 of its whole content. By name, because a name
may carry meaning (a class file's name is its label: pos.txt and neg.txt swapped by renaming flip every
label, each content keeping its size and time); only those files, because a README beside the class
files is no data of the run. Why the whole content and not, say, its first and last MiB: the edit a
user makes in place (a label corrected, a word replaced by one of the same length) keeps the size and
may lie anywhere. Hashing runs at hundreds of MB a second, far faster than reading and tokenizing the
same file, which every run start does anyway.

On resume a file whose name, size and both times are unchanged is taken as unchanged without being read
again, as git does for its index. The status-change time (ctime) is there because the modification time
can be set back (`touch -d`, `cp -p`, `os.utime`) after an edit of the same size, and the status-change
time cannot: any write, rename or time change sets it to now. A file with any of them changed (touched,
copied back, renamed) is hashed again, and only a different content refuses the resume.

Runs started before the fingerprint listed the files recorded one for all the files under a data path
(their number, total size, latest modification time and one sha256); they are checked as they were then.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

STAT_FIELDS = ("size", "mtime_ns", "ctime_ns")


def fingerprint(files: list[Path]) -> dict:
    """{"files": [{"name", "size", "mtime_ns", "ctime_ns", "sha256"}, ...]} of the files read for a data path."""
    return {"files": [{"name": file.name, **_stat(file), "sha256": _sha256(file)} for file in files]}


def change(path: str | Path, files: list[Path], recorded: dict) -> tuple[Path, str] | None:
    """The file that differs between `files` (those read for the data path `path` now) and the `recorded`
    fingerprint, and what differs, in words; None if nothing does."""
    if isinstance(recorded["files"], int):  # a run started by an earlier version
        what = _earlier_change(path, recorded)
        return (Path(path), what) if what else None
    now = {file.name: file for file in files}
    was = {entry["name"]: entry for entry in recorded["files"]}
    read_now = f"read now: {', '.join(now)}" if now else "nothing is read now"
    for name in was:
        if name not in now:
            return _beside(path, name), f"it is gone ({read_now})"
    for name, file in now.items():
        if name not in was:
            return file, f"it is new (the run started with {', '.join(was)})"
    for name, file in now.items():
        stat, entry = _stat(file), was[name]
        if stat["size"] != entry["size"]:
            return file, f"{stat['size']:,} bytes, were {entry['size']:,}, modified {_when(stat['mtime_ns'])}"
        if all(stat[key] == entry[key] for key in STAT_FIELDS):
            continue  # same name, size and times: unchanged (not read again)
        if _sha256(file) != entry["sha256"]:
            return file, f"the same size, {stat['size']:,} bytes, but other content, modified {_when(stat['mtime_ns'])}"
    return None  # touched, copied or renamed back: the same content


def _stat(file: Path) -> dict:
    stat = file.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns}


def _sha256(file: Path) -> str:
    with open(file, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _beside(path: str | Path, name: str) -> Path:
    """Where the file `name` read for the data path `path` is: in the folder `path`, or beside the file or
    the prefix `path`."""
    path = Path(path)
    return path / name if path.is_dir() else path.parent / name


def _earlier_change(path: str | Path, recorded: dict) -> str | None:
    """`change` for a fingerprint of all the files under `path` together, as runs started before the files
    were listed one by one recorded it."""
    files = _all_files(path)
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


def _all_files(path: str | Path) -> list[Path]:
    """The files under a directory, the file itself, or those of a prefix (PREFIX.*)."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    if path.is_file():
        return [path]
    return sorted(p for p in path.parent.glob(f"{path.name}.*") if p.is_file())


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
