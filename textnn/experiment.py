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
from textnn.metrics import HIGHER_IS_BETTER
from textnn.runs import FollowerRunDir, RunDir
from textnn.training import distributed
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

    Under torchrun (training/distributed.py) every process reads the data (a bad file or config
    raises the same error in each); process 0 makes the run directory while the others wait, and
    alone writes into it.
    """
    with distributed.session(resolve_device(config.train.device)):
        run = RunDir(run_dir or Path("runs") / config.name)
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        seed_everything(config.train.seed)
        task = registry.task_class(config.task).from_data(config)
        model = task.build_model()
        distributed.on_main(lambda: _create_run(run, config, resume, task))
        if not distributed.is_main():
            run = FollowerRunDir(run.path)
        trainer = Trainer(task, model, config.train, run)
        try:
            result = trainer.fit(resume=resume)
        except TrainingInterrupted:
            raise
        except BaseException as err:
            run.set_status("failed", error=str(err) or type(err).__name__)
            raise
        if distributed.is_main():
            write_report(run, config, result, task)
    return run, result


def _create_run(run: RunDir, config: Config, resume: bool, task) -> None:
    run.create(config, resume)
    task.save(run.path)


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
    config, task, model = load_run(run_dir)
    encoded = task.encode_file(data_path)
    options = {}
    if streams:
        if config.task != "language_modeling":
            raise TextnnError(f"--streams applies to language models; {run_dir} is a {config.task} run")
        options["streams"] = streams
    with torch.no_grad():
        return task.evaluate(model, encoded, bootstrap_samples=bootstrap_samples, **options)


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


def run_task_name(run_dir: str | Path) -> str:
    """The task a finished run directory was trained for (`predict` chooses its input and output by it)."""
    run = RunDir(run_dir)
    run.require_finished()
    return run.load_config().task


def predict_tagging_run(run_dir: str | Path, lines: Iterable[str], source: str = "<stdin>",
                        input_format: str = "auto", output_format: str = "jsonl") -> str:
    """Tags for raw text or CoNLL input from a tagging run, as CoNLL or JSONL text.

    input_format: text (one sentence per line, split by the run's data.tokenizer), conll (columns
    read with the run's data.token_column / data.tag_column; a tag column, if present, is the gold
    and is written beside the prediction), or auto (`conll.looks_like_conll` decides).
    output_format: conll (`token [gold] predicted` per line) or jsonl (one object per sentence:
    tokens, tags, spans [{type, start, end (exclusive), text}], and gold when the input has it).
    Predicted tags are in the run's data.tag_scheme.
    """
    import json

    from textnn.data.conll import format_conll, looks_like_conll, parse_conll, sentences_from_text, span_records

    if input_format not in ("auto", "text", "conll"):
        raise TextnnError(f"--input-format {input_format!r}: choose auto, text or conll")
    if output_format not in ("conll", "jsonl"):
        raise TextnnError(f"--output-format {output_format!r}: choose conll or jsonl")
    config, task, model = load_run(run_dir)
    if config.task != "tagging":
        raise TextnnError(f"{run_dir}: this is a {config.task} run, not a tagging run")
    lines = list(lines)
    data = config.data
    if input_format == "conll" or (input_format == "auto" and looks_like_conll(lines)):
        sentences = parse_conll(lines, source, token_column=data.token_column, tag_column=data.tag_column,
                                scheme=data.tag_scheme, require_tags=False)
    else:
        sentences = sentences_from_text(lines, task.tokenizer, source)
    predicted, _ = task.predict(model, task.encode(sentences))
    if output_format == "conll":
        return format_conll(sentences, predicted)
    rows = []
    for sentence, tags in zip(sentences, predicted):
        row = {"tokens": list(sentence.tokens), "tags": tags,
               "spans": span_records(sentence.tokens, tags, data.tag_scheme)}
        if sentence.tags is not None:
            row["gold"] = list(sentence.tags)
        rows.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(rows) + "\n"


def _load_language_model(run_dir: str | Path, command: str) -> tuple[Config, object, torch.nn.Module]:
    """load_run for the commands that need a language model; any other run is refused by name."""
    run = RunDir(run_dir)
    run.require_finished()
    config = run.load_config()
    if config.task != "language_modeling":
        raise TextnnError(f"{run_dir}: `{command}` needs a language model run (task language_modeling); this "
                          f"run is a {config.task} run (model {config.model_name})")
    return load_run(run_dir)


def generate_run(run_dir: str | Path, prompt: str = "", max_tokens: int = 200, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None, num_samples: int = 1,
                 stop_at_eos: bool = False):
    """Continue `prompt` with a trained language model (any with a `step`); see generation/lm.py.

    Returns a `textnn.generation.Generation` (the samples, the seed used, unknown prompt tokens).
    """
    from textnn.generation.lm import generate_text

    _, task, model = _load_language_model(run_dir, "generate")
    return generate_text(model, task, prompt, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, seed=seed, num_samples=num_samples, stop_at_eos=stop_at_eos)


def visualize_run(run_dir: str | Path, text: str, output_dir: str | Path | None = None) -> list[Path]:
    """Views of a language model reading `text`: attention heatmaps (Transformers) or LSTM cells.

    Files go to `output_dir` (default <run>/views); returns their paths.
    """
    _, task, model = _load_language_model(run_dir, "visualize")
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
        # Scores in [0, 1] (accuracy, F1, ...) read as percentages; losses, perplexity and bpc as they are.
        scale = 100 if HIGHER_IS_BETTER.get(r.metric, True) else 1
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
    """report.md with the final numbers, plus loss-curve and confusion-matrix plots."""
    from textnn.viz.plots import plot_confusion_matrix, plot_loss_curve

    records = run.read_metrics()
    # A run shorter than train.log_every with no dev set has logged no loss yet: nothing to plot.
    has_losses = any(isinstance(r.get("loss"), (int, float)) for r in records)
    if has_losses:
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
        if "per_type" in metrics:  # tagging: conlleval's per-type breakdown
            from textnn.metrics.spans import per_type_table

            lines += [per_type_table(metrics["per_type"], markdown=True), ""]
    if has_losses:
        lines += ["![loss curve](loss.png)", ""]
    (run.path / "report.md").write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {run.path / 'report.md'}", file=sys.stderr)
