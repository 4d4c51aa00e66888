"""Multi-width 1-D convolutions over a sequence with ReLU and masked max-over-time pooling.

The sentence-classification CNN of Kim (2014, §2): each filter of width h slides over every window of
h consecutive words ("narrow" convolution), and each feature map is reduced to its maximum over time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from textnn.modules.masking import lengths_from_mask
from textnn.modules.pooling import masked_max

# B batch, T sequence length, D input dim, F filters per width, W number of widths, N windows


class MultiWidthConv(nn.Module):
    """Conv1d filters of several widths -> ReLU -> max over valid windows, concatenated: [B, W*F].

    `num_filters` is one count for every width (Kim 2014), or one count per width (the character CNN
    of Kim et al. 2016 and ELMo, whose wider filters are more numerous); the output is then their sum.

    A window is valid when it starts at a real token and lies inside the sequence; a sequence shorter
    than a filter is padded with zero vectors up to the filter width, so it still yields one window
    (Kim's own code pads every sentence with zero vectors for the same reason). Pad positions are zeroed
    first, so a padded batch gives exactly what each sentence gives alone.
    """

    def __init__(self, in_dim: int, num_filters: int | list[int] | tuple[int, ...],
                 widths: list[int] | tuple[int, ...]) -> None:
        super().__init__()
        self.widths = tuple(int(w) for w in widths)
        counts = [int(num_filters)] * len(self.widths) if isinstance(num_filters, int) else [int(n) for n in num_filters]
        if len(counts) != len(self.widths):
            raise ValueError(f"{len(counts)} filter counts for {len(self.widths)} widths")
        self.convs = nn.ModuleList(nn.Conv1d(in_dim, n, w) for n, w in zip(counts, self.widths))
        self.output_size = sum(counts)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x.masked_fill(~mask.unsqueeze(-1), 0.0)  # [B, T, D], zero vectors at pad positions
        short = max(self.widths) - x.size(1)
        if short > 0:
            x = F.pad(x, (0, 0, 0, short))  # [B, T, D] -> [B, max(widths), D]
        x = x.transpose(1, 2)  # [B, T, D] -> [B, D, T]: Conv1d wants channels first
        lengths = lengths_from_mask(mask)  # [B]
        pooled = []
        for width, conv in zip(self.widths, self.convs):
            feats = F.relu(conv(x)).transpose(1, 2)  # [B, F, N] -> [B, N, F]
            windows = (lengths - width + 1).clamp(min=1)  # [B]: at least one (zero-padded) window
            valid = torch.arange(feats.size(1), device=x.device).unsqueeze(0) < windows.unsqueeze(1)  # [B, N]
            pooled.append(masked_max(feats, valid))  # [B, F]
        return torch.cat(pooled, dim=-1)  # [B, W*F]
