"""Recurrent language models: embedding -> stacked LSTM / GRU / Elman RNN (-> softmax over the vocabulary).

The character-level LSTM of Karpathy, Johnson & Fei-Fei (2015), "Visualizing and Understanding
Recurrent Networks" (§3: a stack of LSTM layers reading one character per step and predicting the
next one through a softmax on the top layer), which is also the word-level RNN LM of Mikolov et al.
(2010) when the tokens are words, with the regularisation of Zaremba, Sutskever & Vinyals (2014),
"Recurrent Neural Network Regularization" (§3: dropout only on the non-recurrent connections: the
embeddings, between layers, and before the output layer) and optional weight tying (Press & Wolf
2017, "Using the Output Embedding to Improve Language Models"; Inan, Khosravi & Socher 2017, "Tying
Word Vectors and Word Classifiers"): the output layer reuses the embedding matrix. When the embedding
size differs from the hidden size, a linear projection H -> E sits before the tied output layer
(Press & Wolf 2017 also insert a projection before the tied output embedding). Registered as
`rnn_lm`, and as `char_lstm_lm`, its older name.

As an encoder, RNNLM gives the top layer's states after dropout (and after the projection when
tied): what the output layer reads. The output layer itself is the task's `LMHead`, sharing
`output_embedding()` when tied.

`forward` runs the fused `nn.LSTM` (cuDNN on GPU) over a whole window. `cell_trace` recomputes the
same recurrence one step at a time with the same weights, only to expose the memory cells c_t at
every position for visualisation (Karpathy et al. 2015 §4.2); like `modules.rnn.lstm_memory_cells`,
it is a Python loop over time for visualisation only (DESIGN.md convention 8), and a test checks that
it equals the fused states.

The state a forward call returns is whatever the fused module returns: for an LSTM the pair
(h [L, B, H], c [L, B, H]), for a GRU or Elman RNN h [L, B, H]. Passing it back into the next call
continues the sequence exactly where the previous window stopped.
"""

# B batch, T time steps (window length), V vocabulary size, E embedding dim, H hidden size,
# L layers, G gates (4 for LSTM, 3 for GRU, 1 for the Elman RNN), O output features (E if tied, else H),
# B' batch rows kept by reorder

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, opt
from textnn.errors import TextnnError
from textnn.models.base import (Encoder, EncoderOutput, InputSpec, LayerGroups, TokenFeatures, require_bools,
                                require_choice, require_ints, require_probabilities)
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.rnn import CELLS, init_lstm_forget_bias

# The recurrent state: (h, c) for an LSTM, h for a GRU or Elman RNN, each [L, B, H]; None = zeros.
RNNState = Union[tuple[torch.Tensor, torch.Tensor], torch.Tensor, None]


@dataclass
class RNNLMConfig(ModelOptions):
    cell: str = opt("lstm", "recurrent cell: lstm, gru, or rnn (Elman, tanh)")
    embedding_dim: int = opt(64, "token embedding size E")
    hidden_size: int = opt(256, "hidden (and LSTM memory cell) size H of every layer")
    num_layers: int = opt(2, "number of stacked recurrent layers L")
    dropout: float = opt(0.0, "dropout on embeddings, between layers and before the output layer (Zaremba et al. 2014)", retunable=True)
    tie_weights: bool = opt(False, "share the output layer's weights with the embeddings (Press & Wolf 2017); "
                                   "a projection H -> E is added when embedding_dim != hidden_size")

    def __post_init__(self) -> None:
        require_choice(self, "cell", CELLS)
        require_ints(self, "embedding_dim", "hidden_size", "num_layers")
        require_probabilities(self, "dropout", expected="a number in [0, 1)")
        require_bools(self, "tie_weights")


class RNNLM(Encoder):
    """Recurrent next-token encoder: tokens[b, t] is what the output layer reads to score ids[b, t + 1].

    forward(ids [B, T], mask, state) -> EncoderOutput(tokens [B, T, O], state)
    step(ids [B, T], state)          -> (tokens of the last position [B, O], state)   (generation)
    reorder(state, indices)          -> the state of the batch rows `indices`          (beam search)
    cell_trace(ids [1, T])           -> [T, L, H] memory cells c_t (LSTM) or hidden states h_t (GRU, RNN)

    `mask` is not read: the recurrence runs left to right and stream padding only ever follows the
    real tokens, so no real token's state depends on it.

    LSTM forget-gate biases start at 1 (Jozefowicz, Zaremba & Sutskever 2015, "An Empirical
    Exploration of Recurrent Network Architectures"); PyTorch's two bias vectors are set so that
    their sum is 1 (`modules.rnn.init_lstm_forget_bias`).
    """

    config_class = RNNLMConfig
    gives_tokens = True
    causal = True
    gives_cells = True  # memory_cells: the LSTM cell view (model.cell=lstm)

    def __init__(self, cfg: RNNLMConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(spec.vocab_size, cfg.embedding_dim, spec.pad_id)
        self.drop = Dropout(cfg.dropout)
        common = dict(input_size=cfg.embedding_dim, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                      batch_first=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        if cfg.cell == "lstm":
            self.rnn = nn.LSTM(**common)
            init_lstm_forget_bias(self.rnn, 1.0)
        elif cfg.cell == "gru":
            self.rnn = nn.GRU(**common)
        else:
            self.rnn = nn.RNN(nonlinearity="tanh", **common)
        # Tied weights read E features: with H != E, a projection brings the LSTM's output to E first.
        self.project = nn.Linear(cfg.hidden_size, cfg.embedding_dim, bias=False) \
            if cfg.tie_weights and cfg.embedding_dim != cfg.hidden_size else None
        self.token_size = cfg.embedding_dim if cfg.tie_weights else cfg.hidden_size  # O

    def output_embedding(self) -> nn.Parameter | None:
        return self.embedding.weight if self.cfg.tie_weights else None  # [V, E]

    def layer_groups(self) -> LayerGroups:
        """The embedding, then the recurrent stack as one group: the fused module holds every layer's
        weights in one `nn.LSTM` (or GRU, RNN), so its layers cannot be told apart as modules."""
        return [("embedding", [self.embedding]),
                ("rnn", [self.rnn] + ([self.project] if self.project is not None else []))]

    # ----------------------------------------------------------------------------------------------
    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: RNNState = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = self.drop(self.embedding(ids))  # [B, T, E]
        out, state = self.rnn(x, state)  # [B, T, H]; state: (h, c) [L, B, H] each, or h [L, B, H]
        out = self.drop(out)
        if self.project is not None:
            out = self.project(out)  # [B, T, H] -> [B, T, E]
        return EncoderOutput(tokens=out, state=state)  # [B, T, O]

    @staticmethod
    def reorder(state: RNNState, indices: torch.Tensor) -> RNNState:
        """The state of the batch rows `indices` [B']: (h, c) or h, [L, B, H] -> [L, B', H]."""
        if state is None:
            return None
        if isinstance(state, tuple):
            return tuple(s.index_select(1, indices) for s in state)  # type: ignore[return-value]
        return state.index_select(1, indices)

    def memory_cells(self, ids: torch.Tensor, state: RNNState = None) -> list[torch.Tensor]:
        """The LSTM memory cells c_t of each layer at every position: ids [1, T] -> L tensors [T, H].

        The interface the cell view (viz/lstm_cells.write_cell_view) reads from any LSTM language model.
        """
        if self.cfg.cell != "lstm":
            raise TextnnError(f"a {self.cfg.cell.upper()} has no memory cells; the cell view needs model.cell=lstm")
        return list(self.cell_trace(ids, state).unbind(1))  # [T, L, H] -> L x [T, H]

    # ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def cell_trace(self, ids: torch.Tensor, state: RNNState = None) -> torch.Tensor:
        """Memory cells c_t of every layer at every position: ids [1, T] -> [T, L, H].

        The same recurrence as the fused forward in eval mode (no dropout), one step at a time:
        LSTM (PyTorch's gate order i, f, g, o; Hochreiter & Schmidhuber 1997 with a forget gate,
        Gers et al. 2000):  c_t = f * c_{t-1} + i * g,  h_t = o * tanh(c_t).
        GRU and Elman RNN have no separate memory cell: their hidden states h_t are returned.
        `state` continues a sequence (as returned by `forward` for a batch of one).
        """
        if ids.dim() != 2 or ids.size(0) != 1:
            raise TextnnError(f"cell_trace reads one sequence: ids must have shape [1, T], got {tuple(ids.shape)}")
        cell, num_layers, hidden = self.cfg.cell, self.cfg.num_layers, self.cfg.hidden_size
        x = self.embedding(ids)[0]  # [1, T, E] -> [T, E]
        steps = x.size(0)
        if state is None:
            h0 = x.new_zeros(num_layers, hidden)  # [L, H]
            c0 = x.new_zeros(num_layers, hidden)
        elif cell == "lstm":
            h0, c0 = state[0][:, 0], state[1][:, 0]  # [L, 1, H] -> [L, H]
        else:
            h0, c0 = state[:, 0], None  # [L, 1, H] -> [L, H]
        trace = x.new_empty(steps, num_layers, hidden)  # [T, L, H]
        # Each step is a handful of ops on vectors of a few hundred numbers: on the CPU, waking a
        # second thread costs more than it saves (5x slower with 2 threads on a busy 2-core machine).
        threads = torch.get_num_threads()
        if x.device.type == "cpu":
            torch.set_num_threads(1)
        try:
            inputs = x  # [T, E] for layer 0, then [T, H]
            for layer in range(num_layers):
                w_hh = getattr(self.rnn, f"weight_hh_l{layer}")  # [G*H, H]
                b_hh = getattr(self.rnn, f"bias_hh_l{layer}")  # [G*H]
                w_ih = getattr(self.rnn, f"weight_ih_l{layer}")  # [G*H, E or H]
                b_ih = getattr(self.rnn, f"bias_ih_l{layer}")
                h = h0[layer]  # [H]
                c = c0[layer] if c0 is not None else None
                outputs = x.new_empty(steps, hidden)  # [T, H] this layer's h_t, the next layer's input
                if cell == "gru":
                    # The GRU's reset gate scales (W_hn h + b_hn) alone, so b_hh stays on the recurrent side.
                    projected = torch.addmm(b_ih, inputs, w_ih.T)  # [T, 3H]
                    for t in range(steps):
                        x_r, x_z, x_n = projected[t].chunk(3)  # 3 x [H]
                        h_r, h_z, h_n = torch.addmv(b_hh, w_hh, h).chunk(3)  # 3 x [H]
                        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
                        h = torch.lerp(torch.tanh(torch.addcmul(x_n, r, h_n)), h, z)  # (1 - z) n + z h
                        trace[t, layer] = outputs[t] = h
                else:
                    # The input projection of a whole layer does not depend on its own recurrence: one matmul.
                    projected = torch.addmm(b_ih + b_hh, inputs, w_ih.T)  # [T, G*H]
                    for t in range(steps):
                        gates = torch.addmv(projected[t], w_hh, h)  # [G*H]
                        if cell == "lstm":
                            s = torch.sigmoid(gates)  # gate order i, f, g, o; g's slice is unused
                            g = torch.tanh(gates[2 * hidden:3 * hidden])
                            c = torch.addcmul(s[hidden:2 * hidden] * c, s[:hidden], g)  # f * c + i * g
                            h = s[3 * hidden:] * torch.tanh(c)
                            trace[t, layer] = c
                        else:
                            h = torch.tanh(gates)
                            trace[t, layer] = h
                        outputs[t] = h
                inputs = outputs
        finally:
            torch.set_num_threads(threads)
        return trace


# ------------------------------------------------------------------------------------------- presets

PRESETS: dict[str, Preset] = {
    # For tests: two layers so that the inter-layer path and dropout are exercised.
    "tiny": Preset(
        RNNLMConfig(cell="lstm", embedding_dim=8, hidden_size=16, num_layers=2, dropout=0.1,
                    tie_weights=False)),
    # `textnn demo` (~3 minutes on 2 CPU cores). Measured on the demo's stdlib corpus, each size given
    # 90 CPU-seconds of one thread (Adam, batch 32 x 128 characters), dev bpc: 1 x 256: 1.66 (lr 1e-2),
    # 1.75 (lr 5e-3), 2.35 (lr 2e-3); 2 x 128: 2.22 (5e-3); 1 x 384: 2.18 (1e-2); 1 x 512: 3.00 (2e-3);
    # 2 x 256: 3.06 (2e-3 and 5e-3: still on the early plateau).
    # In a budget this short, updates count more than depth; more layers win with hours, not minutes.
    "demo": Preset(
        RNNLMConfig(cell="lstm", embedding_dim=64, hidden_size=256, num_layers=1, dropout=0.0,
                    tie_weights=False)),
    # Karpathy et al. (2015) §4.1 trained 1-3 layer LSTMs of 64-512 cells on one-hot characters; this
    # is the largest setting of that grid. A learned E = 128 embedding is at least as expressive as
    # their one-hot input for vocabularies of up to 128 characters (their Linux kernel set has 101).
    "paper": Preset(
        RNNLMConfig(cell="lstm", embedding_dim=128, hidden_size=512, num_layers=3, dropout=0.0,
                    tie_weights=False)),
    # The 2 x 200 tied LSTM of gluon-nlp's WikiText-2 table (`standard_lstm_lm_200`: embedding 200,
    # hidden 200, 2 layers, dropout 0.2, tied; trained with SGD lr 20, batch 20, bptt 35, clip 0.25;
    # validation / test perplexity 108.25 / 102.26), the "small" setting of Zaremba et al. (2014)'s
    # family with Press & Wolf's tying.
    "gluon_2x200": Preset(
        RNNLMConfig(cell="lstm", embedding_dim=200, hidden_size=200, num_layers=2, dropout=0.2,
                    tie_weights=True)),
}
RNNLM.presets = PRESETS
