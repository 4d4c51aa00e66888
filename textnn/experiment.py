"""What the commands do, as library functions: train, load a run, evaluate, predict, compare.

`cli.py` only parses arguments and calls these; notebooks and scripts can call them directly.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from textnn import registry
from textnn.config import Config, load_config
from textnn.errors import TextnnError
from textnn.generation.decoding import DecodingConfig
from textnn.runs import FollowerRunDir, RunDir
from textnn.training import distributed
from textnn.training.budget import check_resume_budget
from textnn.training.checkpoint import check_checkpoint, init_encoder_from, load_weights, unwritable
from textnn.training.trainer import Trainer, TrainResult, TrainingInterrupted, resolve_device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(config: Config, run_dir: str | Path | None = None, resume: bool = False) -> tuple[RunDir, TrainResult]:
    """Train `config` into a run directory (default runs/<config name>) and write its report.

    All data is read and checked, and the device found, before the run directory is made, so a bad
    file, config or device never leaves behind a directory that looks like a run.

    Under torchrun (training/distributed.py) every process reads the data (a bad file or config
    raises the same error in each); process 0 makes the run directory while the others wait, and
    alone writes into it.
    """
    # resolve_device: a GPU that is not there fails here, before data is read
    with distributed.session(resolve_device(config.train.device)):
        run = RunDir(run_dir or Path("runs") / config.name)
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        seed_everything(config.train.seed)
        task = registry.task_class(config.task).from_data(config)
        model = task.build_model()
        if resume:  # before run.create rewrites config.yaml: a refused resume changes nothing
            run.check_resume(config)
            check_checkpoint(run.checkpoint_file, model)  # a damaged one is refused here, not mid-run
            check_resume_budget(run, config, task)
        if config.init_from and not resume:
            _start_encoder(model, config.init_from)
        distributed.on_main(lambda: _create_run(run, config, resume, task))
        if not distributed.is_main():
            run = FollowerRunDir(run.path)
        trainer = Trainer(task, model, config.train, run)
        try:
            result = trainer.fit(resume=resume)
        except TrainingInterrupted:
            raise
        except BaseException as err:
            with contextlib.suppress(OSError, TextnnError):  # a full disk may refuse this too
                run.set_status("failed", error=str(err) or type(err).__name__)
            if isinstance(err, OSError):  # a full disk or a size limit met mid-run
                raise unwritable(err.filename or run.path, err, "run's files") from None
            raise
        if distributed.is_main():
            try:
                write_report(run, config, result, task)
            except OSError as err:
                with contextlib.suppress(OSError, TextnnError):  # not a finished run: its report is missing
                    run.set_status("failed", error=f"cannot write the report: {err.strerror}")
                raise unwritable(err.filename or run.path / "report.md", err, "report") from None
    return run, result


def _create_run(run: RunDir, config: Config, resume: bool, task) -> None:
    """The run directory and the files that rebuild the task; if the place is unwritable, one error and
    nothing left behind."""
    if run.path.exists() and not run.path.is_dir():
        raise TextnnError(f"{run.path}: --run-dir names an existing file, not a directory; choose another --run-dir")
    created = not run.path.exists()
    try:
        run.create(config, resume)
        task.save(run.path)
    except OSError as err:
        if created:
            shutil.rmtree(run.path, ignore_errors=True)
        raise unwritable(err.filename or run.path, err, "run directory") from None
    except TextnnError:
        if created:
            shutil.rmtree(run.path, ignore_errors=True)
        raise


def _start_encoder(model: torch.nn.Module, init_from: str) -> None:
    """Load the encoder weights of the run in model.init_from and say what was loaded, new and left out."""
    loaded = init_encoder_from(model, Path(init_from) / "model.safetensors")

    def names(keys: list[str]) -> str:
        return ", ".join(keys[:6]) + (f", ... ({len(keys)} in all)" if len(keys) > 6 else "") if keys else "none"

    if distributed.is_main():
        print(f"init_from {init_from}: loaded {len(loaded['loaded'])} encoder tensors; new here: "
              f"{names(loaded['new'])}; left out: {names(loaded['left_out'])}", file=sys.stderr)


def load_run(run_dir: str | Path, device: str = "cpu") -> tuple[Config, object, torch.nn.Module]:
    """Rebuild (config, task, model) from a finished run directory; weights loaded, eval mode."""
    run = RunDir(run_dir)
    run.require_finished()
    config = run.load_config()
    task = registry.task_class(config.task).from_run(run.path, config)
    model = task.build_model()
    load_weights(model, run.weights_file)
    return config, task, model.to(resolve_device(device)).eval()


def evaluate_run(run_dir: str | Path, data_path: str, bootstrap_samples: int = 1000, streams: int = 0) -> dict:
    """Metrics of a trained run on a labelled file read with the run's own data settings.

    `streams` (language models only): how many contiguous parts of the file are read side by side;
    1 reads it in order from its first token, the exact sequential number (0 = the task's default).
    """
    _, task, model = load_run(run_dir)
    options = {"streams": streams} if streams else {}
    with torch.no_grad():
        return task.evaluate_file(model, data_path, bootstrap_samples=bootstrap_samples, options=options)


def metric_lines(run_dir: str | Path, metrics: dict) -> list[str]:
    """The lines `textnn evaluate` prints for a run's metrics (the task lays them out)."""
    config = RunDir(run_dir).load_config()
    return registry.task_class(config.task).from_run(Path(run_dir), config).format_metrics(metrics)


def predict_run(run_dir: str | Path, lines: Iterable[str], source: str = "<stdin>",
                options: dict | None = None) -> Iterator[str]:
    """Output lines for the input lines, in the run's task's format (JSONL labels, tags, ...).

    `options` are the task's own prediction options (tagging: input_format, output_format).
    """
    _, task, model = load_run(run_dir)
    return task.predict(model, lines, source, options or {})


def _load_decoder_run(run_dir: str | Path, command: str) -> tuple[Config, object, torch.nn.Module]:
    """load_run for the commands that decode token by token; a run whose model cannot is refused by name."""
    config, task, model = load_run(run_dir)
    if not callable(getattr(model, "step", None)):
        raise TextnnError(f"{run_dir}: `{command}` needs a language model run (a model that reads text token by "
                          f"token); this run is a {config.task} run (model {config.model_name})")
    return config, task, model


def generate_run(run_dir: str | Path, prompt: str, decoding: DecodingConfig, num_samples: int = 1):
    """Continue `prompt` with a trained language model as the `DecodingConfig` says; see generation/lm.py.

    Returns a `textnn.generation.Generation` (the samples or hypotheses, the seed used, unknown prompt tokens).
    """
    from textnn.generation.lm import generate_text

    _, task, model = _load_decoder_run(run_dir, "generate")
    return generate_text(model, task, prompt, decoding, num_samples=num_samples)


def visualize_run(run_dir: str | Path, text: str, output_dir: str | Path | None = None) -> list[Path]:
    """Views of a language model reading `text`: attention heatmaps (Transformers) or LSTM cells.

    Files go to `output_dir` (default <run>/views); returns their paths.
    """
    _, task, model = _load_decoder_run(run_dir, "visualize")
    output = Path(output_dir) if output_dir else Path(run_dir) / "views"
    if callable(getattr(model, "forward_with_attention", None)):
        from textnn.viz.attention import write_attention_view

        return write_attention_view(model, task, text, output, title=f"Attention of {Path(run_dir).name}")
    from textnn.viz.lstm_cells import write_cell_view  # refuses, by name, models without LSTM cells

    return [write_cell_view(run_dir, text, output / "cells.html").path]


@dataclass
class CompareRow:
    name: str
    model: str
    metric: str
    value: float
    ci_low: float | None
    ci_high: float | None
    higher_is_better: bool
    parameters: int
    train_seconds: float
    examples_per_second: float
    run_dir: str


def compare(config_paths: list[str], overrides: list[str], runs_root: str | Path) -> list[CompareRow]:
    """Train each config (same overrides for all) and collect one comparable row per config."""
    configs = [load_config(path, overrides) for path in config_paths]  # fail fast on any bad config
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise TextnnError(f"two configs share the run name {names}; give each a distinct `name:`")
    rows = []
    for config in configs:
        run, result = train(config, Path(runs_root) / config.name)
        metric = result.metric_name
        dev = result.dev or result.test
        rows.append(CompareRow(name=config.name, model=config.model_name, metric=metric,
                               value=float(dev.get(metric, float("nan"))),
                               ci_low=dev.get(f"{metric}_ci_low"), ci_high=dev.get(f"{metric}_ci_high"),
                               higher_is_better=result.higher_is_better, parameters=result.parameters,
                               train_seconds=result.train_seconds,
                               examples_per_second=result.examples_per_second, run_dir=str(run.path)))
    return rows


def format_table(rows: list[CompareRow], markdown: bool = False) -> str:
    header = ["config", "model", "dev metric", "95% CI", "params", "train time", "examples/s"]
    body = []
    for r in rows:
        # Scores in [0, 1] (accuracy, F1, ...) read as percentages; losses, perplexity and bpc as they are.
        scale = 100 if r.higher_is_better and r.metric != "loss" else 1
        ci = f"[{scale * r.ci_low:.1f}, {scale * r.ci_high:.1f}]" if r.ci_low is not None else "-"
        body.append([r.name, r.model, f"{r.metric} {scale * r.value:.2f}", ci, f"{r.parameters:,}",
                     f"{r.train_seconds:.1f}s", f"{r.examples_per_second:,.0f}"])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, body)])


def write_report(run: RunDir, config: Config, result: TrainResult, task) -> None:
    """report.md with the final numbers, a loss-curve plot and the task's own sections (a confusion
    matrix, a per-type table, ...)."""
    from textnn.viz.plots import plot_loss_curve

    records = run.read_metrics()
    # A run shorter than train.log_every with no dev set has logged no loss yet: nothing to plot.
    has_losses = any(isinstance(r.get("loss"), (int, float)) for r in records)
    if has_losses:
        plot_loss_curve(records, run.path / "loss.png")
    lines = [f"# Run {run.path.name}", "",
             f"- task: {config.task}, model: {config.model_name} (preset: {config.model_preset or 'none'})"
             + (f", started from {config.init_from}" if config.init_from else ""),
             f"- parameters: {result.parameters:,}",
             f"- steps: {result.steps}, epochs completed: {result.epochs_completed}, stopped: {result.stopped}"
             + (f", {result.skipped_steps} skipped for a non-finite loss" if result.skipped_steps else ""),
             f"- training time: {result.train_seconds:.1f} s, {result.examples_per_second:,.0f} examples/s, "
             f"{result.tokens_per_second:,.0f} tokens/s",
             f"- date: {time.strftime('%Y-%m-%d %H:%M')}, device: {config.train.device}", ""]
    for split, metrics in (("dev", result.dev), ("test", result.test)):
        if not metrics:
            continue
        lines += [f"## {split} (best checkpoint, step {result.best_step})", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items() if isinstance(v, float)]
        lines.append("")
        lines += task.report_sections(metrics, split, run.path)
    if has_losses:
        lines += ["![loss curve](loss.png)", ""]
    (run.path / "report.md").write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {run.path / 'report.md'}", file=sys.stderr)
