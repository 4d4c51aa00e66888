"""Highway layers (Srivastava, Greff & Schmidhuber 2015, "Training Very Deep Networks", §2 Eq. 3):

    y = t * g(W_H x + b_H) + (1 - t) * x,    t = sigmoid(W_T x + b_T)

The transform gate t decides, per feature, how much of the layer's new value g(...) replaces the input
carried through unchanged. §2.2: a negative transform-gate bias makes every layer start close to
the identity, so a deep stack trains; Kim et al. (2016, "Character-Aware Neural Language Models",
§2.3), whose character CNN + highway ELMo reads, use g = ReLU and b_T = -2.
"""

# N rows (words), D features

from __future__ import annotations

import torch
from torch import nn


class Highway(nn.Module):
    """`num_layers` highway layers of width `size` with ReLU: [..., D] -> [..., D]."""

    def __init__(self, size: int, num_layers: int, gate_bias: float = -2.0) -> None:
        super().__init__()
        # One matrix per layer computes both W_H x + b_H (first D rows) and W_T x + b_T (last D rows).
        self.layers = nn.ModuleList(nn.Linear(size, 2 * size) for _ in range(num_layers))
        with torch.no_grad():
            for layer in self.layers:
                layer.bias[size:].fill_(gate_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            value, gate = layer(x).chunk(2, dim=-1)  # [..., 2D] -> 2 x [..., D]
            t = torch.sigmoid(gate)
            x = t * torch.relu(value) + (1.0 - t) * x
        return x
