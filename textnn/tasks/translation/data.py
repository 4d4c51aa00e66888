"""Translation data: the `data:` options, the special tokens, an encoded split of sentence pairs and
its batch (reading the files is data/parallel.py)."""

# B batch (sentence pairs), S source length, T target length, V target vocabulary, D decoder state size

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from textnn.config import DataConfig, check_key, opt
from textnn.data.batching import Batch, pad
from textnn.data.parallel import find_side_file
from textnn.data.vocab import PAD, UNK

BOS, EOS = "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)


@dataclass
class TranslationData(DataConfig):
    """Data options of translation: sentence pairs, subwords, batches."""

    format: str = opt("parallel", "parallel (PREFIX.SRC + PREFIX.TGT, line-aligned, .gz ok; the data paths are "
                                  "prefixes) or tsv (one file with a source and a target column)")
    tokenizer: str = opt("bpe", "bpe (byte-level BPE trained on the training pairs; output decodes to plain text), "
                                "word, whitespace or char")
    source: str = opt("de", "parallel: the source files' suffix (PREFIX.de); tsv: the source column (name or 0-based index)")
    target: str = opt("en", "parallel: the target files' suffix (PREFIX.en); tsv: the target column (name or 0-based index)")
    header: bool = opt(True, "tsv: the first line names the columns")
    bpe_vocab_size: int = opt(8000, "tokenizer bpe: pieces in each BPE (the joint one, or each language's)")
    joint_vocab: bool = opt(True, "one tokenizer and vocabulary for both languages (lets a family share its "
                                  "embeddings); false = one per language")
    max_length: int = opt(0, "training: skip (and count) pairs with more tokens than this on a side; evaluation "
                             "and translation cut the source to it; 0 = the family's own limit, or 1,024 without one "
                             "(`textnn explain limits`)")
    skip_bad: bool = opt(False, "skip and count pairs with text on one side only, instead of stopping with an error")
    batch_tokens: int = opt(0, "batches of about this many padded tokens (sorted by length) instead of "
                               "train.batch_size pairs; 0 = by pair count")

    TOKENIZATION = (*DataConfig.TOKENIZATION, "bpe_vocab_size", "joint_vocab")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(self.format in ("parallel", "tsv"), "data.format", self.format, "parallel or tsv")
        check_key(bool(self.source) and bool(self.target) and self.source != self.target, "data.source/target",
                  (self.source, self.target), "two different, non-empty languages or columns")
        check_key(self.bpe_vocab_size >= 2, "data.bpe_vocab_size", self.bpe_vocab_size, "an integer >= 2")
        check_key(self.max_length >= 0, "data.max_length", self.max_length, "an integer >= 0")
        check_key(self.batch_tokens >= 0, "data.batch_tokens", self.batch_tokens, "an integer >= 0 (0 = off)")

    def files(self, path: str) -> list[Path]:
        if self.format == "parallel":  # the data path is a prefix: PREFIX.SRC and PREFIX.TGT are read
            sides = (find_side_file(path, language) for language in (self.source, self.target))
            return [Path(side) for side in sides if path and side]
        return super().files(path)


@dataclass
class TranslationBatch(Batch):
    src_ids: torch.Tensor  # [B, S]
    src_mask: torch.Tensor  # [B, S] bool, True = real token
    tgt_in: torch.Tensor  # [B, T] <s> y1 .. yn (teacher forcing input)
    tgt_out: torch.Tensor  # [B, T] y1 .. yn </s> (what each position predicts)
    tgt_mask: torch.Tensor  # [B, T] bool
    index: list[int]  # positions of the pairs in their split

    @property
    def count(self) -> int:
        """Target tokens: the mean training loss is per target token."""
        return int(self.tgt_mask.sum())

    @property
    def num_tokens(self) -> int:
        return int(self.src_mask.sum()) + self.count


@dataclass
class EncodedPairs:
    """A split as ids: sources end with </s>; targets are <s> ... </s>; `references` the raw target lines."""

    source: list[list[int]]
    target: list[list[int]]
    references: list[str]
    origin: str
    source_pad_id: int = 0
    target_pad_id: int = 0

    def lengths(self) -> list[int]:
        """A pair's length: its source's, or its target's without <s> (what the decoder reads), the longer."""
        return [max(len(s), len(t) - 1) for s, t in zip(self.source, self.target)]

    def collate(self, index: list[int]) -> TranslationBatch:
        src_ids, src_mask = pad([self.source[i] for i in index], self.source_pad_id)
        tgt_in, tgt_mask = pad([self.target[i][:-1] for i in index], self.target_pad_id)  # <s> y1 ... yn
        tgt_out, _ = pad([self.target[i][1:] for i in index], self.target_pad_id)  # y1 ... yn </s>
        return TranslationBatch(src_ids, src_mask, tgt_in, tgt_out, tgt_mask, index)
