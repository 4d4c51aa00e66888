"""Classification data: the `data:` options, reading a file into records and tokens (cached), an encoded
split and its batch."""

# B batch, T tokens, C characters (feature encoder input)

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textnn.config import Config, TableData, WordVectorData, check_key, is_int, opt
from textnn.data.batching import Batch, pad
from textnn.data.cache import cached
from textnn.data.readers import Record, Records, class_files, line_list, read_classification
from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError, where
from textnn.tasks.features import FeatureData, pad_word_inputs


@dataclass
class ClassificationData(TableData, FeatureData):
    format: str = opt("tsv", "input format: tsv, csv, jsonl, fasttext, label_text or class_files")
    text_column: str = opt("sentence", "column (name, or 0-based index) holding the text")
    text_pair_column: str = opt("", "column holding the second sentence of a pair; empty for single sentences")
    label_column: str = opt("label", "column (name or 0-based index) holding the label")
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
