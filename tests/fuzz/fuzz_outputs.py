"""Fuzz targets for the places textnn writes its outputs to (files.open_output's rule), beside the input
targets of fuzz_inputs.py and counted the same way (error / accepted / other):

    outputs.file       a file output (`predict -o`, `compare --markdown`, a run's files): `check_output_place`,
                       then the lines or bytes written as the command writes them
    outputs.directory  a directory output (`export`): `check_output_place`, the export's own check, then a
                       folder filled beside it and renamed into place

Each probe makes, in a private folder of its own, the place and what is around it: nothing, a file, a
directory (empty or not), a FIFO (with a reader, so a write never waits), character devices made by mknod
with /dev/null's and /dev/full's numbers, a block device of an unregistered major (opening it could only
fail), a socket, and symbolic links to each of those, to nothing and to themselves; the parent folder
missing or a file. The machine's own /dev is never written. Beyond the outcome, a probe counts as *other*
when anything but the output name changed (a link's target written through, a device or FIFO replaced by
a file), when a temporary file is left, or when what was accepted is not what was written.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import stat
from pathlib import Path
from typing import Callable

OUTPUT_TARGETS = ("outputs.file", "outputs.directory")
PLACES = ["new", "file", "empty_dir", "full_dir", "fifo", "null_dev", "full_dev", "block_dev", "socket",
          "link_file", "link_null", "link_full", "link_fifo", "link_dangling", "link_dir", "link_empty_dir",
          "link_loop", "link_link_file", "link_socket"]
UNREGISTERED_BLOCK = os.makedev(240, 0)  # 240-254: for local use, no driver here (see /proc/devices)


def can_make_devices(folder: Path) -> bool:
    try:
        os.mknod(folder / "probe", stat.S_IFCHR | 0o600, os.stat(os.devnull).st_rdev)
    except (PermissionError, OSError):
        return False
    os.unlink(folder / "probe")
    return True


def output_input(rng: random.Random, devices: bool = True) -> bytes:
    places = [p for p in PLACES if devices or not p.endswith(("_dev", "null", "full"))]
    content = "".join(rng.choice(["a line", "", "é", "\x00", "\t", "x" * 100, "{}"]) + rng.choice(["\n", ""])
                      for _ in range(rng.randint(0, 30)))
    return json.dumps({"place": rng.choice(places), "writer": rng.choice(["lines", "bytes"]), "content": content,
                       "parent": rng.choices(["ok", "missing", "file"], [8, 1, 1])[0]}).encode("utf-8")


def output_seed() -> bytes:
    return json.dumps({"place": "new", "writer": "lines", "content": "a line\n", "parent": "ok"}).encode("utf-8")


def _make(place: str, at: Path, outside: Path) -> None:
    """Make `place` at `at`; what a link points to goes in `outside`."""
    kinds = {"file": lambda p: p.write_text("the user's file\n"), "empty_dir": lambda p: p.mkdir(),
             "full_dir": lambda p: (p.mkdir(), (p / "mine.txt").write_text("mine\n")),
             "fifo": os.mkfifo, "socket": _bind,
             "null_dev": lambda p: os.mknod(p, stat.S_IFCHR | 0o666, os.stat(os.devnull).st_rdev),
             "full_dev": lambda p: os.mknod(p, stat.S_IFCHR | 0o666, os.stat("/dev/full").st_rdev),
             "block_dev": lambda p: os.mknod(p, stat.S_IFBLK | 0o600, UNREGISTERED_BLOCK)}
    linked = {"link_file": "file", "link_null": "null_dev", "link_full": "full_dev", "link_fifo": "fifo",
              "link_dir": "full_dir", "link_empty_dir": "empty_dir", "link_socket": "socket"}
    if place in kinds:
        kinds[place](at)
    elif place in linked:
        _make(linked[place], outside / "target", outside)
        at.symlink_to(outside / "target")
    elif place == "link_dangling":
        at.symlink_to(outside / "nothing")
    elif place == "link_loop":
        at.symlink_to(at)
    elif place == "link_link_file":
        _make("link_file", outside / "second", outside)
        at.symlink_to(outside / "second")


_SOCKETS: list[socket.socket] = []


def _bind(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    _SOCKETS.append(server)


def _state(folder: Path) -> dict:
    """Every node below `folder`, links not followed: its kind, device numbers, content or link target."""
    found = {}
    for path in [folder, *folder.rglob("*")]:
        info = os.lstat(path)
        kind = stat.S_IFMT(info.st_mode)
        detail = (os.readlink(path) if stat.S_ISLNK(info.st_mode) else path.read_bytes() if stat.S_ISREG(info.st_mode)
                  else info.st_rdev if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else None)
        found[str(path.relative_to(folder))] = (kind, detail)
    return found


def output_targets(folder: Path) -> dict[str, Callable[[bytes], object]]:
    """The two targets; each probe works in its own folder below `folder`."""
    from textnn.cli import write_lines
    from textnn.files import atomic_write_bytes, check_output_place, temporary_dir_beside
    from textnn.interop.huggingface import check_export_place

    def probe(kind: str) -> Callable[[bytes], object]:
        def run(data: bytes) -> object:
            spec = json.loads(data)
            root = folder / "probe"
            shutil.rmtree(root, ignore_errors=True)
            (root / "outside").mkdir(parents=True)
            base = root / "place"
            base.mkdir()
            if spec["parent"] == "file":
                (base / "sub").write_text("a file where a folder goes\n")
            out = base / "sub" / "out" if spec["parent"] != "ok" else base / "out"
            if spec["parent"] == "ok":
                _make(spec["place"], out, root / "outside")
            reader = os.open(out, os.O_RDONLY | os.O_NONBLOCK) if stat.S_ISFIFO(_mode(out)) else None
            before = _state(root)
            content = spec["content"].encode("utf-8")
            outcome: object = None
            try:
                if kind == "file":
                    check_output_place(out, "file", "-o")
                    if spec["writer"] == "lines":  # as predict -o writes: each line and a newline
                        lines = spec["content"].removesuffix("\n").split("\n") if spec["content"] else []
                        write_lines(iter(lines), str(out))
                        content = "".join(line + "\n" for line in lines).encode("utf-8")
                    else:
                        atomic_write_bytes(out, content)
                else:
                    check_output_place(out, "directory", "export to")
                    check_export_place(root / "outside" / "run", out)
                    with temporary_dir_beside(out) as staging:
                        (staging / "model.bin").write_bytes(content)
                outcome = "accepted"
            finally:
                got = b""
                if reader is not None:
                    with contextlib.suppress(BlockingIOError):
                        got = os.read(reader, 1 << 20)
                    os.close(reader)
                _check(spec, kind, root, out, before, _state(root), outcome == "accepted", content, got)
                for server in _SOCKETS:
                    server.close()
                _SOCKETS.clear()
            return outcome
        return run

    return {"outputs.file": probe("file"), "outputs.directory": probe("directory")}


def _mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


def _check(spec: dict, kind: str, root: Path, out: Path, before: dict, after: dict, accepted: bool, content: bytes,
           got: bytes) -> None:
    """What the probe may have changed, and nothing else (raises AssertionError: an *other*)."""
    name = str(out.relative_to(root))
    temporaries = [path for path in after if ".tmp-" in path]
    assert not temporaries, f"temporary left: {temporaries}"
    place = spec["place"] if spec["parent"] == "ok" else "new"
    filled = kind == "directory" and accepted and place in ("link_empty_dir", "link_dir")  # the link's folder
    made_above = kind == "directory" and accepted  # a directory output's missing folders are made
    changed = {path for path in before.keys() | after.keys()
               if before.get(path) != after.get(path) and not (path == name or path.startswith(name + "/"))
               and not (filled and path.startswith("outside/target"))
               and not (made_above and path not in before and name.startswith(path + "/"))}
    assert not changed, f"{place}: changed beside the output: {sorted(changed)[:3]}"
    was, now = before.get(name), after.get(name)
    in_place = was is not None and was[0] in (stat.S_IFCHR, stat.S_IFIFO, stat.S_IFBLK, stat.S_IFSOCK)
    assert not in_place or now == was, f"{place}: replaced by {now and stat.filemode(now[0])}"
    if not accepted:
        assert now == was, f"{place}: changed although refused"
        return
    if kind == "directory":
        assert (out / "model.bin").read_bytes() == content, f"{place}: the directory does not hold what was written"
    elif stat.S_ISFIFO(_mode(out)):
        assert got == content, f"{place}: the pipe's reader got {len(got)} bytes of {len(content)}"
    elif not stat.S_ISCHR(_mode(out)):
        assert now is not None and now[0] == stat.S_IFREG and now[1] == content, \
            f"{place}: the output is not the file written"
