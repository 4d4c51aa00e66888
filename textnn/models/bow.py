"""Neubig's bag-of-words trio: BOW, CBOW and Deep CBOW (CMU CS 11-747 "Neural Networks for NLP",
lecture 2 code: github.com/neubig/nn4nlp-code, 01-intro/{bow,cbow,deep-cbow}.py).

- BOW: each word has a C-dim vector of per-class scores; a sentence's scores are their sum plus a bias.
  A linear model on word counts, i.e. multinomial logistic regression.
- CBOW: each word has a D-dim embedding; their sum goes through one linear layer to the C scores.
- Deep CBOW: the sum of embeddings goes through `num_layers` tanh layers, then the output layer.

Every model encodes a sentence into a vector u (BOW: the C-dim score sum; CBOW: the embedding sum;
Deep CBOW: the last hidden layer) and classifies it. A sentence pair is encoded by the same encoder
into u and v and classified from [u; v; |u - v|; u * v] by a separate output layer
(`pooling.pair_features`, InferSent §3.1). Sums are masked, so padding never changes a result.
"""

# B batch, T sequence length, D embedding dim, H hidden dim, C classes

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import opt, check_model_field as _check
from textnn.errors import TextnnError
from textnn.models.base import ModelOutput, TextnnModel
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.pooling import masked_sum, pair_features


def _positive_int(key: str, value: object) -> None:
    _check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, key, value, "an integer >= 1")


# ------------------------------------------------------------------------------------------------ BOW


@dataclass
class BOWConfig:
    """BOW has no sizes to choose: its only table is vocab x classes."""


class BOW(TextnnModel):
    """Bag of words: logits = sum of the words' per-class score vectors + bias (nn4nlp 01-intro/bow.py)."""

    def __init__(self, cfg: BOWConfig, vocab_size: int, num_classes: int, pad_id: int = 0,
                 pretrained: torch.Tensor | None = None) -> None:
        super().__init__()
        if pretrained is not None:
            raise TextnnError("model bow learns one score per word and class and cannot start from word "
                              "vectors; remove data.vectors or choose cbow, deep_cbow, dan, cnn or rnn")
        self.cfg = cfg
        self.scores = TokenEmbedding(vocab_size, num_classes, pad_id)  # per-word class scores [V, C]
        self.bias = nn.Parameter(torch.zeros(num_classes))
        self.pair_head = nn.Linear(4 * num_classes, num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_sum(self.scores(ids), mask)  # [B, T, C] -> [B, C]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None) -> ModelOutput:
        u = self.encode(ids, mask)
        if pair_ids is None:
            return ModelOutput(logits=u + self.bias)
        return ModelOutput(logits=self.pair_head(pair_features(u, self.encode(pair_ids, pair_mask))))


# ----------------------------------------------------------------------------------------------- CBOW


@dataclass
class CBOWConfig:
    embedding_dim: int = opt(64, "word embedding size D (must match data.vectors when given)")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        _positive_int("embedding_dim", self.embedding_dim)


class CBOW(TextnnModel):
    """Continuous bag of words: logits = W (sum of word embeddings) + b (nn4nlp 01-intro/cbow.py)."""

    def __init__(self, cfg: CBOWConfig, vocab_size: int, num_classes: int, pad_id: int = 0,
                 pretrained: torch.Tensor | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id, pretrained, cfg.freeze_embeddings)
        self.head = nn.Linear(cfg.embedding_dim, num_classes)
        self.pair_head = nn.Linear(4 * cfg.embedding_dim, num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_sum(self.embedding(ids), mask)  # [B, T, D] -> [B, D]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None) -> ModelOutput:
        u = self.encode(ids, mask)
        if pair_ids is None:
            return ModelOutput(logits=self.head(u))
        return ModelOutput(logits=self.pair_head(pair_features(u, self.encode(pair_ids, pair_mask))))


# ------------------------------------------------------------------------------------------ Deep CBOW


@dataclass
class DeepCBOWConfig:
    embedding_dim: int = opt(64, "word embedding size D (must match data.vectors when given)")
    hidden_dim: int = opt(64, "size H of each tanh hidden layer")
    num_layers: int = opt(2, "number of tanh hidden layers between the embedding sum and the output")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        _positive_int("embedding_dim", self.embedding_dim)
        _positive_int("hidden_dim", self.hidden_dim)
        _positive_int("num_layers", self.num_layers)


class DeepCBOW(TextnnModel):
    """Deep CBOW: h = tanh(W_k ... tanh(W_1 (sum of embeddings) + b_1) ... + b_k); logits = W h + b
    (nn4nlp 01-intro/deep-cbow.py). The sentence vector is the last hidden layer."""

    def __init__(self, cfg: DeepCBOWConfig, vocab_size: int, num_classes: int, pad_id: int = 0,
                 pretrained: torch.Tensor | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id, pretrained, cfg.freeze_embeddings)
        sizes = [cfg.embedding_dim] + [cfg.hidden_dim] * cfg.num_layers
        self.hidden = nn.ModuleList(nn.Linear(n_in, n_out) for n_in, n_out in zip(sizes[:-1], sizes[1:]))
        self.head = nn.Linear(cfg.hidden_dim, num_classes)
        self.pair_head = nn.Linear(4 * cfg.hidden_dim, num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = masked_sum(self.embedding(ids), mask)  # [B, T, D] -> [B, D]
        for layer in self.hidden:
            h = torch.tanh(layer(h))  # [B, H]
        return h

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None) -> ModelOutput:
        u = self.encode(ids, mask)
        if pair_ids is None:
            return ModelOutput(logits=self.head(u))
        return ModelOutput(logits=self.pair_head(pair_features(u, self.encode(pair_ids, pair_mask))))


# ------------------------------------------------------------------------------------------- presets

# "paper": the sizes of the lecture code (nn4nlp-code 01-intro/*.py; trained there with Adam, one
# sentence per update, 100 epochs). BOW has no sizes.
BOW_PRESETS: dict[str, dict] = {"tiny": {}, "paper": {}}
CBOW_PRESETS: dict[str, dict] = {
    "tiny": {"embedding_dim": 8},
    "paper": {"embedding_dim": 64},  # cbow.py: EMB_SIZE = 64
}
DEEP_CBOW_PRESETS: dict[str, dict] = {
    "tiny": {"embedding_dim": 8, "hidden_dim": 8, "num_layers": 2},
    "paper": {"embedding_dim": 64, "hidden_dim": 64, "num_layers": 2},  # deep-cbow.py: EMB_SIZE, HID_SIZE, HID_LAY
}
