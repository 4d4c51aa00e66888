"""Recurrent sentence classifier: embeddings -> (stacked, optionally bidirectional) Elman RNN, LSTM or
GRU -> pooling over time -> (optional MLP) -> class scores.

Cells: "rnn" Elman (1990) with tanh, "lstm" (Hochreiter & Schmidhuber 1997, with forget gate; its
forget-gate bias starts at 1, Jozefowicz et al. 2015, see `modules.rnn.init_lstm_forget_bias`), "gru"
(Cho et al. 2014). All run fused (cuDNN on GPU) over packed sequences, so padding is never read.

Pooling of the top layer's states into the sentence vector u:
  last  the state after the last real token; bidirectional: the forward direction's last state
        concatenated with the backward direction's state at the first token (each direction's final
        state, i.e. what it has read of the whole sentence)
  max   element-wise max over real positions (the BiLSTM-max encoder of Conneau et al. 2017, §3.2.2)
  mean  average over real positions

The encoder gives the top layer's states at every token and the pooled sentence vector; the task's
head classifies it (InferSent's MLP with one hidden layer is `head.hidden`, Conneau et al. 2017 §3.3).
"""

# B batch, T sequence length, D embedding dim, H hidden size, K directions (1 or 2)

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import ModelOptions, Preset, PresetHead, opt
from textnn.models.base import (Encoder, EncoderOutput, InputSpec, TokenFeatures, require_choice, require_ints,
                                require_probabilities)
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.pooling import last_valid, masked_max, masked_mean
from textnn.modules.rnn import CELLS, RNNEncoder

POOLINGS = ("last", "max", "mean")


@dataclass
class RNNClassifierConfig(ModelOptions):
    cell: str = opt("lstm", "recurrent cell: rnn (Elman, tanh), lstm or gru")
    embedding_dim: int = opt(300, "word embedding size D (must match data.vectors when given)")
    hidden_size: int = opt(256, "hidden state size H of each direction")
    num_layers: int = opt(1, "stacked recurrent layers")
    bidirectional: bool = opt(True, "run a second, right-to-left RNN and concatenate its states")
    dropout: float = opt(0.0, "dropout between stacked recurrent layers, in [0, 1) (needs num_layers > 1)", retunable=True)
    embedding_dropout: float = opt(0.0, "dropout on the word embeddings, in [0, 1)", retunable=True)
    pooling: str = opt("max", "how the states become one vector: last, max or mean")
    freeze_embeddings: bool = opt(False, "keep the (pretrained) embeddings fixed during training")

    def __post_init__(self) -> None:
        require_choice(self, "cell", CELLS, one_of=True)
        require_ints(self, "embedding_dim", "hidden_size", "num_layers")
        require_probabilities(self, "dropout", "embedding_dropout")
        require_choice(self, "pooling", POOLINGS, one_of=True)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        RNNClassifierConfig(cell="lstm", embedding_dim=8, hidden_size=8, num_layers=2, bidirectional=True,
                            dropout=0.2, embedding_dropout=0.1, pooling="max"),
        PresetHead(dropout=0.2)),
    # InferSent's BiLSTM-max encoder (Conneau et al. 2017): §3.2.2 one bidirectional LSTM layer with 2048
    # units per direction (4096-d sentence vectors) and max pooling; §3.3 300-d GloVe (Common Crawl 840B)
    # vectors kept fixed, an MLP classifier with one 512-unit hidden layer, no dropout (SGD lr 0.1,
    # batch 64). Their code (facebookresearch/InferSent train_nli.py) has the same defaults.
    "paper": Preset(
        RNNClassifierConfig(cell="lstm", embedding_dim=300, hidden_size=2048, num_layers=1,
                            bidirectional=True, dropout=0.0, embedding_dropout=0.0, pooling="max",
                            freeze_embeddings=True),
        PresetHead(hidden=512, dropout=0.0)),
}


class RNNClassifier(Encoder):
    """Embeddings -> RNNEncoder -> the states at every token and their pooling; see the module docstring."""

    config_class = RNNClassifierConfig
    presets = PRESETS
    gives_tokens = True
    gives_sentence = True
    uses_vectors = True
    takes_context = True  # a frozen encoder's features join the word embeddings (data.features_from: ELMo)

    def __init__(self, cfg: RNNClassifierConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id, spec.pretrained,
                                        cfg.freeze_embeddings)
        self.embedding_dropout = Dropout(cfg.embedding_dropout)
        self.context_dim = spec.context_dim
        self.rnn = RNNEncoder(cfg.embedding_dim + spec.context_dim, cfg.hidden_size, cfg.cell, cfg.num_layers,
                                  cfg.bidirectional, cfg.dropout)
        self.token_size = self.sentence_size = self.rnn.output_size  # K*H

    def _pool(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.cfg.pooling == "max":
            return masked_max(states, mask)  # [B, K*H]
        if self.cfg.pooling == "mean":
            return masked_mean(states, mask)  # [B, K*H]
        hidden = self.cfg.hidden_size
        forward_last = last_valid(states[..., :hidden], mask)  # [B, H]
        if not self.cfg.bidirectional:
            return forward_last
        backward_first = states[:, 0, hidden:]  # [B, H]: the backward RNN ends at the first token
        return torch.cat([forward_last, backward_first], dim=-1)  # [B, 2H]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = self.embedding_dropout(self.embedding(ids))  # [B, T, D]
        if self.context_dim:  # Peters et al. 2018 §3.3: [x_k; ELMo_k] is the RNN's input
            x = torch.cat([x, features.context], dim=-1)  # [B, T, D] -> [B, T, D+E]
        states = self.rnn(x, mask)  # [B, T, K*H]
        return EncoderOutput(tokens=states, sentence=self._pool(states, mask))
