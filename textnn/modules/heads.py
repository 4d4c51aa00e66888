"""Task heads: what a task puts on top of any encoder (models/base.py).

Each head takes explicit sizes and options (never a config) and maps an encoder's states to the
task's scores. A run holds only the head its task built: a single-sentence classifier has no pair
layer, a language model no classifier.

    ClassifierHead       sentence vector [B, D] -> class scores [B, C]
    PairClassifierHead   two sentence vectors [B, D] x 2 -> [u; v; |u - v|; u * v] -> [B, C]
    RegressionHead       sentence vector [B, D] -> one real value [B]
    TaggerHead           token states [B, T, D] -> tag scores [B, T, K], softmax or linear-chain CRF
    LMHead               token states [B, T, D] -> vocabulary scores [B, T, V], tied or not
    MLMHead              token states [B, T, D] -> vocabulary scores [B, T, V] (BERT's transform + tied output)
    SpanHead             token states [B, T, D] -> start and end scores [B, T] each (extractive QA)
"""

# B batch, T sequence length, D input (state) size, M hidden size, C classes, K tags, V vocabulary

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from textnn.models.base import Head
from textnn.modules.crf import LinearChainCRF, transition_constraints
from textnn.modules.pooling import pair_features

TAGGER_OUTPUTS = ("softmax", "crf")


def _mlp(in_dim: int, hidden: int, out_dim: int, dropout: float) -> nn.Sequential:
    """dropout -> linear, or dropout -> linear -> tanh -> dropout -> linear when hidden > 0 (InferSent's
    MLP classifier with one hidden layer, Conneau et al. 2017 §3.3). The last module is the output layer."""
    output = nn.Linear(hidden or in_dim, out_dim)
    if hidden == 0:
        return nn.Sequential(nn.Dropout(dropout), output)
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(in_dim, hidden), nn.Tanh(), nn.Dropout(dropout), output)


class ClassifierHead(Head):
    """Class scores of a sentence vector: [dropout ->] (linear | MLP) -> [B, C].

    max_norm > 0 keeps every output weight row (one per class) inside an L2 ball of that radius after
    each optimizer step (Kim 2014 §2.1, s = 3).
    """

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 0, dropout: float = 0.0,
                 max_norm: float = 0.0) -> None:
        super().__init__()
        self.net = _mlp(in_dim, hidden, num_classes, dropout)
        self.max_norm = max_norm

    @property
    def output(self) -> nn.Linear:
        """The output layer (one weight row per class): the last module of `net`."""
        return self.net[-1]

    def forward(self, sentence: torch.Tensor) -> torch.Tensor:
        return self.net(sentence)  # [B, D] -> [B, C]

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        if self.max_norm <= 0:
            return
        norms = self.output.weight.norm(dim=1, keepdim=True)  # [C, 1]
        self.output.weight.mul_(torch.clamp(self.max_norm / norms.clamp(min=1e-12), max=1.0))


class PairClassifierHead(ClassifierHead):
    """Class scores of a sentence pair read separately by the same encoder: u, v -> [u; v; |u-v|; u*v]
    -> ClassifierHead (Conneau et al. 2017 §3.1)."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 0, dropout: float = 0.0,
                 max_norm: float = 0.0) -> None:
        super().__init__(4 * in_dim, num_classes, hidden, dropout, max_norm)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.net(pair_features(u, v))  # [B, D] x 2 -> [B, 4D] -> [B, C]


class RegressionHead(Head):
    """One real value per sentence (STS-B similarity): [dropout ->] (linear | MLP) -> [B]."""

    def __init__(self, in_dim: int, hidden: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = _mlp(in_dim, hidden, 1, dropout)

    @property
    def output(self) -> nn.Linear:
        return self.net[-1]

    def forward(self, sentence: torch.Tensor) -> torch.Tensor:
        return self.net(sentence).squeeze(-1)  # [B, D] -> [B, 1] -> [B]


class TaggerHead(Head):
    """Per-token tag scores (emissions) and their likelihood: softmax (each token on its own) or a
    linear-chain CRF (Lample et al. 2016 §2.2; Collobert et al. 2011 §3.4.2's sentence-level likelihood).

    constrained: with a CRF, forbid the transitions the tag scheme never produces (O -> I-PER in BIO),
    read from the tag names, in training and decoding.
    """

    def __init__(self, in_dim: int, tags: list[str], scheme: str, output: str = "crf",
                 constrained: bool = True) -> None:
        super().__init__()
        self.scores = nn.Linear(in_dim, len(tags))
        self.crf: LinearChainCRF | None = None
        if output == "crf":
            self.crf = LinearChainCRF(len(tags), transition_constraints(tags, scheme) if constrained else None)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.scores(states)  # [B, T, D] -> [B, T, K]

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the gold tags per sentence, [B]: the CRF's log Z - score, or the sum
        of the tokens' cross-entropies over real tokens (word-level likelihood, Collobert et al. §3.4.1)."""
        if self.crf is not None:
            return self.crf.nll(emissions, tags, mask)
        flat = F.cross_entropy(emissions.float().flatten(0, 1), tags.masked_fill(~mask, 0).flatten(),
                               reduction="none")  # [B, T, K] -> [B*T]
        return flat.view(mask.shape).masked_fill(~mask, 0.0).sum(dim=1)  # [B*T] -> [B, T] -> [B]

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Best tag ids [B, T] (0 where mask is False): Viterbi with the CRF, else each token's argmax."""
        if self.crf is not None:
            return self.crf.viterbi(emissions, mask)
        return emissions.argmax(dim=-1).masked_fill(~mask, 0)


class LMHead(Head):
    """Next-token scores: a linear map to the vocabulary, its weight shared with the encoder's input
    embedding when `tied` is given (Press & Wolf 2017, "Using the Output Embedding to Improve
    Language Models"; Inan et al. 2017)."""

    def __init__(self, in_dim: int, vocab_size: int, tied: nn.Parameter | None = None, bias: bool = True) -> None:
        super().__init__()
        self.decoder = nn.Linear(in_dim, vocab_size, bias=bias)
        if tied is not None:
            self.decoder.weight = tied  # [V, D]
        if bias:
            nn.init.zeros_(self.decoder.bias)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(states)  # [..., D] -> [..., V]


class MLMHead(Head):
    """Masked-LM scores as BERT computes them (Devlin et al. 2019; the released code's
    `cls/predictions`): dense -> GELU (erf) -> LayerNorm, then the tied output embedding plus a bias."""

    def __init__(self, in_dim: int, vocab_size: int, tied: nn.Parameter | None = None, eps: float = 1e-12) -> None:
        super().__init__()
        self.transform = nn.Linear(in_dim, in_dim)
        self.norm = nn.LayerNorm(in_dim, eps=eps)
        self.decoder = LMHead(in_dim, vocab_size, tied, bias=True)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.transform(states))))  # [B, T, D] -> [B, T, V]


class SpanHead(Head):
    """Answer-span scores (Devlin et al. 2019 §4.2): one linear map to a start and an end score per
    token; positions outside the mask score -inf."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.scores = nn.Linear(in_dim, 2)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.scores(states).masked_fill(~mask.unsqueeze(-1), float("-inf"))  # [B, T, 2]
        start, end = scores.unbind(-1)  # [B, T] each
        return start, end
