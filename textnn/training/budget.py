"""How many steps a run plans, and which new budgets a resumed run can honour exactly.

A run's learning-rate schedule spans its planned steps (`planned_steps`), so a `--resume` with a new
budget (train.epochs, max_steps, max_minutes) changes more than when the run stops. `check_resume_budget`
lets it through only when the run then goes on exactly as if it had been started with that budget.
"""

from __future__ import annotations

import math
import sys

from textnn.config import Config, TrainConfig
from textnn.errors import TextnnError
from textnn.runs import RunDir
from textnn.training import distributed
from textnn.training.checkpoint import read_trainer_state


def planned_steps(task, cfg: TrainConfig, processes: int = 1) -> int:
    """Optimizer steps in a run that nothing stops early: the sum over its epochs (variable-length
    BPTT gives each epoch its own number of windows), at most train.max_steps. Schedules span it.
    A step takes grad_accum micro-batches per process (training/distributed.py)."""
    total = 0
    for epoch in range(cfg.epochs):
        batches = task.num_train_batches(epoch)
        if batches == 0:
            raise TextnnError("the training data gave no batches; check data.train")
        total += math.ceil(batches / (cfg.grad_accum * processes))
        if cfg.max_steps and total >= cfg.max_steps:
            return cfg.max_steps
    return total


BUDGET = ("epochs", "max_steps", "max_minutes")


def check_resume_budget(run: RunDir, config: Config, task, extend: bool = False) -> None:
    """Refuse a --resume with a new budget (train.epochs, max_steps, max_minutes) unless the run can go
    on exactly as if it had been started with it. Call it after `run.check_resume(config)` (every
    other option is the run's own) and before `run.create` rewrites config.yaml.

    Refused: a budget the run is already past; a schedule that spans the planned steps (linear,
    triangular) when their number changes, since every later step's learning rate would change; and
    more training for a run that ended with an evaluation outside its schedule (stopped by
    max_steps or max_minutes between evaluations), which a longer run would not have made, unless
    `extend` (--extend) accepts that evaluation: the run goes on with it in its history, and says so.
    """
    saved, wanted = run.train_config(), config.train
    changed = [key for key in BUDGET if getattr(saved, key) != getattr(wanted, key)]
    if not changed:
        return
    state = read_trainer_state(run.checkpoint_file)
    processes = distributed.world()
    before, after = planned_steps(task, saved, processes), planned_steps(task, wanted, processes)
    change = ", ".join(f"train.{key}={getattr(wanted, key)!r} (was {getattr(saved, key)!r})" for key in changed)
    prefix = f"{run.path}: cannot resume with {change}:"
    remedy = f"resume with the old value{'s' if len(changed) > 1 else ''}, or start a new run with a new --run-dir"
    out_of_time = "max_minutes" in changed and wanted.max_minutes and state["seconds"] > 60 * wanted.max_minutes
    if after < state["step"] or out_of_time:
        raise TextnnError(f"{prefix} the run is already past that budget (step {state['step']}, "
                          f"{state['seconds'] / 60:.1f} minutes); {remedy}")
    if wanted.scheduler in ("linear", "triangular") and after != before:  # constant, inverse_sqrt: step alone
        raise TextnnError(f"{prefix} the {wanted.scheduler} schedule spans the planned steps ({before} -> {after}), "
                          f"so the learning rate of every later step would change; {remedy}")
    if state.get("unscheduled_evaluation") and after > state["step"]:
        unscheduled = (f"the run ended at step {state['step']} with a dev evaluation outside its schedule, which a "
                       f"run given this budget from the start would not have made")
        if not extend:
            raise TextnnError(f"{prefix} {unscheduled}; {remedy}, or pass --extend to go on with that evaluation "
                              f"kept")
        if distributed.is_main():
            print(f"{run.path}: extending with {change}: {unscheduled}; it stays in the run's history (it may have "
                  f"picked the best weights so far), so the result is not bit for bit that run's", file=sys.stderr)
