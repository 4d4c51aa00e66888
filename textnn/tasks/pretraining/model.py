"""The pre-training model: a BERT-family encoder with the MLM head (tied to the word embeddings) and the
NSP classifier over the sentence vector."""

# B batch, T sequence length, D model dim, V vocabulary size, N predicted positions in the batch

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.models.base import EncoderWithHead, TokenFeatures
from textnn.modules.heads import Head, MLMHead


class PretrainingHead(Head):
    """MLM scores over the vocabulary at the chosen positions, and IsNext/NotNext scores of the pooled vector."""

    def __init__(self, token_size: int, sentence_size: int, vocab_size: int, tied: nn.Parameter | None,
                 eps: float, nsp: bool) -> None:
        super().__init__()
        self.mlm = MLMHead(token_size, vocab_size, tied, eps)
        self.nsp = nn.Linear(sentence_size, 2) if nsp else None

    def describe(self) -> dict:
        return {"kind": "mlm and nsp" if self.nsp is not None else "mlm", "mlm": self.mlm.describe()}


@dataclass
class PretrainingOutput:
    mlm_logits: torch.Tensor  # [N, V] at the predicted positions, in row-major order of the batch
    nsp_logits: torch.Tensor | None  # [B, 2]


class Pretrainer(EncoderWithHead):
    def head_input(self) -> str:
        return "tokens and sentence"  # MLM over the token states, NSP over the sentence vector

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor,
                predict: torch.Tensor) -> PretrainingOutput:
        """ids, mask, segments [B, T]; predict [B, T] bool: the positions whose tokens are predicted."""
        out = self.encoder(ids, mask, features=TokenFeatures(segments=segments))
        # Only the ~15% predicted positions go through the V-wide output layer.
        chosen = out.tokens[predict]  # [B, T, D] -> [N, D]
        nsp = self.head.nsp(out.sentence) if self.head.nsp is not None else None  # [B, D] -> [B, 2]
        return PretrainingOutput(self.head.mlm(chosen), nsp)
