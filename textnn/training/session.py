"""The shell around a training loop: what a run promises whatever loop trains it.

textnn has two training loops: `Trainer` (training/trainer.py), one optimizer step over a group of
batches, for every task but one, and word2vec's (training/word2vec.py), sparse SGD on rows by hand,
whose speed depends on never making a dense optimizer step. What a step is differs; what the run
directory, the user and a later `--resume` see of the run must not. That shell is written here once:

- run.json says `running` (with the planned steps and whatever the loop adds) while the loop runs,
  and `interrupted` once a Ctrl-C or SIGTERM has stopped it;
- Ctrl-C and SIGTERM (what `docker stop`, Slurm, Kubernetes and torchrun send before they kill) set
  a flag that the loop reads between steps: it finishes the step, writes the checkpoint and calls
  `stop_interrupted`; a second one, in a single process, stops at once; under torchrun, a process
  leaving the loop with an error ignores SIGTERM from then on, so that its error line gets out;
- the checkpoint (training/checkpoint.py) is written by process 0, and `--resume` restores it,
  cuts metrics.jsonl back to it and says so; train.keep_checkpoint=all keeps each one by its step;
- the progress bar, and the TensorBoard view of metrics.jsonl (train.tensorboard), which a folder that
  cannot be written turns off with a warning, never stopping training;
- when a training record goes to metrics.jsonl (`train_record_due`, `record_train`), and the final
  records (`dev_final`, `test`).

The run is marked finished only once its report is written too (experiment.train), so a run killed
while writing it does not look finished.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator, NoReturn

import torch
from tqdm import tqdm

from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.runs import RunDir
from textnn.training import distributed
from textnn.training.checkpoint import keep_step_checkpoint, load_checkpoint, save_checkpoint
from textnn.training.progress import progress_bar

# Signals that stop training cleanly: Ctrl-C, and SIGTERM, which `docker stop`, Slurm, Kubernetes and
# torchrun send before they kill.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def train_record_due(step: int, log_every: int) -> bool:
    """Whether the training record of step `step` (counted from 1) is written: every `log_every` steps, and
    before the first of those at the powers of two (1, 2, 4, 8, ...), so that a run shorter than `log_every`
    still draws a training curve, in most detail where the loss falls fastest. The step alone decides, so a
    resumed run writes the records an uninterrupted one writes. (The run's last step writes one too:
    `TrainingSession.record_train` with `last`.)"""
    return step % log_every == 0 or (step < log_every and step & (step - 1) == 0)


class TrainingInterrupted(Exception):
    """Raised after Ctrl-C or SIGTERM once the checkpoint is safely written."""

    def __init__(self, message: str, signal_number: int = signal.SIGINT):
        super().__init__(message)
        self.signal_number = signal_number  # the command exits with 128 + this, as a process killed by it


def say(message: str) -> None:
    """Status lines go to stderr, around the progress bar (from process 0 alone under torchrun)."""
    if distributed.is_main():
        tqdm.write(message, file=sys.stderr)


class TrainingSession:
    """The shell of one `fit` of a training loop over `run` (see the module docstring).

    `unit` is what a Ctrl-C lets finish before the checkpoint ("step", or "step or evaluation" for a
    loop that evaluates between steps). The loop reads `interrupted` between its steps.
    """

    def __init__(self, run: RunDir, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 total_steps: int, unit: str = "step"):
        self.run, self.cfg, self.model, self.optimizer = run, cfg, model, optimizer
        self.total_steps = total_steps
        self.unit = unit
        self.interrupted = False
        self.signal_number = signal.SIGINT  # the signal that interrupted training (Ctrl-C or SIGTERM)
        self._resumed_at: int | None = None  # the checkpoint's step after `resume`
        self._tensorboard = None  # training/tensorboard.TensorBoardLog between `begin` and `close`

    # --- around the steps --------------------------------------------------------------------------------
    def resume(self) -> dict:
        """Restore the model, optimizer and random states of the run's checkpoint; return the loop's state.

        metrics.jsonl forgets what was written after the checkpoint: the resumed run writes it again.
        """
        state = load_checkpoint(self.run.checkpoint_file, self.model, self.optimizer)
        if state.get("processes", 1) != distributed.world():  # checkpoints before torchrun support: 1
            raise TextnnError(f"{self.run.path}: the run was trained by {state.get('processes', 1)} process(es) "
                              f"and cannot continue with {distributed.world()}: a step's batches depend on "
                              f"the number; resume it with as many")
        self.run.truncate_metrics(state["step"])
        self._resumed_at = state["step"]
        say(f"resuming {self.run.path} at step {state['step']} (epoch {state['epoch'] + 1})")
        return state

    def begin(self, **status: object) -> None:
        """Mark the run running in run.json (with the planned steps and `status`), and open its TensorBoard
        log (which, on resume, drops the events logged after the checkpoint)."""
        self.run.set_status("running", total_steps=self.total_steps, **status)
        if self.cfg.tensorboard and distributed.is_main():
            from textnn.training.tensorboard import TensorBoardLog

            purge = None if self._resumed_at is None else self._resumed_at + 1
            self._tensorboard = TensorBoardLog(self.run.tensorboard_dir, say, purge_step=purge)
            self.run.on_record = self._tensorboard

    def close(self) -> None:
        """Flush the TensorBoard log, however training ended (call it in a `finally`)."""
        if self._tensorboard is not None:
            self._tensorboard.close()
            self.run.on_record = self._tensorboard = None

    @contextlib.contextmanager
    def steps(self, initial_step: int) -> Iterator[tqdm]:
        """While the loop runs its steps: Ctrl-C and SIGTERM set `interrupted`, and a progress bar (yielded)
        counts the steps from `initial_step`. Both are gone when the block ends, however it ends."""
        previous_handlers = {signum: signal.signal(signum, self.on_signal) for signum in STOP_SIGNALS}
        # Under a time budget the steps it allows are known after the first step (the trainer sets the total
        # then); the total of epochs and max_steps alone would be a wrong first frame (0/1221000).
        total = None if self.cfg.max_minutes else self.total_steps
        bar = progress_bar(f"train {self.run.path.name}", "step", total=total, enabled=self.cfg.progress,
                           initial=initial_step)
        try:
            yield bar
        except BaseException:
            if distributed.world() > 1:
                # This process is on its way out with an error, most often because another one died;
                # torchrun then sends SIGTERM to the rest at once, which must not cut our one-line error
                # short (torchrun still kills a process that has not ended 30 s later).
                previous_handlers[signal.SIGTERM] = signal.SIG_IGN
            raise
        finally:
            bar.close()
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)

    # --- during the steps -------------------------------------------------------------------------------
    def on_signal(self, signum, frame) -> None:
        """Ctrl-C and SIGTERM alike: the loop finishes its step (or abandons its evaluation), checkpoints and
        stops. A second one stops at once. Not under torchrun: it passes a signal on to every process
        (which may already have it from the terminal), and kills them itself if they have not stopped in 30 s.
        """
        if self.interrupted and distributed.world() == 1:
            raise KeyboardInterrupt
        self.interrupted = True
        self.signal_number = signum
        again = "Ctrl-C" if signum == signal.SIGINT else "the signal"
        say(f"interrupt ({signal.Signals(signum).name}): finishing this {self.unit}, then saving a checkpoint"
            + (f" ({again} again to abort)" if distributed.world() == 1 else ""))

    def save_checkpoint(self, state: dict, carried: list[object] | None = None) -> None:
        """Write the checkpoint of `state` (process 0 alone), and with train.keep_checkpoint=all keep it as
        the checkpoint of its step too; `carried`: see checkpoint.save_checkpoint."""
        if distributed.is_main():
            save_checkpoint(self.run.checkpoint_file, self.model, self.optimizer, state, carried)
            if self.cfg.keep_checkpoint == "all":
                keep_step_checkpoint(self.run.checkpoint_file, state["step"])

    def stop_interrupted(self, state: dict) -> NoReturn:
        """Once the checkpoint of `state` is written: mark the run interrupted and stop with the way to go on."""
        self.run.set_status("interrupted", step=state["step"])
        raise TrainingInterrupted(f"interrupted at step {state['step']}; checkpoint saved. Continue with "
                                  f"`{distributed.command()} train CONFIG --run-dir {self.run.path} --resume`",
                                  self.signal_number)

    def record_train(self, record: dict, last: bool = False) -> None:
        """A training record (step, epoch, loss, ...) into metrics.jsonl. `last`: the record of the run's last
        step, written at its end when that step was not due (`train_record_due`), and marked `"last": true`, so
        that a resume of the finished run drops it with the other final records (RunDir.truncate_metrics): a
        run given a larger budget does not stop there."""
        self.run.append_metrics({"split": "train", **record, **({"last": True} if last else {})})

    # --- the end ----------------------------------------------------------------------------------------
    def record_final(self, dev: dict, test: dict, step: int) -> None:
        """The final dev and test metrics (of the weights the run keeps) into metrics.jsonl, at `step`."""
        for split, metrics in (("dev_final", dev), ("test", test)):
            if metrics:
                self.run.append_metrics({"split": split, "step": step, **metrics})


def scalars(metrics: dict) -> dict:
    """The numbers of a metrics dict (what run.json and the TensorBoard log keep of it)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
