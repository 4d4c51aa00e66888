"""Optimizers and learning-rate schedules.

A schedule is a pure function of the step (`lr_factor`), so resuming needs only the step count:
there is no scheduler object whose hidden state could drift from the checkpoint.
"""

from __future__ import annotations

import torch

from textnn.config import TrainConfig


def build_optimizer(parameters: list[torch.nn.Parameter], cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    params = [p for p in parameters if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        # The fused kernel is one launch for all parameters; it exists for CUDA tensors only.
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=device.type == "cuda")
    # Adadelta (Zeiler 2012) with rho 0.95 and eps 1e-6, the setting Kim (2014, §3.1) trained with.
    return torch.optim.Adadelta(params, lr=cfg.lr, rho=cfg.adadelta_rho, eps=1e-6, weight_decay=cfg.weight_decay)


def lr_factor(step: int, total_steps: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based) of `total_steps`."""
    if cfg.scheduler == "constant" or total_steps <= 0:
        return 1.0
    if cfg.scheduler == "linear":
        warmup = cfg.warmup_steps
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    # Slanted triangular (Howard & Ruder 2018, ULMFiT eq. 3): a short linear rise over cut_frac of
    # training, then a long linear fall; ratio = 32 bounds how far below the peak the lr starts/ends.
    ratio = 32.0
    cut = cfg.warmup_steps or max(1, int(0.1 * total_steps))
    p = step / cut if step < cut else 1 - (step - cut) / max(1, total_steps - cut)
    return (1 + p * (ratio - 1)) / ratio


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
