"""What every model shares: the output dataclass and the hook the trainer calls after a step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ModelOutput:
    """What `forward` returns, whatever the model (DESIGN.md convention 5).

    logits: [B, C] for classifiers, [B, T, V] for language models.
    state: recurrent state to carry to the next window (language models), else None.
    regularizer: a scalar added to the mean training loss (e.g. AWD-LSTM's activation regularization),
        returned in training mode only; None when the model has none.
    """

    logits: torch.Tensor
    state: object | None = None
    regularizer: torch.Tensor | None = None


class TextnnModel(nn.Module):
    """Base class of every textnn model: an `nn.Module` plus one optional hook."""

    def after_optimizer_step(self) -> None:
        """Apply parameter constraints after each optimizer step (e.g. Kim 2014's max-norm). No-op by default."""

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)
