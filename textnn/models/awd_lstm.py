"""AWD-LSTM: the ASGD Weight-Dropped LSTM of Merity, Keskar & Socher (2018), "Regularizing and
Optimizing LSTM Language Models" (ICLR), also the encoder of ULMFiT (Howard & Ruder 2018).

A stack of separate one-layer LSTMs (the last one sized to the embeddings so the output layer can be
tied to them, §4.4; Press & Wolf 2017, Inan et al. 2017) with the paper's regularisers:
- DropConnect on every hidden-to-hidden matrix, one mask per forward call (§2, `modules.rnn.WeightDrop`),
  which keeps the fused nn.LSTM / cuDNN kernel;
- embedding dropout: whole word types dropped from the embedding matrix (§4.3);
- locked (variational) dropout, one mask per sequence: on the embeddings, between layers and on the
  final output (§4.2);
- activation regularisation AR = alpha * mean(m * h_T^2) over the dropped final-layer outputs and
  temporal activation regularisation TAR = beta * mean((h_t - h_{t+1})^2) over the undropped ones
  (§4.6), returned as `EncoderOutput.regularizer` in training mode (the task adds it to the loss).
Its optimiser, NT-ASGD (§3), is `train.optimizer: ntasgd` (training/optim.py), and variable-length
BPTT (§4.1) is `data.bptt_variable: true` (tasks/language_modeling.py).

As an encoder, AWD-LSTM gives the final layer's outputs after the output locked dropout: what the
output layer reads. The output layer is the task's `LMHead` (sharing `output_embedding()` when tied).

The state is a list with one (h [1, B, H_l], c [1, B, H_l]) pair per layer. Initialisation follows
the authors' code: embeddings uniform in [-0.1, 0.1], PyTorch's default LSTM init, and output bias 0
(`LMHead` starts its bias at zero).
"""

# B batch, T window length, V vocabulary size, E embedding dim, H hidden size, L layers,
# H_l the size of layer l (H, and E for the last layer when tied), B' batch rows kept by reorder

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, opt
from textnn.models.base import (Encoder, EncoderOutput, InputSpec, LayerGroups, TokenFeatures, require_bools,
                                require_ints, require_probabilities)
from textnn.modules.rnn import LockedDropout, WeightDrop, embedding_dropout, lstm_memory_cells

State = list[tuple[torch.Tensor, torch.Tensor]] | None
INIT_RANGE = 0.1  # embeddings ~ U(-0.1, 0.1), as in the authors' code


@dataclass
class AWDLSTMConfig(ModelOptions):
    embedding_dim: int = opt(400, "embedding size E (and, when tied, the last LSTM layer's size)")
    hidden_size: int = opt(1150, "size H of every LSTM layer but the last")
    num_layers: int = opt(3, "number of stacked one-layer LSTMs L")
    tie_weights: bool = opt(True, "output layer = embedding matrix (§4.4); the last layer then has E units")
    dropout: float = opt(0.4, "locked dropout on the final LSTM output (the paper's dropout)", retunable=True)
    dropout_hidden: float = opt(0.3, "locked dropout between LSTM layers (dropouth; 0.2 for WikiText-2)", retunable=True)
    dropout_input: float = opt(0.65, "locked dropout on the embedded input (dropouti)", retunable=True)
    dropout_embedding: float = opt(0.1, "embedding dropout: probability of dropping a whole word type (dropoute)", retunable=True)
    weight_drop: float = opt(0.5, "DropConnect probability on the hidden-to-hidden weights (wdrop)", retunable=True)
    alpha: float = opt(2.0, "activation regularisation (AR) weight on the dropped final outputs", retunable=True)
    beta: float = opt(1.0, "temporal activation regularisation (TAR) weight on the undropped final outputs", retunable=True)

    def __post_init__(self) -> None:
        require_ints(self, "embedding_dim", "hidden_size", "num_layers")
        require_bools(self, "tie_weights")
        require_probabilities(self, "dropout", "dropout_hidden", "dropout_input", "dropout_embedding", "weight_drop",
                              expected="a number in [0, 1)")
        for key in ("alpha", "beta"):
            value = getattr(self, key)
            _check(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0, key, value,
                   "a number >= 0")


class AWDLSTM(Encoder):
    """AWD-LSTM as an encoder (see the module docstring).

    forward(ids [B, T], mask, state) -> EncoderOutput(tokens [B, T, H_L], state, regularizer (training only))
    step(ids [B, T], state)          -> (tokens of the last position [B, H_L], state)
    reorder(state, indices)          -> the state of the batch rows `indices`   (beam search)
    memory_cells(ids [1, T])         -> L tensors [T, H_l]: every layer's memory cells c_t (for the cell view)

    `mask` is not read: the LSTMs run left to right and stream padding only ever follows the real tokens.
    """

    config_class = AWDLSTMConfig
    gives_tokens = True
    causal = True
    gives_cells = True  # memory_cells: the LSTM cell view

    def __init__(self, cfg: AWDLSTMConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(spec.vocab_size, cfg.embedding_dim)
        sizes = [cfg.embedding_dim] + [cfg.hidden_size] * (cfg.num_layers - 1) \
            + [cfg.embedding_dim if cfg.tie_weights else cfg.hidden_size]  # L + 1 sizes: input, then each layer
        self.rnns = nn.ModuleList(
            WeightDrop(nn.LSTM(sizes[layer], sizes[layer + 1], batch_first=True), ["weight_hh_l0"], cfg.weight_drop)
            for layer in range(cfg.num_layers))
        self.drop_input = LockedDropout(cfg.dropout_input)
        self.drop_hidden = LockedDropout(cfg.dropout_hidden)
        self.drop_output = LockedDropout(cfg.dropout)
        self.token_size = sizes[-1]
        with torch.no_grad():
            self.embedding.weight.uniform_(-INIT_RANGE, INIT_RANGE)

    def output_embedding(self) -> nn.Parameter | None:
        return self.embedding.weight if self.cfg.tie_weights else None  # [V, E]

    def layer_groups(self) -> LayerGroups:
        """The embedding, then one group per LSTM layer (ULMFiT's discriminative rates and gradual
        unfreezing, Howard & Ruder 2018 §3.2-3.3, work layer by layer on this stack)."""
        return [("embedding", [self.embedding]),
                *((f"lstm{layer + 1}", [rnn]) for layer, rnn in enumerate(self.rnns))]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: State = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = embedding_dropout(self.embedding.weight, ids, self.cfg.dropout_embedding, self.training)  # [B, T, E]
        x = self.drop_input(x)
        new_state = []
        last = len(self.rnns) - 1
        for layer, rnn in enumerate(self.rnns):
            raw, layer_state = rnn(x, None if state is None else state[layer])  # [B, T, H_l]; (h, c) [1, B, H_l]
            new_state.append(layer_state)
            x = self.drop_hidden(raw) if layer < last else self.drop_output(raw)
        regularizer = None
        if self.training and (self.cfg.alpha or self.cfg.beta):
            # §4.6: AR penalises large (dropped) outputs, TAR large changes between consecutive (raw) outputs.
            regularizer = self.cfg.alpha * x.pow(2).mean()
            if raw.size(1) > 1:
                regularizer = regularizer + self.cfg.beta * (raw[:, 1:] - raw[:, :-1]).pow(2).mean()
        return EncoderOutput(tokens=x, state=new_state, regularizer=regularizer)  # tokens [B, T, H_L]

    @staticmethod
    def reorder(state: State, indices: torch.Tensor) -> State:
        """The state of the batch rows `indices` [B']: each layer's (h, c) [1, B, H_l] -> [1, B', H_l]."""
        if state is None:
            return None
        return [(h.index_select(1, indices), c.index_select(1, indices)) for h, c in state]

    @torch.no_grad()
    def memory_cells(self, ids: torch.Tensor, state: State = None) -> list[torch.Tensor]:
        """Memory cells c_t of every layer at every position, as in eval mode: ids [1, T] -> L x [T, H_l]."""
        if ids.dim() != 2 or ids.size(0) != 1:
            raise ValueError(f"memory_cells reads one sequence: ids must have shape [1, T], got {tuple(ids.shape)}")
        x = self.embedding(ids)[0]  # [1, T, E] -> [T, E]
        cells = []
        for layer, rnn in enumerate(self.rnns):
            x, c = lstm_memory_cells(rnn.module, x, None if state is None else state[layer])  # [T, H_l] each
            cells.append(c)
        return cells


PRESETS: dict[str, Preset] = {
    # For tests: every regulariser on, small enough to run in milliseconds.
    "tiny": Preset(
        AWDLSTMConfig(embedding_dim=8, hidden_size=16, num_layers=3, tie_weights=True, dropout=0.2,
                      dropout_hidden=0.1, dropout_input=0.2, dropout_embedding=0.1, weight_drop=0.3, alpha=2.0,
                      beta=1.0)),
    # Merity et al. (2018) §5 on WikiText-2: 3 layers, 400 / 1150 / 400 units, tied, dropouts
    # (output, between layers, input, embedding, weight drop) = 0.4, 0.2, 0.65, 0.1, 0.5, AR 2, TAR 1
    # (the authors' WikiText-2 command sets dropouth 0.2). 33M parameters; with NT-ASGD (lr 30,
    # batch 80, bptt 70, clip 0.25, 750 epochs) the paper reports 68.6 / 65.8 validation / test
    # perplexity (Table 2, after fine-tuning); the authors' README gives about 68.7 / 65.6 without
    # fine-tuning for its current code.
    "paper": Preset(
        AWDLSTMConfig(embedding_dim=400, hidden_size=1150, num_layers=3, tie_weights=True, dropout=0.4,
                      dropout_hidden=0.2, dropout_input=0.65, dropout_embedding=0.1, weight_drop=0.5, alpha=2.0,
                      beta=1.0)),
    # For 2-core CPU runs: the paper's WikiText-2 regularisation on a 200 / 400 / 200 stack (9.4M
    # parameters with the 33k WikiText-2 vocabulary, most of them the tied embedding). Measured at
    # batch 20 x bptt 35 on one thread of a shared 2-core machine: ~1 step/s, about the speed of the
    # 2 x 200 LSTM (rnn_lm gluon_2x200), since both spend most of a step in the 33k-way softmax.
    "cpu": Preset(
        AWDLSTMConfig(embedding_dim=200, hidden_size=400, num_layers=3, tie_weights=True, dropout=0.4,
                      dropout_hidden=0.2, dropout_input=0.65, dropout_embedding=0.1, weight_drop=0.5, alpha=2.0,
                      beta=1.0)),
}
AWDLSTM.presets = PRESETS
