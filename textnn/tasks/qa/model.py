"""The QA model: an encoder that reads [CLS] question [SEP] context [SEP] with a span head giving start
and end scores per position."""

# B batch (windows), T window length

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.models.base import EncoderWithHead, TokenFeatures


@dataclass
class SpanOutput:
    start: torch.Tensor  # [B, T] start scores, -inf at padding
    end: torch.Tensor  # [B, T]


class SpanModel(EncoderWithHead):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> SpanOutput:
        tokens = self.encoder(ids, mask, features=TokenFeatures(segments=segments)).tokens  # [B, T, D]
        start, end = self.head(tokens, mask)
        return SpanOutput(start.float(), end.float())
