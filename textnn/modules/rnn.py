"""A recurrent encoder over fused nn.RNN / nn.LSTM / nn.GRU with packed sequences.

No Python loop over time (DESIGN.md convention 8): the whole padded batch goes through one fused
(cuDNN on GPU) call, packed so that padding is never read, so a padded batch gives the same states as
each sequence alone.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

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
        # pack_padded_sequence wants lengths on the CPU and > 0; an empty row runs over its pad position.
        lengths = lengths_from_mask(mask).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # [B, T, K*H]
        return out
