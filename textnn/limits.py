"""The input-size policy: how much one input may ask of this machine, in one place.

Every limit here guards against an input that is endless or huge by mistake (`/dev/zero` given as data,
a whole book on one line, a beam of a million) and that would otherwise hang, fill the memory or end in
an allocation error deep inside torch. Each check refuses with one line that names the input, the size
found, the limit, and what to do. `textnn explain limits` prints the table below.

Lowest layer: nothing here imports torch or any other part of textnn but its errors.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import NamedTuple

from textnn.errors import TextnnError

GiB = 1024 ** 3


class InputTooLarge(TextnnError):
    """An input, or a count asked for, beyond a limit of this policy (the HTTP server answers 413 for it)."""

# name -> (value, what it bounds); read by the checks below, by the commands' option checks and by explain.
MAX_LINE_BYTES = 64 * 1024 * 1024
# Memory one input line takes once tokenized, per byte of the line: the most measured (docs/RELIABILITY.md,
# "Hostile use"), WordPiece's tokens, ids and offsets as Python objects on a token every two bytes (303; real
# English text: 154; the word tokenizer: 32, and 58 at worst), rounded up. A shorter line than
# LINE_COST_UNCHECKED / LINE_COST bytes (1 MiB) is not checked: it asks for less than loading torch took.
LINE_COST = 320
LINE_COST_UNCHECKED = 320 * 1024 * 1024
MAX_STREAM_BYTES = 64 * GiB
MAX_BEAM = 1000
MAX_NEW_TOKENS = 100_000
MAX_SAMPLES = 1000
MAX_BATCH = 65_536
MAX_EXAMPLE_TOKENS = 20_000
MAX_PAIR_TOKENS = 1024
MAX_BOOTSTRAP = 100_000

TABLE = {
    "line": (MAX_LINE_BYTES, "bytes in one line of an input read line by line (predict, translate, generate RUN FILE)"),
    "line_cost": (LINE_COST, "bytes of memory one such line may take per byte once tokenized (WordPiece at worst): "
                             "a line of 1 MiB or more whose cost is more than this process may use (`memory`) is "
                             "refused before it is tokenized"),
    "stream": (MAX_STREAM_BYTES, "bytes read from a data file that is not a regular file (a pipe, a device)"),
    "beam": (MAX_BEAM, "--beam and --n-best of translate, generate and evaluate"),
    "new_tokens": (MAX_NEW_TOKENS, "tokens one `generate` or `translate` may write per input (--max-tokens; a "
                                   "model with a fixed context, GPT, goes past it by re-reading its last window)"),
    "samples": (MAX_SAMPLES, "--num-samples of generate: samples drawn side by side in one batch"),
    "batch": (MAX_BATCH, "--batch-size of evaluate, predict, translate, generate and visualize: examples in "
                         "one forward pass"),
    "example_tokens": (MAX_EXAMPLE_TOKENS, "tokens of one sentence a tagger reads whole (training, evaluate, "
                                           "predict): a longer one is refused"),
    "pair_tokens": (MAX_PAIR_TOKENS, "tokens of a side of a translation pair when neither data.max_length nor the "
                                     "model sets a limit: longer training pairs are skipped and counted, longer "
                                     "sources cut (as fairseq's default positions)"),
    "bootstrap": (MAX_BOOTSTRAP, "resamples behind a bootstrap interval (--bootstrap of evaluate, "
                                 "train.bootstrap_samples): each is the metric computed once more over the data"),
    "memory": (None, "what this process may use: the least of the free memory, the room under its cgroup's "
                     "memory limit and under `ulimit -v` and `ulimit -d`; a model whose training needs more "
                     "is refused before it is built (weights, gradients and the optimizer's two moments)"),
}


def describe() -> list[str]:
    """The limits as `textnn explain limits` prints them."""
    lines = ["[limits] inputs larger than these are refused with one line (textnn/limits.py)"]
    for name, (value, what) in TABLE.items():
        shown = str(memory_available() or "unknown") if value is None else f"{value:,}"  # memory: now, here
        lines.append(f"  {name:<16} {shown:>16}  {what}")
    return lines


def check_line(length: int, where: str, available: Memory | None = None) -> None:
    """Refuse a line of more than MAX_LINE_BYTES bytes, or one whose tokens would take more memory than this
    process may use (`where`: file:line), before it is tokenized."""
    if length > MAX_LINE_BYTES:
        raise InputTooLarge(f"{where}: a line of more than {MAX_LINE_BYTES // (1024 * 1024)} MiB with no line break; "
                          f"is this a text file with one input per line? (an endless source such as /dev/zero, "
                          f"or binary data, looks like this)")
    cost = length * LINE_COST
    if cost < LINE_COST_UNCHECKED:
        return
    available = memory_available() if available is None else available
    if available is not None and cost > available.free:
        raise InputTooLarge(f"{where}: a line of {length / 2 ** 20:,.1f} MiB would take about {cost / GiB:,.1f} GiB "
                          f"once tokenized ({LINE_COST} bytes for each of its bytes, `textnn explain limits`), but "
                          f"this process may use {available}; split it into shorter inputs, one per line")


def check_stream(read: int, where: str) -> None:
    """Refuse a data source that is not a regular file once more than MAX_STREAM_BYTES came from it."""
    if read > MAX_STREAM_BYTES:
        raise InputTooLarge(f"{where}: more than {MAX_STREAM_BYTES // GiB} GiB read from a source that is not a "
                          f"regular file, and no end yet; give a file (an endless source such as /dev/zero or "
                          f"`yes` never ends)")


def check_count(value: int, name: str, option: str) -> None:
    """Refuse an option (`option`, e.g. "--beam") above the limit `name` of TABLE."""
    limit = TABLE[name][0]
    if value > limit:
        raise InputTooLarge(f"{option}={value:,}: more than the limit of {limit:,} ({TABLE[name][1]}); choose a "
                          f"smaller value")


def check_example(tokens: int, where: str, what: str, limit: int = MAX_EXAMPLE_TOKENS) -> None:
    """Refuse one sentence (or pair side) of more than `limit` tokens, which a model reads whole."""
    if tokens > limit:
        raise InputTooLarge(f"{where}: {what} of {tokens:,} tokens, more than the limit of {limit:,} for one "
                          f"sentence read whole; split it into sentences (one per line)")


class Memory(NamedTuple):
    """Bytes this process may still allocate, and the limit that sets the number (named in messages)."""
    free: int
    bound: str  # "free memory", "the cgroup's memory limit", "ulimit -v" or "ulimit -d"

    def __str__(self) -> str:
        return f"{max(self.free, 0) / GiB:,.1f} GiB ({self.bound})"


def memory_available(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup"),
                     rlimit=None) -> Memory | None:
    """How much more memory this process may use: the least of the machine's free memory (MemAvailable),
    the room under the memory limit of its cgroup and of every cgroup above it (v2 and v1), and the room
    under `ulimit -v` (address space) and `ulimit -d` (data). None where none of them can be read (not Linux).

    A limit other than the free memory makes an allocation fail long before the machine is full, so each
    is read. `proc`, `cgroup` and `rlimit` (resource.getrlimit) are arguments so that tests can fake them.
    """
    rooms = [Memory(free, "free memory") for free in [_meminfo(proc / "meminfo")] if free is not None]
    rooms += [Memory(room, "the cgroup's memory limit") for room in _cgroup_rooms(proc, cgroup)]
    rooms += _rlimit_rooms(proc, rlimit or resource.getrlimit)
    return min(rooms, default=None)


def _meminfo(path: Path) -> int | None:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# The files of a cgroup's memory limit and use, in cgroup v2 and v1; "max" or v1's huge number: no limit.
CGROUP_FILES = {"v2": ("memory.max", "memory.current", "inactive_file"),
                "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


def _cgroup_rooms(proc: Path, cgroup: Path) -> list[int]:
    """Room under the memory limit of this process's cgroup and of each above it: a limit binds at every level."""
    paths = {"v2": "/", "v1": "/"}
    try:  # "0::/user.slice/..." (v2), "4:memory:/docker/..." (v1)
        for line in (proc / "self" / "cgroup").read_text(encoding="utf-8").splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" or "memory" in controllers.split(","):
                paths["v2" if number == "0" else "v1"] = path
    except (OSError, ValueError):
        pass
    rooms = []
    for version, mount in (("v2", cgroup), ("v2", cgroup / "unified"), ("v1", cgroup / "memory")):
        folder = mount / paths[version].lstrip("/")
        for place in [folder, *folder.parents]:  # a container sees its own cgroup as the root: the others are absent
            room = _cgroup_room(place, *CGROUP_FILES[version])
            if room is not None:
                rooms.append(room)
            if place == mount:
                break
    return rooms


def _cgroup_room(folder: Path, limit_file: str, usage_file: str, cache_key: str) -> int | None:
    try:
        limit = (folder / limit_file).read_text(encoding="ascii").strip()
        if limit == "max" or int(limit) >= 2 ** 62:
            return None
        usage = int((folder / usage_file).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    try:  # the usage counts the page cache, which the kernel gives back before it refuses an allocation
        for line in (folder / "memory.stat").read_text(encoding="ascii").splitlines():
            name, value = line.split()
            if name == cache_key:
                usage -= int(value)
    except (OSError, ValueError):
        pass
    return int(limit) - usage


def _rlimit_rooms(proc: Path, rlimit) -> list[Memory]:
    """Room under `ulimit -v` (the address space: /proc/self/statm's size) and `ulimit -d` (its data)."""
    try:  # statm's fields, in pages: size resident shared text lib data dt
        pages = [int(field) for field in (proc / "self" / "statm").read_text(encoding="ascii").split()]
        size, data = pages[0], pages[5]
    except (OSError, ValueError, IndexError):
        return []
    rooms = []
    for which, used, name in ((resource.RLIMIT_AS, size, "ulimit -v"), (resource.RLIMIT_DATA, data, "ulimit -d")):
        soft = rlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            rooms.append(Memory(soft - used * resource.getpagesize(), name))
    return rooms


# Float32 copies that training keeps of each parameter: the weights, their gradients, Adam's two moments.
TRAINING_COPIES = 4


def check_training_memory(parameters: int, bytes_per_value: int = 4, available: Memory | None = None) -> None:
    """Refuse a model whose `parameters` need more memory to train than this process may use (`memory_available`),
    before any is allocated."""
    available = memory_available() if available is None else available
    needed = parameters * bytes_per_value * TRAINING_COPIES
    if available is not None and needed > available.free:
        raise TextnnError(f"the model has {parameters:,} parameters: training it needs at least "
                          f"{needed / GiB:,.1f} GiB (weights, gradients and two optimizer moments, "
                          f"{bytes_per_value} bytes each), but this process may use {available}; "
                          f"choose smaller model sizes (`textnn explain model`)")
