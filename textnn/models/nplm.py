"""The neural probabilistic language model of Bengio, Ducharme, Vincent & Jauvin (2003), JMLR 3.

Each next word is predicted from the n-1 words before it (§2, Figure 1): their learned feature
vectors C(w) are concatenated into x = (C(w_{t-1}), ..., C(w_{t-n+1})), and

    y = b + W x + U tanh(d + H x)        (eq. 1)

gives the unnormalised log-probabilities of the next word, softmax-normalised. W x is the optional
"direct connection" from the word features to the output (W = 0 when absent, §2). The order of the
context vectors inside x does not matter (it only permutes H's and W's columns); here the oldest
word comes first.

As an encoder, NPLM gives at every position the features eq. 1's output layer reads, z = [tanh(d +
H x); x] (only the parts that exist: x alone when hidden_size is 0, the hidden layer alone when
direct is false), and the language-modelling task's `LMHead` is ONE linear map over them:
b + [U W] z = b + U tanh(d + H x) + W x, eq. 1 exactly. (Only the initialisation differs from two
separate output layers: the head draws [U W] from one uniform range, and b starts at 0.)

All positions of a window are computed at once: the window's embeddings are cut into the n-1-word
contexts ending at every position with `Tensor.unfold` (a strided view, no Python loop over
positions). The state carried to the next window is its last n-1 ids, so contexts cross window
boundaries exactly as in the continuous stream; before the stream's first token the context is the
padding token, whose embedding is the zero vector (`TokenEmbedding`'s fixed pad row). `dropout` (on
the features and on the hidden layer) is not in the paper, which regularised with weight decay;
0 reproduces it.
"""

# B batch, T window length, V vocabulary size, E embedding dim (m in the paper), C context length
# (n - 1), H hidden units (h), Z features the head reads (H + C*E with both paths)

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, opt
from textnn.models.base import (Encoder, EncoderOutput, InputSpec, LayerGroups, TokenFeatures, require_bools,
                                require_ints, require_probabilities)
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding


@dataclass
class NPLMConfig(ModelOptions):
    context_size: int = opt(4, "n - 1: how many previous tokens each prediction reads (Bengio et al. 2003: n = 5)")
    embedding_dim: int = opt(60, "feature vector size m of each word")
    hidden_size: int = opt(50, "tanh hidden units h; 0 = no hidden layer (then model.direct must be true)")
    direct: bool = opt(True, "direct connections from the word features to the output (the W x term of eq. 1)")
    dropout: float = opt(0.0, "dropout on the concatenated features and on the hidden layer (not in the paper)", retunable=True)

    def __post_init__(self) -> None:
        require_ints(self, "context_size", "embedding_dim")
        require_ints(self, "hidden_size", at_least=0)
        require_bools(self, "direct")
        _check(self.hidden_size > 0 or self.direct, "hidden_size", self.hidden_size,
               "an integer >= 1 when model.direct is false (the model needs at least one path to the output)")
        require_probabilities(self, "dropout", expected="a number in [0, 1)")


class NPLM(Encoder):
    """Bengio et al. (2003)'s feed-forward n-gram language model as an encoder (module docstring).

    forward(ids [B, T], mask, state) -> EncoderOutput(tokens [B, T, Z], state = the last n-1 ids [B, C])
    step(ids [B, T], state)          -> (features of the last position [B, Z], state)

    `mask` is not read: each position's features depend on the C ids up to it and stream padding
    only ever follows the real tokens.
    """

    config_class = NPLMConfig
    gives_tokens = True
    causal = True

    def __init__(self, cfg: NPLMConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.pad_id = spec.pad_id
        features = cfg.context_size * cfg.embedding_dim  # size of x
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id)  # C
        self.drop = Dropout(cfg.dropout)
        self.hidden = nn.Linear(features, cfg.hidden_size) if cfg.hidden_size else None  # H, d
        self.token_size = cfg.hidden_size + (features if cfg.direct else 0)  # Z

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: torch.Tensor | None = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        batch, steps = ids.shape
        context = self.cfg.context_size
        if state is None:  # the stream starts here: nothing before it but padding
            state = ids.new_full((batch, context), self.pad_id)  # [B, C]
        seq = torch.cat([state, ids], dim=1)  # [B, C+T]
        emb = self.embedding(seq)  # [B, C+T, E]
        windows = emb.unfold(1, context, 1)[:, 1:]  # [B, T+1, E, C] -> [B, T, E, C]: the C tokens ending at each input
        x = self.drop(windows.transpose(2, 3).reshape(batch, steps, -1))  # [B, T, C, E] -> [B, T, C*E]
        parts = []
        if self.hidden is not None:
            parts.append(self.drop(torch.tanh(self.hidden(x))))  # tanh(d + H x): [B, T, H]
        if self.cfg.direct:
            parts.append(x)  # read by W
        tokens = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]  # [B, T, Z]
        return EncoderOutput(tokens=tokens, state=seq[:, -context:])  # state: [B, C]

    @staticmethod
    def reorder(state: torch.Tensor | None, indices: torch.Tensor) -> torch.Tensor | None:
        """The state of the batch rows `indices` [B'] (beam search): [B, C] -> [B', C]."""
        return None if state is None else state.index_select(0, indices)

    def layer_groups(self) -> LayerGroups:
        groups: LayerGroups = [("embedding", [self.embedding])]
        if self.hidden is not None:
            groups.append(("hidden", [self.hidden]))
        return groups


PRESETS: dict[str, Preset] = {
    # For tests: a hidden layer and direct connections, so that every path is exercised.
    "tiny": Preset(NPLMConfig(context_size=3, embedding_dim=8, hidden_size=16, direct=True, dropout=0.1)),
    # Bengio et al. (2003) Table 1, the Brown-corpus model "MLP1": n = 5, h = 50, m = 60, with
    # direct connections.
    "paper": Preset(NPLMConfig(context_size=4, embedding_dim=60, hidden_size=50, direct=True, dropout=0.0)),
}
NPLM.presets = PRESETS
