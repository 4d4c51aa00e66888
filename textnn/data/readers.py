"""Readers: turn a labelled (or unlabelled) text file into a list of `Record`s.

This is the first step of the one-way data flow (file -> records -> tokens -> ids -> batches). A
reader only parses; it never tokenizes or lower-cases, so what a record holds is what the file says,
minus the surrounding whitespace of each text.

Every problem a user can cause (missing file, wrong encoding, a ragged line, a misspelled column, an
empty label) raises `TextnnError` with one line that names the file, the 1-based line and the value,
and says what to change. Nothing is skipped silently: blank lines carry no example in any format, and
a line that holds a label but no text (the MPQA and CR files as distributed hold a few; an empty text
cell or JSON string) is passed over and its number kept in `Records.no_text`, for the caller to
report (tasks/classification.py warns once per file).

Formats (`FORMATS`):
  tsv / csv     delimited columns, chosen by header name or 0-based index
  jsonl         one JSON object per line, columns are keys
  fasttext      `__label__pos some text`
  label_text    `pos some text` (label, then a space or tab, then the text)
  class_files   a directory with one `<class>.txt` per class, one example per line
  text          one unlabelled example per line (input to `textnn predict`)

A path ending in `.gz` is decompressed first, for every format.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import gzip
import io
import json
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

import numpy as np

from textnn import limits, progress
from textnn.errors import TextnnError, short, where

FORMATS: tuple[str, ...] = ("tsv", "csv", "jsonl", "fasttext", "label_text", "class_files", "text")

# Formats whose lines hold exactly one text, so a sentence pair cannot be expressed in them.
_SINGLE_TEXT_FORMATS = ("fasttext", "label_text", "class_files")

# Data at least this large takes seconds to read, tokenize or hash: reading or preparing it is a stage
# a person sees (textnn/progress.py: a line when it starts, one when it ends); smaller files pass quietly.
LARGE_DATA_BYTES = 8 * 1024 * 1024

_FASTTEXT_PREFIX = "__label__"


@dataclass(frozen=True)
class Record:
    """One example as read from a file.

    `label` is None only for unlabelled input (prediction). `path` and `line` (1-based; 0 when the
    record did not come from a file; None where `path` names the place itself: an example given to
    `predict`) travel with the record so that errors found later in the pipeline, such as a label
    never seen in training, can still point at the line that caused them.
    """

    text: str
    label: str | None
    text_pair: str | None = None
    path: str = ""
    line: int | None = 0


class Records(list):
    """The `Record`s of a file, in file order, the 1-based numbers of the lines passed over because
    they hold no text (`no_text`), and the header line of a tsv/csv file read with one (`header`, as
    written, without its line ending; None otherwise)."""

    def __init__(self, records: list[Record] = (), no_text: list[int] = (), header: str | None = None):
        super().__init__(records)
        self.no_text = list(no_text)
        self.header = header


# --------------------------------------------------------------------------------------------------
# Public entry points


def read_classification(
    path: str | os.PathLike,
    fmt: str,
    *,
    text_column: str | int = "sentence",
    text_pair_column: str | int = "",
    label_column: str | int = "label",
    header: bool = True,
    quoting: bool = False,
    delimiter: str = "",
    encoding: str = "utf-8",
    require_labels: bool = True,
) -> Records:
    """Read a classification file (or, for `class_files`, a directory) into records.

    Column arguments apply to tsv/csv (a header name, or a 0-based index as an int or a digit
    string) and to jsonl (a key). An empty `text_pair_column` means single-sentence examples.
    `require_labels=False` is for prediction input: a missing label column or an empty label then
    gives `label=None` instead of an error. `delimiter` overrides tab (tsv) / comma (csv) and is
    ignored by the other formats. A line with an empty text (or second text) is no example: it is
    left out and its number kept in the result's `no_text`.
    """
    path = os.fspath(path)
    if fmt not in FORMATS:
        raise TextnnError(
            f"unknown data format {fmt!r}{_did_you_mean(str(fmt), FORMATS)}; "
            f"set data.format to one of: {', '.join(FORMATS)}"
        )
    pair = text_pair_column not in ("", None)
    if pair and fmt in _SINGLE_TEXT_FORMATS:
        raise TextnnError(
            f"{path}: data.format={fmt} holds one text per example, but data.text_pair_column is "
            f"{text_pair_column!r}; for sentence pairs use tsv, csv or jsonl, or clear "
            "data.text_pair_column"
        )
    if fmt == "class_files":
        return Records(_read_class_files(path, encoding))
    with progress.stage(f"read {path}", enabled=is_large(path)) as stage:
        records = _read_records(path, fmt, text_column, text_pair_column, pair, label_column, header, quoting,
                                delimiter, encoding, require_labels)
        stage.summary = f"{len(records):,} examples"
    return records


def is_large(path: str | os.PathLike) -> bool:
    """Whether the file (or the files of the directory) at `path` hold LARGE_DATA_BYTES or more; a pipe or
    a device, whose size is not known before it is read, is not."""
    path = Path(path)
    if path.is_dir():
        return sum(item.stat().st_size for item in path.rglob("*") if item.is_file()) >= LARGE_DATA_BYTES
    return path.is_file() and path.stat().st_size >= LARGE_DATA_BYTES


def _read_records(path: str, fmt: str, text_column: str | int, text_pair_column: str | int, pair: bool,
                  label_column: str | int, header: bool, quoting: bool, delimiter: str, encoding: str,
                  require_labels: bool) -> Records:
    """`read_classification` of one file in a format other than class_files."""
    text = read_text(path, encoding)
    lines = _split_lines(text)
    if fmt in ("tsv", "csv"):
        records = _read_delimited(
            path, text, lines, fmt, text_column, text_pair_column if pair else None, label_column,
            header, quoting, delimiter, require_labels,
        )
    elif fmt == "jsonl":
        records = _read_jsonl(
            path, lines, text_column, text_pair_column if pair else None, label_column,
            require_labels,
        )
    elif fmt == "fasttext":
        records = _read_fasttext(path, lines, require_labels)
    elif fmt == "label_text":
        records = _read_label_text(path, lines)
    else:  # "text"
        records = _read_plain(path, lines, pair)
    if not records:
        raise TextnnError(f"{path}: no examples: {_why_empty(text, fmt, header, records.no_text)}")
    return records


def read_lines(path: str | os.PathLike, encoding: str = "utf-8") -> list[str]:
    """All lines of a text file without their line endings, blank lines included.

    Blank lines are kept because language-model corpora give them meaning (WikiText separates
    paragraphs and headings with them, and its published token counts include one end-of-line per
    line). A trailing newline at the end of the file does not add an empty last line.
    """
    path = os.fspath(path)
    text = read_text(path, encoding)
    if not text:
        raise TextnnError(
            f"{path}: the file is empty; point the data path at a non-empty text file"
        )
    return _split_lines(text)


def kfold_splits(n: int, k: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """`k` (train, test) index splits of `range(n)` for cross-validation.

    The indices are shuffled once with `seed` and cut into `k` folds whose sizes differ by at most
    one; fold i is the test set of split i and the rest is its training set, so every index is
    tested exactly once. Needed for MR, Subj, CR and MPQA, which ship without a split and which
    Kim (2014, Sec. 3) evaluates with 10-fold cross-validation.
    """
    _check_k(n, k)
    order = np.random.default_rng(seed).permutation(n)
    folds = [order[i::k] for i in range(k)]
    return _splits_from_folds(folds)


def stratified_kfold_splits(
    labels: list[str], k: int, seed: int = 0
) -> list[tuple[list[int], list[int]]]:
    """Like `kfold_splits`, but every fold keeps each class's share of the data.

    Each class's indices are shuffled, the classes are laid end to end, and the sequence is dealt
    to the folds round-robin. Dealing a contiguous run of c items round-robin gives every fold
    floor(c/k) or ceil(c/k) of them, so per-class counts differ by at most one between folds, and
    because the deal never restarts, total fold sizes also differ by at most one. With fewer than
    k examples of a class, some folds simply get none of it.
    """
    _check_k(len(labels), k)
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    # Sorted class order keeps the result independent of the order the classes first appear in.
    classes = sorted(by_class, key=str)
    shuffled = [rng.permutation(np.asarray(by_class[c], dtype=np.int64)) for c in classes]
    dealt = np.concatenate(shuffled)
    folds = [dealt[i::k] for i in range(k)]
    return _splits_from_folds(folds)


# --------------------------------------------------------------------------------------------------
# File access and decoding


def missing_file(path: str | os.PathLike) -> TextnnError:
    """The error for a data file that is not there (every reader's, and the cache's before it hashes one)."""
    return TextnnError(f"{path}: file does not exist (looked relative to {os.getcwd()}); check data paths")


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """The whole file as text (decompressed first if its name ends in .gz), with a leading byte-order
    mark removed.

    Reading everything at once and decoding in one call is what makes large files fast (SST-2
    train is 67k lines); on a decoding error the raw bytes are still at hand to say exactly where.
    """
    path = os.fspath(path)
    p = Path(path)
    if not p.exists():
        raise missing_file(path)
    if p.is_dir():
        raise TextnnError(
            f"{path}: is a directory, expected a file; give the file's path (a directory with one "
            ".txt file per class needs data.format=class_files)"
        )
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        raise TextnnError(
            f"{path}: unknown encoding {str(encoding)[:40]!r}; set data.encoding to a Python codec name "
            "such as utf-8, latin-1 or cp1252"
        ) from None
    nul_free = not codec.startswith(("utf-16", "utf-32"))
    try:
        raw = p.read_bytes() if p.is_file() else _read_stream(p, nul_free)
    except OSError as err:
        raise TextnnError(
            f"{path}: cannot read the file ({err.strerror}); check its permissions"
        ) from None
    if path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except _GZIP_ERRORS as err:
            raise _not_gzip(path, err) from None
    if nul_free:
        check_no_nul(raw, path)
    # Decode UTF-8 with or without a BOM as plain UTF-8 so that error offsets are offsets in the
    # file itself; the BOM then arrives as U+FEFF and is dropped below (MRPC's header carries one).
    if codec == "utf-8-sig":
        codec = "utf-8"
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as err:
        raise _decode_error(path, raw, err, encoding) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def _read_stream(path: Path, nul_free: bool, chunk: int = 16 * 1024 * 1024) -> bytes:
    """All bytes of a data source that is not a regular file (a pipe, a device), read in parts: each part is
    checked for NUL bytes as it comes (so `/dev/zero` is refused at once), and a source that never ends is
    refused once it passed the stream limit (textnn/limits.py)."""
    parts, read, line = [], 0, 1
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            if nul_free and not str(path).endswith(".gz"):
                check_no_nul(block, str(path), line)
                line += block.count(b"\n")
            parts.append(block)
            read += len(block)
            limits.check_stream(read, str(path))
    return b"".join(parts)


# What a damaged or not-gzip file raises while it is decompressed (gzip.BadGzipFile is an OSError).
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


def _not_gzip(path: str, err: Exception) -> TextnnError:
    if path == "<stdin>":  # recognised by its first bytes, not by a name
        return TextnnError(f"{path}: not a valid gzip stream ({err}), though it starts as one; check that "
                           "the whole file was sent, or recompress it")
    return TextnnError(f"{path}: not a valid gzip file ({err}); the name ends in .gz, so it must be "
                       "gzip-compressed: recompress it or drop the .gz suffix")


def open_input(path: str | os.PathLike) -> BinaryIO:
    """An input file opened to read its bytes as they are needed (`iter_input_lines`); a name ending in
    .gz is decompressed as it is read, as `read_text` does for a whole file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TextnnError(f"{path}: input file not found; check the path")
    if os.path.isdir(path):
        raise TextnnError(f"{path}: is a directory, expected a file of input lines")
    try:  # a pipe or a device is read as it comes (`<(command)`); an endless line stops at the line limit
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except OSError as err:
        raise TextnnError(f"{path}: cannot read it ({err.strerror}); check its permissions") from None


def open_standard_input(stream: BinaryIO) -> BinaryIO:
    """Standard input's bytes, decompressed as they are read when they start as gzip does (`zcat`-free
    `textnn predict RUN < reviews.txt.gz`): a pipe has no name ending in .gz to say so."""
    if stream.peek(2)[:2] == b"\x1f\x8b":  # gzip's magic number; no text starts with byte 0x1f
        return gzip.GzipFile(fileobj=stream, mode="rb")
    return stream


def check_no_nul(raw: bytes, path: str, first_line: int = 1) -> None:
    """Refuse bytes holding NUL: no text file has one, and UTF-16 text (what Windows tools often save)
    has one in every other byte, which a UTF-8 decoder would silently turn into NUL characters."""
    offset = raw.find(b"\0")
    if offset < 0:
        return
    line = first_line + raw.count(b"\n", 0, offset)
    sample = raw[:2000]
    if sample.count(b"\0") == len(sample):
        raise TextnnError(f"{where(path, line)}: holds nothing but NUL bytes, which no text file has (is it /dev/zero, "
                          f"or binary data?); give a text file")
    if sample[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) or sample.count(b"\0") * 3 >= len(sample):
        raise TextnnError(f"{where(path, line)}: looks like UTF-16 text (a NUL in every other byte); re-encode "
                          f"it as UTF-8 (`iconv -f utf-16 -t utf-8`) or set data.encoding=utf-16")
    raise TextnnError(f"{where(path, line)}: holds a NUL byte (at byte offset {offset}), which no text file "
                      f"has; check that this is the right file, or remove the NUL bytes (`tr -d '\\000'`)")


def iter_input_lines(stream, source: str) -> Iterator[str]:
    """The lines of a binary stream (a file, or standard input), decoded as UTF-8 one at a time.

    Lazy, so `predict` answers the first lines while the rest is still coming. A line that is not
    UTF-8, or holds a NUL byte, is an error naming `source` and the line, as `read_text` gives
    for a data file. A UTF-8 byte-order mark at the start is dropped; line endings are kept.
    """
    for number, raw in enumerate(_checked_gzip(stream, source), start=1):
        limits.check_line(len(raw), where(source, number))
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        check_no_nul(raw, source, number)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise TextnnError(f"{where(source, number)}: not valid UTF-8 text: byte 0x{raw[err.start]:02x} (byte "
                              f"{err.start + 1} of the line); re-encode the input as UTF-8 (e.g. `iconv -f cp1252 "
                              f"-t utf-8`)") from None


def _checked_gzip(stream, source: str) -> Iterator[bytes]:
    """The lines of `stream`; a gzip stream that turns out damaged or not gzip is a TextnnError."""
    def lines():  # each read at most one byte past the line limit: an endless line never fills the memory
        while line := stream.readline(limits.MAX_LINE_BYTES + 1):
            yield line

    if not isinstance(stream, gzip.GzipFile):
        yield from lines()
        return
    try:
        yield from lines()
    except _GZIP_ERRORS as err:
        raise _not_gzip(source, err) from None


def _decode_error(path: str, raw: bytes, err: UnicodeDecodeError, encoding: str) -> TextnnError:
    offset = err.start
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return TextnnError(
        f"{where(path, line)}: not valid {encoding} text: byte 0x{raw[offset]:02x} at byte offset "
        f"{offset} (byte {column} of the line); re-encode the file as UTF-8 (e.g. "
        f"`iconv -f cp1252 -t utf-8`) or set data.encoding to the file's real encoding"
    )


def _split_lines(text: str) -> list[str]:
    """Lines without their endings; `\\n` and `\\r\\n` both end a line.

    `str.splitlines` is not used because it also breaks on characters that occur inside real text
    (form feed, U+2028, U+0085), which would shift every later line number.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    return lines


def _why_empty(text: str, fmt: str, header: bool, no_text: list[int]) -> str:
    if no_text:
        return (f"every line has a label but no text ({line_list(no_text)}); check data.format and the "
                "text column")
    if not text:
        return "the file is empty (0 bytes); point the data path at the right file"
    if fmt in ("tsv", "csv") and header:
        return "the file holds only its header line (data.header=true); add examples below it"
    return "the file holds only blank lines; point the data path at the right file"


# --------------------------------------------------------------------------------------------------
# Delimited files (tsv / csv)


def column_names(names: list[str], shown: int = 8) -> str:
    """The first few header names, each cut short, so a line with no delimiter cannot flood a message."""
    text = ", ".join(short(name, 30) for name in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _delimiter_name(delim: str) -> str:
    return {"\t": "tab", ",": "comma", ";": "semicolon", " ": "space", "|": "pipe"}.get(
        delim, repr(delim)
    )


def _iter_rows(path: str, text: str, lines: list[str], delim: str, quoting: bool):
    """Yield (1-based line number, fields) for every non-blank row.

    With quoting off, a row is its line split at every delimiter: exactly what csv.QUOTE_NONE
    without an escape character does, but with no special case for `"` (GLUE's MRPC and RTE have
    unbalanced quotes inside sentences) and no C-reader complaints about a stray carriage return.
    With quoting on, the csv module applies standard quoting, so a quoted field may hold the
    delimiter or even a newline; such a row is numbered by the line it starts on.
    """
    if not quoting:
        for i, line in enumerate(lines):
            if line and not line.isspace():
                yield i + 1, line.split(delim)
        return
    reader = quoted_rows(io.StringIO(text, newline=""), delim)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TextnnError(
                f"{where(path, start)}: cannot parse this row with CSV quoting ({err}); fix the "
                "quotes on this line, or set data.quoting=false if quotes are plain text"
            ) from None
        if row and not (len(row) == 1 and row[0].strip() == ""):
            yield start, row


def quoted_rows(lines: Iterable[str], delim: str):
    """A `csv.reader` of standard quoting over `lines` (each with its line ending) for data.quoting=true.
    A quoted field may be as long as a line may be (limits.MAX_LINE_BYTES), not only the csv module's
    default of 128 KiB."""
    if csv.field_size_limit() < limits.MAX_LINE_BYTES:
        csv.field_size_limit(limits.MAX_LINE_BYTES)
    return csv.reader(lines, delimiter=delim, quotechar='"', doublequote=True)


def _resolve_column(
    spec: str | int,
    option: str,
    names: list[str] | None,
    n_fields: int,
    path: str,
    first_line: int,
    required: bool,
) -> int | None:
    """The 0-based index a column option points at, or None when it is absent and not required.

    `names` is the header (None when data.header=false). A header name wins over reading the value
    as an index, so a column literally named "3" is still found by name.
    """
    if isinstance(spec, bool):  # bool is an int subclass; `True` is surely a config mistake
        raise TextnnError(
            f"{path}: {option} must be a column name or a 0-based index, got {short(spec)}"
        )
    if isinstance(spec, str) and names is not None and spec in names:
        if names.count(spec) > 1:
            raise TextnnError(
                f"{where(path, first_line)}: the header names column {short(spec)} more than once, so "
                f"{option}={short(spec)} is ambiguous; give its 0-based index instead"
            )
        return names.index(spec)
    if isinstance(spec, int):
        index = spec
    elif isinstance(spec, str) and spec.strip().isascii() and spec.strip().isdigit():
        index = int(spec)
    elif names is None:
        if not required:
            return None
        raise TextnnError(
            f"{path}: data.header=false, so {option} must be a 0-based column index "
            f"(0-{n_fields - 1}), got {short(spec)}; give a number, or set data.header=true if the "
            "first line names the columns"
        )
    else:
        if not required:
            return None
        raise TextnnError(
            f"{where(path, first_line)}: no column {short(spec)} for {option}"
            f"{_did_you_mean(str(spec), names)}; the header's columns are: "
            f"{column_names(names)} (if the first line is data rather than column "
            "names, set data.header=false and give columns by 0-based index)"
        )
    if 0 <= index < n_fields:
        return index
    if index >= n_fields and not required:
        return None
    source = "the header" if names is not None else f"line {first_line}"
    raise TextnnError(
        f"{where(path, first_line)}: {option}={short(spec)} is out of range: {source} has {n_fields} "
        f"fields, so valid indices are 0-{n_fields - 1}; check the column index or data.delimiter"
    )


def _read_delimited(
    path: str,
    text: str,
    lines: list[str],
    fmt: str,
    text_column: str | int,
    pair_column: str | int | None,
    label_column: str | int,
    header: bool,
    quoting: bool,
    delimiter: str,
    require_labels: bool,
) -> Records:
    delim = delimiter or ("\t" if fmt == "tsv" else ",")
    if quoting and len(delim) != 1:
        raise TextnnError(
            f"{path}: data.delimiter must be one character when data.quoting=true, got {delim!r}"
        )
    rows = _iter_rows(path, text, lines, delim, quoting)
    first = next(rows, None)
    if first is None:
        return Records()
    first_line, first_fields = first
    n_fields = len(first_fields)
    names = [name.strip() for name in first_fields] if header else None

    ti = _resolve_column(text_column, "data.text_column", names, n_fields, path, first_line, True)
    pi = None
    if pair_column is not None:
        pi = _resolve_column(
            pair_column, "data.text_pair_column", names, n_fields, path, first_line, True
        )
    li = None
    if label_column not in ("", None):
        li = _resolve_column(
            label_column, "data.label_column", names, n_fields, path, first_line, require_labels
        )
    elif require_labels:
        raise TextnnError(
            f"{path}: data.label_column is empty, but these examples need labels; name the label "
            "column"
        )
    if li is not None and li in (ti, pi):
        raise TextnnError(
            f"{path}: data.label_column={label_column!r} is the same column as the text; "
            "point it at the label column"
        )

    def col_name(index: int) -> str:
        return repr(names[index]) if names is not None else f"{index}"

    count_source = f"header has {n_fields}" if header else f"line {first_line} has {n_fields}"
    stray_hint = (
        f"check for a stray {_delimiter_name(delim)} in the text"
        + ("" if quoting else " or set data.quoting=true")
    )
    records = Records(header=lines[first_line - 1] if header else None)
    append = records.append
    if not header:
        rows = _chain_first(first, rows)
    for line_no, fields in rows:
        if len(fields) != n_fields:
            raise TextnnError(
                f"{where(path, line_no)}: expected {n_fields} {_delimiter_name(delim)}-separated "
                f"fields ({count_source}), found {len(fields)}; {stray_hint}"
            )
        text_value = fields[ti].strip()
        pair_value = fields[pi].strip() if pi is not None else None
        if not text_value or pair_value == "":
            records.no_text.append(line_no)
            continue
        label = None
        if li is not None:
            label = fields[li].strip()
            if not label:
                if require_labels:
                    raise TextnnError(
                        f"{where(path, line_no)}: empty label in column {col_name(li)}; every "
                        "training and evaluation example needs a label"
                    )
                label = None
        append(Record(text_value, label, pair_value, path, line_no))
    return records


def line_list(numbers: list[int], shown: int = 5) -> str:
    """'line 7' or 'lines 3, 9, 12, 20, 31 and 4 more': the first few of a list of line numbers."""
    head = ", ".join(str(n) for n in numbers[:shown])
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line{'s' if len(numbers) > 1 else ''} {head}{more}"


def _chain_first(first, rest):
    yield first
    yield from rest


# --------------------------------------------------------------------------------------------------
# Line-per-example formats


def _read_jsonl(
    path: str,
    lines: list[str],
    text_column: str | int,
    pair_column: str | int | None,
    label_column: str | int,
    require_labels: bool,
) -> Records:
    text_key = str(text_column)
    pair_key = None if pair_column is None else str(pair_column)
    label_key = None if label_column in ("", None) else str(label_column)
    if label_key is None and require_labels:
        raise TextnnError(
            f"{path}: data.label_column is empty, but these examples need labels; name the "
            "label key"
        )
    records = Records()
    for i, line in enumerate(lines):
        if not line or line.isspace():
            continue
        line_no = i + 1
        try:
            obj = parse_json(line, where(path, line_no))
        except json.JSONDecodeError as err:
            raise TextnnError(
                f"{where(path, line_no)}: not valid JSON ({err.msg} at column {err.colno}); "
                f"each line must be one JSON object such as "
                f'{{"{text_key}": "some text", "{label_key or "label"}": "pos"}}'
            ) from None
        if not isinstance(obj, dict):
            raise TextnnError(
                f"{where(path, line_no)}: expected a JSON object, found a JSON "
                f"{type(obj).__name__}; each line must be one object with key {text_key!r}"
            )
        text = _json_text(obj, text_key, "data.text_column", path, line_no)
        pair = None
        if pair_key is not None:
            pair = _json_text(obj, pair_key, "data.text_pair_column", path, line_no)
        if not text or pair == "":
            records.no_text.append(line_no)
            continue
        label = None
        if label_key is not None:
            value = obj.get(label_key)
            if value is None:
                if require_labels:
                    raise _missing_key(obj, label_key, "data.label_column", path, line_no)
            elif isinstance(value, bool):
                label = "true" if value else "false"
            elif isinstance(value, (str, int, float)):
                label = str(value).strip()
                if not label:
                    if require_labels:
                        raise TextnnError(
                            f"{where(path, line_no)}: empty label under key {label_key!r}; every "
                            "training and evaluation example needs a label"
                        )
                    label = None
            else:
                raise TextnnError(
                    f"{where(path, line_no)}: the label under key {label_key!r} is a JSON "
                    f"{type(value).__name__}; it must be a string or a number"
                )
        records.append(Record(text, label, pair, path, line_no))
    return records


def parse_json(text: str, place: str, expected: str = "fix it"):
    """`json.loads(text)`, with the JSON that Python's reader cannot hold refused as one line naming `place`
    (file:line) and ending in `expected`: arrays or objects nested past the recursion limit, and integers
    of more digits than Python turns into numbers. Malformed JSON still raises `json.JSONDecodeError`,
    which each reader words for its own format."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TextnnError(f"{place}: JSON arrays or objects nested too deeply for Python's reader (no real "
                          f"data is); {expected}") from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the one other failure of json.loads on a str: int() past its digit limit
        raise TextnnError(f"{place}: a JSON integer of more than {sys.get_int_max_str_digits():,} digits, which "
                          f"Python does not read as a number; {expected}") from None


def _json_text(obj: dict, key: str, option: str, path: str, line_no: int) -> str:
    if key not in obj:
        raise _missing_key(obj, key, option, path, line_no)
    value = obj[key]
    if not isinstance(value, str):
        raise TextnnError(
            f"{where(path, line_no)}: the value under key {key!r} is a JSON "
            f"{type(value).__name__}; {option} must name a key holding a string"
        )
    return value.strip()


def _missing_key(obj: dict, key: str, option: str, path: str, line_no: int) -> TextnnError:
    keys = [str(k) for k in obj]
    return TextnnError(
        f"{where(path, line_no)}: no key {short(key, 40)} for {option}{_did_you_mean(key, keys)}; "
        f"this line's keys are: {column_names(keys) or '(none)'}"
    )


def _read_fasttext(path: str, lines: list[str], require_labels: bool) -> Records:
    """`__label__a [__label__b ...] text`: the first label is kept.

    fastText itself allows several labels per line (multi-label); textnn's classification is
    single-label, so the first one is the example's class.
    """
    records = Records()
    for i, line in enumerate(lines):
        rest = line.strip()
        if not rest:
            continue
        line_no = i + 1
        labels: list[str] = []
        while rest.startswith(_FASTTEXT_PREFIX):
            # split(None, 1) cuts at the first run of spaces or tabs and drops that run.
            parts = rest.split(None, 1)
            labels.append(parts[0][len(_FASTTEXT_PREFIX):])
            rest = parts[1] if len(parts) == 2 else ""
        label: str | None = None
        if labels:
            label = labels[0]
            if not label:
                if require_labels:
                    raise TextnnError(
                        f"{where(path, line_no)}: empty label: '{_FASTTEXT_PREFIX}' must be "
                        f"followed by the class name, as in '{_FASTTEXT_PREFIX}pos'"
                    )
                label = None
        elif require_labels:
            raise TextnnError(
                f"{where(path, line_no)}: no label: a fastText line starts with "
                f"'{_FASTTEXT_PREFIX}<class>' and then the text, found {line.strip()[:40]!r}; add "
                "the label or choose the matching data.format"
            )
        if not rest:
            records.no_text.append(line_no)
            continue
        records.append(Record(rest, label, None, path, line_no))
    return records


def _read_label_text(path: str, lines: list[str]) -> Records:
    records = Records()
    for i, line in enumerate(lines):
        parts = line.split(None, 1)
        if not parts:
            continue
        text = parts[1].strip() if len(parts) == 2 else ""
        if not text:
            records.no_text.append(i + 1)
            continue
        records.append(Record(text, parts[0], None, path, i + 1))
    return records


def _read_plain(path: str, lines: list[str], pair: bool) -> Records:
    records = Records()
    for i, line in enumerate(lines):
        if not line or line.isspace():
            continue
        if not pair:
            records.append(Record(line.strip(), None, None, path, i + 1))
            continue
        first, tab, second = line.partition("\t")
        first, second = first.strip(), second.strip()
        if not tab or not first or not second:
            raise TextnnError(
                f"{where(path, i + 1)}: expected two texts separated by a tab "
                "(data.text_pair_column is set, so every line is a sentence pair); add the tab or "
                "clear data.text_pair_column"
            )
        records.append(Record(first, None, second, path, i + 1))
    return records


def class_files(directory: str | Path) -> list[Path]:
    """The files data.format=class_files reads in `directory`: its `*.txt` files, one per class, by name;
    nothing else there (a README, a sub-folder) is read."""
    return sorted(f for f in Path(directory).iterdir() if f.suffix.lower() == ".txt" and f.is_file())


def _read_class_files(path: str, encoding: str) -> list[Record]:
    """One class per `*.txt` file in the directory, named after the file's stem."""
    directory = Path(path)
    if not directory.exists():
        raise TextnnError(
            f"{path}: directory does not exist (looked relative to {os.getcwd()}); check data paths"
        )
    if not directory.is_dir():
        raise TextnnError(
            f"{path}: is a file, but data.format=class_files expects a directory holding one "
            ".txt file per class (pos.txt, neg.txt, ...)"
        )
    files = class_files(directory)
    if not files:
        raise TextnnError(
            f"{path}: no .txt files in this directory; data.format=class_files expects one file "
            "per class named after it (pos.txt, neg.txt, ...) with one example per line"
        )
    records: list[Record] = []
    for file in files:
        file_path = str(file)
        label = file.stem
        found = 0
        for i, line in enumerate(_split_lines(read_text(file_path, encoding))):
            text = line.strip()
            if text:
                records.append(Record(text, label, None, file_path, i + 1))
                found += 1
        if not found:
            raise TextnnError(
                f"{file_path}: no examples for class {label!r} (the file is empty or blank); add "
                "one example per line or remove the file"
            )
    return records


# --------------------------------------------------------------------------------------------------
# Cross-validation helpers


def _check_k(n: int, k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TextnnError(f"the number of cross-validation folds must be an integer, got {k!r}")
    if k < 2 or k > n:
        raise TextnnError(
            f"cannot make {k} cross-validation folds of {n} examples; choose k with 2 <= k <= {n}"
            if n >= 2
            else f"cannot cross-validate {n} example(s); k-fold needs at least 2 examples"
        )


def _splits_from_folds(folds: list[np.ndarray]) -> list[tuple[list[int], list[int]]]:
    splits = []
    for i, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != i])
        splits.append((np.sort(train).tolist(), np.sort(test).tolist()))
    return splits


def _did_you_mean(value: str, options) -> str:
    options = [str(o) for o in options]
    if len(value) > 200 or len(options) > 1000:  # no typo; and difflib is quadratic
        return ""
    close = difflib.get_close_matches(value, options, n=1)
    if not close:
        # Case-only differences ("Label" vs "label") score too low for difflib on short names.
        close = [o for o in options if o.lower() == value.lower()][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""
