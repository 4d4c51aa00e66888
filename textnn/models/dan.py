"""Deep Averaging Network (Iyyer, Manjunatha, Boyd-Graber and Daumé III, 2015, "Deep Unordered
Composition Rivals Syntactic Methods for Text Classification", ACL).

§3: average the word embeddings of a sentence, pass the average through k feed-forward layers, and
classify the last one with a softmax layer. §3.1 word dropout: during training each token is dropped
before averaging (see `masking.word_dropout_mask`), which the paper finds more useful than dropout
on hidden units. With k = 0 the model is the neural bag of words (NBOW) baseline of §4.

A sentence pair is encoded by the same network (average + layers) into u and v and classified from
[u; v; |u - v|; u * v] (`pooling.pair_features`, Conneau et al. 2017 §3.1) by a separate output layer.
"""

# B batch, T sequence length, D embedding dim, H hidden dim, C classes

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import opt, check_model_field as _check, is_int as _is_int
from textnn.models.base import ModelOutput, TextnnModel
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.masking import word_dropout_mask
from textnn.modules.pooling import masked_mean, pair_features

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


@dataclass
class DANConfig:
    embedding_dim: int = opt(300, "word embedding size D (must match data.vectors when given)")
    hidden_dim: int = opt(300, "size H of each feed-forward layer")
    num_layers: int = opt(3, "feed-forward layers k on the average (0 = NBOW: classify the average)")
    word_dropout: float = opt(0.3, "probability of dropping each input token during training, in [0, 1)")
    activation: str = opt("relu", "nonlinearity of the feed-forward layers: relu or tanh")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        _check(_is_int(self.embedding_dim) and self.embedding_dim >= 1, "embedding_dim", self.embedding_dim,
               "an integer >= 1")
        _check(_is_int(self.hidden_dim) and self.hidden_dim >= 1, "hidden_dim", self.hidden_dim, "an integer >= 1")
        _check(_is_int(self.num_layers) and self.num_layers >= 0, "num_layers", self.num_layers, "an integer >= 0")
        _check(isinstance(self.word_dropout, (int, float)) and 0.0 <= self.word_dropout < 1.0, "word_dropout",
               self.word_dropout, "a probability in [0, 1)")
        _check(self.activation in ACTIVATIONS, "activation", self.activation, "one of " + ", ".join(ACTIVATIONS))


class DAN(TextnnModel):
    """Average of (word-dropped) embeddings -> k layers (`activation`) -> linear output (softmax in the loss)."""

    def __init__(self, cfg: DANConfig, vocab_size: int, num_classes: int, pad_id: int = 0,
                 pretrained: torch.Tensor | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id, pretrained, cfg.freeze_embeddings)
        sizes = [cfg.embedding_dim] + [cfg.hidden_dim] * cfg.num_layers
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(n_in, n_out), ACTIVATIONS[cfg.activation]()]
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(sizes[-1], num_classes)
        self.pair_head = nn.Linear(4 * sizes[-1], num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.training:
            mask = word_dropout_mask(mask, self.cfg.word_dropout)  # §3.1; off in eval
        avg = masked_mean(self.embedding(ids), mask)  # [B, T, D] -> [B, D]
        return self.layers(avg)  # [B, H] (or [B, D] when num_layers = 0)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None) -> ModelOutput:
        u = self.encode(ids, mask)
        if pair_ids is None:
            return ModelOutput(logits=self.head(u))
        return ModelOutput(logits=self.pair_head(pair_features(u, self.encode(pair_ids, pair_mask))))


PRESETS: dict[str, dict] = {
    "tiny": {"embedding_dim": 8, "hidden_dim": 8, "num_layers": 2, "word_dropout": 0.3},
    # Iyyer et al. 2015 §4 (sentiment experiments: RT, SST, IMDB): 300-d GloVe embeddings fine-tuned,
    # three 300-d ReLU layers, word-dropout rate 0.3 (the best rate in their dropout study, §5);
    # the same values are the defaults of the authors' code (github.com/miyyer/dan, dan_sentiment.py:
    # -d 300 -dh 300 -deep 3 -drop 0.3, f=relu; trained with AdaGrad lr 0.005, L2 1e-4).
    "paper": {"embedding_dim": 300, "hidden_dim": 300, "num_layers": 3, "word_dropout": 0.3,
              "activation": "relu", "freeze_embeddings": False},
}
