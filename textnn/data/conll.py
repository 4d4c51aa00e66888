"""CoNLL column files for sequence labelling: reading, tag schemes, chunks, scheme conversion, writing.

A CoNLL file holds one token per line as whitespace-separated columns (CoNLL-2003 English:
`WORD POS CHUNK NER`). A blank line ends a sentence (several blank lines in a row are fine) and a
line whose first column is `-DOCSTART-` starts a new document; that line is not a token. The token
and the tag are taken from the columns `token_column` and `tag_column` (-1 = the last column).
Every line must have the same number of columns as the file's first token line.

A `Sentence` is only ever created from at least one token line, so a sentence is never empty: blank
lines and `-DOCSTART-` lines close the sentence in progress only when it holds a token.

Tag schemes (the tag is `O`, or `PREFIX-TYPE` with the type after the first hyphen):
  iob1          CoNLL-2003's own: I- inside a chunk, B- only on the first token of a chunk that
                directly follows a chunk of the same type (Tjong Kim Sang & Veenstra 1999)
  iob2 (= bio)  B- on the first token of every chunk, I- on the others (Ratinov & Roth 2009)
  bioes         B- first, I- inside, E- last token of a multi-token chunk, S- single-token chunk
                (Ratinov & Roth 2009 call it BILOU; Lample et al. 2016, section 2.4, call it IOBES)

Chunks (`spans`) of iob1/iob2 tags follow the rules of the conlleval script of the CoNLL shared
tasks, which reads iob1 and iob2 the same way:
  a chunk starts at a B- tag, and at an I- tag that follows O or a tag of another type (so a stray
  I- tag opens a chunk); a chunk ends before O, before a B- tag, and before a tag of another type.
bioes chunks use the same rules with E- and S- added: S- starts and ends a chunk, E- ends one, and
an I- or E- tag that follows O, E-, S- or another type opens a chunk, just as a stray I- does.
Converting between schemes goes through chunks (`convert_tags`), so any scheme converts to any
other; on tags that are well formed in their scheme the conversion is lossless.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from textnn.errors import TextnnError, short, where

DOCSTART = "-DOCSTART-"
SCHEMES = ("iob1", "iob2", "bio", "bioes")
MAX_WORD_CHARS = 30  # characters per word the character encoders see (longer words are cut)

_PREFIXES = {"iob1": ("B", "I"), "bio": ("B", "I"), "bioes": ("B", "I", "E", "S")}

Span = tuple[str, int, int]  # (type, start, end), end exclusive


@dataclass(frozen=True)
class Sentence:
    """One sentence of a CoNLL file (or one line of raw text).

    tokens: never empty. tags: one tag per token as written in the file, or None when the input
    has no tag column (prediction input). document: 0-based index of the document (a new one at
    every `-DOCSTART-` line). doc_start: True for the first sentence after a `-DOCSTART-` line, so
    a writer can put the marker back. line: 1-based line of the first token, for error messages (None
    where `path` names the place itself: a sentence given to `predict`).
    """

    tokens: tuple[str, ...]
    tags: tuple[str, ...] | None
    document: int = 0
    doc_start: bool = False
    path: str = ""
    line: int | None = 0


# --------------------------------------------------------------------------------------------------
# Tag schemes


def normalise_scheme(scheme: str) -> str:
    """'iob1', 'bio' or 'bioes' for a scheme name ('iob2' and 'bio' are the same scheme)."""
    if scheme not in SCHEMES:
        raise TextnnError(f"unknown tag scheme {scheme!r}; set data.tag_scheme / data.train_tag_scheme "
                          f"to one of {', '.join(SCHEMES)}")
    return "bio" if scheme == "iob2" else scheme


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) of a tag: ('O', '') for O, ('B', 'PER') for B-PER; the type follows the FIRST hyphen.

    Like conlleval, a tag without a hyphen is a prefix with an empty type.
    """
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def tag_problem(tag: str, scheme: str) -> str | None:
    """Why `tag` is not valid in `scheme` (a phrase for an error message), or None when it is valid."""
    scheme = normalise_scheme(scheme)
    allowed = _PREFIXES[scheme]
    if tag == "O":
        return None
    prefix, hyphen, kind = tag.partition("-")
    shape = f"{scheme} tags are O or {'/'.join(allowed)} + '-' + an entity type, e.g. {allowed[0]}-PER"
    if not hyphen:
        return f"it has no prefix and is not O ({shape})"
    if prefix not in allowed:
        if prefix in ("E", "S") and scheme != "bioes":
            return (f"{prefix}- tags belong to the bioes scheme ({shape}); if the file is bioes set "
                    f"data.tag_scheme=bioes")
        return f"prefix {prefix!r} is not one of {', '.join(allowed)} ({shape})"
    if not kind:
        return f"{prefix}- needs an entity type after the hyphen, e.g. {prefix}-PER"
    return None


def tag_set(types: Iterable[str], scheme: str) -> list[str]:
    """Every tag of `scheme` over the given entity types: 'O' first, then each type's prefixes in order.

    'O' comes first so that tag id 0, which models emit at padded positions, is harmless.
    """
    prefixes = _PREFIXES[normalise_scheme(scheme)]
    return ["O"] + [f"{p}-{t}" for t in sorted(set(types)) for p in prefixes]


def _starts(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """Does a chunk start at the current tag? (conlleval's start rules, with bioes's S- and E-.)"""
    if cur in ("B", "S"):
        return True
    if cur in ("I", "E"):
        return prev in ("O", "E", "S") or prev_type != cur_type
    return False


def _ends(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """Does the chunk holding the previous tag end before the current one?"""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I"):
        return cur in ("B", "S", "O") or prev_type != cur_type
    return False


def spans(tags: Sequence[str], scheme: str = "iob2") -> list[Span]:
    """The chunks of a tag sequence as (type, start, end_exclusive), left to right.

    iob1 and iob2 give the chunks conlleval counts (see the module doc); in those schemes E- and S-
    cannot occur in checked tags, so the bioes rules below never fire for them.
    """
    normalise_scheme(scheme)
    found: list[Span] = []
    start, kind = -1, ""
    prev, prev_type = "O", ""
    for i, tag in enumerate(tags):
        cur, cur_type = split_tag(tag)
        if start >= 0 and _ends(prev, prev_type, cur, cur_type):
            found.append((kind, start, i))
            start = -1
        if _starts(prev, prev_type, cur, cur_type):
            start, kind = i, cur_type
        prev, prev_type = cur, cur_type
    if start >= 0:
        found.append((kind, start, len(tags)))
    return found


def tags_from_spans(chunks: Iterable[Span], length: int, scheme: str) -> list[str]:
    """Tags in `scheme` for `length` tokens holding the given non-overlapping chunks (others are O)."""
    scheme = normalise_scheme(scheme)
    tags = ["O"] * length
    last_end, last_type = -1, ""
    for kind, start, end in sorted(chunks, key=lambda c: c[1]):
        if not (0 <= start < end <= length) or start < last_end:
            raise TextnnError(f"chunk ({kind!r}, {start}, {end}) is empty, outside {length} tokens or "
                              f"overlaps another chunk; chunks must be disjoint token ranges")
        if scheme == "iob1":
            # B- only where the chunk touches a previous chunk of the same type.
            first = "B" if (start == last_end and kind == last_type) else "I"
            tags[start:end] = [f"{first}-{kind}"] + [f"I-{kind}"] * (end - start - 1)
        elif scheme == "bio":
            tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
        elif end - start == 1:
            tags[start] = f"S-{kind}"
        else:
            tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 2) + [f"E-{kind}"]
        last_end, last_type = end, kind
    return tags


def convert_tags(tags: Sequence[str], source: str, target: str) -> list[str]:
    """`tags` read as `source` and rewritten in `target` (through their chunks)."""
    return tags_from_spans(spans(tags, source), len(tags), target)


# --------------------------------------------------------------------------------------------------
# Reading


def read_conll(path: str | os.PathLike, *, token_column: int = 0, tag_column: int = -1, scheme: str = "iob1",
               encoding: str = "utf-8", require_tags: bool = True) -> list[Sentence]:
    """Read a CoNLL column file (`.gz` is decompressed) into sentences; see the module doc for the format.

    Raises TextnnError naming path:line for a line with a different column count than the first
    token line, a column index outside the file's columns, a tag not valid in `scheme`, and a file
    that is empty or holds no token line. With `require_tags=False` (prediction input) a file
    without a separate tag column gives sentences whose `tags` is None.
    """
    from textnn.data.readers import read_lines

    path = os.fspath(path)
    return parse_conll(read_lines(path, encoding), path, token_column=token_column, tag_column=tag_column,
                       scheme=scheme, require_tags=require_tags)


def parse_conll(lines: Sequence[str], path: str, *, token_column: int = 0, tag_column: int = -1,
                scheme: str = "iob1", require_tags: bool = True, first: int = 1) -> list[Sentence]:
    """`read_conll` on lines already in memory (standard input); `path` names them in errors, and `first`
    is the number of the first line (a later part of a stream read in parts)."""
    normalise_scheme(scheme)
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    first_line = 0
    document, doc_start = -1, False
    n_columns = 0
    token_index = tag_index = -1
    header_line = 0  # the first token line, which fixes the column count

    def close() -> None:
        nonlocal tokens, tags, doc_start, document
        if tokens:
            document = max(document, 0)
            sentences.append(Sentence(tuple(tokens), tuple(tags) if tag_index >= 0 else None,
                                      document, doc_start, path, first_line))
            doc_start = False
        tokens, tags = [], []

    for number, line in enumerate(lines, start=first):
        fields = line.split()
        if not fields:
            close()
            continue
        if fields[0] == DOCSTART:
            close()
            document += 1
            doc_start = True
            continue
        if not n_columns:
            n_columns, header_line = len(fields), number
            token_index, tag_index = _resolve_columns(path, number, n_columns, token_column, tag_column,
                                                      require_tags)
        elif len(fields) != n_columns:
            raise TextnnError(f"{where(path, number)}: expected {n_columns} whitespace-separated columns (as on "
                              f"line {header_line}, the first token line), found {len(fields)}; fix this "
                              f"line (a token may not contain spaces)")
        if not tokens:
            first_line = number
        tokens.append(fields[token_index])
        if tag_index >= 0:
            tag = fields[tag_index]
            problem = tag_problem(tag, scheme)
            if problem:
                raise TextnnError(f"{where(path, number)}: tag {short(tag, 40)} is not valid: {problem[:200]}; fix the tag "
                                  f"or set data.tag_scheme (now {scheme}) / data.tag_column (now {tag_column})")
            tags.append(tag)
    close()
    if not sentences:
        raise TextnnError(f"{path}: no tokens: the file holds only blank or {DOCSTART} lines; point the "
                          f"data path at a CoNLL file with one token per line")
    return sentences


def _resolve_columns(path: str, line: int, n_columns: int, token_column: int, tag_column: int,
                     require_tags: bool) -> tuple[int, int]:
    """(token index, tag index or -1 when the input has no tag column) for a file of `n_columns` columns."""
    if not 0 <= token_column < n_columns:
        raise TextnnError(f"{where(path, line)}: data.token_column={token_column} is out of range: this "
                          f"line has {n_columns} columns (0-{n_columns - 1}); check data.token_column")
    tag_index = n_columns - 1 if tag_column == -1 else tag_column
    if 0 <= tag_index < n_columns and tag_index != token_column:
        return token_column, tag_index
    if not require_tags:
        return token_column, -1
    if tag_index == token_column:
        raise TextnnError(f"{where(path, line)}: data.tag_column={tag_column} is the token column (the line "
                          f"has {n_columns} column{'s' if n_columns > 1 else ''}); a labelled file needs a "
                          f"separate tag column: add it or set data.tag_column")
    raise TextnnError(f"{where(path, line)}: data.tag_column={tag_column} is out of range: this line has "
                      f"{n_columns} columns (0-{n_columns - 1}); check data.tag_column")


def sentences_from_text(lines: Iterable[str], tokenize, path: str = "<input>", first: int = 1) -> list[Sentence]:
    """Raw text for prediction: one sentence per non-blank line, split into tokens by `tokenize`;
    `first` is the number of the first line."""
    sentences = []
    for number, line in enumerate(lines, start=first):
        tokens = tokenize(line.rstrip("\n"))
        if tokens:
            sentences.append(Sentence(tuple(tokens), None, 0, False, path, number))
    if not sentences:
        raise TextnnError(f"{path}: no text to tag (every line is blank); give one sentence per line")
    return sentences


def looks_like_conll(lines: Sequence[str]) -> bool:
    """The rule `--input-format auto` applies: is this text CoNLL columns rather than one sentence per line?

    CoNLL when the first non-blank line starts with -DOCSTART-, or when every non-blank line has the
    same number (at least 2) of whitespace-separated fields and a blank line separates two of them
    (token-and-tag columns, sentences apart). Anything else is raw text; a tokens-only CoNLL file
    (one column) therefore needs an explicit `--input-format conll`.
    """
    counts = [len(line.split()) for line in lines]
    filled = [i for i, n in enumerate(counts) if n]
    if not filled:
        return False
    if lines[filled[0]].split()[0] == DOCSTART:
        return True
    widths = {counts[i] for i in filled}
    separated = any(counts[i] == 0 for i in range(filled[0], filled[-1]))
    return len(widths) == 1 and widths.pop() >= 2 and separated


# --------------------------------------------------------------------------------------------------
# Writing


def format_conll(sentences: Sequence[Sentence], predicted: Sequence[Sequence[str]]) -> str:
    """CoNLL text with columns `token [gold] predicted`, a blank line after each sentence.

    The gold column is written when the sentences carry tags; a `-DOCSTART-` line (with O in the
    tag columns) goes back before every sentence that followed one in the input.
    """
    if len(sentences) != len(predicted):
        raise TextnnError(f"{len(sentences)} sentences but {len(predicted)} predicted tag sequences")
    out: list[str] = []
    for sentence, tags in zip(sentences, predicted):
        if len(tags) != len(sentence.tokens):
            raise TextnnError(f"{where(sentence.path, sentence.line)}: {len(sentence.tokens)} tokens but "
                              f"{len(tags)} predicted tags")
        gold = sentence.tags
        for value in (*sentence.tokens, *(gold or ())):  # one held in JSON lines may hold any white space
            if value.split() != [value]:
                raise TextnnError(f"{where(sentence.path, sentence.line)}: {short(value, 40)} holds white space, "
                                  f"which would break CoNLL's columns; write it without (or split it into tokens), "
                                  f"or use --output-format jsonl")
        if sentence.doc_start:
            out += [" ".join([DOCSTART] + ["O"] * (2 if gold is not None else 1)), ""]
        for i, (token, tag) in enumerate(zip(sentence.tokens, tags)):
            out.append(f"{token} {gold[i]} {tag}" if gold is not None else f"{token} {tag}")
        out.append("")
    return "\n".join(out) + "\n"


def span_records(tokens: Sequence[str], tags: Sequence[str], scheme: str) -> list[dict]:
    """The chunks of a tagged sentence as JSON-ready dicts {type, start, end (exclusive), text}."""
    return [{"type": kind, "start": start, "end": end, "text": " ".join(tokens[start:end])}
            for kind, start, end in spans(tags, scheme)]
