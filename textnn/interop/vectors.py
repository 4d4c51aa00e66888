"""Pretrained word vectors: read word2vec (text and binary), GloVe and fastText `.vec` files, build an
embedding matrix for a vocabulary, and write word2vec files.

Formats (picked by file name and first line):
- `*.bin`: word2vec binary. A text header "N D\\n", then N entries, each the word's UTF-8 bytes, one
  space, D little-endian float32 values, and usually a "\\n" (the original C tool writes it; some
  writers do not, so it is optional).
- anything else: text, optionally gzipped (`*.gz`). If the first line is two integers it is the
  word2vec / fastText `.vec` header "N D"; otherwise the file is GloVe (no header) and the
  dimension is the number of values on the first line. Each line is "word v1 ... vD",
  space-separated.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from textnn import progress
from textnn.errors import TextnnError, where

# Binary files are read in blocks of this many bytes, not byte by byte.
_BINARY_BLOCK = 1 << 20
# A text file's bytes read so far are counted into the progress bar once every this many lines.
_COUNT_EVERY = 4096


class _RowCollector:
    """Rows of a float32 matrix gathered one at a time into a buffer that doubles when full, so
    reading never holds a Python list of per-word arrays."""

    def __init__(self, dim: int, capacity: int) -> None:
        self.dim = dim
        self.rows = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.count = 0

    def add(self, vector: np.ndarray) -> None:
        if self.count == self.rows.shape[0]:
            grown = np.empty((2 * self.rows.shape[0], self.dim), dtype=np.float32)
            grown[: self.count] = self.rows
            self.rows = grown
        self.rows[self.count] = vector
        self.count += 1

    def matrix(self) -> np.ndarray:
        if self.count == self.rows.shape[0]:
            return self.rows
        return self.rows[: self.count].copy()


def _parse_header(fields: Sequence[str]) -> tuple[int, int] | None:
    """(N, D) if `fields` is a word2vec header of two non-negative integers, else None."""
    if len(fields) != 2:
        return None
    try:
        count, dim = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if count < 0 or dim < 0:
        return None
    return count, dim


def _first_bad_value(values: Sequence[str]) -> str:
    """The first entry of `values` that does not parse as a float."""
    for value in values:
        try:
            float(value)
        except ValueError:
            return value
    return ""


def _not_finite(place: str, word: str, what: str) -> TextnnError:
    """A vector holding nan or inf: it would spread through the embedding matrix (its random rows are
    drawn at the pretrained vectors' scale) and every loss computed from it."""
    return TextnnError(f"{place} for word {word!r} is not a finite number (nan or inf, or beyond float32); "
                       f"fix or remove {what}")


def _capacity_hint(header_count: int | None, wanted: set[str] | None) -> int:
    """Initial number of rows to allocate: exact when the header says how many words follow."""
    hint = header_count if header_count is not None else 4096
    if wanted is not None:
        hint = min(hint, len(wanted))
    return hint


def _read_text(path: Path, wanted: set[str] | None, stage: progress.Stage) -> tuple[list[str], np.ndarray]:
    """word2vec text / fastText .vec / GloVe, plain or gzipped; the file's bytes read (compressed ones for
    a .gz) are counted into `stage`."""
    gzipped = path.name.endswith(".gz")
    words: list[str] = []
    rows: _RowCollector | None = None
    dim: int | None = None
    dim_origin = ""
    header_count: int | None = None
    entries = 0
    line_number = 0
    raw = open(path, "rb")  # kept at hand: its position is what the bar counts
    handle = io.TextIOWrapper(gzip.GzipFile(fileobj=raw) if gzipped else raw, encoding="utf-8")
    counted = 0
    try:
        # A value beyond float32 becomes inf, refused with its line below, without NumPy's warning besides.
        with raw, handle, np.errstate(over="ignore"):
            for line_number, raw_line in enumerate(handle, start=1):
                if line_number % _COUNT_EVERY == 0:
                    stage.update(raw.tell() - counted)
                    counted = raw.tell()
                line = raw_line.rstrip()
                if not line:
                    continue  # blank lines (e.g. a trailing one) carry no entry
                if dim is None:
                    fields = line.split(" ")
                    header = _parse_header(fields)
                    if header is not None:
                        header_count, dim = header
                        if dim == 0:
                            raise TextnnError(
                                f"{where(str(path), line_number)}: header '{line}' gives dimension "
                                "0; expected 'N D' with D > 0"
                            )
                        dim_origin = f"the header on line {line_number}"
                        rows = _RowCollector(dim, _capacity_hint(header_count, wanted))
                        continue
                    if len(fields) < 2:
                        raise TextnnError(
                            f"{where(str(path), line_number)}: first line '{line[:60]}' has "
                            f"{len(fields)} field; expected a header 'N D' or 'word v1 ... vD'"
                        )
                    dim = len(fields) - 1
                    dim_origin = f"line {line_number}"
                    rows = _RowCollector(dim, _capacity_hint(None, wanted))
                word, _, rest = line.partition(" ")
                n_values = rest.count(" ") + 1 if rest else 0
                if n_values != dim:
                    raise TextnnError(
                        f"{where(str(path), line_number)}: word {word!r} has {n_values} values but "
                        f"the vectors have {dim} (from {dim_origin}); fix or remove that line"
                    )
                entries += 1
                if wanted is not None and word not in wanted:
                    continue  # values of unwanted words are never parsed: that is most of the time
                values = rest.split(" ")
                try:
                    vector = np.asarray(values, dtype=np.float32)
                except ValueError:
                    bad = _first_bad_value(values)
                    raise TextnnError(
                        f"{where(str(path), line_number)}: value {bad!r} for word {word!r} is not a "
                        "number; fix or remove that line"
                    ) from None
                if not np.isfinite(vector).all():
                    bad = values[int(np.flatnonzero(~np.isfinite(vector))[0])]
                    raise _not_finite(f"{where(str(path), line_number)}: value {bad!r}", word, "that line")
                words.append(word)
                rows.add(vector)
    except UnicodeDecodeError as err:
        # Text mode decodes in blocks, so the failure can surface a few lines early; find the line.
        raise TextnnError(
            f"{where(str(path), _first_undecodable_line(path, gzipped))}: not valid UTF-8 "
            f"({err.reason}); word-vector text files must be UTF-8 (a word2vec binary file must be "
            "named *.bin)"
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise TextnnError(
            f"{where(str(path), line_number + 1)}: cannot decompress ({err}); the .gz file is "
            "truncated or not gzip, download it again"
        ) from None
    if dim is None:
        raise TextnnError(f"{where(str(path))}: the word-vector file is empty; check the path")
    if header_count is not None and entries != header_count:
        raise TextnnError(
            f"{where(str(path), 1)}: header says {header_count} words but the file has {entries}; "
            "the file is truncated or the header is wrong"
        )
    stage.summary = _read_summary(entries, len(words), dim, wanted)
    return words, rows.matrix()


def _read_summary(entries: int, kept: int, dim: int, wanted: set[str] | None) -> str:
    """The end line of reading a vector file: how many words it holds, and how many were kept."""
    kept_words = f", {kept:,} of them in the vocabulary" if wanted is not None else ""
    return f"{entries:,} words of dimension {dim}{kept_words}"


def _first_undecodable_line(path: Path, gzipped: bool) -> int | None:
    """1-based number of the first line of `path` that is not valid UTF-8 (None if all are)."""
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            try:
                raw_line.decode("utf-8")
            except UnicodeDecodeError:
                return line_number
    return None


def _read_binary(path: Path, wanted: set[str] | None, stage: progress.Stage) -> tuple[list[str], np.ndarray]:
    """word2vec binary (`*.bin`); the bytes read are counted into `stage`."""
    location = where(str(path))
    with open(path, "rb") as handle:
        header_line = handle.readline()
        stage.update(len(header_line))
        if not header_line.strip():
            raise TextnnError(f"{location}: the word-vector file is empty; check the path")
        header = _parse_header(header_line.decode("utf-8", errors="replace").split())
        if header is None or header[1] == 0:
            raise TextnnError(
                f"{where(str(path), 1)}: header {header_line[:60]!r} is not 'N D' with D > 0; is "
                "this really a word2vec binary file? (text files must not be named *.bin)"
            )
        count, dim = header
        record = 4 * dim
        words: list[str] = []
        rows = _RowCollector(dim, _capacity_hint(count, wanted))
        buffer = b""
        position = 0
        at_end = False

        def fill(needed: int) -> bool:
            """Make `needed` bytes available from `position`; False if the file ends first."""
            nonlocal buffer, position, at_end
            while len(buffer) - position < needed and not at_end:
                block = handle.read(max(_BINARY_BLOCK, needed))
                stage.update(len(block))
                at_end = not block
                buffer = buffer[position:] + block
                position = 0
            return len(buffer) - position >= needed

        def truncated(entry: int) -> TextnnError:
            return TextnnError(
                f"{location}: file ends inside entry {entry + 1} of the {count} its header "
                "announces; the file is truncated, download or export it again"
            )

        for entry in range(count):
            # Skip the "\n" that ends the previous vector (written by the C tool, optional).
            while True:
                if not fill(1):
                    raise truncated(entry)
                if buffer[position] != 0x0A:
                    break
                position += 1
            space = buffer.find(b" ", position)
            while space < 0:
                searched = len(buffer) - position
                if not fill(searched + 1):
                    raise truncated(entry)
                space = buffer.find(b" ", position)
            # Some published files hold words cut inside a UTF-8 sequence; replacing the broken
            # bytes keeps the rest of the file usable (such a word simply matches no token).
            word = buffer[position:space].decode("utf-8", errors="replace")
            position = space + 1
            if not fill(record):
                raise truncated(entry)
            if entry == 0 and _looks_like_text(buffer[position : position + record]):
                raise TextnnError(
                    f"{location}: named *.bin but its first vector is text; rename a text "
                    "word2vec file so it does not end in .bin"
                )
            if wanted is None or word in wanted:
                vector = np.frombuffer(buffer, dtype="<f4", count=dim, offset=position)
                if not np.isfinite(vector).all():
                    raise _not_finite(f"{location}: entry {entry + 1}: a value", word, "that entry")
                words.append(word)
                rows.add(vector)
            position += record
    stage.summary = _read_summary(count, len(words), dim, wanted)
    return words, rows.matrix()


def _looks_like_text(data: bytes) -> bool:
    """True if `data` is only the characters of printed numbers (a text file named *.bin)."""
    return bool(data) and not data.translate(None, b"0123456789.-+eE \n")


def read_vectors(
    path: str | Path, wanted: Iterable[str] | None = None
) -> tuple[list[str], np.ndarray]:
    """Read a word-vector file: `(words, vectors)` with vectors float32 [len(words), D].

    Handles word2vec binary (`*.bin`), word2vec text and fastText `.vec` (first line "N D"), and
    GloVe (no header), the text ones optionally gzipped (`*.gz`). With `wanted`, only those words are
    kept (the file is streamed, so a large file costs only the kept rows in memory). Words are
    returned in file order, duplicates included. Raises TextnnError for a missing or empty file, a
    line with the wrong number of values, or a value that is not a number, naming path:line.

    A large file takes seconds to minutes (GloVe 840B is 5 GB): reading it is a stage of its own
    (textnn/progress.py), with a bar over its bytes on a terminal.
    """
    path = Path(path)
    if not path.is_file():
        raise TextnnError(f"{where(str(path))}: word-vector file not found; check the path")
    if wanted is not None and not isinstance(wanted, (set, frozenset)):
        wanted = set(wanted)
    read = _read_binary if path.name.endswith(".bin") else _read_text
    with progress.stage(f"read vectors {path}", unit="B", total=path.stat().st_size, unit_scale=True) as stage:
        return read(path, wanted, stage)


def build_embedding_matrix(
    tokens: list[str],
    path: str | Path,
    seed: int = 0,
    init_range: float | None = None,
    lowercase_fallback: bool = True,
    read: tuple[list[str], np.ndarray] | None = None,
) -> tuple[np.ndarray, dict]:
    """An embedding matrix float32 [len(tokens), D] for a vocabulary, from a word-vector file.

    Row i is the file's vector for tokens[i] (exact match first, then its lower-cased form when
    `lowercase_fallback`; the first occurrence in the file wins). Tokens not in the file get
    U[-a, a] values, as Kim (2014, section 3.1) initialises words missing from word2vec, with a chosen
    so that these random vectors have the same variance as the pretrained ones (a = sqrt(3 var),
    since U[-a, a] has variance a^2 / 3; Kim's 0.25 matched word2vec, GloVe needs about 1.2), or
    a = `init_range` when given. The draws come from `numpy.random.default_rng(seed)` for all rows at once, so a token's
    random row depends only on the seed and its position. If tokens[0] is "<pad>" row 0 is zeros.

    `read`: the file's `read_vectors(path)` when the caller has read it all already (data.vectors_vocab
    took its words), so that it is not read a second time; the same rows are used as when read here.

    Returns (matrix, {"found": n, "total": len(tokens), "coverage": n / total, "dim": D}).
    """
    if init_range is not None and init_range < 0:
        raise TextnnError(f"init_range = {init_range}; pass a non-negative half-width such as 0.25")
    wanted = set(tokens)
    if lowercase_fallback:
        wanted.update(token.lower() for token in tokens)
    if read is None:
        words, vectors = read_vectors(path, wanted)
    else:
        kept = [row for row, word in enumerate(read[0]) if word in wanted]
        words, vectors = [read[0][row] for row in kept], read[1][kept]
    dim = vectors.shape[1]
    row_of: dict[str, int] = {}
    for row, word in enumerate(words):
        row_of.setdefault(word, row)

    if init_range is None:
        init_range = float(np.sqrt(3.0 * vectors.var())) if vectors.size else 0.25
    rng = np.random.default_rng(seed)
    matrix = rng.uniform(-init_range, init_range, size=(len(tokens), dim)).astype(np.float32)
    has_pad = bool(tokens) and tokens[0] == "<pad>"
    found = 0
    for index, token in enumerate(tokens):
        if index == 0 and has_pad:
            continue
        row = row_of.get(token)
        if row is None and lowercase_fallback:
            row = row_of.get(token.lower())
        if row is not None:
            matrix[index] = vectors[row]
            found += 1
    if has_pad:
        # Padding positions should contribute nothing to sums and averages over a sequence.
        matrix[0] = 0.0
    total = len(tokens)
    report = {"found": found, "total": total, "coverage": found / total if total else 0.0, "dim": dim,
              "init_range": init_range}
    return matrix, report


def write_word2vec(
    path: str | Path, words: Sequence[str], matrix: np.ndarray, binary: bool
) -> None:
    """Write vectors in word2vec format: binary (header, then word, space, D little-endian float32,
    newline) or text ("word v1 ... vD" lines after the "N D" header; gzipped if path ends in .gz).
    Text values use 9 significant digits, enough to read back every float32 exactly."""
    path = Path(path)
    vectors = np.asarray(matrix, dtype=np.float32)
    if vectors.ndim != 2:
        raise TextnnError(f"matrix has shape {tuple(vectors.shape)}; pass a 2-D [words, dim] array")
    if len(words) != vectors.shape[0]:
        raise TextnnError(
            f"{len(words)} words but the matrix has {vectors.shape[0]} rows; pass one row per word"
        )
    for index, word in enumerate(words):
        if not word or any(character in word for character in " \t\n\r"):
            raise TextnnError(
                f"words[{index}] = {word!r} is empty or contains whitespace, which the word2vec "
                "format cannot store; rename that token"
            )
    header = f"{vectors.shape[0]} {vectors.shape[1]}\n"
    if binary:
        little_endian = vectors.astype("<f4", copy=False)
        with open(path, "wb") as handle:
            handle.write(header.encode("utf-8"))
            for word, vector in zip(words, little_endian):
                handle.write(word.encode("utf-8") + b" " + vector.tobytes() + b"\n")
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.write(header)
        for word, vector in zip(words, vectors.tolist()):
            handle.write(word + " " + " ".join(f"{value:.9g}" for value in vector) + "\n")
