"""Layers of a frozen encoder as features: the scalar mix, and the ways of combining layers BERT compared.

ScalarMix (Peters et al. 2018, "Deep contextualized word representations", §3.2 Eq. 1): a task-specific
weighted sum of an encoder's L layers, gamma * sum_l softmax(w)_l h_l, with w and gamma learned; the
softmax keeps the weights a convex combination and gamma rescales the result for the task.

`combine_layers` gives the feature-based variants of Devlin et al. 2019 §5.3 / Table 7: the last
hidden layer, the sum of the last four, their concatenation, or a scalar mix of all of them.
"""

# L layers, B batch, T tokens, D layer width

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYER_COMBINATIONS = ("last", "sum4", "cat4", "mix")


class ScalarMix(nn.Module):
    """gamma * sum_l softmax(w)_l * layers[l] over L layers of the same shape (w = 0: an even mix at first).

    layer_norm: normalise each layer's vector at each position (zero mean, unit variance over D; Ba et
    al. 2016) before weighting, which Peters et al. 2018 §3.2 found to help in some cases: the biLM's
    layers have different scales, and the weights then compare like with like.
    """

    def __init__(self, num_layers: int, layer_norm: bool = False) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))
        self.layer_norm = layer_norm

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        if len(layers) != self.weights.numel():
            raise ValueError(f"ScalarMix of {self.weights.numel()} layers got {len(layers)}")
        if self.layer_norm:
            layers = [F.layer_norm(layer, layer.shape[-1:]) for layer in layers]
        stacked = torch.stack(layers)  # L x [B, T, D] -> [L, B, T, D]
        weights = torch.softmax(self.weights, dim=0).view(-1, *([1] * (stacked.dim() - 1)))  # [L] -> [L, 1, 1, 1]
        return self.gamma * (weights * stacked).sum(dim=0)  # [B, T, D]


def combined_size(how: str, width: int, num_layers: int) -> int:
    """Feature size of `combine_layers(how)` on `num_layers` layers `width` wide."""
    return min(4, num_layers) * width if how == "cat4" else width


def combine_layers(layers: list[torch.Tensor], how: str, mix: ScalarMix | None = None) -> torch.Tensor:
    """last, sum4 (sum of the last four), cat4 (their concatenation, [B, T, 4D]) or mix (the scalar mix);
    an encoder with fewer than four layers gives all it has to sum4 and cat4."""
    if how == "last":
        return layers[-1]
    if how == "mix":
        return mix(layers)
    last4 = layers[-4:]
    if how == "sum4":
        return torch.stack(last4).sum(dim=0)  # 4 x [B, T, D] -> [B, T, D]
    return torch.cat(last4, dim=-1)  # 4 x [B, T, D] -> [B, T, 4D]
