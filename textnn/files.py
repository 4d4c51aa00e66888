"""How textnn writes and reads its own small files safely: the bottom of the layers, beside errors.py.

One rule for the files textnn writes (`open_output`, `output_kind`): a regular file is written by atomic
replace (temp file beside the target, fsync, rename), so a run killed at any moment leaves a file's old
content or all of its new one, never half, and a symbolic link in its place is replaced, never written
through; a character device or a pipe (/dev/null, /dev/stdout, a FIFO) is written in place and never
replaced; anything else (a socket, a block device) is refused, by `check_output_place` before any work.
Checkpoints, run.json, config.yaml, the tokenized-data cache, plots and command output all go through it.
A killed writer's temporary file is removed by the next one (`remove_stale_temporaries`). Any OSError
while writing becomes one error saying what to do (`unwritable`).

Reading YAML (`read_yaml`) is bounded and safe: a config, a run's config.yaml and the starting run of
model.init_from are all read through it, so a huge or hostile file is refused before it is parsed.
JSON that textnn prints for other programs (`json_text`: predictions, `--json` output) is strict JSON.
Every layer above may use all three; this module imports nothing of textnn's but errors.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import stat
from pathlib import Path

import yaml

from textnn.errors import TextnnError, short


# ------------------------------------------------------------------------------------- JSON for others

def json_text(value: object, **options) -> str:
    """`json.dumps(value, **options)` that every JSON reader takes: a float that is not finite (NaN, an
    infinite score or metric), for which JSON has no word and Python would write `NaN` or `-Infinity`,
    is written null."""
    return json.dumps(_finite(value), allow_nan=False, **options)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


# ------------------------------------------------------------------------------------- atomic writes

def unwritable(path: str | Path, err: OSError, what: str = "file") -> TextnnError:
    """One error for an OSError met while writing `path`, saying what to do about its cause."""
    advice = "free space or choose" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "choose"
    return TextnnError(f"{path}: cannot write the {what}: {write_failure(err)}; {advice} a writable place "
                       f"(another --run-dir or -o)")


def write_failure(err: OSError) -> str:
    """Why a write failed, in words (an OSError's errno)."""
    causes = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
              errno.EFBIG: "the file grew past a size limit (`ulimit -f`)", errno.EROFS: "the file system is read-only",
              errno.EACCES: "permission denied", errno.EPERM: "permission denied",
              errno.EISDIR: "a directory of that name is in the way", errno.ENOTDIR: "a file is in the way of a directory",
              errno.ELOOP: "a symbolic link stands in its place (a run's files are written only as plain files: "
                           "remove the link)",
              errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes)"}
    return causes.get(err.errno, err.strerror or type(err).__name__)


IN_PLACE = "a character device or a pipe"  # what `output_kind` says of a place written in place


def output_kind(path: str | Path) -> str:
    """What stands at `path`, as `open_output` writes it: "new" (nothing, or a link to nothing), "file" (a
    regular file, or a link to one: replaced), IN_PLACE (also behind a link, as /dev/stdout is), or what
    else is there ("a directory", "a socket", "a block device", ...), which is refused."""
    try:
        mode = os.stat(path).st_mode  # through links: /dev/stdout -> /proc/self/fd/1 -> a pipe
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # nothing there (a file above: see callers)
            return "new"
        raise
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return IN_PLACE
    return ("a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a block device (a disk)" if stat.S_ISBLK(mode) else "a special file")


def _refused(place: str, kind: str) -> TextnnError:
    return TextnnError(f"{place}: {kind} is in the way; textnn writes regular files (by replace) and character "
                       f"devices or pipes (in place): give a file name")


def check_output_place(path: str | Path, kind: str, option: str) -> Path:
    """Refuse, before any work starts, an output place a command could not write: `kind` "file" (written
    by `open_output`: a regular file by atomic replace, a device or a pipe such as /dev/stdout in place)
    or "directory" (made if missing, written into if there). `option` names where the place was given
    (-o, --output-dir).

    Checked: something else of that name in the way (a directory where a file goes, a socket or a block
    device, a file where a directory goes), a missing folder above a file, a file above a directory, a
    folder that cannot be written. Returns the place, ~ expanded.
    """
    path = Path(path).expanduser()
    given = f"{option} {path}"
    if kind == "file":
        found = output_kind(path)
        if found == "a directory":
            raise TextnnError(f"{given}: a directory of that name is in the way; give a file name (e.g. "
                              f"{path / 'out.txt'})")
        if found == IN_PLACE:  # written in place, as it is
            return path
        if found not in ("new", "file"):
            raise _refused(given, found)
        parent = path.parent
        if parent.exists() and not parent.is_dir():
            raise TextnnError(f"{given}: {parent} is a file, not a folder; give a place in a folder")
        if not parent.is_dir():
            raise TextnnError(f"{given}: the folder {parent} does not exist; create it first or give another place")
    elif kind == "directory":
        if path.is_symlink() and not path.exists():
            raise TextnnError(f"{given}: a symbolic link to nothing ({os.readlink(path)}) is in the way; remove it "
                              f"or give another directory")
        if path.exists() and not path.is_dir():
            raise TextnnError(f"{given}: a file of that name is in the way; give a directory (a new one is made)")
        parent = path
        while not parent.exists():  # the nearest folder that exists: the new ones are made inside it
            parent = parent.parent
        if not parent.is_dir():
            raise TextnnError(f"{given}: {parent} is a file, not a folder; give a directory elsewhere")
    else:
        raise ValueError(f"kind must be file or directory, got {kind!r}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TextnnError(f"{given}: the folder {parent} cannot be written (permission denied); choose a "
                          f"writable place")
    return path


def _temporary(path: Path) -> Path:
    """Where `temporary_beside` writes `path`: beside it, hidden, named by the writing process."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


_TEMPORARY = re.compile(r"\..+\.tmp-([0-9]+)")


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (one of another user counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Remove the temporary files of `temporary_beside` in `folder` whose writer is no longer alive.

    A process killed mid-write (kill -9, a power cut) cannot remove its own, and a checkpoint's is as
    large as the checkpoint: without this, each killed write would leave one behind for ever.
    Returns the files removed.
    """
    removed = []
    with contextlib.suppress(OSError):  # no folder yet: nothing to remove
        for path in Path(folder).iterdir():
            match = _TEMPORARY.fullmatch(path.name)
            if match and path.is_file() and not process_alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


@contextlib.contextmanager
def temporary_beside(path: str | Path, what: str = "file"):
    """A binary handle to a temporary file beside `path`, renamed over it once the block ends well.

    The temporary file is fsynced before the rename, so `path` holds either its old content or all the
    new one. On any error it is removed, and an OSError (a full disk, a read-only place) becomes one
    TextnnError naming `path`.
    """
    path = Path(path)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError):
            raise unwritable(path, err, what) from None
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


@contextlib.contextmanager
def temporary_dir_beside(path: str | Path, what: str = "directory"):
    """A temporary directory beside `path`, renamed to `path` (over an empty directory there) once the
    block ends well. On any error it is removed, so `path` is left as it was or complete, never half
    written; an OSError becomes one TextnnError naming `path`. A link to a directory is followed: the
    directory it names is the one filled (a rename cannot put a directory over the link itself).
    """
    path = Path(path)
    if path.is_symlink() and path.is_dir():
        path = path.resolve()
    tmp = _temporary(path)
    try:
        tmp.mkdir(parents=True)
        yield tmp
        os.rename(tmp, path)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError):
            raise unwritable(path, err, what) from None
        raise


@contextlib.contextmanager
def open_output(path: str | Path, what: str = "file"):
    """A binary handle that writes `path` by the one rule above: a regular file (or none yet) through
    `temporary_beside`; a character device or a pipe in place, opened without creating or truncating, so
    it is never replaced by a file; anything else refused. Any OSError becomes one TextnnError."""
    path = Path(path)
    try:
        found = output_kind(path)
    except OSError as err:
        raise unwritable(path, err, what) from None
    if found in ("new", "file"):
        with temporary_beside(path, what) as handle:
            yield handle
        return
    if found != IN_PLACE:
        raise _refused(path, found)
    try:
        # No O_CREAT: if the device went away meanwhile, nothing is made in its place.
        with open(os.open(path, os.O_WRONLY | os.O_NOCTTY), "wb") as handle:
            yield handle
    except OSError as err:
        raise unwritable(path, err, what) from None


def atomic_write_bytes(path: str | Path, data: bytes, what: str = "file") -> None:
    """Write `data` to `path` by `open_output`: a regular file by replace (temp file, fsync, rename)."""
    with open_output(path, what) as handle:
        handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_link(source: str | Path, path: str | Path, what: str = "file") -> None:
    """Make `path` a second name of the file at `source` without copying it (a hard link), atomically: linked
    under `temporary_beside`'s temporary name, then renamed over `path`. Run files are written by replace,
    never in place, so a later write of either name leaves the other as it is. Where the file system has no
    hard links, `source` is copied there instead."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.link(source, tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        with temporary_beside(path, what) as handle, open(source, "rb") as original:
            shutil.copyfileobj(original, handle)


# ---------------------------------------------------------------------------------------- YAML reading

class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe subset, less two things a config never needs and that hide mistakes or attacks.

    Aliases (`*name`) are refused: a few nested ones expand a 500-byte file into gigabytes (the
    "billion laughs"), and a config is short enough to write its values out. A key given twice in one
    mapping is refused: YAML keeps the last silently, so the first value is lost without a word.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor[:40]} refused: textnn configs do "
                                              f"not expand anchors and aliases; write the value out",
                                              event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # a list or mapping as a key: the base class names it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"key {short(key, 40)} appears twice in one "
                                                        f"mapping; keep one of them", key_node.start_mark)
        return super().construct_mapping(node, deep)


MAX_NESTING = 32  # a config nests sections, lists and maps a few levels deep; far more is not a config
# A config is a page of YAML (the longest recipe is under 2 KB). YAML's pure-Python scanner spends about
# a quarter of a second per megabyte, so a file far past this bound is refused before it is parsed.
MAX_CONFIG_BYTES = 256 * 1024


def _bracket_depth(text: str) -> int:
    """The deepest nesting of YAML flow brackets ([ and {) in `text` (quotes not considered: an upper bound)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def read_yaml(path: str | Path) -> dict:
    """The mapping a YAML config file holds, read within the bounds above; any problem is one error naming
    the file (and the line, where YAML gives one)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TextnnError(f"{path}: config file not found; check the path")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise TextnnError(f"{path}: {size:,} bytes is not a config (textnn configs are a page of YAML, at most "
                              f"{MAX_CONFIG_BYTES // 1024} KiB); check that this is the file you meant")
        text = path.read_text(encoding="utf-8")
        if _bracket_depth(text) > MAX_NESTING:  # YAML's parser would spend seconds before its RecursionError
            raise RecursionError
        data = yaml.load(text, Loader=_ConfigLoader) or {}  # noqa: S506 (safe subset)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())  # one line, whatever YAML says
        raise TextnnError(f"{path}{line}: not valid YAML ({problem[:200]}); fix the file") from None
    except UnicodeDecodeError as err:
        raise TextnnError(f"{path}: not UTF-8 text (byte {err.start}); save the config as UTF-8") from None
    except RecursionError:
        raise TextnnError(f"{path}: not a config: its values nest too deeply; fix the file") from None
    except OSError as err:
        raise TextnnError(f"{path}: cannot read the config ({err.strerror}); check its permissions") from None
    if not isinstance(data, dict):
        raise TextnnError(f"{path}: a config must be a mapping with sections task/data/model/train")
    return data
