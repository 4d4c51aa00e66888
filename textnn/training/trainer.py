"""One training loop for every task.

The trainer never knows which model or task it trains. A task gives it:

    task.train_batches(epoch) -> list[Batch]   the same list for the same epoch and seed (exact resume)
    task.loss(model, batch)   -> scalar tensor: the SUM of the loss over batch.count terms
    task.evaluate(model, split, bootstrap_samples) -> dict of metrics (incl. "loss")
    task.has_split(split)     -> bool
    task.default_metric       -> name of the metric to select checkpoints on

and a Batch has `.count` (loss terms, e.g. examples or target tokens), `.num_tokens` (for throughput)
and `.to(device)`, and `.lr_scale` (1.0 unless the task wants this step's learning rate scaled, e.g.
for variable-length BPTT windows; the first batch of a step decides). Because `task.loss` returns a
sum, a step of `grad_accum` micro-batches divides by the total count of all of them: the gradient
equals that of one big batch.

Several processes (torchrun, training/distributed.py): a step takes `grad_accum * N` micro-batches
of the epoch list and each process runs its share of them; the count that divides the loss is that
of the whole step over all processes, so the gradient is still that of one big batch. Process 0
writes and evaluates, and all processes take the same decisions.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.metrics import HIGHER_IS_BETTER
from textnn.runs import RunDir
from textnn.training import distributed
from textnn.training.checkpoint import load_checkpoint, load_weights, save_checkpoint, save_weights
from textnn.training.optim import after_evaluation, build_optimizer, evaluation_weights, lr_factor, set_lr



class TrainingInterrupted(Exception):
    """Raised after Ctrl-C once the checkpoint is safely written."""


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
    parameters: int = 0
    dev: dict = field(default_factory=dict)
    test: dict = field(default_factory=dict)
    stopped: str = "completed"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TextnnError(f"config key train.device: '{name}' requested but CUDA is not available; use cpu")
    return torch.device(name)


def is_better(metric: str, value: float, best: float | None) -> bool:
    if best is None:
        return True
    return value > best if HIGHER_IS_BETTER.get(metric, True) else value < best


def say(message: str) -> None:
    """Status lines go to stderr, around the progress bar (from process 0 alone under torchrun)."""
    if distributed.is_main():
        tqdm.write(message, file=sys.stderr)


class Trainer:
    def __init__(self, task, model: torch.nn.Module, cfg: TrainConfig, run: RunDir):
        self.task, self.cfg, self.run = task, cfg, run
        self.device = distributed.local_device(resolve_device(cfg.device))
        self.model = model.to(self.device)
        # Several processes: the forward pass goes through DDP, which sums the gradients across them.
        self._ddp = distributed.wrap(self.model, self.device)
        self._gradients_checked = False
        wrapped = self._ddp if self._ddp is not None else self.model
        self.forward_model = torch.compile(wrapped) if cfg.compile else wrapped
        self.optimizer = build_optimizer(list(self.model.parameters()), cfg, self.device)
        self.metric = cfg.metric or task.default_metric
        self._interrupted = False
        self._best_dev: dict | None = None  # dev metrics of the saved best weights, from this process
        self.batches_per_step = cfg.grad_accum * distributed.world()  # micro-batches, over all processes
        steps_per_epoch = math.ceil(len(task.train_batches(0)) / self.batches_per_step)
        if steps_per_epoch == 0:
            raise TextnnError("the training data gave no batches; check data.train")
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = steps_per_epoch * cfg.epochs
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)

    # ----------------------------------------------------------------------------------------------
    def _autocast(self):
        if self.device.type == "cuda" and self.cfg.amp:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def _train_step(self, group: list, step: int) -> float:
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
        if self.cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        set_lr(self.optimizer, self.cfg.lr * lr_factor(step, self.total_steps, self.cfg) * group[0].lr_scale)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.after_optimizer_step()
        return loss_sum / total

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
        if distributed.is_main():
            save_checkpoint(self.run.checkpoint_file, self.model, self.optimizer, state)
        distributed.reseed(self.cfg.seed, state["step"])

    def _evaluate(self, split: str, bootstrap: int = 0) -> dict:
        self.model.eval()
        with torch.no_grad(), self._autocast():
            return self.task.evaluate(self.model, split, bootstrap_samples=bootstrap)

    def _on_sigint(self, signum, frame) -> None:
        # A second Ctrl-C stops at once. Not under torchrun: it passes a Ctrl-C on to every process that
        # already got it from the terminal, and kills them itself if they have not stopped in 30 s.
        if self._interrupted and distributed.world() == 1:
            raise KeyboardInterrupt
        self._interrupted = True
        say("interrupt: finishing this step, then saving a checkpoint" +
            (" (Ctrl-C again to abort)" if distributed.world() == 1 else ""))

    # ----------------------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> TrainResult:
        cfg, run = self.cfg, self.run
        state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best": None, "best_step": None,
                 "bad_evals": 0, "seconds": 0.0, "step_seconds": 0.0, "examples": 0, "tokens": 0,
                 "processes": distributed.world()}
        if resume:
            state = load_checkpoint(run.checkpoint_file, self.model, self.optimizer)
            if state.get("processes", 1) != distributed.world():  # checkpoints before torchrun support: 1
                raise TextnnError(f"{run.path}: the run was trained by {state.get('processes', 1)} process(es) "
                                  f"and cannot continue with {distributed.world()}: a step's batches depend on "
                                  f"the number; resume it with as many")
            run.truncate_metrics(state["step"])
            say(f"resuming {run.path} at step {state['step']} (epoch {state['epoch'] + 1})")
        distributed.reseed(cfg.seed, state["step"])
        has_dev = self.task.has_split("dev")
        run.set_status("running", total_steps=self.total_steps)

        previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        bar = tqdm(total=self.total_steps, initial=state["step"],
                   disable=not cfg.progress or not distributed.is_main(), desc=f"train {run.path.name}", unit="step", file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.2 if sys.stderr.isatty() else 10.0)
        stopped = "completed"
        started = time.perf_counter() - state["seconds"]
        try:
            while state["epoch"] < cfg.epochs and stopped == "completed":
                batches = self.task.train_batches(state["epoch"])
                per_step = self.batches_per_step
                groups = [batches[i:i + per_step] for i in range(0, len(batches), per_step)]
                for group in groups[state["batch_in_epoch"] // per_step:]:
                    step_started = time.perf_counter()
                    loss = self._train_step(group, state["step"])
                    state["step_seconds"] += time.perf_counter() - step_started
                    if not math.isfinite(loss):
                        raise TextnnError(f"training loss became {loss} at step {state['step'] + 1}; "
                                          f"lower train.lr or set train.clip_norm")
                    state["step"] += 1
                    state["batch_in_epoch"] += len(group)
                    state["examples"] += sum(b.count for b in group)
                    state["tokens"] += sum(b.num_tokens for b in group)
                    state["seconds"] = time.perf_counter() - started
                    speed = state["tokens"] / max(state["step_seconds"], 1e-9)  # training only, not evaluation
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{speed:,.0f}", epoch=state["epoch"] + 1, refresh=False)
                    if cfg.max_minutes:  # a time budget ends the run first: show the steps it will allow
                        allowed = int(state["step"] * 60 * cfg.max_minutes / max(state["seconds"], 1e-9))
                        bar.total = max(state["step"] + 1, min(self.total_steps, allowed))
                    bar.update(1)
                    if state["step"] % cfg.log_every == 0:
                        run.append_metrics({"split": "train", "step": state["step"], "epoch": state["epoch"],
                                            "loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                                            "tokens_per_s": speed, "seconds": round(state["seconds"], 2)})
                    evaluated = False
                    if cfg.eval_every and state["step"] % cfg.eval_every == 0 and has_dev:
                        stopped = self._eval_and_select(state) or stopped
                        evaluated = True
                    if (cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0) or (
                            evaluated and not cfg.checkpoint_every):
                        self._save_checkpoint(state)
                    out_of_time = bool(cfg.max_minutes) and state["seconds"] >= 60 * cfg.max_minutes
                    interrupted = self._interrupted  # a Ctrl-C from here on is acted on after the next step
                    if distributed.world() > 1:  # a Ctrl-C or the clock may reach one process first: all stop
                        interrupted, out_of_time = distributed.any_process(interrupted, out_of_time)
                    if cfg.max_steps and state["step"] >= cfg.max_steps:
                        stopped = "max_steps"
                    if out_of_time:
                        stopped = "max_minutes"
                    if interrupted:
                        self._save_checkpoint(state)
                        run.set_status("interrupted", step=state["step"])
                        raise TrainingInterrupted(
                            f"interrupted at step {state['step']}; checkpoint saved. Continue with "
                            f"`{distributed.command()} train CONFIG --run-dir {run.path} --resume`")
                    if stopped != "completed":
                        break
                else:
                    state["epoch"] += 1
                    state["batch_in_epoch"] = 0
                    if not cfg.eval_every and has_dev:
                        stopped = self._eval_and_select(state) or stopped
                    self._save_checkpoint(state)
        finally:
            bar.close()
            signal.signal(signal.SIGINT, previous_handler)

        if has_dev and state.get("evaluated_step") != state["step"]:
            self._eval_and_select(state)  # the steps since the last evaluation count too
        self._save_checkpoint(state)
        dev, test = {}, {}
        if distributed.is_main():  # several processes: the others are done; process 0 saves and tests the result
            if state["best_step"] is None or not has_dev:
                save_weights(self.model, run.weights_file)  # no dev set: the last weights are the result
            load_weights(self.model, run.weights_file)
            if has_dev and not cfg.bootstrap_samples and self._best_dev is not None:
                dev = self._best_dev  # the saved weights were evaluated at selection; a second pass adds nothing
            else:
                dev = self._evaluate("dev", cfg.bootstrap_samples) if has_dev else {}
            test = self._evaluate("test", cfg.bootstrap_samples) if self.task.has_split("test") else {}
        for split, metrics in (("dev_final", dev), ("test", test)):
            if metrics:
                run.append_metrics({"split": split, "step": state["best_step"] or state["step"], **metrics})
        seconds = max(state["step_seconds"], 1e-9)
        result = TrainResult(steps=state["step"], epochs_completed=state["epoch"], train_seconds=state["seconds"],
                             examples_per_second=state["examples"] / seconds,
                             tokens_per_second=state["tokens"] / seconds, best_metric=state["best"],
                             best_step=state["best_step"], metric_name=self.metric,
                             parameters=sum(p.numel() for p in self.model.parameters()), dev=dev, test=test,
                             stopped=stopped)
        run.set_status("finished", steps=result.steps, train_seconds=round(result.train_seconds, 2),
                       examples_per_second=round(result.examples_per_second, 1),
                       tokens_per_second=round(result.tokens_per_second, 1),
                       metric=self.metric, best=result.best_metric, best_step=result.best_step,
                       dev=_scalars(dev), test=_scalars(test), stopped=stopped)
        return result

    def _eval_and_select(self, state: dict) -> str | None:
        """Evaluate on dev, keep the best weights, and say whether early stopping triggers.

        The optimizer picks the weights that are evaluated and saved (NT-ASGD: its running averages)
        and hears the dev score (training/optim.py); for other optimizers both are no-ops.
        """
        with evaluation_weights(self.optimizer):
            return self._select_on_dev(state)

    def _select_on_dev(self, state: dict) -> str | None:
        # Several processes: process 0 alone evaluates while the others wait, and sends them its metrics,
        # from which every process takes the same decisions below (best step, patience, NT-ASGD's switch).
        metrics = distributed.on_main(self._dev_metrics)
        state["evaluated_step"] = state["step"]
        self.run.append_metrics({"split": "dev", "step": state["step"], "epoch": state["epoch"], **_scalars(metrics)})
        value = metrics[self.metric]
        note = after_evaluation(self.optimizer, value, HIGHER_IS_BETTER.get(self.metric, True))
        if note:
            say(f"step {state['step']}: {note}")
        summary = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        if is_better(self.metric, value, state["best"]):
            state.update(best=value, best_step=state["step"], bad_evals=0)
            self._best_dev = metrics
            if distributed.is_main():
                save_weights(self.model, self.run.weights_file)
            say(f"step {state['step']}: dev {summary} (best)")
        else:
            state["bad_evals"] += 1
            say(f"step {state['step']}: dev {summary}")
            if self.cfg.patience and state["bad_evals"] >= self.cfg.patience:
                say(f"early stopping: no dev {self.metric} improvement in {self.cfg.patience} evaluations")
                return "early_stopping"
        return None

    def _dev_metrics(self) -> dict:
        metrics = self._evaluate("dev")
        if self.metric not in metrics:
            raise TextnnError(f"config key train.metric: '{self.metric}' is not reported by this task; "
                              f"choose one of {', '.join(k for k in metrics if isinstance(metrics[k], float))}")
        return metrics


def _scalars(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
