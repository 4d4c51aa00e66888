"""Task heads: what a task puts on top of any encoder (models/base.py), all subclasses of `Head`.

Each head takes explicit sizes and options (never a config) and maps an encoder's states to the
task's scores. A run holds only the head its task built: a single-sentence classifier has no pair
layer, a language model no classifier. Each head says what it is, `describe()`: its kind and sizes as
plain JSON, which a run keeps (run.json `model`) and export reads to choose its Hugging Face class.

    SentenceHead         the base of the three below: the layers from a sentence vector to its outputs
    ClassifierHead       sentence vector [B, D] -> class scores [B, C] (linear, an MLP, or ULMFiT's
                         batch-normed blocks)
    PairClassifierHead   two sentence vectors [B, D] x 2 -> [u; v; |u - v|; u * v] -> [B, C]
    RegressionHead       sentence vector [B, D] -> one real value [B]
    TaggerHead           token states [B, T, D] -> tag scores [B, T, K], softmax or linear-chain CRF
    LMHead               token states [B, T, D] -> vocabulary scores [B, T, V], tied or not
    AdaptiveLMHead       token states [B, T, D] -> log-probabilities [B, T, V] by frequency clusters
                         (Grave et al. 2017); its `nll` never scores the whole vocabulary
    MLMHead              token states [B, T, D] -> vocabulary scores [B, T, V] (BERT's transform + tied output)
    SpanHead             token states [B, T, D] -> start and end scores [B, T] each (extractive QA)
"""

# B batch, T sequence length, D input (state) size, M hidden size, C classes, K tags, V vocabulary

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from textnn.modules.crf import LinearChainCRF, transition_constraints
from textnn.modules.dropout import Dropout
from textnn.modules.pooling import pair_features

TAGGER_OUTPUTS = ("softmax", "crf")
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class Head(nn.Module):
    """Base class of the task heads below: what a task puts on an encoder (models/base.py `EncoderWithHead`)."""

    def describe(self) -> dict:
        """What this head is, as plain JSON: {"kind": ..., and its sizes}. Every head declares its own."""
        raise NotImplementedError(f"{type(self).__name__} does not describe itself")

    def after_optimizer_step(self) -> None:
        """Apply parameter constraints after each optimizer step (e.g. Kim 2014's max-norm). No-op by default."""


class BatchNorm(nn.BatchNorm1d):
    """Batch normalisation over sentence vectors [B, D] (Ioffe & Szegedy 2015). A training batch of one
    example has no batch statistics to normalise with (its variance is undefined): it is normalised
    with the running ones, as in evaluation, and leaves them as they are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.size(0) == 1:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False,
                                eps=self.eps)
        return super().forward(x)


def _net_kind(hidden: int, batch_norm: bool) -> str:
    """The shape of `_mlp`'s layers in a word: "linear" (one linear map after dropout), "batch-normed
    linear", or "mlp" (a hidden layer)."""
    return "mlp" if hidden else "batch-normed linear" if batch_norm else "linear"


def _mlp(in_dim: int, hidden: int, out_dim: int, dropout: float, hidden_dropout: float | None = None,
         activation: str = "tanh", batch_norm: bool = False) -> nn.Sequential:
    """The layers from a sentence vector to the outputs; the last module is the output layer.

    hidden = 0: dropout -> linear. hidden > 0: dropout -> linear -> activation -> dropout (hidden_dropout,
    or `dropout` when None) -> linear (InferSent's MLP classifier with one tanh hidden layer, Conneau
    et al. 2017 §3.3). batch_norm puts a batch norm before each dropout: with hidden > 0 and ReLU, the
    two linear blocks of ULMFiT's classifier (Howard & Ruder 2018 §3.3: batch norm, dropout, linear,
    ReLU, then batch norm, dropout, linear).
    """
    def block(size: int, p: float) -> list[nn.Module]:
        return [BatchNorm(size), Dropout(p)] if batch_norm else [Dropout(p)]

    output = nn.Linear(hidden or in_dim, out_dim)
    if hidden == 0:
        return nn.Sequential(*block(in_dim, dropout), output)
    second = dropout if hidden_dropout is None else hidden_dropout
    return nn.Sequential(*block(in_dim, dropout), nn.Linear(in_dim, hidden), ACTIVATIONS[activation](),
                         *block(hidden, second), output)


class SentenceHead(Head):
    """A head over a sentence vector: `_mlp`'s layers (`net`), the last of them the output layer. Its kind
    is the shape of those layers and what it gives (`gives`)."""

    gives: ClassVar[str]  # "classifier", "pair classifier", "regression"

    def __init__(self, in_dim: int, out_dim: int, hidden: int, dropout: float, hidden_dropout: float | None,
                 activation: str, batch_norm: bool, sizes: dict) -> None:
        super().__init__()
        self.net = _mlp(in_dim, hidden, out_dim, dropout, hidden_dropout, activation, batch_norm)
        self.sizes = {**sizes, "hidden": hidden, "batch_norm": batch_norm}

    @property
    def output(self) -> nn.Linear:
        """The output layer (one weight row per output): the last module of `net`."""
        return self.net[-1]

    def describe(self) -> dict:
        return {"kind": f"{_net_kind(self.sizes['hidden'], self.sizes['batch_norm'])} {self.gives}", **self.sizes}


class ClassifierHead(SentenceHead):
    """Class scores of a sentence vector: [batch norm ->] dropout -> (linear | MLP) -> [B, C] (see `_mlp`).

    max_norm > 0 keeps every output weight row (one per class) inside an L2 ball of that radius after
    each optimizer step (Kim 2014 §2.1, s = 3).
    """

    gives = "classifier"

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 0, dropout: float = 0.0,
                 max_norm: float = 0.0, hidden_dropout: float | None = None, activation: str = "tanh",
                 batch_norm: bool = False) -> None:
        super().__init__(in_dim, num_classes, hidden, dropout, hidden_dropout, activation, batch_norm,
                         {"in": in_dim, "classes": num_classes})
        self.max_norm = max_norm

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

    gives = "pair classifier"

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 0, dropout: float = 0.0,
                 max_norm: float = 0.0, hidden_dropout: float | None = None, activation: str = "tanh",
                 batch_norm: bool = False) -> None:
        super().__init__(4 * in_dim, num_classes, hidden, dropout, max_norm, hidden_dropout, activation, batch_norm)
        self.sizes["in"] = in_dim  # each sentence's vector; the layers read 4 * in_dim features

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.net(pair_features(u, v))  # [B, D] x 2 -> [B, 4D] -> [B, C]


class RegressionHead(SentenceHead):
    """One real value per sentence (STS-B similarity): [batch norm ->] dropout -> (linear | MLP) -> [B]."""

    gives = "regression"

    def __init__(self, in_dim: int, hidden: int = 0, dropout: float = 0.0, hidden_dropout: float | None = None,
                 activation: str = "tanh", batch_norm: bool = False) -> None:
        super().__init__(in_dim, 1, hidden, dropout, hidden_dropout, activation, batch_norm, {"in": in_dim})

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
        self.constrained = constrained and self.crf is not None

    def describe(self) -> dict:
        kind = "crf tagger" if self.crf is not None else "softmax tagger"
        return {"kind": kind, "in": self.scores.in_features, "tags": self.scores.out_features,
                "constrained": self.constrained}

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
        self.sizes = {"in": in_dim, "vocab": vocab_size, "tied": tied is not None, "bias": bias}

    def describe(self) -> dict:
        return {"kind": "lm", **self.sizes}

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(states)  # [..., D] -> [..., V]

    def nll(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of each target: states [N, D], targets [N] -> [N] (float32)."""
        return F.cross_entropy(self(states).float(), targets, reduction="none")


class AdaptiveLMHead(Head):
    """The adaptive softmax (Grave et al. 2017, "Efficient softmax approximation for GPUs", §4).

    The vocabulary, ids in order of decreasing frequency, is cut at `cutoffs` c1 < c2 < ... < V into a
    head, the c1 most frequent words plus one entry per tail cluster, and tail clusters [c_i, c_i+1).
    p(w) = p_head(w) for a head word and p_head(cluster) * p_cluster(w) for a tail word. Cluster i
    (from 1) reads the states projected to D / div_value^i dimensions (§4.3), so rare words cost
    fewer parameters and, in training, only the rows whose target is in a cluster pay for it: `nll`
    never scores the whole vocabulary. `forward` gives the exact log-probabilities of every word
    (evaluation, generation), which sum to 1.

    Word vocabularies are sorted by frequency (data/streams.vocab_from_counts; specials first), as
    the clusters need. With `tied` (the encoder's [V, D] input embedding) the head's word rows are
    that embedding's first c1 rows (Press & Wolf 2017, applied to the shortlist; the tails keep their
    own reduced-size weights, since the embedding has no reduced copies of them).
    """

    def __init__(self, in_dim: int, vocab_size: int, cutoffs: list[int], div_value: float = 4.0,
                 tied: nn.Parameter | None = None, bias: bool = True) -> None:
        super().__init__()
        if not cutoffs or list(cutoffs) != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] >= vocab_size:
            raise ValueError(f"cutoffs must increase strictly within (0, {vocab_size}); got {cutoffs}")
        self.bounds = [*cutoffs, vocab_size]  # cluster i holds ids [bounds[i-1], bounds[i])
        self.sizes = {"in": in_dim, "vocab": vocab_size, "cutoffs": list(cutoffs), "div_value": div_value,
                      "tied": tied is not None, "bias": bias}
        shortlist = cutoffs[0]
        self.tied = tied  # [V, D] or None
        self.words = None if tied is not None else nn.Parameter(torch.empty(shortlist, in_dim))  # [c1, D]
        if self.words is not None:
            nn.init.normal_(self.words, std=in_dim ** -0.5)
        self.words_bias = nn.Parameter(torch.zeros(shortlist)) if bias else None
        self.clusters = nn.Linear(in_dim, len(cutoffs))  # the head's entries for the tail clusters
        self.tails = nn.ModuleList()
        for i, (low, high) in enumerate(zip(self.bounds[:-1], self.bounds[1:]), start=1):
            size = max(1, int(in_dim // div_value ** i))
            self.tails.append(nn.Sequential(nn.Linear(in_dim, size, bias=False), nn.Linear(size, high - low, bias=bias)))

    def describe(self) -> dict:
        return {"kind": "adaptive lm", **self.sizes}

    def _head_log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """states [N, D] -> log-probabilities of the head's c1 words and its cluster entries [N, c1 + k]."""
        weight = self.tied[: self.bounds[0]] if self.tied is not None else self.words  # [c1, D]
        scores = torch.cat([F.linear(states, weight, self.words_bias), self.clusters(states)], dim=-1)
        return F.log_softmax(scores.float(), dim=-1)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Exact log-probabilities over the whole vocabulary: [..., D] -> [..., V]."""
        flat = states.reshape(-1, states.size(-1))  # [..., D] -> [N, D]
        head = self._head_log_probs(flat)  # [N, c1 + k]
        shortlist = self.bounds[0]
        parts = [head[:, :shortlist]]
        for i, tail in enumerate(self.tails):
            cluster = head[:, shortlist + i].unsqueeze(1)  # [N, 1]
            parts.append(cluster + F.log_softmax(tail(flat).float(), dim=-1))  # [N, size_i]
        return torch.cat(parts, dim=-1).reshape(*states.shape[:-1], -1)  # [N, V] -> [..., V]

    def nll(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of each target: states [N, D], targets [N] -> [N] (float32); each
        tail cluster is computed for the rows whose target it holds, and only for them."""
        head = self._head_log_probs(states)  # [N, c1 + k]
        shortlist = self.bounds[0]
        in_head = targets < shortlist
        nll = -head.gather(1, torch.where(in_head, targets, 0).unsqueeze(1)).squeeze(1)  # [N]
        for i, tail in enumerate(self.tails):
            low, high = self.bounds[i], self.bounds[i + 1]
            rows = ((targets >= low) & (targets < high)).nonzero().squeeze(1)  # [n_i]
            if rows.numel() == 0:
                continue
            within = F.log_softmax(tail(states[rows]).float(), dim=-1)  # [n_i, size_i]
            picked = within.gather(1, (targets[rows] - low).unsqueeze(1)).squeeze(1)  # [n_i]
            nll = nll.index_put((rows,), -(head[rows, shortlist + i] + picked))
        return nll


class MLMHead(Head):
    """Masked-LM scores as BERT computes them (Devlin et al. 2019; the released code's
    `cls/predictions`): dense -> GELU (erf) -> LayerNorm, then the tied output embedding plus a bias."""

    def __init__(self, in_dim: int, vocab_size: int, tied: nn.Parameter | None = None, eps: float = 1e-12) -> None:
        super().__init__()
        self.transform = nn.Linear(in_dim, in_dim)
        self.norm = nn.LayerNorm(in_dim, eps=eps)
        self.decoder = LMHead(in_dim, vocab_size, tied, bias=True)

    def describe(self) -> dict:
        return {"kind": "mlm", "in": self.transform.in_features, "vocab": self.decoder.sizes["vocab"],
                "tied": self.decoder.sizes["tied"], "eps": self.norm.eps}

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.transform(states))))  # [B, T, D] -> [B, T, V]


class SpanHead(Head):
    """Answer-span scores (Devlin et al. 2019 §4.2): one linear map to a start and an end score per
    token; positions outside the mask score -inf."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.scores = nn.Linear(in_dim, 2)

    def describe(self) -> dict:
        return {"kind": "span", "in": self.scores.in_features}

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.scores(states).masked_fill(~mask.unsqueeze(-1), float("-inf"))  # [B, T, 2]
        start, end = scores.unbind(-1)  # [B, T] each
        return start, end
