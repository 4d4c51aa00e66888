"""Tagging data: the `data:` options, reading CoNLL files into sentences (cached), the word forms and
casing categories a tagger reads, an encoded file and its batch."""

# B batch (sentences), T tokens per sentence, C characters per token, P pieces

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from textnn.config import Config, WordVectorData, check_key, opt
from textnn.data.batching import Batch, OnDevice, pad
from textnn.data.cache import cached
from textnn.data.conll import Sentence, read_conll
from textnn.tasks.features import FeatureData, pad_word_inputs

TAG_SCHEMES = ("iob1", "iob2", "bio", "bioes")


@dataclass
class TaggingData(FeatureData):
    format: str = opt("conll", "input format: conll (one token per line, columns, blank line between sentences)")
    token_column: int = opt(0, "conll: 0-based column holding the token")
    tag_column: int = opt(-1, "conll: 0-based column holding the tag; -1 = the last column")
    tag_scheme: str = opt("iob1", "conll: tag scheme of the files: iob1 (CoNLL-2003), iob2 (also called bio) or bioes")
    train_tag_scheme: str = opt("bioes", "scheme the model learns and decodes in; predictions are written back in data.tag_scheme")
    max_length: int = opt(0, "sub-word encoders (bert): pieces per sentence, [CLS] and [SEP] included; 0 = the encoder's limit")
    wordpiece_vocab_size: int = opt(8000, "tokenizer wordpiece without model.init_from: size of the vocabulary trained on data.train")

    TOKENIZATION = (*WordVectorData.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(self.tokenizer in ("word", "whitespace", "wordpiece"), "data.tokenizer", self.tokenizer,
                  "word or whitespace (tagging splits raw prediction input into words), or wordpiece for a "
                  "sub-word encoder (bert)")
        check_key(self.max_length >= 0, "data.max_length", self.max_length, "an integer >= 0")
        for key in ("tag_scheme", "train_tag_scheme"):
            check_key(getattr(self, key) in TAG_SCHEMES, f"data.{key}", getattr(self, key), ", ".join(TAG_SCHEMES))
        check_key(self.token_column >= 0, "data.token_column", self.token_column, "an integer >= 0")
        check_key(self.tag_column >= -1, "data.tag_column", self.tag_column,
                  "an integer >= 0, or -1 for the last column")


CASINGS = ("<pad>", "lower", "UPPER", "Title", "mixed", "numeric", "mostly_numeric", "has_digit",
           "punctuation", "other")
NUM_CASINGS = len(CASINGS)
_CASING_ID = {name: i for i, name in enumerate(CASINGS)}


def casing(token: str) -> int:
    """Casing category id (1 .. NUM_CASINGS - 1) of a token; 0 is reserved for padding.

    numeric: only digits; mostly_numeric: more than half digits ("1996-08-30"); has_digit: some
    digit ("F-16"); punctuation: no letter or digit; lower / UPPER ("U.S.", "A") / Title ("London")
    / mixed ("McDonald", "iPod"); other: anything left (letters without case, e.g. CJK).
    """
    digits = sum(ch.isdigit() for ch in token)
    if digits == len(token):
        name = "numeric"
    elif digits > len(token) / 2:
        name = "mostly_numeric"
    elif digits:
        name = "has_digit"
    elif not any(ch.isalnum() for ch in token):
        name = "punctuation"
    elif token.islower():
        name = "lower"
    elif token.isupper():
        name = "UPPER"
    elif token[0].isupper() and token[1:].islower():
        name = "Title"
    elif any(ch.isupper() for ch in token):
        name = "mixed"
    else:
        name = "other"
    return _CASING_ID[name]


@dataclass
class SubwordInput(OnDevice):
    """A sub-word encoder's view of a batch of sentences."""

    ids: torch.Tensor  # [B, P] [CLS] pieces [SEP]
    mask: torch.Tensor  # [B, P] bool
    first: torch.Tensor  # [B, T] position in ids of each word's first piece (0 at padding)


@dataclass
class TaggingBatch(Batch):
    """One negative log-likelihood per sentence: `count` is the number of sentences (`index`)."""

    words: torch.Tensor  # [B, T] word ids (pad 0)
    chars: torch.Tensor  # [B, T, C] character ids (pad 0)
    casing: torch.Tensor  # [B, T] casing ids (pad 0)
    mask: torch.Tensor  # [B, T] bool, True = real token
    tags: torch.Tensor  # [B, T] tag ids in the training scheme (0 at padding and in unlabelled input)
    index: list[int]  # positions of these sentences in their split
    pieces: SubwordInput | None = None  # sub-word encoders only
    word_inputs: torch.Tensor | None = None  # [B, T, C] a word-level feature encoder's input (ELMo)


@dataclass
class EncodedSentences:
    """One file's sentences as id arrays (what `encode_file` returns and `evaluate` accepts)."""

    sentences: list[Sentence]
    words: list[np.ndarray]  # [T] each
    chars: list[np.ndarray]  # [T, C_i] each, C_i = the sentence's longest (capped) word
    casing: list[np.ndarray]  # [T] each
    tags: list[np.ndarray] | None  # [T] training-scheme tag ids each; None for unlabelled input
    pieces: list[np.ndarray] | None = None  # sub-word encoders: [P] ids of [CLS] pieces [SEP] each
    first: list[np.ndarray] | None = None  # [T] position of each word's first piece in `pieces`
    word_inputs: list[np.ndarray] | None = None  # a word-level feature encoder's input, [T, C] each
    piece_pad_id: int = 0  # the padding id of the sub-word vocabulary `pieces` are ids of
    batches: list[TaggingBatch] | None = None  # evaluation batches, built once

    def lengths(self) -> list[int]:
        return [len(w) for w in self.words]

    def collate(self, index: list[int]) -> TaggingBatch:
        longest = max(len(self.words[i]) for i in index)
        width = max(self.chars[i].shape[1] for i in index)
        words = np.zeros((len(index), longest), dtype=np.int64)  # [B, T]
        chars = np.zeros((len(index), longest, width), dtype=np.int64)  # [B, T, C]
        casings = np.zeros((len(index), longest), dtype=np.int64)  # [B, T]
        tags = np.zeros((len(index), longest), dtype=np.int64)  # [B, T]
        mask = np.zeros((len(index), longest), dtype=bool)  # [B, T]
        for row, i in enumerate(index):
            n, c = self.chars[i].shape
            words[row, :n], chars[row, :n, :c], casings[row, :n] = self.words[i], self.chars[i], self.casing[i]
            mask[row, :n] = True
            if self.tags is not None:
                tags[row, :n] = self.tags[i]
        batch = TaggingBatch(*(torch.from_numpy(a) for a in (words, chars, casings, mask, tags)), index=index)
        if self.pieces is not None:
            ids, piece_mask = pad([self.pieces[i].tolist() for i in index], self.piece_pad_id)
            first = np.zeros((len(index), longest), dtype=np.int64)  # [B, T]
            for row, i in enumerate(index):
                first[row, :len(self.first[i])] = self.first[i]
            batch.pieces = SubwordInput(ids, piece_mask, torch.from_numpy(first))
        if self.word_inputs is not None:
            batch.word_inputs = pad_word_inputs([self.word_inputs[i] for i in index], longest)  # [B, T, C]
        return batch


def read_sentences(config: Config, path: str, require_tags: bool = True) -> list[Sentence]:
    """Sentences of a CoNLL file read with the config's columns and scheme; the parse is cached."""
    data = config.data

    def compute() -> list:
        return [[list(s.tokens), list(s.tags) if s.tags is not None else None, s.document, s.doc_start, s.line]
                for s in read_conll(path, token_column=data.token_column, tag_column=data.tag_column,
                                    scheme=data.tag_scheme, encoding=data.encoding, require_tags=require_tags)]

    settings = {"kind": "conll", "version": 1, "token_column": data.token_column, "tag_column": data.tag_column,
                "scheme": data.tag_scheme, "encoding": data.encoding, "require_tags": require_tags}
    return [Sentence(tuple(tokens), tuple(tags) if tags is not None else None, document, doc_start, str(path), line)
            for tokens, tags, document, doc_start, line in cached(path, settings, compute, enabled=data.cache)]


def extra_inputs(batch: TaggingBatch) -> dict:
    """The sub-word view of a batch (or a word-level feature encoder's input) as keyword arguments of
    the model, only for models that read them."""
    extra = {"pieces": batch.pieces} if batch.pieces is not None else {}
    if batch.word_inputs is not None:
        extra["word_inputs"] = batch.word_inputs
    return extra


def word_form(config: Config, token: str) -> str:
    """The form of a token used for the word lookup (lower-cased when data.lowercase)."""
    return token.lower() if config.data.lowercase else token
