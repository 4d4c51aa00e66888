"""Malformed inputs through every reader and the config loader, in this process, with the outcomes counted.

    PYTHONPATH=. python -m tests.fuzz.fuzz_inputs --n 10000          # the full table (minutes)
    PYTHONPATH=. python -m tests.fuzz.fuzz_inputs --n 200 --only tsv  # one target, a short run
    PYTHONPATH=. python -m tests.fuzz.fuzz_inputs --only qa,qa.predict,predict,translate,generate,predict.csv,predict.jsonl
                  # the command inputs and the QA reader (fuzz_commands.py)
    PYTHONPATH=. python -m tests.fuzz.fuzz_inputs --only outputs.file,outputs.directory  # the output places
                                                                      # (fuzz_outputs.py)

Each input is a valid seed file (or config) spoiled by a few random mutations: bytes flipped, inserted
or deleted, lines duplicated, cut or spliced in from another format, NUL and invalid UTF-8 bytes, UTF-16,
huge lines, deep nesting; config values of every YAML type, huge strings, unknown and duplicated keys,
aliases. An outcome is one of:
    error     a TextnnError (the one-line message a user sees)
    accepted  the reader or loader returned normally
    other     anything else: another exception (a traceback for the user), more than --time-bound
              seconds of CPU time or --wall-bound seconds of wall-clock time (a hang), or more than
              --memory-bound MiB allocated at peak
The goal is 0 in `other`. The table is printed, then a few examples of each `other` kind.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import random
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

from tests.fuzz.fuzz_commands import command_seed, command_target_input, command_targets
from tests.fuzz.fuzz_outputs import OUTPUT_TARGETS, can_make_devices, output_input, output_seed, output_targets
from textnn.errors import TextnnError

SEEDS = {
    "tsv": "sentence\tlabel\na good and great film\t1\nan awful plot\t0\nfine acting\t1\n",
    "csv": 'sentence,label\n"a good, great film",1\nan awful plot,0\nfine acting,1\n',
    "jsonl": '{"sentence": "a good film", "label": "pos"}\n{"sentence": "an awful plot", "label": 0}\n'
             '{"sentence": "fine", "label": true}\n',
    "fasttext": "__label__pos a good film\n__label__neg an awful plot\n__label__pos __label__x fine acting\n",
    "label_text": "pos a good film\nneg\tan awful plot\npos fine acting\n",
    "conll": "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\n\n"
             "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n",
    "text": "the cat sat on the mat\n\nanother line of text\nand a third\n",
    # Parallel text is two files (or one TSV); this is the source side, PARALLEL_SEEDS has the rest.
    "parallel": "ein Hund läuft .\nzwei Katzen schlafen\n\n",
}
# The command inputs and the QA reader (fuzz_commands.py), fuzzed beside the readers.
COMMAND_TARGETS = ("qa", "qa.predict", "predict", "translate", "generate", "predict.csv", "predict.jsonl")
PARALLEL_SEEDS = {"de": SEEDS["parallel"], "en": "a dog runs .\ntwo cats sleep\n\n",
                  "tsv": "de\ten\nein Hund läuft .\ta dog runs .\nzwei Katzen schlafen\ttwo cats sleep\n"}
PIECES = [b"\x00", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"\r", b"\r\n", b"\n", b"\t", b",", b'"', b"'", b"{", b"}",
          b"[", b"]", b":", b"__label__", b"-DOCSTART-", b"\\", b"\xc3", b"\xe2\x80\xa8", b" ", b"null", b"1e999",
          b"NaN", b"\x0c", b"\x85", b"{\"sentence\": ", b"\"label\": [1]", b"B-", b"I-", b"E-X", b"O", b"9" * 4301]


def mutate(seed: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """`seed` spoiled by 1 to 4 random mutations."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(12)
        pos = rng.randint(0, len(data))
        if kind == 0 and data:  # flip a byte
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:  # insert a troublesome piece
            data[pos:pos] = rng.choice(PIECES) * rng.choice((1, 1, 2, 50))
        elif kind == 2:  # delete a range
            data[pos:pos + rng.randint(1, 20)] = b""
        elif kind == 3:  # cut short
            data = data[:pos]
        elif kind == 4:  # duplicate the lines
            data = data * rng.randint(2, 5)
        elif kind == 5:  # splice in another format
            other = rng.choice(others)
            data[pos:pos] = other[: rng.randint(0, len(other))]
        elif kind == 6:  # a huge line
            data[pos:pos] = bytes([rng.choice(b"ab \t,")]) * rng.choice((1_000, 100_000))
        elif kind == 7:  # the whole thing as UTF-16
            data = bytearray(bytes(data).decode("utf-8", "replace").encode(rng.choice(("utf-16", "utf-16-le"))))
        elif kind == 8:  # random bytes
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 30)))
        elif kind == 9:  # empty or blank
            data = bytearray(rng.choice((b"", b"\n", b"\n\n\n", b" \t \n")))
        elif kind == 10:  # deep nesting (JSON)
            depth = rng.choice((10, 10_000))
            data[pos:pos] = b"[" * depth + b"]" * depth
        else:  # random unicode text
            data[pos:pos] = "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randint(1, 10))).encode(
                "utf-8", "replace")
    return bytes(data)


def reader_targets(path: Path) -> dict[str, Callable[[bytes], object]]:
    """One function per reader: write the bytes to `path`, read them with that reader."""
    from textnn.data.conll import read_conll
    from textnn.data.readers import read_classification, read_lines

    def through(read: Callable[[], object]) -> Callable[[bytes], object]:
        def run(data: bytes) -> object:
            path.write_bytes(data)
            return read()
        return run

    targets = {fmt: through(lambda fmt=fmt: read_classification(path, fmt))
               for fmt in ("tsv", "csv", "jsonl", "fasttext", "label_text")}
    targets["conll"] = through(lambda: read_conll(path, scheme="iob1"))
    targets["text"] = through(lambda: (read_lines(path), read_classification(path, "text", require_labels=False)))
    targets["parallel"] = lambda data: read_parallel_input(path.parent / "pair", data)
    return targets


def parallel_input(rng: random.Random, others: list[bytes]) -> bytes:
    """A parallel-text input, packed as bytes (`pack_parallel`): two line-aligned sides PREFIX.de and
    PREFIX.en (one or both gzipped, or one missing), or one two-column TSV, each spoiled on its own,
    so line counts differ, a side is empty, a .gz is corrupt or not gzip at all."""
    import gzip

    layout = rng.choice(b"ffgt")  # f: two plain files, g: gzipped sides, t: one TSV
    sides = []
    for name in (("de", "en") if layout != ord("t") else ("tsv",)):
        data = PARALLEL_SEEDS[name].encode("utf-8")
        if rng.random() < 0.7:
            data = mutate(data, rng, others)
        if layout == ord("g") and rng.random() < 0.7:
            data = gzip.compress(data, mtime=0)
            if rng.random() < 0.3:  # a damaged archive
                data = mutate(data, rng, others)
        sides.append(None if rng.random() < 0.05 else data)  # None: the file is not there at all
    return pack_parallel(layout, rng.randrange(256), rng.randrange(256), sides)


def pack_parallel(layout: int, options: int, columns: int, sides: list[bytes | None]) -> bytes:
    """One bytes value for a parallel input: layout, two option bytes, then each side as a 1-byte
    presence flag, an 8-byte length and its bytes."""
    packed = bytes([layout, options, columns])
    for side in sides:
        packed += bytes([side is not None]) + len(side or b"").to_bytes(8, "big") + (side or b"")
    return packed


COLUMNS = [("de", "en"), ("0", "1"), ("1", "0"), ("en", "en"), ("9", "0"), ("fr", "en"), ("", "en")]
ENCODINGS = ["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"]


def read_parallel_input(prefix: Path, packed: bytes) -> object:
    """Write the files of a packed parallel input next to `prefix`; read them with `read_parallel`."""
    from textnn.data.parallel import read_parallel

    layout, options, columns, rest = chr(packed[0]), packed[1], packed[2], packed[3:]
    sides: list[bytes | None] = []
    while rest:
        size = int.from_bytes(rest[1:9], "big")
        sides.append(rest[9:9 + size] if rest[0] else None)
        rest = rest[9 + size:]
    for old in prefix.parent.glob(prefix.name + ".*"):
        old.unlink()
    skip_bad, encoding = bool(options & 1), ENCODINGS[options // 2 % len(ENCODINGS)]
    if layout == "t":
        path = prefix.with_suffix(".tsv")
        if sides[0] is not None:
            path.write_bytes(sides[0])
        source, target = COLUMNS[columns % len(COLUMNS)]
        return read_parallel(str(path), "tsv", source, target, encoding=encoding, header=bool(columns & 128),
                             skip_bad=skip_bad, warn=False)
    for language, data in zip(("de", "en"), sides):
        if data is not None:  # a gzipped side, or (sometimes) a plain one that is named .gz all the same
            gzipped = layout == "g" and (data[:2] == b"\x1f\x8b" or columns & 2)
            Path(f"{prefix}.{language}{'.gz' if gzipped else ''}").write_bytes(data)
    return read_parallel(str(prefix), "parallel", "de", "en", encoding=encoding, skip_bad=skip_bad, warn=False)


CONFIG_SEED = {
    "name": "fuzzed",
    "task": "classification",
    "data": {"format": "tsv", "train": "train.tsv", "dev": "dev.tsv", "min_freq": 1, "lowercase": False},
    "model": {"name": "cnn", "preset": "tiny"},
    "head": {"dropout": 0.5},
    "train": {"lr": 0.001, "epochs": 2, "batch_size": 16, "optimizer": "adam", "device": "cpu"},
}
VALUES = [None, True, False, 0, -1, 1, 2 ** 70, -(2 ** 70), 0.5, float("inf"), float("nan"), "", "x", "1e-3",
          "../..", "/abs", "~/x", "\x00", "é" * 3, [], [1, 2], {}, {"a": 1}, [[[]]], "tiny", "cnn", "rnn", "tsv",
          "tagging", "language_modeling", "cuda:99", "auto", "adam", "sgd"]


def huge(rng: random.Random) -> bool:
    """True for one value in twenty: YAML's pure-Python parser takes a tenth of a second over a
    100 kB value, so a huge value in every other input would make 10,000 inputs take hours."""
    return rng.random() < 0.05


def config_value(rng: random.Random) -> object:
    kind = rng.randrange(5)
    if kind == 0:
        return "v" * (100_000 if huge(rng) else 100)
    if kind == 1:
        return [rng.choice(VALUES[:12]) for _ in range(3000 if huge(rng) else 3)]
    if kind == 2:
        return {rng.choice(("a", 1, None, "lr")): rng.choice(VALUES[:12]) for _ in range(3)}
    return rng.choice(VALUES)


def config_targets(path: Path) -> dict[str, Callable[[bytes], object]]:
    """One target per config section; its inputs are YAML files spoiling that section."""
    from textnn.resolve import load_config

    def run(data: bytes) -> object:
        path.write_bytes(data)
        return load_config(path)

    return {f"config.{section}": run for section in CONFIG_SEED}


def config_input(section: str, rng: random.Random) -> bytes:
    import yaml

    raw = {key: (dict(value) if isinstance(value, dict) else value) for key, value in CONFIG_SEED.items()}
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        if kind == 0 or not isinstance(raw.get(section), dict):
            raw[section] = config_value(rng)
        elif kind == 1:  # a known key, a bad value
            raw[section][rng.choice(list(raw[section]) or ["x"])] = config_value(rng)
        elif kind == 2:  # an unknown key
            raw[section][rng.choice(("lrr", "x" * (100_000 if huge(rng) else 100), 3, None, "format ",
                                      "min_freq"))] = config_value(rng)
        elif kind == 3:
            raw.pop(section, None)
        else:
            raw[section] = {"x": 1} if kind == 4 else raw[section]
    try:
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, when there: only faster
        text = yaml.dump(raw, Dumper=dumper, sort_keys=False, allow_unicode=rng.random() < 0.5).encode(
            "utf-8", "replace")
    except (yaml.YAMLError, ValueError):
        text = b"{}"
    if rng.random() < 0.3:  # byte-level damage to the file, or YAML's own tricks
        tricks = [b"\na: &a [x, x]\nb: [*a, *a]\n", b"\ntask: tagging\n", b"\n" + section.encode() + b": !!python/object:os.system {}\n",
                  b"\n? [a]\n: 1\n", b"\x00", b"\t", b"\n" + section.encode() + b": *nothing\n"]
        if rng.random() < 0.5:
            text += rng.choice(tricks)
        else:
            text = mutate(text, rng, [text])
    return text


def seed_input(name: str) -> bytes:
    """The well-formed input a target's malformed ones are made from."""
    import yaml

    if name.startswith("config."):
        return yaml.safe_dump(CONFIG_SEED, sort_keys=False).encode("utf-8")
    if name == "parallel":
        return pack_parallel(ord("f"), 0, 0, [PARALLEL_SEEDS[language].encode("utf-8") for language in ("de", "en")])
    if name in COMMAND_TARGETS:
        return command_seed(name)
    if name in OUTPUT_TARGETS:
        return output_seed()
    return SEEDS[name].encode("utf-8")


class TimeBound(BaseException):
    """Raised by the alarms: not an Exception, so no `except Exception` in the code under test swallows it."""


def _alarm(signum, frame):
    raise TimeBound("CPU" if signum == signal.SIGPROF else "wall-clock")


def classify(run: Callable[[bytes], object], data: bytes, time_bound: float, memory_bound: int,
             wall_bound: float = 60.0) -> tuple[str, str]:
    """(outcome, detail) of one input: error, accepted, or other (with what happened).

    The time bound counts this process's CPU time: on a machine shared with other work, a reader
    waiting for a core is not hanging. A wall-clock bound, far larger, catches a wait that uses none.
    """
    tracemalloc.start()
    signal.setitimer(signal.ITIMER_PROF, time_bound)
    signal.setitimer(signal.ITIMER_REAL, wall_bound)
    try:
        run(data)
        outcome, detail = "accepted", ""
    except TextnnError as err:
        outcome, detail = "error", str(err)
    except TimeBound as bound:
        outcome, detail = "other", f"over {time_bound if str(bound) == 'CPU' else wall_bound:g} s of {bound} time"
    except RecursionError:
        outcome, detail = "other", "RecursionError"
    except Exception as err:  # noqa: BLE001 - counting every kind is the point
        outcome, detail = "other", f"{type(err).__name__}: {str(err)[:120]}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    if outcome != "other" and peak > memory_bound:
        outcome, detail = "other", f"peak memory {peak / 2 ** 20:.0f} MiB"
    if outcome == "error" and ("\n" in detail or len(detail) > 1000):
        outcome, detail = "other", f"error message of {len(detail)} characters / {detail.count(chr(10)) + 1} lines"
    return outcome, detail


def fuzz(n: int, seed: int = 0, only: list[str] | None = None, time_bound: float = 5.0,
         memory_bound_mib: int = 256, wall_bound: float = 60.0) -> list[dict]:
    """Run `n` inputs through each target; one row per target with counts, time and examples of `other`."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input"
        targets = {**reader_targets(path), **config_targets(path.with_suffix(".yaml")),
                   **command_targets(path.with_suffix(".json")), **output_targets(Path(tmp))}
        devices = can_make_devices(Path(tmp))  # device nodes (mknod) need the right to make them
        seeds = [text.encode("utf-8") for text in SEEDS.values()]
        for name, run in targets.items():
            if only and name not in only:
                continue
            # The seed input once, untimed, so every module the target needs is imported before the alarm
            # can fire: an import cut short by it would leave a half-built module for the inputs after it.
            with contextlib.suppress(Exception):
                run(seed_input(name))
            rng = random.Random(f"{seed}:{name}")
            counts: collections.Counter = collections.Counter()
            examples: dict[str, bytes] = {}
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                if name.startswith("config."):
                    data = config_input(name.split(".", 1)[1], rng)
                elif name == "parallel":
                    data = parallel_input(rng, seeds)
                elif name in COMMAND_TARGETS:
                    data = command_target_input(name, rng, mutate)
                elif name in OUTPUT_TARGETS:
                    data = output_input(rng, devices)
                else:
                    data = mutate(SEEDS[name].encode("utf-8"), rng, seeds)
                outcome, detail = classify(run, data, time_bound, memory_bound_mib * 2 ** 20, wall_bound)
                counts[outcome] += 1
                if outcome == "other":
                    examples.setdefault(detail.split(":")[0], data[:200])
            rows.append({"target": name, "inputs": n, "error": counts["error"], "accepted": counts["accepted"],
                         "other": counts["other"], "seconds": time.perf_counter() - start,
                         "cpu_seconds": time.process_time() - start_cpu, "examples": examples})
    return rows


def format_rows(rows: list[dict]) -> str:
    # seconds: wall-clock time; cpu s: this process's CPU time (what the inputs cost on a shared machine)
    lines = [f"{'target':<17} {'inputs':>7} {'error':>7} {'accepted':>9} {'other':>6} {'seconds':>8} {'cpu s':>7}"]
    for row in rows:
        lines.append(f"{row['target']:<17} {row['inputs']:>7} {row['error']:>7} {row['accepted']:>9} "
                     f"{row['other']:>6} {row['seconds']:>8.1f} {row['cpu_seconds']:>7.1f}")
    for row in rows:
        for kind, data in row["examples"].items():
            lines.append(f"  other in {row['target']}: {kind}  (input starts {data[:80]!r})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="inputs per target (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated targets (default: all)")
    parser.add_argument("--time-bound", type=float, default=5.0,
                        help="seconds of CPU time per input before it counts as a hang (default 5)")
    parser.add_argument("--wall-bound", type=float, default=60.0,
                        help="seconds of wall-clock time per input before it counts as a hang (default 60)")
    parser.add_argument("--memory-bound", type=int, default=256, help="MiB allocated at peak per input")
    args = parser.parse_args(argv)
    rows = fuzz(args.n, args.seed, [t for t in args.only.split(",") if t], args.time_bound, args.memory_bound,
                args.wall_bound)
    print(format_rows(rows))
    return 1 if any(row["other"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
