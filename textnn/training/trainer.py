"""One training loop for every task.

The trainer never knows which model or task it trains. It reads a `tasks.base.BatchTask` (the abstract
class declares each method and what it must return): `train_batches(epoch)` (the same list for the same
epoch and seed: exact resume), `num_train_batches(epoch)`, `loss(model, batch)` (the SUM of the loss
over batch.count terms), `evaluate(model, split, bootstrap_samples)`, `has_split(split)`,
`default_metric`, and `carried_state()` / `restore_carried_state(state)` (a stateful LM's recurrent
state, saved in every checkpoint so that a resume is exact). A batch is a `data.batching.Batch`:
`.count` (loss terms), `.num_tokens` (throughput), `.to(device)` and `.lr_scale` (the first batch of a
step decides the step's learning-rate factor). Because `task.loss` returns a sum, a step of
`grad_accum` micro-batches divides by the total count of all of them: the gradient equals that of one
big batch.

Several processes (torchrun, training/distributed.py): a step takes `grad_accum * N` micro-batches
of the epoch list and each process runs its share of them; the count that divides the loss is that
of the whole step over all processes, so the gradient is still that of one big batch. Process 0
writes and evaluates, and all processes take the same decisions.

What can go wrong mid-run is contained: a step whose loss is not finite is skipped before it can
touch the weights (after train.max_bad_steps in a row the run stops), a NaN dev score is never the
best, and Ctrl-C during a dev evaluation abandons it at the next batch (the resumed run redoes it).
SIGTERM (what `docker stop`, Slurm and Kubernetes send before they kill) is handled as Ctrl-C is.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import torch

from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.runs import RunDir
from textnn.training import distributed, precision
from textnn.training.budget import planned_steps
from textnn.training.checkpoint import load_carried_state, load_weights, save_weights
from textnn.training.optim import (after_evaluation, build_optimizer, evaluation_weights, freeze_layers, lr_factor,
                                   set_lr)
from textnn.training.progress import counting_batches
# TrainingInterrupted: experiment.py and cli.py import it from here
from textnn.training.session import TrainingInterrupted, TrainingSession, say, scalars, train_record_due  # noqa: F401


class EvaluationInterrupted(Exception):
    """Ctrl-C arrived during an evaluation, which was abandoned before it gave a result."""


@dataclass
class TrainResult:
    steps: int
    epochs_completed: int
    train_seconds: float
    examples_per_second: float
    tokens_per_second: float
    best_metric: float | None
    best_step: int | None
    metric_name: str
    higher_is_better: bool = True  # direction of metric_name
    parameters: int = 0
    dev: dict = field(default_factory=dict)
    test: dict = field(default_factory=dict)
    selected_on: str = "dev"  # the split best_metric is of, that chose the kept weights: dev or validation
    stopped: str = "completed"
    skipped_steps: int = 0  # optimizer steps skipped for a non-finite training loss
    precision: str = "fp32"  # what the forward passes ran in: fp32 or bf16 (autocast)
    device: str = "cpu"  # where it trained (train.device resolved: auto is cuda or cpu)


def resolve_device(name: str, option: str = "config key train.device") -> torch.device:
    """The torch device `name` names (auto, cpu, cuda, cuda:N); an absent GPU, or a name that is none of these,
    is a TextnnError naming `option` (where the name was given)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TextnnError(f"{option}: '{name}' requested but CUDA is not available; use cpu")
        index = name.partition(":")[2]
        if index and not index.isdigit():
            raise TextnnError(f"{option}: '{name}' is not a device; use auto, cpu, cuda or cuda:N")
        if int(index or 0) >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise TextnnError(f"{option}: '{name}' requested but this machine has {count} GPU(s); "
                              f"use cuda:0 .. cuda:{count - 1}")
    elif name != "cpu":
        raise TextnnError(f"{option}: '{name}' is not a device; use auto, cpu, cuda or cuda:N")
    return torch.device(name)


def is_better(value: float, best: float | None, higher_is_better: bool) -> bool:
    """Whether a dev score improves on the best so far; NaN never does."""
    if math.isnan(value):  # diverged weights: never worth keeping, not even as the first score
        return False
    if best is None:
        return True
    return value > best if higher_is_better else value < best


class Trainer:
    def __init__(self, task, model: torch.nn.Module, cfg: TrainConfig, run: RunDir):
        self.task, self.cfg, self.run = task, cfg, run
        self.device = distributed.local_device(resolve_device(cfg.device))
        self.model = model.to(self.device)
        self.precision = precision.resolve(cfg.precision, self.device)
        # Several processes: the forward pass goes through DDP, which sums the gradients across them.
        self._ddp = distributed.wrap(self.model, self.device)
        self._gradients_checked = False
        self._logged_frozen: tuple | None = None  # frozen flags of the groups when last logged (_log_groups)
        wrapped = self._ddp if self._ddp is not None else self.model
        self.forward_model = torch.compile(wrapped) if cfg.compile else wrapped
        self.optimizer = build_optimizer(self.model, cfg, self.device)
        self.metric = cfg.metric or task.default_metric
        self.higher_is_better = task.higher_is_better(self.metric)
        # The split the run selects on (kept weights, early stopping, the best so far): a validation set when
        # the task has one (data.validation, data.validation_split), which leaves dev and test to be evaluated
        # once, on the kept weights; else dev, whose final numbers are then those it was selected by.
        self.selected_on = "validation" if task.has_split("validation") else "dev"
        self._best_dev: dict | None = None  # selected_on's metrics of the saved best weights, from this process
        # Called after each evaluation on the split the run selects on, with the step and the value of the run's
        # metric there: True stops the run at once, as `pruned` (a search over settings that gives up on this
        # one: textnn/sweep.py). A pruned run keeps its best weights so far and evaluates neither dev nor test.
        # One process only: every process would have to give the same answer.
        self.after_selection: Callable[[int, float], bool] | None = None
        self._pruned = False
        self.base_lr = cfg.lr  # of the last step, before each parameter group's own scale
        self.batches_per_step = cfg.grad_accum * distributed.world()  # micro-batches, over all processes
        self.total_steps = planned_steps(task, cfg, distributed.world())
        # run.json, Ctrl-C and SIGTERM, checkpoints, the progress bar, TensorBoard (training/session.py)
        self.session = TrainingSession(run, cfg, self.model, self.optimizer, self.total_steps,
                                       unit="step or evaluation")

    # ----------------------------------------------------------------------------------------------
    def _autocast(self):
        return precision.autocast(self.precision, self.device)

    def _train_step(self, group: list, step: int, epoch: int = 0) -> float:
        """One optimizer step over a group of micro-batches; returns the mean loss per term.

        Several processes: `group` is the step's micro-batches over all of them; this process runs
        its share (`distributed.share`) and the returned loss is the whole step's.
        """
        self.model.train()
        total = sum(batch.count for batch in group)
        mine, weight = distributed.share(group)
        loss_sum = 0.0
        for index, batch in enumerate(mine):
            batch = batch.to(self.device)
            with self._sync_gradients(last=index == len(mine) - 1):
                with self._autocast():
                    loss = self.task.loss(self.forward_model, batch)
                scaled = loss / total
                if self._ddp is not None:
                    # DDP AVERAGES the gradients of the N processes, and each process's loss is its part
                    # of the step's sum / total; times N, the average is the sum: the gradient of one big
                    # batch. Weight 0: a process with no micro-batch of its own (see distributed.deal).
                    scaled = scaled * (weight * distributed.world())
                scaled.backward()
            if weight:
                loss_sum += float(loss.detach())
        if self._ddp is not None:
            self._check_gradients()
            loss_sum = distributed.all_reduce_sum(loss_sum)  # the same loss (and finiteness) on every process
        if not math.isfinite(loss_sum):  # its gradient would put NaN into every weight and moment: skip it
            self.optimizer.zero_grad(set_to_none=True)
            return loss_sum / total
        freeze_layers(self.optimizer, step, epoch, self.cfg)  # gradual unfreezing: before clipping
        if self.cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.base_lr = self.cfg.lr * lr_factor(step, self.total_steps, self.cfg) * group[0].lr_scale
        set_lr(self.optimizer, self.base_lr)  # each parameter group scales it (training/optim.py)
        self._log_groups(step)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.after_optimizer_step()
        return loss_sum / total

    def _log_groups(self, step: int) -> None:
        """With discriminative rates or gradual unfreezing: at the first step and whenever unfreezing
        changes what trains, each parameter group's actual learning rate (0 while frozen) and frozen
        state, in metrics.jsonl and one status line, so a run shows that they are what the config asked
        for. (A resumed run starts from the flags of its checkpoint, so it logs what the uninterrupted
        run logged.)"""
        if not self.cfg.unfreeze and self.cfg.layer_lr_decay == 1:
            return
        frozen = tuple(group["frozen"] for group in self.optimizer.param_groups)
        if frozen == self._logged_frozen:
            return
        self._logged_frozen = frozen
        groups = {group["name"]: {"lr": group["lr"], "frozen": group["frozen"]} for group in self.optimizer.param_groups}
        self.run.append_metrics({"split": "groups", "step": step + 1, "groups": groups})
        if len(groups) > 1:
            say(f"step {step + 1}: learning rate per layer group: " + ", ".join(
                f"{name} {'frozen' if g['frozen'] else format(g['lr'], '.2e')}" for name, g in groups.items()))

    def _sync_gradients(self, last: bool):
        """DDP: sum the gradients across processes in the backward pass of a step's last micro-batch only."""
        return self._ddp.no_sync() if self._ddp is not None and not last else nullcontext()

    def _check_gradients(self) -> None:
        """DDP (find_unused_parameters=False) needs every trained parameter in the loss; checked once."""
        if self._gradients_checked:
            return
        missing = [name for name, p in self.model.named_parameters() if p.requires_grad and p.grad is None]
        if missing:
            raise TextnnError(f"training with several processes needs every trained parameter to get a gradient, "
                              f"but {', '.join(missing[:4])} got none; this model cannot be trained under "
                              f"torchrun yet, train it in one process")
        self._gradients_checked = True

    def _save_checkpoint(self, state: dict) -> None:
        """Process 0 writes the checkpoint; the others reseed where a resume from it will (distributed.reseed)."""
        carried = distributed.gather_states(self.task.carried_state())  # a stateful stream's, per process
        self.session.save_checkpoint(state, carried)
        distributed.reseed(self.cfg.seed, state["step"])

    def _evaluate(self, split: str, bootstrap: int = 0) -> dict:
        self.model.eval()
        # Ctrl-C only sets a flag (`TrainingSession.on_signal`); this hook runs before every forward pass of the
        # model, so an evaluation notices it between two batches instead of after the whole split,
        # and no task needs to know about signals. Several processes: the others wait for process 0's
        # evaluation (distributed.on_main), so it finishes and the Ctrl-C is acted on after it.
        hook = self.model.register_forward_pre_hook(self._stop_if_interrupted) if distributed.world() == 1 else None
        try:
            with torch.no_grad(), self._autocast(), \
                    counting_batches(self.model, f"evaluate {split}", enabled=self.cfg.progress):
                return self.task.evaluate(self.model, split, bootstrap_samples=bootstrap)
        finally:
            if hook is not None:
                hook.remove()

    def _stop_if_interrupted(self, module, args) -> None:
        if self.session.interrupted:
            raise EvaluationInterrupted

    def _stop_interrupted(self, state: dict) -> None:
        self._save_checkpoint(state)
        self.session.stop_interrupted(state)

    def _stop_reason(self, state: dict) -> str | None:
        """Why training must stop before its next step, if it must (also checked on resume)."""
        cfg = self.cfg
        if self._pruned:
            return "pruned"
        if cfg.max_steps and state["step"] >= cfg.max_steps:
            return "max_steps"
        if cfg.max_minutes and state["seconds"] >= 60 * cfg.max_minutes:
            return "max_minutes"
        if cfg.patience and state["bad_evals"] >= cfg.patience:
            return "early_stopping"
        return None

    def _skipped(self, state: dict, loss: float) -> None:
        """Count and report a step skipped for a non-finite loss; stop after max_bad_steps in a row."""
        state["skipped_steps"] = state.get("skipped_steps", 0) + 1
        state["bad_in_a_row"] = state.get("bad_in_a_row", 0) + 1
        self.run.append_metrics({"split": "skipped", "step": state["step"], "epoch": state["epoch"],
                                 "reason": f"training loss {loss}"})
        say(f"step {state['step']}: training loss is {loss}; update skipped ({state['bad_in_a_row']} in a row, "
            f"{state['skipped_steps']} in all)")
        if state["bad_in_a_row"] >= self.cfg.max_bad_steps:
            first = state["step"] - state["bad_in_a_row"] + 1
            raise TextnnError(f"training stopped: the loss was {loss} in {state['bad_in_a_row']} steps in a row "
                              f"(steps {first}-{state['step']}), none of which changed the weights, so the last "
                              f"checkpoint is intact; set a lower train.lr or a train.clip_norm (e.g. 1.0) and "
                              f"start a new run")

    # ----------------------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> TrainResult:
        try:
            return self._fit(resume)
        finally:
            self.session.close()

    def _fit(self, resume: bool) -> TrainResult:
        cfg, run = self.cfg, self.run
        state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best": None, "best_step": None,
                 "bad_evals": 0, "seconds": 0.0, "step_seconds": 0.0, "eval_seconds": 0.0, "examples": 0, "tokens": 0,
                 "skipped_steps": 0, "bad_in_a_row": 0, "processes": distributed.world()}
        if resume:
            state = self.session.resume()
            state.setdefault("eval_seconds", 0.0)  # checkpoints written before evaluations were timed
            self._logged_frozen = tuple(group["frozen"] for group in self.optimizer.param_groups)
            self.task.restore_carried_state(load_carried_state(run.checkpoint_file, distributed.rank(), self.device))
        distributed.reseed(cfg.seed, state["step"])
        has_dev = self.task.has_split(self.selected_on)  # what the evaluations during training are on
        # run.json keeps the precision of each leg (a resumed run may switch, when asked): the run's is the
        # last one's, which the commands that read the run compute in (training/precision.py `for_run`)
        legs = [leg for leg in run.status().get("precision_legs") or [] if isinstance(leg, dict)
                and isinstance(leg.get("from_step"), int) and leg["from_step"] < state["step"]] if resume else []
        legs.append({"from_step": state["step"], "precision": self.precision.name, "device": str(self.device)})
        # The best dev score so far stands in run.json from the start (a resumed run: its checkpoint's), so
        # that `textnn runs` shows it for a run that stops, or dies, before it finishes. The model's description
        # (its head's kind and sizes) stands there too: export reads it (interop/huggingface.py).
        self.session.begin(metric=self.metric, best=state["best"], best_step=state["best_step"], precision_legs=legs,
                           selected_on=self.selected_on, **({"validation_rows": self.task.validation_rows}
                                                            if self.task.validation_rows else {}),
                           model=self.model.describe())
        say(self.precision.describe())

        started = time.perf_counter() - state["seconds"]
        with self.session.steps(state["step"]) as bar:
            if state.pop("pending_evaluation", False):  # Ctrl-C cut it short: it is still owed
                self._scheduled_evaluation(state)
                if self._agree(state):
                    self._stop_interrupted(state)
            stopped = self._stop_reason(state)  # a resumed run may have nothing left to do
            while state["epoch"] < cfg.epochs and not stopped:
                batches = self.task.train_batches(state["epoch"])
                per_step = self.batches_per_step
                groups = [batches[i:i + per_step] for i in range(0, len(batches), per_step)]
                for group in groups[state["batch_in_epoch"] // per_step:]:
                    step_started = time.perf_counter()
                    loss = self._train_step(group, state["step"], state["epoch"])
                    state["step_seconds"] += time.perf_counter() - step_started
                    state["step"] += 1
                    state["batch_in_epoch"] += len(group)
                    state["examples"] += sum(b.count for b in group)
                    state["tokens"] += sum(b.num_tokens for b in group)
                    state["seconds"] = time.perf_counter() - started
                    if math.isfinite(loss):
                        state["bad_in_a_row"] = 0
                    else:
                        self._skipped(state, loss)
                    speed = state["tokens"] / max(state["step_seconds"], 1e-9)  # training only, not evaluation
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{speed:,.0f}", epoch=state["epoch"] + 1, refresh=False)
                    if cfg.max_minutes:  # a time budget ends the run first: show the steps it will allow
                        allowed = int(state["step"] * 60 * cfg.max_minutes / max(state["seconds"], 1e-9))
                        bar.total = max(state["step"] + 1, min(self.total_steps, allowed))
                    bar.update(1)
                    # The step's loss goes to metrics.jsonl when due; else it waits in the state (and so in
                    # the checkpoint) for the run's end, in case this step is the last.
                    state["unlogged_train"] = None
                    if math.isfinite(loss):
                        record = {"step": state["step"], "epoch": state["epoch"], "loss": loss, "lr": self.base_lr,
                                  "tokens_per_s": speed, "seconds": round(state["seconds"], 2),
                                  "eval_seconds": round(state["eval_seconds"], 2)}
                        if train_record_due(state["step"], cfg.log_every):
                            self.session.record_train(record)
                        else:
                            state["unlogged_train"] = record
                    evaluated = bool(cfg.eval_every and state["step"] % cfg.eval_every == 0 and has_dev)
                    if evaluated:
                        self._scheduled_evaluation(state)
                    if (cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0) or (
                            evaluated and not cfg.checkpoint_every):
                        self._save_checkpoint(state)
                    interrupted = self._agree(state)
                    stopped = self._stop_reason(state)
                    if interrupted:
                        self._stop_interrupted(state)
                    if stopped:
                        break
                else:
                    state["epoch"] += 1
                    state["batch_in_epoch"] = 0
                    if not cfg.eval_every and has_dev:
                        self._scheduled_evaluation(state)
                    self._save_checkpoint(state)
                    interrupted = self._agree(state)
                    stopped = self._stop_reason(state)
                    if interrupted:
                        self._stop_interrupted(state)

        stopped = stopped or "completed"
        if state.get("unlogged_train"):  # the last step's loss, which was not due: the curve reaches the end
            self.session.record_train(state["unlogged_train"], last=True)
        if has_dev and state.get("evaluated_step") != state["step"]:
            # The steps since the last evaluation count too. A run given a larger budget would not
            # make this evaluation, so such a run cannot simply be continued (check_resume_budget).
            state["unscheduled_evaluation"] = True
            self._eval_and_select(state)
        self._save_checkpoint(state)
        dev, test = {}, {}
        if distributed.is_main():  # several processes: the others are done; process 0 saves and tests the result
            if state["best_step"] is None or not has_dev:
                save_weights(self.model, run.weights_file)  # no dev set (or no finite score): the last weights
        if distributed.is_main() and stopped != "pruned":  # a pruned run is given up on: no dev, no test
            load_weights(self.model, run.weights_file)
            if self.selected_on == "dev" and has_dev and (not cfg.bootstrap_samples or not self.task.intervals) \
                    and self._best_dev is not None:
                dev = self._best_dev  # the saved weights were evaluated at selection; a second pass adds nothing
            else:  # selected on validation: dev's one evaluation, on the kept weights
                dev = self._evaluate("dev", cfg.bootstrap_samples) if self.task.has_split("dev") else {}
            test = self._evaluate("test", cfg.bootstrap_samples) if self.task.has_split("test") else {}
        self.session.record_final(dev, test, state["best_step"] or state["step"])
        seconds = max(state["step_seconds"], 1e-9)
        result = TrainResult(steps=state["step"], epochs_completed=state["epoch"], train_seconds=state["seconds"],
                             examples_per_second=state["examples"] / seconds,
                             tokens_per_second=state["tokens"] / seconds, best_metric=state["best"],
                             best_step=state["best_step"], metric_name=self.metric,
                             higher_is_better=self.higher_is_better,
                             parameters=self.model.num_parameters(), dev=dev, test=test, selected_on=self.selected_on,
                             stopped=stopped, skipped_steps=state.get("skipped_steps", 0),
                             precision=self.precision.name, device=str(self.device))
        # Still `running`: the run is finished once its report is written too (experiment.train, with
        # `finished_status`), so a run killed while writing it does not look finished.
        return result

    def _scheduled_evaluation(self, state: dict) -> None:
        """A dev evaluation the schedule asks for; one that Ctrl-C cuts short is owed by the resumed run.

        Its wall time (the evaluation, the selection and the saving of new best weights) is added to
        `eval_seconds`, which the train records carry next to `seconds` (since training began, these
        evaluations included): `seconds - eval_seconds` is the time spent training.
        """
        started = time.perf_counter()
        try:
            self._eval_and_select(state)
        except EvaluationInterrupted:
            state["pending_evaluation"] = True
        state["eval_seconds"] += time.perf_counter() - started

    def _eval_and_select(self, state: dict) -> None:
        """Evaluate on the split the run selects on (validation or dev) and keep the best weights
        (`_stop_reason` then decides on early stopping).

        The optimizer picks the weights that are evaluated and saved (NT-ASGD: its running averages)
        and hears the dev score (training/optim.py); for other optimizers both are no-ops.
        """
        with evaluation_weights(self.optimizer):
            self._select_on_dev(state)

    def _agree(self, state: dict) -> bool:
        """Whether to stop for a Ctrl-C now: the same answer on every process.

        Several processes: a Ctrl-C or the clock may reach one process first; all act on it together.
        The answer is returned, never written back to `session.interrupted`: a Ctrl-C handled while the
        processes agree would be overwritten and lost; kept, it is acted on after the next step.
        """
        if distributed.world() == 1:
            return self.session.interrupted
        interrupted, out_of_time = distributed.any_process(
            self.session.interrupted, bool(self.cfg.max_minutes) and state["seconds"] >= 60 * self.cfg.max_minutes)
        if out_of_time:
            state["seconds"] = max(state["seconds"], 60 * self.cfg.max_minutes)
        return interrupted

    def _select_on_dev(self, state: dict) -> None:
        # Several processes: process 0 alone evaluates while the others wait, and sends them its metrics,
        # from which every process takes the same decisions below (best step, patience, NT-ASGD's switch).
        metrics = distributed.on_main(self._dev_metrics)
        state["evaluated_step"] = state["step"]
        self.run.append_metrics({"split": self.selected_on, "step": state["step"], "epoch": state["epoch"],
                                 **scalars(metrics)})
        value = metrics[self.metric]
        note = None if math.isnan(value) else after_evaluation(self.optimizer, value, self.higher_is_better)
        if note:
            say(f"step {state['step']}: {note}")
        summary = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        if is_better(value, state["best"], self.higher_is_better):
            state.update(best=value, best_step=state["step"], bad_evals=0)
            self._best_dev = metrics
            if distributed.is_main():
                save_weights(self.model, self.run.weights_file)
                self.run.set_status("running", best=value, best_step=state["step"])
            say(f"step {state['step']}: {self.selected_on} {summary} (best)")
        else:
            state["bad_evals"] += 1
            flag = " (not a number: never the best)" if math.isnan(value) else ""
            say(f"step {state['step']}: {self.selected_on} {summary}{flag}")
            if self.cfg.patience and state["bad_evals"] >= self.cfg.patience:
                say(f"early stopping: no {self.selected_on} {self.metric} improvement in {self.cfg.patience} "
                    f"evaluations")
        if self.after_selection is not None and self.after_selection(state["step"], value):
            self._pruned = True
            say(f"step {state['step']}: pruned: the search gives up on this run ({self.selected_on} {self.metric} "
                f"{value:.4f}); it keeps its best weights so far")

    def _dev_metrics(self) -> dict:
        metrics = self._evaluate(self.selected_on)
        if self.metric not in metrics:
            raise TextnnError(f"config key train.metric: '{self.metric}' is not reported by this task; "
                              f"choose one of {', '.join(k for k in metrics if isinstance(metrics[k], float))}")
        return metrics


def ended_status(result: TrainResult) -> str:
    """run.json's status of a run whose training has ended: `pruned` when a search stopped it
    (`Trainer.after_selection`), else `finished`."""
    return "pruned" if result.stopped == "pruned" else "finished"


def finished_status(result: TrainResult) -> dict:
    """What run.json records about a finished run (`RunDir.set_status("finished", **this)`)."""
    return dict(steps=result.steps, train_seconds=round(result.train_seconds, 2),
                examples_per_second=round(result.examples_per_second, 1),
                tokens_per_second=round(result.tokens_per_second, 1), metric=result.metric_name,
                best=result.best_metric, best_step=result.best_step, dev=scalars(result.dev),
                test=scalars(result.test), stopped=result.stopped, skipped_steps=result.skipped_steps,
                precision=result.precision, selected_on=result.selected_on)
