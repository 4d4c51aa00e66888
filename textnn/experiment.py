"""What the commands do, as library functions: train, load a run, evaluate, predict, compare.

`cli.py` only parses arguments and calls these; notebooks and scripts can call them directly.
"""

from __future__ import annotations

import random
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
from textnn.runs import RunDir
from textnn.training.checkpoint import load_weights
from textnn.training.trainer import Trainer, TrainResult, TrainingInterrupted, resolve_device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(config: Config, run_dir: str | Path | None = None, resume: bool = False) -> tuple[RunDir, TrainResult]:
    """Train `config` into a run directory (default runs/<config name>) and write its report.

    All data is read and checked before the run directory is made, so a bad file or config never
    leaves behind a directory that looks like a run.
    """
    run = RunDir(run_dir or Path("runs") / config.name)
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    seed_everything(config.train.seed)
    task = registry.task_class(config.task).from_data(config)
    model = task.build_model()
    run.create(config, resume)
    task.save(run.path)
    trainer = Trainer(task, model, config.train, run)
    try:
        result = trainer.fit(resume=resume)
    except TrainingInterrupted:
        raise
    except BaseException as err:
        run.set_status("failed", error=str(err) or type(err).__name__)
        raise
    write_report(run, config, result, task)
    return run, result


def load_run(run_dir: str | Path, device: str = "cpu") -> tuple[Config, object, torch.nn.Module]:
    """Rebuild (config, task, model) from a finished run directory; weights loaded, eval mode."""
    run = RunDir(run_dir)
    run.require_finished()
    config = run.load_config()
    task = registry.task_class(config.task).from_run(run.path, config)
    model = task.build_model()
    load_weights(model, run.weights_file)
    return config, task, model.to(resolve_device(device)).eval()


def evaluate_run(run_dir: str | Path, data_path: str, bootstrap_samples: int = 1000) -> dict:
    """Metrics of a trained run on a labelled file read with the run's own data settings."""
    config, task, model = load_run(run_dir)
    encoded = task.encode_file(data_path)
    with torch.no_grad():
        return task.evaluate(model, encoded, bootstrap_samples=bootstrap_samples)


def predict_run(run_dir: str | Path, lines: Iterable[str], source: str = "<stdin>") -> Iterator[dict]:
    """Label and class probabilities for each input line (`text` or `text<TAB>pair`)."""
    from textnn.data.readers import Record

    config, task, model = load_run(run_dir)
    if config.task != "classification":
        raise TextnnError(f"{run_dir}: `predict` labels text with a classifier; this run is a "
                          f"{config.task} run")
    records = []
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        text, _, pair = line.partition("\t") if task.is_pair else (line, "", "")
        if task.is_pair and not pair:
            raise TextnnError(f"{source}:{number}: this model classifies sentence pairs; give "
                              f"`first sentence<TAB>second sentence` on each line")
        records.append(Record(text=text, label=None, text_pair=pair or None, path=source, line=number))
    if not records:
        raise TextnnError(f"{source}: no input lines to predict")
    tokens = [(task.tokenizer(r.text), task.tokenizer(r.text_pair) if r.text_pair is not None else None)
              for r in records]
    encoded = task.encode(records, tokens, require_known_labels=False)
    probs = task.probabilities(model, encoded)
    for record, row in zip(records, probs):
        yield {"text": record.text, **({"text_pair": record.text_pair} if record.text_pair else {}),
               "label": task.labels[int(row.argmax())],
               "probabilities": {label: round(float(p), 6) for label, p in zip(task.labels, row)}}


@dataclass
class CompareRow:
    name: str
    model: str
    metric: str
    value: float
    ci_low: float | None
    ci_high: float | None
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
                               parameters=result.parameters,
                               train_seconds=result.train_seconds,
                               examples_per_second=result.examples_per_second, run_dir=str(run.path)))
    return rows


def format_table(rows: list[CompareRow], markdown: bool = False) -> str:
    header = ["config", "model", "dev metric", "95% CI", "params", "train time", "examples/s"]
    body = []
    for r in rows:
        ci = f"[{100 * r.ci_low:.1f}, {100 * r.ci_high:.1f}]" if r.ci_low is not None else "-"
        body.append([r.name, r.model, f"{r.metric} {100 * r.value:.2f}", ci, f"{r.parameters:,}",
                     f"{r.train_seconds:.1f}s", f"{r.examples_per_second:,.0f}"])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, body)])


def write_report(run: RunDir, config: Config, result: TrainResult, task) -> None:
    """report.md with the final numbers, plus loss-curve and confusion-matrix plots."""
    from textnn.viz.plots import plot_confusion_matrix, plot_loss_curve

    records = run.read_metrics()
    plot_loss_curve(records, run.path / "loss.png")
    lines = [f"# Run {run.path.name}", "",
             f"- task: {config.task}, model: {config.model_name} (preset: {config.model_preset or 'none'})",
             f"- parameters: {result.parameters:,}",
             f"- steps: {result.steps}, epochs completed: {result.epochs_completed}, stopped: {result.stopped}",
             f"- training time: {result.train_seconds:.1f} s, {result.examples_per_second:,.0f} examples/s, "
             f"{result.tokens_per_second:,.0f} tokens/s",
             f"- date: {time.strftime('%Y-%m-%d %H:%M')}, device: {config.train.device}", ""]
    for split, metrics in (("dev", result.dev), ("test", result.test)):
        if not metrics:
            continue
        lines += [f"## {split} (best checkpoint, step {result.best_step})", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items() if isinstance(v, float)]
        lines.append("")
        if "confusion_matrix" in metrics:
            plot_confusion_matrix(np.asarray(metrics["confusion_matrix"]), task.labels,
                                  run.path / f"confusion_{split}.png", title=f"{run.path.name} ({split})")
            lines += [f"![confusion matrix]({f'confusion_{split}.png'})", ""]
    lines += ["![loss curve](loss.png)", ""]
    (run.path / "report.md").write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {run.path / 'report.md'}", file=sys.stderr)
