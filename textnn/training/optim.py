"""Optimizers, parameter groups and learning-rate schedules.

A schedule is a pure function of the step (`lr_factor`), so resuming needs only the step count:
there is no scheduler object whose hidden state could drift from the checkpoint.

Parameter groups (`parameter_groups`) follow the model's `layer_groups()`, bottom (embeddings) to
top (head): each optimizer group keeps its learning-rate multiplier (`lr_scale`, discriminative
fine-tuning) and its depth below the top (gradual unfreezing); `set_lr` sets the base rate and
every group derives its own from it. Frozen layer groups stay in the optimizer, in groups of their
own, and only lose their gradients before each step (`freeze_layers`): see there for why.

An optimizer may also react to the dev metric: the trainer calls `after_evaluation` after every dev
evaluation and evaluates inside `evaluation_weights`. Only NT-ASGD uses them (below); for every
other optimizer both do nothing.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from textnn.config import TrainConfig


def parameter_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    """The optimizer's parameter groups: one per layer group of `model.layer_groups()`, bottom first,
    each split in two (decayed, then `<name>.no_decay`) when train.no_decay is on; empty ones left out.

    A parameter shared by two layer groups (a tied output layer is the embedding matrix) belongs to
    the highest one: a language model's tied matrix is its output layer and learns at the head's
    rate, as in the ULMFiT authors' fastai split, where the embedding and the tied decoder form the
    top group of an LM and the bottom group only under a classifier. A parameter a model registers
    on itself, outside every layer group, belongs to the top group; one with requires_grad False to
    none. The order is that of the layer groups, then the model's modules, so a checkpoint's
    optimizer state lines up with a new optimizer built the same way. Besides what
    torch.optim reads (params, lr, weight_decay) each group holds `name`, `depth` (layer groups
    between it and the top: 0 for the head), `lr_scale` (layer_lr_decay ** depth) and `frozen`.
    """
    named = [(name, [param for member in members  # modules, or parameters a module registers on itself
                     for param in ([member] if isinstance(member, nn.Parameter) else member.parameters())])
             for name, members in model.layer_groups() or [("model", [])]]
    owner = {id(param): index for index, (_, params) in enumerate(named) for param in params}  # the last wins
    owner.update({id(p): len(named) - 1 for p in model.parameters() if id(p) not in owner})
    layers: list[tuple[str, list[nn.Parameter]]] = [(name, []) for name, _ in named]
    seen: set[int] = set()
    for param in [p for _, params in named for p in params] + list(model.parameters()):
        if id(param) not in seen:
            seen.add(id(param))
            layers[owner[id(param)]][1].append(param)
    # Biases and norm gains set offsets and scales, so decay only pulls them towards 0 for nothing
    # (BERT's reference code exempts them too); an embedding row is trained only in the steps its
    # token occurs in but decayed in every one, so decay would shrink the vectors of rare tokens.
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    groups = []
    for index, (name, params) in enumerate(layers):
        depth = len(layers) - 1 - index
        trainable = [p for p in params if p.requires_grad]
        exempt = {id(p) for p in trainable if cfg.no_decay and (p.ndim < 2 or id(p) in tables)}
        for group_name, group_params, decay in (
                (name, [p for p in trainable if id(p) not in exempt], cfg.weight_decay),
                (f"{name}.no_decay", [p for p in trainable if id(p) in exempt], 0.0)):
            if group_params:
                scale = cfg.layer_lr_decay ** depth
                groups.append({"params": group_params, "name": group_name, "depth": depth, "lr_scale": scale,
                               "frozen": False, "lr": cfg.lr * scale, "weight_decay": decay})
    return groups


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer train.optimizer names, over `parameter_groups(model, cfg)`."""
    params = parameter_groups(model, cfg)
    if cfg.optimizer == "ntasgd":
        return NTASGD(params, lr=cfg.lr, nonmono=cfg.ntasgd_nonmono, momentum=cfg.momentum,
                      weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    # Adam and AdamW run fused: one kernel over all parameters (CUDA and CPU alike), instead of a few
    # tensor operations per parameter. On one CPU thread a BERT-Mini update takes 8 ms fused against
    # 33 ms per parameter and 44 ms with foreach (docs/RESULTS.md, CPU speed); the weights agree with
    # the per-parameter update to float rounding (2e-7 after 5 steps).
    fused = device.type in ("cuda", "cpu")
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay,
                                fused=fused)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay,
                                 fused=fused)
    # Adadelta (Zeiler 2012) with rho 0.95 and eps 1e-6, the setting Kim (2014, §3.1) trained with.
    return torch.optim.Adadelta(params, lr=cfg.lr, rho=cfg.adadelta_rho, eps=1e-6, weight_decay=cfg.weight_decay)


def lr_factor(step: int, total_steps: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based) of `total_steps`."""
    if cfg.scheduler == "inverse_sqrt":
        # Vaswani et al. (2017) §5.3 eq. 3: lrate = d^-0.5 * min(n^-0.5, n * warmup^-1.5) for step
        # n = step + 1, a linear rise over the warmup then a decay with 1/sqrt(n). Divided by its peak
        # (at n = warmup) it is a factor of train.lr, so train.lr is the peak rate; the paper's own
        # schedule is train.lr = (d_model * warmup_steps)^-0.5 (base, d 512, 4000 steps: 7.0e-4).
        # It does not depend on the length of training, so a longer budget does not change it.
        n, warmup = step + 1, cfg.warmup_steps
        return min(n / warmup, (warmup / n) ** 0.5)
    if cfg.scheduler == "constant" or total_steps <= 0:
        return 1.0
    if cfg.scheduler == "linear":
        warmup = cfg.warmup_steps
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    return slanted_triangular(step, total_steps, cfg.stlr_cut_frac, cfg.stlr_ratio, cfg.warmup_steps)


def slanted_triangular(step: int, total_steps: int, cut_frac: float = 0.1, ratio: float = 32.0,
                       cut: int = 0) -> float:
    """Slanted triangular learning rates (Howard & Ruder 2018, ULMFiT §3.2, eq. 3), as a factor of the peak:

        cut = floor(T * cut_frac)
        p   = t / cut                                   if t < cut
              1 - (t - cut) / (cut * (1 / cut_frac - 1))  otherwise
        lr  = lr_max * (1 + p * (ratio - 1)) / ratio

    for step t of T: a short linear rise from lr_max / ratio to lr_max, then a long linear fall back.
    cut * (1 / cut_frac - 1) is T - cut whenever T * cut_frac is a whole number; T - cut is used
    always, so that for other T the fall still ends at lr_max / ratio instead of going below it
    (to a negative rate, for the paper's formula taken literally). `cut` > 0 sets the rising edge in
    steps instead (train.warmup_steps)."""
    # the small epsilon keeps floor(29.0) from reading 0.29 * 100 = 28.999999999999996 as 28
    cut = cut or max(1, math.floor(total_steps * cut_frac + 1e-9))
    p = step / cut if step < cut else 1 - (step - cut) / max(1, total_steps - cut)
    return (1 + max(0.0, p) * (ratio - 1)) / ratio


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the base learning rate: each group gets lr * its lr_scale, or 0 while it is frozen."""
    for group in optimizer.param_groups:
        group["lr"] = 0.0 if group["frozen"] else lr * group["lr_scale"]


def trainable_depth(step: int, epoch: int, cfg: TrainConfig) -> int | None:
    """How many layer groups from the top train at step `step` (0-based) of epoch `epoch`; None = all.

    Gradual unfreezing (Howard & Ruder 2018, ULMFiT §3.3): the head alone first, then one more layer
    group every train.unfreeze epochs or steps. A pure function of (step, epoch), so a resumed run
    freezes exactly what the uninterrupted one did.
    """
    if not cfg.unfreeze:
        return None
    return 1 + (epoch if cfg.unfreeze_unit == "epoch" else step) // cfg.unfreeze


def freeze_layers(optimizer: torch.optim.Optimizer, step: int, epoch: int, cfg: TrainConfig) -> None:
    """Mark the groups gradual unfreezing holds back at this step and drop their gradients.

    Call it after backward and before clipping (the clipped norm is that of what will be updated).
    A torch optimizer skips a parameter whose gradient is None altogether: no update, no weight
    decay, no momentum or Adam moments, no step count. So a frozen layer stays bit-identical and
    its optimizer state empty until it first trains (NT-ASGD's running average of the weights aside),
    as if it only then joined; a learning rate of 0
    alone would not do that (Adam's moments and SGD's momentum would still take in its gradients).
    The groups themselves never change, so the optimizer state has the same layout at every step
    and a checkpoint from any step loads exactly. requires_grad is left alone: DDP fixes the set of
    parameters it reduces when it wraps the model, and torch.compile guards on it.
    """
    depth = trainable_depth(step, epoch, cfg)
    for group in optimizer.param_groups:
        group["frozen"] = depth is not None and group["depth"] >= depth
        if group["frozen"]:
            for param in group["params"]:
                param.grad = None


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
