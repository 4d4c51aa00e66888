"""Neubig's bag-of-words trio: BOW, CBOW and Deep CBOW (CMU CS 11-747 "Neural Networks for NLP",
lecture 2 code: github.com/neubig/nn4nlp-code, 01-intro/{bow,cbow,deep-cbow}.py).

- BOW: each word has a C-dim vector of per-class scores; a sentence's scores are their sum plus a bias.
  A linear model on word counts, i.e. multinomial logistic regression. As an encoder: the sentence
  vector is the word-count vector [B, V]; the classification head's linear layer IS the table of
  per-word class scores (its weight [C, V]) and the bias.
- CBOW: each word has a D-dim embedding; the sentence vector is their sum (the head: one linear layer).
- Deep CBOW: the sum of embeddings goes through `num_layers` tanh layers; the last is the sentence vector.

Sums are masked, so padding never changes a result.
"""

# B batch, T sequence length, V vocabulary, D embedding dim, H hidden dim

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, opt
from textnn.errors import TextnnError
from textnn.models.base import Encoder, EncoderOutput, InputSpec, TokenFeatures, require_ints
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.pooling import masked_sum


# ------------------------------------------------------------------------------------------------ BOW


@dataclass
class BOWConfig(ModelOptions):
    """BOW has no sizes to choose: its only table (in the head) is vocab x classes."""


class BOW(Encoder):
    """Bag of words: the sentence vector is its word counts (nn4nlp 01-intro/bow.py with the score table
    in the head). Padding is not counted; every other id, <unk> included, is."""

    config_class = BOWConfig
    presets = {"tiny": Preset(BOWConfig()), "paper": Preset(BOWConfig())}
    gives_sentence = True

    def __init__(self, cfg: BOWConfig, spec: InputSpec) -> None:
        super().__init__()
        if spec.pretrained is not None:
            raise TextnnError("model bow learns one score per word and class and cannot start from word "
                              "vectors; remove data.vectors or choose cbow, deep_cbow, dan, cnn or rnn")
        self.cfg = cfg
        self.vocab_size = spec.vocab_size
        self.sentence_size = spec.vocab_size

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        counts = torch.zeros(ids.size(0), self.vocab_size, device=ids.device)  # [B, V]
        counts.scatter_add_(1, ids, mask.float())  # each real token adds 1 to its word's count
        return EncoderOutput(sentence=counts)


# ----------------------------------------------------------------------------------------------- CBOW


@dataclass
class CBOWConfig(ModelOptions):
    embedding_dim: int = opt(64, "word embedding size D (must match data.vectors when given)")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        require_ints(self, "embedding_dim")


class CBOW(Encoder):
    """Continuous bag of words: the sentence vector is the sum of its word embeddings (nn4nlp
    01-intro/cbow.py; the head's linear layer gives the class scores)."""

    config_class = CBOWConfig
    presets = {"tiny": Preset(CBOWConfig(embedding_dim=8)),
               "paper": Preset(CBOWConfig(embedding_dim=64))}  # cbow.py: EMB_SIZE = 64
    gives_sentence = True
    uses_vectors = True

    def __init__(self, cfg: CBOWConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id, spec.pretrained,
                                        cfg.freeze_embeddings)
        self.sentence_size = cfg.embedding_dim

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        return EncoderOutput(sentence=masked_sum(self.embedding(ids), mask))  # [B, T, D] -> [B, D]


# ------------------------------------------------------------------------------------------ Deep CBOW


@dataclass
class DeepCBOWConfig(ModelOptions):
    embedding_dim: int = opt(64, "word embedding size D (must match data.vectors when given)")
    hidden_dim: int = opt(64, "size H of each tanh hidden layer")
    num_layers: int = opt(2, "number of tanh hidden layers between the embedding sum and the output")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        require_ints(self, "embedding_dim", "hidden_dim", "num_layers")


class DeepCBOW(Encoder):
    """Deep CBOW: h = tanh(W_k ... tanh(W_1 (sum of embeddings) + b_1) ... + b_k), the sentence vector
    (nn4nlp 01-intro/deep-cbow.py)."""

    config_class = DeepCBOWConfig
    presets = {"tiny": Preset(DeepCBOWConfig(embedding_dim=8, hidden_dim=8, num_layers=2)),
               # deep-cbow.py: EMB_SIZE, HID_SIZE, HID_LAY
               "paper": Preset(DeepCBOWConfig(embedding_dim=64, hidden_dim=64, num_layers=2))}
    gives_sentence = True
    uses_vectors = True

    def __init__(self, cfg: DeepCBOWConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id, spec.pretrained,
                                        cfg.freeze_embeddings)
        sizes = [cfg.embedding_dim] + [cfg.hidden_dim] * cfg.num_layers
        self.hidden = nn.ModuleList(nn.Linear(n_in, n_out) for n_in, n_out in zip(sizes[:-1], sizes[1:]))
        self.sentence_size = cfg.hidden_dim

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        h = masked_sum(self.embedding(ids), mask)  # [B, T, D] -> [B, D]
        for layer in self.hidden:
            h = torch.tanh(layer(h))  # [B, H]
        return EncoderOutput(sentence=h)

    def layer_groups(self):
        return [("embedding", [self.embedding]), *((f"hidden{i}", [layer]) for i, layer in enumerate(self.hidden))]
