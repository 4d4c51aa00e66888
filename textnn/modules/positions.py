"""Position information for Transformers: fixed sinusoids and learned position embeddings.

A Transformer's attention is blind to order, so every family adds where a token sits:
- the MT Transformer adds sinusoids of absolute positions to its embeddings (Vaswani et al. 2017, §3.5);
- Transformer-XL encodes relative distances with the same sinusoids inside its attention scores
  (Dai et al. 2019, §3.3; `modules.relative_attention`);
- GPT and BERT learn one vector per absolute position (Radford et al. 2018 §3.1; Devlin et al. 2019 §3).
"""

# T positions, D model dim, P number of learned positions

from __future__ import annotations

import torch
from torch import nn


def sinusoid_encoding(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoid encodings of (absolute or relative) positions: float positions [T] -> [T, dim], dim even.

    The frequencies of Vaswani et al. (2017, §3.5), 1 / 10000^(2k/dim); all sines come before all
    cosines, as in Dai et al.'s code. The paper interleaves them (sin in even, cos in odd dimensions):
    a fixed permutation of the dimensions, which nothing downstream of a learned layer can tell apart.
    """
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim))
    angles = positions[:, None] * inv_freq[None, :]  # [T, 1] * [1, dim/2] -> [T, dim/2]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # [T, dim]


def sinusoid_positions(offset: int, length: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """The sinusoids of the absolute positions offset .. offset + length - 1: [T, dim] float32."""
    positions = torch.arange(offset, offset + length, device=device, dtype=torch.float32)  # [T]
    return sinusoid_encoding(positions, dim)


class LearnedPositions(nn.Embedding):
    """One learned vector per absolute position 0 .. P-1 (GPT, BERT): an `nn.Embedding` [P, D] whose
    forward takes the first position and the number of positions instead of ids.

    It stays an `nn.Embedding` so that its weight keeps the name `weight` in the state dict (and with
    it Hugging Face's `wpe` / `position_embeddings` mapping) and is initialised and exempted from
    weight decay like every other embedding table. Callers check `length` against P themselves, with
    the config key to change in the message.
    """

    def __init__(self, max_positions: int, dim: int) -> None:
        super().__init__(max_positions, dim)

    def forward(self, offset: int, length: int) -> torch.Tensor:  # type: ignore[override]
        """The vectors of positions offset .. offset + length - 1: [T, D]."""
        positions = torch.arange(offset, offset + length, device=self.weight.device)  # [T]
        return super().forward(positions)
