"""Weight initialisation shared by the families that draw every layer from one normal distribution."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn


def init_normal(modules: Iterable[nn.Module], std: float, skip: Iterable[nn.Parameter] = ()) -> None:
    """N(0, std^2) for the weight of every Linear and Embedding among `modules`, zero Linear biases.

    GPT (Radford et al. 2018 §4.1: "a simple weight initialization of N(0, 0.02)") and the
    Transformer-XL authors' code (init_std 0.02) start every layer this way. Parameters in `skip`
    are left as they are: a head's output weight tied to an embedding the encoder already drew.
    """
    skipped = {id(param) for param in skip}
    for module in modules:
        if isinstance(module, (nn.Linear, nn.Embedding)) and id(module.weight) not in skipped:
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None and id(module.bias) not in skipped:
            nn.init.zeros_(module.bias)
