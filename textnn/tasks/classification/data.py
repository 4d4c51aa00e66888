"""Classification data: the `data:` options, reading a file into records and tokens (cached), an encoded
split and its batch, and the lines `predict` reads out of a table in the run's training format."""

# B batch, T tokens, C characters (feature encoder input)

from __future__ import annotations

import csv
import itertools
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from textnn.config import Config, WordVectorData, check_key, is_int, opt
from textnn.data.batching import Batch, pad
from textnn.data.cache import cached
from textnn.data.readers import Record, Records, class_files, line_list, quoted_rows, read_classification
from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError, where
from textnn.tasks.features import FeatureData, pad_word_inputs
from textnn.tasks.inputs import announce, field, json_records, reads_json_lines


@dataclass
class ClassificationData(FeatureData):
    format: str = opt("tsv", "input format: tsv, csv, jsonl, fasttext, label_text or class_files")
    text_column: str = opt("sentence", "column (name, or 0-based index) holding the text")
    text_pair_column: str = opt("", "column holding the second sentence of a pair; empty for single sentences")
    label_column: str = opt("label", "column (name or 0-based index) holding the label")
    header: bool = opt(True, "tsv/csv: the first line names the columns")
    quoting: bool = opt(False, "tsv/csv: honour \" quoting (GLUE files need it off)")
    delimiter: str = opt("", "tsv/csv field separator; empty means tab for tsv, comma for csv")
    max_length: int = opt(0, "truncate inputs to this many tokens; 0 = no limit (or the encoder's own limit)")
    kfold: int = opt(0, "k-fold cross-validation when there is no dev file: split train into k folds")
    fold: int = opt(0, "which fold (0-based) is held out as dev when kfold > 0")
    train_subset: int = opt(0, "train on this many training examples drawn at random with train.seed (after a k-fold split: from the training folds), for learning curves over the number of labels; 0 = all")
    wordpiece_vocab_size: int = opt(8000, "tokenizer wordpiece: size of the vocabulary trained on data.train")
    extend_vocab: int = opt(0, "with model.init_from (word tokenizers): add the words of data.train seen at least this often that the starting vocabulary lacks, their rows starting at the mean of the starting rows (ULMFiT's fastai code); 0 = keep the starting vocabulary")
    regression: bool = opt(False, "labels are real numbers (STS-B): one output trained with the squared error, scored by Pearson/Spearman")
    # FeatureData's option, its doc narrowed: classification takes only word-level (ELMo) features
    features_from: str = opt("", "an ELMo run whose frozen layers join the word embeddings of a classifier that takes them (rnn, cnn)")

    TOKENIZATION = (*WordVectorData.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(is_int(self.wordpiece_vocab_size) and self.wordpiece_vocab_size >= 8, "data.wordpiece_vocab_size",
                  self.wordpiece_vocab_size, "an integer >= 8")
        check_key(self.tokenizer != "bpe", "data.tokenizer", self.tokenizer, "word, whitespace, char or "
                  "wordpiece (bpe is for language modelling)")
        check_key(self.max_length >= 0, "data.max_length", self.max_length, "an integer >= 0")
        check_key(self.extend_vocab >= 0, "data.extend_vocab", self.extend_vocab, "an integer >= 0 (0 = off)")
        check_key(self.kfold == 0 or self.kfold >= 2, "data.kfold", self.kfold, "0 (off) or >= 2")
        check_key(self.kfold == 0 or 0 <= self.fold < self.kfold, "data.fold", self.fold, f"0 .. {self.kfold - 1}")

    def files(self, path: str) -> list[Path]:
        if self.format == "class_files":
            return class_files(path) if path and os.path.isdir(path) else []
        return super().files(path)


@dataclass
class ClassificationBatch(Batch):
    ids: torch.Tensor  # [B, T] token ids
    mask: torch.Tensor  # [B, T] bool, True = real token
    labels: torch.Tensor  # [B] class ids (real values [B] for regression)
    index: list[int]  # positions of these examples in their split
    pair_ids: torch.Tensor | None = None  # [B, T2] second sentence of a pair
    pair_mask: torch.Tensor | None = None
    segments: torch.Tensor | None = None  # [B, T] segment ids of packed inputs (encoders that read them)
    word_inputs: torch.Tensor | None = None  # [B, T, C] a word-level feature encoder's input (data.features_from)
    pair_word_inputs: torch.Tensor | None = None  # [B, T2, C] the same for the pair's second sentence

    @property
    def num_tokens(self) -> int:
        n = int(self.mask.sum())
        return n + (int(self.pair_mask.sum()) if self.pair_mask is not None else 0)


@dataclass
class EncodedTexts:
    """A split of texts (or text pairs) as ids: an encoded split (tasks/base.py) that batches itself."""

    records: list[Record]
    ids: list[list[int]]
    pair_ids: list[list[int]] | None
    labels: list  # class ids, -1 where unlabelled (prediction input); regression: floats, NaN where unlabelled
    segments: list[list[int]] | None = None  # packed inputs: segment id per token of `ids`
    word_inputs: list[np.ndarray] | None = None  # data.features_from: the feature encoder's input, [T, C] each
    pair_word_inputs: list[np.ndarray] | None = None
    pad_id: int = 0  # the vocabulary's padding id
    regression: bool = False  # labels are real values (float32), not class ids

    def lengths(self) -> list[int]:
        if self.pair_ids is None:
            return [len(s) for s in self.ids]
        return [len(a) + len(b) for a, b in zip(self.ids, self.pair_ids)]

    def collate(self, index: list[int]) -> ClassificationBatch:
        ids, mask = pad([self.ids[i] for i in index], self.pad_id)
        pair_ids = pair_mask = None
        if self.pair_ids is not None:
            pair_ids, pair_mask = pad([self.pair_ids[i] for i in index], self.pad_id)
        segments = pad([self.segments[i] for i in index], 0)[0] if self.segments is not None else None
        labels = torch.tensor([self.labels[i] for i in index], dtype=torch.float32 if self.regression else torch.long)
        batch = ClassificationBatch(ids, mask, labels, index, pair_ids, pair_mask, segments)
        if self.word_inputs is not None:
            batch.word_inputs = pad_word_inputs([self.word_inputs[i] for i in index], ids.size(1))  # [B, T, C]
        if self.pair_word_inputs is not None:
            batch.pair_word_inputs = pad_word_inputs([self.pair_word_inputs[i] for i in index], pair_ids.size(1))
        return batch


def real_label(record: Record) -> float:
    """A regression label as a float, or an error naming the line."""
    try:
        return float(record.label)
    except (TypeError, ValueError):
        raise TextnnError(f"{where(record.path, record.line)}: label {record.label!r} is not a number; "
                          f"data.regression reads real-valued labels (check data.label_column)") from None


def label_order(labels: set[str]) -> list[str]:
    """Numeric labels in numeric order ("0" < "1" < "10"), others alphabetically."""
    if all(label.lstrip("-").isdigit() for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def table_texts(lines: Iterable[str], source: str, data: ClassificationData, header: str | None) -> Iterator[str]:
    """The input lines as `predict` reads them. An input whose first line is the whole header line of the
    run's training table (`header`: tsv/csv with data.header; None: no header is looked for) is such a
    table: each row after it gives its text column(s), as `text` or `text<TAB>pair`, one per row, and it
    says so on stderr, so the header is not classified and the gold label does not end up inside the
    text. Rows are read as the training reader reads them: split at data.delimiter, or with data.quoting
    by standard CSV quoting, where a quoted field may hold the delimiter, a line break or a carriage return.
    JSON lines (tasks/inputs.py) give the text field(s) of each object, the run's column names or `text` /
    `text_pair`. Anything else passes unchanged: its lines are never parsed as a table's."""
    lines = iter(lines)
    first = next(lines, None)
    if first is None:
        return
    text_fields, pair_fields = json_fields(data)
    if reads_json_lines([first], source):
        print(announce(source, text_fields), file=sys.stderr)
        for number, record in json_records(itertools.chain([first], lines), source):
            if record is None:
                yield ""
                continue
            text = field(record, text_fields, source, number).replace("\t", " ")
            pair = field(record, pair_fields, source, number).replace("\t", " ") if pair_fields else ""
            yield text + ("\t" + pair if pair_fields else "")
        return
    # a line ends at a line feed, or in a table (read as `open(newline="")` reads a file) at a bare carriage
    # return too: old Mac files end every line so
    head = _cr_lines([first])
    if header is None or next(head).rstrip("\r\n") != header:
        yield first
        yield from lines
        return
    named = " and ".join(repr(c) for c in (data.text_column, data.text_pair_column) if c)
    print(f"{source}: its first line is the header of the run's training table; predicting on its {named} "
          f"column{'s' if data.text_pair_column else ''}, one output line per row after the header", file=sys.stderr)
    names = [name.strip() for name in next(_table_rows([header], data, source))[1]]
    columns = [_column(data.text_column, names)] + ([_column(data.text_pair_column, names)]
                                                    if data.text_pair_column else [])
    for number, fields in _table_rows(itertools.chain(head, _cr_lines(lines)), data, source, first=2):
        if fields is None:
            yield ""
        elif max(columns) >= len(fields):
            raise TextnnError(f"{source}:{number}: the row has {len(fields)} field(s), fewer than the header's; "
                              f"fix the row")
        else:
            yield "\t".join(fields[i].strip().replace("\t", " ") for i in columns)


def _column(spec: str, names: list[str]) -> int:
    """The index of a column option in the training header (a name, or a 0-based index: training checked it)."""
    return names.index(spec) if spec in names else int(spec)


def _cr_lines(lines: Iterable[str]) -> Iterator[str]:
    """`lines` cut after each carriage return that no line feed follows as well."""
    return (piece for line in lines for piece in re.split(r"(?<=\r)(?!\n)", line) if piece)


def _table_rows(lines: Iterable[str], data: ClassificationData, source: str, first: int = 1
                ) -> Iterator[tuple[int, list[str] | None]]:
    """(number of its first line, fields) of each row of a table in the run's training format; None for a
    blank row, which still gets its output line."""
    delimiter = data.delimiter or ("\t" if data.format == "tsv" else ",")
    if not data.quoting:
        for number, line in enumerate(lines, start=first):
            line = line.rstrip("\r\n")
            yield number, line.split(delimiter) if line.strip() else None
        return
    reader = quoted_rows(lines, delimiter)
    while True:
        number = first + reader.line_num
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TextnnError(f"{source}:{number}: cannot read this row with CSV quoting ({err}); fix its "
                              f"quotes") from None
        yield number, row if any(value.strip() for value in row) else None


def json_fields(data: ClassificationData) -> tuple[list[str], list[str]]:
    """The fields a JSON-lines input gives the text (and, for a pair model, the second text) in: the run's
    column names, then `text` / `text_pair`."""
    named = lambda column, default: list(dict.fromkeys(  # noqa: E731
        ([column] if column and not column.isdigit() else []) + [default]))
    return named(data.text_column, "text"), named(data.text_pair_column, "text_pair") if data.text_pair_column else []


def read_and_tokenize(config: Config, tokenizer: Tokenizer, path: str, require_labels: bool = True
                      ) -> tuple[list[Record], list[tuple[list[str], list[str] | None]]]:
    """A data file's records and their tokens, less the examples that hold nothing to classify.

    Lines with a label but no text (the reader leaves them out) and texts with no tokens are skipped
    and reported in ONE warning per file, naming the first few lines; a file left with no example is
    an error. Input to `predict` does not come through here: a line it cannot read is an error there,
    since every input line is owed an output line.
    """
    records = read_split(config, path, require_labels=require_labels)
    tokens = tokenize_records(config, tokenizer, path, records)
    empty = [i for i, (text, pair) in enumerate(tokens) if not text or pair == []]  # pair: None if single
    if not records.no_text and not empty:
        return records, tokens
    reasons = []
    if records.no_text:
        reasons.append(f"{len(records.no_text)} with a label but no text ({line_list(records.no_text)})")
    if empty:
        lines = [records[i].line for i in empty]
        reasons.append(f"{len(lines)} whose text has no tokens ({line_list(lines)})")
    if len(empty) == len(records):
        raise TextnnError(f"{path}: no example has any text to classify: {', '.join(reasons)}; check "
                          f"data.format and data.text_column")
    print(f"warning: {path}: skipped {len(records.no_text) + len(empty)} of "
          f"{len(records) + len(records.no_text):,} examples: {', '.join(reasons)}; fix or remove those lines "
          f"to use them", file=sys.stderr)
    dropped = set(empty)
    kept = [i for i in range(len(records)) if i not in dropped]
    return Records([records[i] for i in kept], header=records.header), [tokens[i] for i in kept]


def read_split(config: Config, path: str, require_labels: bool = True, fmt: str = "") -> Records:
    data = config.data
    return read_classification(path, fmt or data.format, text_column=data.text_column,
                               text_pair_column=data.text_pair_column, label_column=data.label_column,
                               header=data.header, quoting=data.quoting, delimiter=data.delimiter,
                               encoding=data.encoding, require_labels=require_labels)


def tokenize_records(config: Config, tokenizer: Tokenizer, path: str,
                     records: list[Record]) -> list[tuple[list[str], list[str] | None]]:
    """Tokens of each record's text (and pair text), cached by file content + settings."""
    def compute() -> list:
        return [[tokenizer(r.text), tokenizer(r.text_pair) if r.text_pair is not None else None] for r in records]

    data = config.data
    settings = {"kind": "classification", "tokenizer": tokenizer.to_dict(), "format": data.format,
                "columns": [data.text_column, data.text_pair_column, data.label_column], "header": data.header,
                "quoting": data.quoting, "delimiter": data.delimiter, "n": len(records)}
    return [tuple(item) for item in cached(path, settings, compute, enabled=data.cache)]
