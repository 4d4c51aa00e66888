"""The neural probabilistic language model of Bengio, Ducharme, Vincent & Jauvin (2003), JMLR 3.

Each next word is predicted from the n-1 words before it (§2, Figure 1): their learned feature
vectors C(w) are concatenated into x = (C(w_{t-1}), ..., C(w_{t-n+1})), and

    y = b + W x + U tanh(d + H x)        (eq. 1)

gives the unnormalised log-probabilities of the next word, softmax-normalised. W x is the optional
"direct connection" from the word features to the output (W = 0 when absent, §2). The order of the
context vectors inside x does not matter (it only permutes H's and W's columns); here the oldest
word comes first.

All positions of a window are computed at once: the window's embeddings are cut into the n-1-word
contexts ending at every position with `Tensor.unfold` (a strided view, no Python loop over
positions). The state carried to the next window is its last n-1 ids, so contexts cross window
boundaries exactly as in the continuous stream; before the stream's first token the context is the
padding token, whose embedding is the zero vector (`TokenEmbedding`'s fixed pad row). `dropout` (on
the features and on the hidden layer) is not in the paper, which regularised with weight decay;
0 reproduces it.
"""

# B batch, T window length, V vocabulary size, E embedding dim (m in the paper), C context length
# (n - 1), H hidden units (h)

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import check_model_field as _check
from textnn.config import is_int, opt
from textnn.models.base import ModelOutput, TextnnModel
from textnn.modules.embeddings import TokenEmbedding


@dataclass
class NPLMConfig:
    context_size: int = opt(4, "n - 1: how many previous tokens each prediction reads (Bengio et al. 2003: n = 5)")
    embedding_dim: int = opt(60, "feature vector size m of each word")
    hidden_size: int = opt(50, "tanh hidden units h; 0 = no hidden layer (then model.direct must be true)")
    direct: bool = opt(True, "direct connections from the word features to the output (the W x term of eq. 1)")
    dropout: float = opt(0.0, "dropout on the concatenated features and on the hidden layer (not in the paper)")

    def __post_init__(self) -> None:
        _check(is_int(self.context_size) and self.context_size >= 1, "context_size", self.context_size,
               "an integer >= 1")
        _check(is_int(self.embedding_dim) and self.embedding_dim >= 1, "embedding_dim", self.embedding_dim,
               "an integer >= 1")
        _check(is_int(self.hidden_size) and self.hidden_size >= 0, "hidden_size", self.hidden_size,
               "an integer >= 0")
        _check(isinstance(self.direct, bool), "direct", self.direct, "true or false")
        _check(self.hidden_size > 0 or self.direct, "hidden_size", self.hidden_size,
               "an integer >= 1 when model.direct is false (the model needs at least one path to the output)")
        _check(isinstance(self.dropout, (int, float)) and not isinstance(self.dropout, bool)
               and 0.0 <= self.dropout < 1.0, "dropout", self.dropout, "a number in [0, 1)")


class NPLM(TextnnModel):
    """Bengio et al. (2003)'s feed-forward n-gram language model, in the language-model interface.

    forward(ids [B, T], state) -> ModelOutput(logits [B, T, V], state = the last n-1 ids [B, C])
    step(ids [B, T], state)    -> (logits [B, V] of the last position, state)
    """

    def __init__(self, cfg: NPLMConfig, vocab_size: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.pad_id = pad_id
        features = cfg.context_size * cfg.embedding_dim  # size of x
        self.embedding = TokenEmbedding(vocab_size, cfg.embedding_dim, pad_id)  # C
        self.drop = nn.Dropout(cfg.dropout)
        self.hidden = nn.Linear(features, cfg.hidden_size) if cfg.hidden_size else None  # H, d
        self.output = nn.Linear(cfg.hidden_size, vocab_size) if cfg.hidden_size else None  # U, b
        self.direct = nn.Linear(features, vocab_size, bias=self.output is None) if cfg.direct else None  # W

    def forward(self, ids: torch.Tensor, state: torch.Tensor | None = None) -> ModelOutput:
        batch, steps = ids.shape
        context = self.cfg.context_size
        if state is None:  # the stream starts here: nothing before it but padding
            state = ids.new_full((batch, context), self.pad_id)  # [B, C]
        seq = torch.cat([state, ids], dim=1)  # [B, C+T]
        emb = self.embedding(seq)  # [B, C+T, E]
        windows = emb.unfold(1, context, 1)[:, 1:]  # [B, T+1, E, C] -> [B, T, E, C]: the C tokens ending at each input
        x = self.drop(windows.transpose(2, 3).reshape(batch, steps, -1))  # [B, T, C, E] -> [B, T, C*E]
        logits = 0
        if self.hidden is not None:
            logits = self.output(self.drop(torch.tanh(self.hidden(x))))  # b + U tanh(d + H x): [B, T, V]
        if self.direct is not None:
            logits = logits + self.direct(x)  # + W x
        return ModelOutput(logits=logits, state=seq[:, -context:])  # state: [B, C]

    def step(self, ids: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoding interface of `generation.sampling.sample`: logits of the last position only."""
        out = self.forward(ids, state)
        return out.logits[:, -1], out.state  # [B, V]

    def reorder_state(self, state: torch.Tensor | None, indices: torch.Tensor) -> torch.Tensor | None:
        """The state of the batch rows `indices` [B'] (beam search): the last ids [B, C] -> [B', C]."""
        return None if state is None else state.index_select(0, indices)


PRESETS: dict[str, dict] = {
    # For tests: a hidden layer and direct connections, so that every path is exercised.
    "tiny": {"context_size": 3, "embedding_dim": 8, "hidden_size": 16, "direct": True, "dropout": 0.1},
    # Bengio et al. (2003) Table 1, the Brown-corpus model "MLP1": n = 5, h = 50, m = 60, with
    # direct connections.
    "paper": {"context_size": 4, "embedding_dim": 60, "hidden_size": 50, "direct": True, "dropout": 0.0},
}
