"""Parallel text for translation: sentence pairs from two line-aligned files or one two-column TSV.

    format parallel   PREFIX.SRC and PREFIX.TGT (each may be gzipped: PREFIX.SRC.gz), line i of one
                      the translation of line i of the other (Multi30k, WMT, IWSLT as released)
    format tsv        one file, a source and a target column (named in a header line, or 0-based indices)

Alignment is everything in parallel data, so what would break it is an error naming the files and
the line: files with different numbers of lines, and a pair with text on one side only (a sentence
lost or split in one file shifts every later pair). With `skip_bad` a one-sided pair is skipped and
counted instead; the counts are reported in one warning per file. Pairs empty on both sides (blank
trailing lines) are always skipped and counted.

`detokenize_words` turns word-level tokens back into plain text for BLEU against raw references;
byte-level BPE needs no such rule (its pieces decode to the exact text, `Tokenizer.join`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

from textnn import progress
from textnn.data.readers import column_names, is_large, line_list, read_lines
from textnn.errors import TextnnError, short


@dataclass
class ParallelText:
    """The kept pairs of one split, with where they came from (for messages) and what was skipped."""

    source: list[str]
    target: list[str]
    lines: list[int]  # 1-based line number of each pair in its files
    origin: str  # "train.de + train.en", or the TSV's path
    skipped: dict[str, list[int]] = field(default_factory=dict)  # reason -> line numbers

    def __len__(self) -> int:
        return len(self.source)


def find_side_file(prefix: str, language: str) -> str | None:
    """PREFIX.LANG, or PREFIX.LANG.gz when only that exists; None when neither does."""
    plain = f"{prefix}.{language}"
    return next((path for path in (plain, plain + ".gz") if os.path.isfile(path)), None)


def side_file(prefix: str, language: str) -> str:
    """`find_side_file`, with a clear error when neither file exists."""
    found = find_side_file(prefix, language)
    if found:
        return found
    plain = f"{prefix}.{language}"
    raise TextnnError(f"{plain}: not found (nor {plain}.gz); data.format=parallel reads PREFIX.{language} for "
                      f"the prefix given in the data path: check the path and data.source / data.target")


def read_parallel(path: str, fmt: str, source: str, target: str, encoding: str = "utf-8", header: bool = True,
                  skip_bad: bool = False, warn: bool = True) -> ParallelText:
    """The sentence pairs of `path` (a prefix for `parallel`, a file for `tsv`; see the module docstring).
    Files of LARGE_DATA_BYTES or more are read under a progress stage."""
    if fmt not in ("parallel", "tsv"):
        raise TextnnError(f"unknown parallel data format {fmt!r}; set data.format to parallel or tsv")
    files = (side_file(path, source), side_file(path, target)) if fmt == "parallel" else (path,)
    with progress.stage(f"read {' + '.join(files)}", enabled=any(is_large(file) for file in files)) as stage:
        if fmt == "parallel":
            source_path, target_path = files
            sources, targets = read_lines(source_path, encoding), read_lines(target_path, encoding)
            if len(sources) != len(targets):
                shorter = source_path if len(sources) < len(targets) else target_path
                raise TextnnError(f"{source_path} has {len(sources):,} lines but {target_path} has {len(targets):,} "
                                  f"(the first unmatched line is {shorter}:{min(len(sources), len(targets)) + 1}); "
                                  f"parallel files must be line-aligned")
            names = (source_path, target_path)
            origin = f"{source_path} + {target_path}"
            numbers = list(range(1, len(sources) + 1))
        else:
            sources, targets, numbers = _read_tsv(path, source, target, encoding, header)
            names = (f"{path} (column {source})", f"{path} (column {target})")
            origin = path
        pairs = _check_pairs(sources, targets, numbers, names, origin, skip_bad, warn, fmt)
        stage.summary = f"{len(pairs):,} sentence pairs"
    return pairs


def _read_tsv(path: str, source: str, target: str, encoding: str, header: bool
              ) -> tuple[list[str], list[str], list[int]]:
    lines = read_lines(path, encoding)
    first = 1
    columns: list[str] = []
    if header:
        columns, lines, first = lines[0].split("\t"), lines[1:], 2

    def index(name: str) -> int:
        if name in columns:
            return columns.index(name)
        if name.isdigit():
            return int(name)
        # The header is the file's first line, whatever it holds: shown by its first few names, each cut short.
        known = f"the header names {column_names(columns)}" if columns else "the file has no header (data.header=false)"
        raise TextnnError(f"{path}: no column {short(name, 40)}; {known}: set data.source / data.target to a "
                          f"column name or a 0-based index")

    src, tgt = index(source), index(target)
    sources, targets, numbers = [], [], []
    for number, line in enumerate(lines, start=first):
        if not line.strip():  # a blank line is a pair empty on both sides, counted below
            cells = []
        else:
            cells = line.split("\t")
            if len(cells) <= max(src, tgt):
                raise TextnnError(f"{path}:{number}: {len(cells)} tab-separated column(s), but the source and target "
                                  f"are columns {src} and {tgt}; every line needs both (a tab between them)")
        sources.append(cells[src] if cells else "")
        targets.append(cells[tgt] if cells else "")
        numbers.append(number)
    return sources, targets, numbers


def _check_pairs(sources: list[str], targets: list[str], numbers: list[int], names: tuple[str, str], origin: str,
                 skip_bad: bool, warn: bool, fmt: str) -> ParallelText:
    """Keep the pairs with text on both sides; a one-sided pair is an error unless `skip_bad`."""
    kept = ParallelText([], [], [], origin)
    blank, one_sided = [], []
    for src, tgt, number in zip(sources, targets, numbers):
        has_src, has_tgt = bool(src.strip()), bool(tgt.strip())
        if has_src and has_tgt:
            kept.source.append(src.strip())
            kept.target.append(tgt.strip())
            kept.lines.append(number)
            continue
        if not has_src and not has_tgt:
            blank.append(number)
            continue
        if not skip_bad:
            empty, full = (names[0], names[1]) if not has_src else (names[1], names[0])
            where = f"{empty.split(' (')[0]}:{number}" if fmt == "parallel" else f"{origin}:{number}"
            raise TextnnError(f"{where}: empty {('source' if not has_src else 'target')} side while "
                              f"{full} has text on line {number}; the files are out of step or a translation is "
                              f"missing: fix the line, or set data.skip_bad=true to skip and count such pairs")
        one_sided.append(number)
    if blank:
        kept.skipped["empty on both sides"] = blank
    if one_sided:
        kept.skipped["empty on one side"] = one_sided
    if not kept.source:
        raise TextnnError(f"{origin}: no sentence pair with text on both sides; check the files and data.format")
    if kept.skipped and warn:
        parts = [f"{len(lines)} {reason} ({line_list(lines)})" for reason, lines in kept.skipped.items()]
        print(f"warning: {origin}: skipped {sum(map(len, kept.skipped.values()))} of {len(numbers):,} pairs: "
              f"{'; '.join(parts)}", file=sys.stderr)
    return kept


# No space before closing punctuation, none after an opening bracket or quote-like opener.
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}'’]|n't|'s|'re|'ve|'ll|'d|'m)(?=\s|$)")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")


def detokenize_words(tokens: list[str]) -> str:
    """Plain text from word-level tokens: joined by spaces, then the spaces the word tokenizer made
    around punctuation removed ("a dog ." -> "a dog.", "it 's" -> "it's"), so BLEU on raw references
    does not count tokenization differences as errors."""
    text = " ".join(tokens)
    text = _NO_SPACE_BEFORE.sub(r"\1", text)
    return _NO_SPACE_AFTER.sub(r"\1", text)
