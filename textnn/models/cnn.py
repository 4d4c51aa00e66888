"""Kim (2014), "Convolutional Neural Networks for Sentence Classification", EMNLP.

§2: word vectors -> convolution filters of several widths with ReLU -> max-over-time pooling of each
feature map -> dropout on the pooled (penultimate) layer -> fully connected softmax layer.
§2.1 regularization: dropout p = 0.5 and a max-norm constraint: after each gradient step every
output-layer weight vector w with ||w||_2 > s is rescaled to ||w||_2 = s (`after_optimizer_step`).
§3.3 variants (`mode`):
  rand          embeddings randomly initialised and trained
  static        pretrained vectors kept fixed
  non-static    pretrained vectors fine-tuned
  multichannel  two channels from the same vectors, one fixed and one fine-tuned; "each filter is
                applied to both channels and the results are added" (§2).
Without pretrained vectors (e.g. when a saved run is rebuilt before its weights are loaded) the
pretrained modes start from random vectors.

A sentence pair is encoded by the same network into u and v (the pooled features) and classified from
[u; v; |u - v|; u * v] (`pooling.pair_features`, Conneau et al. 2017 §3.1) by a separate output layer,
also under dropout and max-norm.
"""

# B batch, T sequence length, D embedding dim, F feature maps per width, W number of widths, C classes

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import opt, check_model_field as _check, is_int as _is_int
from textnn.errors import TextnnError
from textnn.models.base import ModelOutput, TextnnModel
from textnn.modules.conv import MultiWidthConv
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.pooling import pair_features

MODES = ("rand", "static", "non-static", "multichannel")


@dataclass
class KimCNNConfig:
    mode: str = opt("rand", "embedding variant: rand, static, non-static or multichannel (Kim 2014 §3.3)")
    embedding_dim: int = opt(300, "word embedding size D (must match data.vectors when given)")
    filter_widths: list[int] = opt([3, 4, 5], "widths of the convolution filters, in words")
    num_filters: int = opt(100, "feature maps per filter width")
    dropout: float = opt(0.5, "dropout on the pooled features (the penultimate layer), in [0, 1)")
    max_norm: float = opt(3.0, "rescale each output-layer weight row to this L2 norm when above it; 0 = off")

    def __post_init__(self) -> None:
        _check(self.mode in MODES, "mode", self.mode, "one of " + ", ".join(MODES))
        _check(_is_int(self.embedding_dim) and self.embedding_dim >= 1, "embedding_dim", self.embedding_dim,
               "an integer >= 1")
        _check(isinstance(self.filter_widths, (list, tuple)) and len(self.filter_widths) > 0
               and all(_is_int(w) and w >= 1 for w in self.filter_widths), "filter_widths", self.filter_widths,
               "a non-empty list of integers >= 1")
        _check(_is_int(self.num_filters) and self.num_filters >= 1, "num_filters", self.num_filters,
               "an integer >= 1")
        _check(isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0, "dropout", self.dropout,
               "a probability in [0, 1)")
        _check(isinstance(self.max_norm, (int, float)) and self.max_norm >= 0.0, "max_norm", self.max_norm,
               "a number >= 0 (0 turns the constraint off)")


class KimCNN(TextnnModel):
    """Multi-width CNN with max-over-time pooling, dropout and a max-norm-constrained output layer."""

    def __init__(self, cfg: KimCNNConfig, vocab_size: int, num_classes: int, pad_id: int = 0,
                 pretrained: torch.Tensor | None = None) -> None:
        super().__init__()
        if cfg.mode == "rand" and pretrained is not None:
            raise TextnnError("model.mode = 'rand' trains randomly initialised embeddings but pretrained word "
                              "vectors were given; set model.mode to static, non-static or multichannel, "
                              "or remove data.vectors")
        self.cfg = cfg
        # The trained channel (rand, non-static, multichannel) or the only, fixed one (static).
        self.embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id, pretrained,
                                        freeze=cfg.mode == "static")
        self.static_embedding: TokenEmbedding | None = None
        if cfg.mode == "multichannel":
            # The fixed channel starts from the same vectors as the trained one (random ones if none given).
            self.static_embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id,
                                                   self.embedding.weight.detach().clone(), freeze=True)
        self.conv = MultiWidthConv(cfg.embedding_dim, cfg.num_filters, cfg.filter_widths)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(self.conv.output_size, num_classes)
        self.pair_head = nn.Linear(4 * self.conv.output_size, num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)  # [B, T, D]
        if self.static_embedding is not None:
            # Multichannel (§2): each filter sees both channels and the two results are added. A
            # convolution is linear, so w*x1 + w*x2 + b = w*(x1 + x2) + b: one convolution of the summed
            # channels is exactly that, at half the cost; each channel still gets its own gradient path
            # (the static one is frozen).
            x = x + self.static_embedding(ids)  # [B, T, D]
        return self.conv(x, mask)  # [B, W*F]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None) -> ModelOutput:
        u = self.encode(ids, mask)
        if pair_ids is None:
            return ModelOutput(logits=self.head(self.dropout(u)))
        features = pair_features(u, self.encode(pair_ids, pair_mask))  # [B, 4*W*F]
        return ModelOutput(logits=self.pair_head(self.dropout(features)))

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Max-norm constraint (§2.1): rescale every output weight row (one per class) whose L2 norm
        exceeds s back to norm s; rows within the ball are untouched."""
        if self.cfg.max_norm <= 0:
            return
        for head in (self.head, self.pair_head):
            norms = head.weight.norm(dim=1, keepdim=True)  # [C, 1]
            head.weight.mul_(torch.clamp(self.cfg.max_norm / norms.clamp(min=1e-12), max=1.0))


PRESETS: dict[str, dict] = {
    "tiny": {"mode": "rand", "embedding_dim": 8, "filter_widths": [2, 3], "num_filters": 4, "dropout": 0.5,
             "max_norm": 3.0},
    # Kim 2014 §3.1 "Hyperparameters and Training": ReLU, filter windows 3, 4, 5 with 100 feature maps
    # each, dropout 0.5, l2 constraint s = 3 (mini-batches of 50, Adadelta); §3.2: 300-d word2vec
    # vectors. Table 2 reports all four modes; non-static is the single-channel fine-tuned one.
    "paper": {"mode": "non-static", "embedding_dim": 300, "filter_widths": [3, 4, 5], "num_filters": 100,
              "dropout": 0.5, "max_norm": 3.0},
}
