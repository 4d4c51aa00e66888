"""Pre-training data: the `data:` options, a split of masking instances and its batch (reading documents
and drawing masks is data/masking.py)."""

# B batch, T sequence length, D model dim, V vocabulary size, N predicted positions in the batch

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import DataConfig, check_key, is_int, opt
from textnn.data.batching import Batch
from textnn.tasks.windows import check_wordpiece_windows

DOCUMENTS = ("blank_lines", "wikitext")


@dataclass
class PretrainingData(DataConfig):
    format: str = opt("text", "text: plain text; documents separated as data.documents says")
    tokenizer: str = opt("wordpiece", "wordpiece (trained on data.train, or that of model.init_from)")
    lowercase: bool = opt(True, "uncased WordPiece: lower-case and strip accents (BERT-uncased)")
    documents: str = opt("blank_lines", "document boundaries: blank_lines, or wikitext (articles start at ' = Title = ' lines)")
    wordpiece_vocab_size: int = opt(8000, "size of the WordPiece vocabulary trained on data.train")
    max_length: int = opt(0, "tokens per sequence, [CLS] and [SEP] included; 0 = 128 (BERT's phase 1), or the encoder's limit when lower")
    mask_rate: float = opt(0.15, "fraction of the positions predicted (Devlin et al. 2019: 0.15)")
    whole_word_masking: bool = opt(False, "choose all the pieces of a word together")
    dynamic_masking: bool = opt(False, "draw new masks every epoch (RoBERTa) instead of once (BERT)")
    nsp: bool = opt(True, "next-sentence prediction on sentence pairs; false = full-sentence packing (RoBERTa)")
    short_seq_rate: float = opt(0.1, "share of sequences packed to a budget drawn uniformly from 2 .. max_length, so pre-training also shows short inputs (the released BERT code's short_seq_prob, 0.1); 0 = every sequence to max_length")
    single_segment_rate: float = opt(0.0, "with data.nsp: share of sequences framed as one segment, [CLS] a [SEP], without an NSP label (the frame single-sentence fine-tuning reads); 0 = pairs only, as BERT")

    TOKENIZATION = (*DataConfig.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_wordpiece_windows(self)
        check_key(self.documents in DOCUMENTS, "data.documents", self.documents, " or ".join(DOCUMENTS))
        check_key(is_int(self.wordpiece_vocab_size) and self.wordpiece_vocab_size >= 8, "data.wordpiece_vocab_size",
                  self.wordpiece_vocab_size, "an integer >= 8")
        check_key(0.0 < self.mask_rate < 1.0, "data.mask_rate", self.mask_rate, "a fraction in (0, 1)")
        check_key(0.0 <= self.short_seq_rate <= 1.0, "data.short_seq_rate", self.short_seq_rate, "a fraction in [0, 1]")
        check_key(0.0 <= self.single_segment_rate < 1.0, "data.single_segment_rate", self.single_segment_rate,
                  "a fraction in [0, 1)")
        check_key(self.nsp or not self.single_segment_rate, "data.single_segment_rate", self.single_segment_rate,
                  "0 with data.nsp=false (every sequence is then a single segment already)")


@dataclass
class PretrainingBatch(Batch):
    ids: torch.Tensor  # [B, T] masked inputs
    mask: torch.Tensor  # [B, T] bool
    segments: torch.Tensor  # [B, T]
    targets: torch.Tensor  # [B, T] original ids at predicted positions, IGNORE elsewhere
    is_next: torch.Tensor  # [B] 1 IsNext, 0 NotNext, -1 no NSP label (a single segment, or data.nsp false)

    @property
    def count(self) -> int:
        """Loss terms: one per sequence (each sequence's loss is its mean MLM loss + its NSP loss)."""
        return int(self.ids.size(0))


@dataclass
class PretrainingSplit:
    instances: list  # data/masking.Instance
    path: str
    masked: list | None = None  # (inputs, targets) per instance, when drawn once

    def lengths(self) -> list[int]:
        return [len(x.ids) for x in self.instances]
