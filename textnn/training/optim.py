"""Optimizers and learning-rate schedules.

A schedule is a pure function of the step (`lr_factor`), so resuming needs only the step count:
there is no scheduler object whose hidden state could drift from the checkpoint.

An optimizer may also react to the dev metric: the trainer calls `after_evaluation` after every dev
evaluation and evaluates inside `evaluation_weights`. Only NT-ASGD uses them (below); for every
other optimizer both do nothing.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from textnn.config import TrainConfig


def build_optimizer(parameters: list[torch.nn.Parameter], cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    params = [p for p in parameters if p.requires_grad]
    if cfg.optimizer == "ntasgd":
        return NTASGD(params, lr=cfg.lr, nonmono=cfg.ntasgd_nonmono, momentum=cfg.momentum,
                      weight_decay=cfg.weight_decay)
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


class NTASGD(torch.optim.SGD):
    """Non-monotonically triggered averaged SGD (Merity, Keskar & Socher 2018, §3 and Algorithm 1).

    Plain SGD until `observe` sees a dev score that is worse than the best of all evaluations but
    the last `nonmono` ones; from the next step on it also keeps the running average of every
    parameter over the steps taken since (averaged SGD, Polyak & Juditsky 1992), and evaluation and
    the saved best weights use that average (`evaluation_weights`). The trigger needs no schedule
    to tune: it waits until the dev score has stopped improving for a while.

    Everything it remembers is optimizer state, so a checkpoint restores it exactly: the per-parameter
    average `ax` is a state tensor, and the dev history, whether averaging is on and the number of
    averaged steps live in the first parameter group (plain JSON values).
    """

    def __init__(self, params, lr: float, nonmono: int = 5, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.param_groups[0].update(nonmono=nonmono, history=[], averaging=False, averaged_steps=0)

    @property
    def averaged(self) -> bool:
        """True once an average exists (averaging triggered and at least one step taken since)."""
        return self.param_groups[0]["averaged_steps"] > 0

    def observe(self, value: float, higher_is_better: bool = False) -> bool:
        """Record a dev score; switch to averaging (return True) when it is worse than the best of all
        scores but the last `nonmono` (Algorithm 1's condition; the authors' code compares the same way)."""
        group = self.param_groups[0]
        if group["averaging"]:
            return False
        score = -value if higher_is_better else value  # lower is better from here on
        history, nonmono = group["history"], group["nonmono"]
        triggered = len(history) > nonmono and score > min(history[:len(history) - nonmono])
        history.append(score)
        group["averaging"] = triggered
        return triggered

    @torch.no_grad()
    def step(self, closure=None):
        """An SGD step; while averaging, then fold the new parameters into their running average."""
        loss = super().step(closure)
        group0 = self.param_groups[0]
        if group0["averaging"]:
            group0["averaged_steps"] += 1
            count = group0["averaged_steps"]
            for group in self.param_groups:
                for param in group["params"]:
                    state = self.state[param]
                    if count == 1 or "ax" not in state:
                        state["ax"] = param.detach().clone()
                    else:
                        state["ax"].lerp_(param, 1.0 / count)  # ax += (p - ax) / count: the mean so far
        return loss


@contextmanager
def evaluation_weights(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Inside: the parameters an evaluation should see. NT-ASGD swaps in its averages (Merity et al.
    2018 evaluate and save the averaged model) and puts the trained values back on exit; no-op otherwise."""
    if not isinstance(optimizer, NTASGD) or not optimizer.averaged:
        yield
        return
    saved = []
    with torch.no_grad():
        for group in optimizer.param_groups:
            for param in group["params"]:
                if "ax" in optimizer.state[param]:
                    saved.append((param, param.detach().clone()))
                    param.copy_(optimizer.state[param]["ax"])
    try:
        yield
    finally:
        with torch.no_grad():
            for param, value in saved:
                param.copy_(value)


def after_evaluation(optimizer: torch.optim.Optimizer, value: float, higher_is_better: bool) -> str | None:
    """Tell the optimizer the dev score; returns a line to show when it changes behaviour, else None."""
    if isinstance(optimizer, NTASGD) and optimizer.observe(value, higher_is_better):
        return (f"NT-ASGD: dev score {value:.4f} is worse than the best before the last "
                f"{optimizer.param_groups[0]['nonmono']} evaluations; averaging the weights from now on")
    return None
