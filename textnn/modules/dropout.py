"""Dropout (Srivastava et al. 2014) whose mask is drawn faster on the CPU.

In training each element is kept with probability 1 - p and scaled by 1 / (1 - p), the rest set to 0;
in eval mode the input passes unchanged: the function of `nn.Dropout`. torch draws a CPU mask with
`bernoulli_`, which costs about twice as much as drawing uniform numbers and comparing them with p,
and dropout masks were 7-14% of a training step of the attention families (docs/RESULTS.md, "Where a
training step's time goes"). So on the CPU the mask here is `uniform >= p`: a dropout forward and
backward runs 1.3-1.4x faster, a training step up to 6% (`python benchmarks/dropout_speed.py`). On
other devices torch's own fused kernel runs. The random numbers drawn differ from torch's, so a seeded
run gives other weights than `nn.Dropout` would, equally random.

The dropout inside `F.scaled_dot_product_attention` stays torch's: computing attention by hand to
use this mask there was no faster for whole training steps (measured: -2% to +3% by family).

`Dropout` is an `nn.Dropout` (same `p`, same repr, no parameters) whose forward is `dropout`.
`DRAW_ON_CPU = False` gives every CPU mask back to torch (`benchmarks/dropout_speed.py` compares the two).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DRAW_ON_CPU = True  # draw CPU dropout masks here (uniform >= p); False: torch draws them (bernoulli_)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the mask drawn as uniform >= p on the CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not DRAW_ON_CPU or p >= 1.0:
        return F.dropout(x, p, True)
    return x * cpu_mask(x, p)


def cpu_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """1 / (1 - p) where an element is kept (probability 1 - p), else 0; x's shape and dtype. The uniform
    numbers are float32 whatever x's dtype, so that p is not rounded to bf16."""
    keep = torch.rand(x.shape, device=x.device) >= p  # [*x.shape]
    return keep.to(x.dtype).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """`nn.Dropout` computed by `dropout` (the faster CPU mask)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
