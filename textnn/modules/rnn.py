"""A recurrent encoder over fused nn.RNN / nn.LSTM / nn.GRU with packed sequences, and the LSTM
regularisers of AWD-LSTM (locked dropout, embedding dropout, weight drop).

No Python loop over time (DESIGN.md convention 8): the whole padded batch goes through one fused
(cuDNN on GPU) call, packed so that padding is never read, so a padded batch gives the same states as
each sequence alone. Weight drop keeps that fused call too (`WeightDrop`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from textnn.modules.dropout import dropout
from textnn.modules.masking import lengths_from_mask

# B batch, T sequence length, D input dim, H hidden size, K directions (1 or 2)

CELLS = ("rnn", "lstm", "gru")


def init_lstm_forget_bias(lstm: nn.LSTM, value: float = 1.0) -> None:
    """Set every LSTM forget-gate bias so that the gate starts at sigmoid(value) (Jozefowicz et al.
    2015, "An Empirical Exploration of Recurrent Network Architectures": abstract and the "LSTM-b"
    rows of their results; a forget bias of 1 keeps the cell remembering, so gradients flow through it
    from the start, and closes the gap between the LSTM and the GRU).

    PyTorch keeps two bias vectors per layer and direction, bias_ih and bias_hh, each laid out as the
    gates [input | forget | cell | output] of size H; the gate sees their sum. So bias_ih's forget slice
    is set to `value` and bias_hh's to 0: the sum is `value`, not 2 * value.
    """
    hidden = lstm.hidden_size
    with torch.no_grad():
        for name, param in lstm.named_parameters():
            if name.startswith("bias_ih"):
                param[hidden:2 * hidden].fill_(value)
            elif name.startswith("bias_hh"):
                param[hidden:2 * hidden].zero_()


class RNNEncoder(nn.Module):
    """Stacked (optionally bidirectional) Elman-tanh RNN, LSTM or GRU over a masked batch.

    forward(x [B, T, D], mask [B, T]) -> outputs [B, T, K*H] of the top layer; positions past a row's
    length are 0. For direction k, outputs[..., k*H:(k+1)*H]; the backward direction's final state is
    at position 0. `dropout` applies between stacked layers (nn.RNN's own inter-layer dropout).
    """

    def __init__(self, input_size: int, hidden_size: int, cell: str, num_layers: int = 1,
                 bidirectional: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"unknown cell {cell!r}; valid: {', '.join(CELLS)}")
        common = dict(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                      batch_first=True, bidirectional=bidirectional,
                      dropout=dropout if num_layers > 1 else 0.0)  # torch warns on dropout with 1 layer
        if cell == "rnn":
            self.rnn = nn.RNN(nonlinearity="tanh", **common)
        elif cell == "lstm":
            self.rnn = nn.LSTM(**common)
            init_lstm_forget_bias(self.rnn, 1.0)
        else:
            self.rnn = nn.GRU(**common)
        self.hidden_size = hidden_size
        self.num_directions = 2 if bidirectional else 1
        self.output_size = hidden_size * self.num_directions

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.forward_with_final(x, mask)[0]

    def forward_with_final(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, object]:
        """The outputs [B, T, K*H] (as `forward`) and the final state as the fused module returns it:
        h_n [L*K, B, H] (or (h_n, c_n) for an LSTM), each row's taken at its own last real token
        (packing), layer-major with the directions of a layer next to each other."""
        # pack_padded_sequence wants lengths on the CPU and > 0; an empty row runs over its pad position.
        lengths = lengths_from_mask(mask).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, final = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # [B, T, K*H]
        return out, final


# --------------------------------------------------------------------------------------------------
# Regularisers of Merity, Keskar & Socher (2018), "Regularizing and Optimizing LSTM Language Models"


class LockedDropout(nn.Module):
    """Variational ("locked") dropout: one mask per sequence, the same at every time step.

    Gal & Ghahramani (2016), used by Merity et al. (2018) §4.2 on the LSTM's inputs, between layers
    and on its output: a unit dropped for one word is dropped for the whole window, so the noise
    cannot average out over time. x [B, T, D] -> [B, T, D]; kept units are scaled by 1 / (1 - p).
    A new mask is drawn at every call in training; eval mode is the identity.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1.0 - self.p)  # [B, 1, D]: shared over T
        return x * mask / (1.0 - self.p)


def embedding_dropout(weight: torch.Tensor, ids: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look up `ids` [B, T] in `weight` [V, E] after dropping whole words: -> [B, T, E].

    Merity et al. (2018) §4.3 (after Gal & Ghahramani 2016): each row of the embedding matrix (a word
    type, not an occurrence) is zeroed with probability p and the kept rows are scaled by 1 / (1 - p),
    so every occurrence of a dropped word disappears from this batch. Identity when not training.
    """
    if not training or p == 0.0:
        return F.embedding(ids, weight)
    keep = weight.new_empty(weight.size(0), 1).bernoulli_(1.0 - p) / (1.0 - p)  # [V, 1]
    return F.embedding(ids, weight * keep)


class WeightDrop(nn.Module):
    """DropConnect on the hidden-to-hidden weights of a fused RNN module (Merity et al. 2018 §2).

    Wan et al. (2013)'s DropConnect drops weights instead of activations; on U_h (W_hh) it regularises
    the recurrence itself, and because the mask is drawn once per forward call the same dropped
    matrix is used at every time step, so the fused nn.LSTM / cuDNN kernel still runs the whole
    window (no Python loop over time). `torch.func.functional_call` runs the wrapped module with the
    dropped tensor in place of its parameter; the parameter keeps its name (the state dict is that of
    the plain module) and its gradient flows through the mask. A new mask every call in training
    (kept weights scaled by 1 / (1 - p), as `F.dropout` does); eval mode runs the module unchanged.
    """

    def __init__(self, module: nn.RNNBase, weights: list[str] | tuple[str, ...], p: float) -> None:
        super().__init__()
        for name in weights:
            if not isinstance(getattr(module, name, None), nn.Parameter):
                raise ValueError(f"{type(module).__name__} has no parameter {name!r}")
        self.module, self.weights, self.p = module, tuple(weights), p

    def forward(self, *args):
        if not self.training or self.p == 0.0:
            return self.module(*args)
        dropped = {name: dropout(getattr(self.module, name), self.p, training=True) for name in self.weights}
        return torch.func.functional_call(self.module, dropped, args)


def lstm_memory_cells(lstm: nn.LSTM, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states h_t and memory cells c_t of a one-layer batch-first nn.LSTM: x [T, D] -> ([T, H], [T, H]).

    nn.LSTM returns every h_t but only the last c_t. The h_t come from the fused kernel; with them
    every gate of every step is one matrix product ([h_{t-1}; x_t] for all t at once), and only the
    element-wise c_t = f_t * c_{t-1} + i_t * g_t runs step by step (for visualisation: Karpathy et
    al. 2015 §4.2). `state` is (h0, c0), each [1, 1, H], as nn.LSTM takes it; None = zeros.
    """
    if lstm.num_layers != 1 or lstm.bidirectional or not lstm.batch_first:
        raise ValueError("lstm_memory_cells reads a one-layer, one-direction, batch-first nn.LSTM")
    hidden = lstm.hidden_size
    h, _ = lstm(x[None], state)  # [1, T, H]
    h = h[0]  # [1, T, H] -> [T, H]
    h0 = x.new_zeros(1, hidden) if state is None else state[0].reshape(1, hidden)  # [1, 1, H] -> [1, H]
    c = x.new_zeros(hidden) if state is None else state[1].reshape(hidden)  # [1, 1, H] -> [H]
    previous = torch.cat([h0, h[:-1]])  # [T, H]: h_{t-1}
    gates = x @ lstm.weight_ih_l0.T + previous @ lstm.weight_hh_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0  # [T, 4H]
    i, f, g, _ = gates.chunk(4, dim=1)  # PyTorch's gate order: input, forget, cell, output; each [T, H]
    i, f, g = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g)
    cells = x.new_empty(len(x), hidden)  # [T, H]
    for t in range(len(x)):
        c = torch.addcmul(f[t] * c, i[t], g[t])
        cells[t] = c
    return h, cells
