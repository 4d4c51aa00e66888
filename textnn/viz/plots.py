"""PNG plots for run reports: loss curves from `metrics.jsonl` records and confusion matrices.

Figures are built on matplotlib's object API with the Agg canvas attached explicitly, instead of
through `pyplot`: nothing global changes (a notebook's interactive backend stays as it was), no
figure lingers in pyplot's registry, and matplotlib is imported only when a plot is drawn, so
`import textnn` stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from textnn.errors import TextnnError



def _new_figure(width: float, height: float):
    """A matplotlib Figure drawn by the Agg (PNG) canvas; imports matplotlib on first use."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: str | Path) -> None:
    """Write `figure` as PNG at `path`, creating its folder, by `files.open_output`: by replace (a temporary
    file renamed over it), so a symbolic link at `path` is replaced, never written through to a file outside
    the run; a device or a pipe is written in place, never replaced."""
    from textnn.files import open_output

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_output(path, "plot") as handle:
        figure.savefig(handle, format="png")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _metric_names(records: list[dict]) -> list[str]:
    """Names of the scores to plot beside the loss: keys in the metric direction table."""
    from textnn.metrics import HIGHER_IS_BETTER

    names: list[str] = []
    for record in records:
        for key, value in record.items():
            if key in HIGHER_IS_BETTER and key != "loss" and _is_number(value) and key not in names:
                names.append(key)
    return names


# A curve of at most this many points is drawn with a marker on each: a line alone through two or
# three points reads as a stray stroke, and through one point draws nothing at all.
FEW_POINTS = 30


def _marker(points: int, always: bool = False) -> str | None:
    """The marker for a curve of `points` points: a dot on each when they are few (or `always`, as for
    evaluations, which are sparse by nature), none on a dense training curve."""
    return "o" if always or points <= FEW_POINTS else None


def plot_loss_curve(records: list[dict], path: str | Path):
    """Plot a run's loss curve(s) to a PNG at `path`.

    `records` are the dicts of a run's `metrics.jsonl`, each with a "step" and a "split" (missing
    means "train"), e.g.
    {"step": 10, "epoch": 0, "split": "train", "loss": 0.7} and
    {"step": 50, "split": "dev", "loss": 0.6, "accuracy": 0.8}. The left panel shows the loss of
    every split against step; when evaluation records carry metrics (any name in
    `textnn.metrics.HIGHER_IS_BETTER` other than "loss"), a right panel shows them against step.
    Evaluation points, and the points of a curve with few of them (a short run), are drawn as markers,
    so that a run of a few steps still shows its losses. Returns the figure (its axes and legends).
    """
    by_split: dict[str, list[dict]] = {}
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise TextnnError(
                f"records[{index}] is {type(record).__name__}, not a dict; pass the parsed lines "
                "of metrics.jsonl"
            )
        if not _is_number(record.get("step")):
            raise TextnnError(
                f"records[{index}] = {record!r} has no numeric 'step'; every metrics.jsonl record "
                "needs the optimizer step it was taken at"
            )
        split = str(record.get("split", "train"))
        if split != "dev_final":  # the best dev evaluation again, from the kept weights: already on the dev curve
            by_split.setdefault(split, []).append(record)
    if not any(_is_number(record.get("loss")) for record in records):
        raise TextnnError(
            f"none of the {len(records)} records has a numeric 'loss'; nothing to plot (is this a "
            "metrics.jsonl from a training run?)"
        )
    # Train first, then evaluation splits in the order they appear.
    splits = sorted(by_split, key=lambda split: (split != "train", list(by_split).index(split)))
    eval_records = [record for split in splits if split != "train" for record in by_split[split]]
    metric_names = _metric_names(eval_records)

    panels = 2 if metric_names else 1
    figure = _new_figure(6.0 * panels, 4.5)
    loss_axes = figure.add_subplot(1, panels, 1)
    for split in splits:
        points = sorted(
            (record["step"], record["loss"])
            for record in by_split[split]
            if _is_number(record.get("loss"))
        )
        if not points:
            continue
        steps, losses = zip(*points)
        marker = _marker(len(points), always=split != "train")
        loss_axes.plot(steps, losses, marker=marker, markersize=4, label=f"{split} loss")
    loss_axes.set_title("Loss")
    loss_axes.set_xlabel("step")
    loss_axes.set_ylabel("loss")
    loss_axes.grid(True, alpha=0.3)
    loss_axes.legend()

    if metric_names:
        metric_axes = figure.add_subplot(1, panels, 2)
        for split in splits:
            if split == "train":
                continue
            for name in metric_names:
                points = sorted(
                    (record["step"], record[name])
                    for record in by_split[split]
                    if _is_number(record.get(name))
                )
                if points:
                    steps, values = zip(*points)
                    metric_axes.plot(steps, values, marker="o", markersize=4, label=f"{split} {name}")
        metric_axes.set_title("Evaluation metrics")
        metric_axes.set_xlabel("step")
        metric_axes.set_ylabel("score")
        metric_axes.grid(True, alpha=0.3)
        metric_axes.legend()
    figure.tight_layout()
    _save(figure, path)
    return figure


@dataclass
class ComparedRun:
    """One run of a comparison as `plot_comparison` draws it."""

    name: str  # the legend label and bar label
    metric: str  # the metric the comparison ranks by, e.g. "accuracy"
    value: float  # its final (best checkpoint's) dev value
    ci_low: float | None = None  # its bootstrap interval, when the run computed one
    ci_high: float | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)  # (step, value) of each dev evaluation


def _colour(index: int) -> str:
    """The colour of the `index`-th run of a comparison, the same in both panels (matplotlib's cycle)."""
    return f"C{index % 10}"


def plot_comparison(runs: list[ComparedRun], path: str | Path):
    """One picture of several runs, written as a PNG at `path`: their dev metric against step side by side
    (left, when any run evaluated during training) and their final values as bars with the bootstrap
    intervals where the runs have them (right). Returns the figure (its axes and legends)."""
    if not runs:
        raise TextnnError("no runs to compare; give at least one config")
    metrics = list(dict.fromkeys(run.metric for run in runs))
    metric_label = " / ".join(metrics)
    with_curves = any(run.curve for run in runs)
    panels = 2 if with_curves else 1
    figure = _new_figure(6.0 * panels, 4.5)
    if with_curves:
        curve_axes = figure.add_subplot(1, panels, 1)
        for index, run in enumerate(runs):
            if run.curve:
                steps, values = zip(*sorted(run.curve))
                curve_axes.plot(steps, values, marker=_marker(len(steps)), markersize=4, label=run.name,
                                color=_colour(index))
        curve_axes.set_title(f"dev {metric_label} during training")
        curve_axes.set_xlabel("step")
        curve_axes.set_ylabel(metric_label)
        curve_axes.grid(True, alpha=0.3)
        curve_axes.legend()

    bar_axes = figure.add_subplot(1, panels, panels)
    positions = np.arange(len(runs))
    values = np.array([run.value for run in runs], dtype=np.float64)
    # Error bars as distances below and above each value; a run without an interval gets none (0, 0).
    below = [run.value - run.ci_low if run.ci_low is not None else 0.0 for run in runs]
    above = [run.ci_high - run.value if run.ci_high is not None else 0.0 for run in runs]
    has_intervals = any(run.ci_low is not None for run in runs)
    bar_axes.bar(positions, values, yerr=[below, above] if has_intervals else None, capsize=4,
                 color=[_colour(index) for index in range(len(runs))])
    bar_axes.set_xticks(positions)
    bar_axes.set_xticklabels([run.name for run in runs], rotation=30 if len(runs) > 3 else 0,
                             ha="right" if len(runs) > 3 else "center")
    bar_axes.set_title(f"final dev {metric_label}" + (" (95% bootstrap interval)" if has_intervals else ""))
    bar_axes.set_ylabel(metric_label)
    bar_axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    _save(figure, path)
    return figure


def plot_confusion_matrix(
    matrix: np.ndarray, labels: list[str], path: str | Path, title: str = ""
) -> None:
    """Plot a confusion matrix (rows = true class, columns = predicted) to a PNG at `path`.

    Cells show the raw counts; colour is the row-normalised fraction (recall per true class), so
    rare classes are as readable as frequent ones.
    """
    counts = np.asarray(matrix)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise TextnnError(
            f"confusion matrix has shape {tuple(counts.shape)}; pass a square [C, C] array"
        )
    classes = counts.shape[0]
    if len(labels) != classes:
        raise TextnnError(
            f"{len(labels)} labels for a {classes}x{classes} confusion matrix; pass one label per class"
        )
    row_totals = counts.sum(axis=1, keepdims=True).astype(np.float64)
    fractions = np.zeros(counts.shape, dtype=np.float64)
    np.divide(counts, row_totals, out=fractions, where=row_totals > 0)

    side = min(max(4.0, 0.55 * classes + 2.5), 24.0)
    figure = _new_figure(side + 1.0, side)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(fractions, cmap="Blues", vmin=0.0, vmax=1.0)
    colorbar = figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    colorbar.set_label("fraction of the true class")
    axes.set_xticks(range(classes))
    axes.set_yticks(range(classes))
    # Long label lists are slanted so neighbouring names do not overlap.
    slanted = classes > 4
    axes.set_xticklabels(labels, rotation=45 if slanted else 0, ha="right" if slanted else "center")
    axes.set_yticklabels(labels)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title or "Confusion matrix")
    font_size = max(5.0, min(10.0, 120.0 / max(classes, 1)))
    integral = np.issubdtype(counts.dtype, np.integer) or np.all(np.equal(np.mod(counts, 1), 0))
    for row in range(classes):
        for column in range(classes):
            value = counts[row, column]
            text = f"{int(value)}" if integral else f"{value:.2f}"
            # Dark cells get white text so the count stays legible.
            colour = "white" if fractions[row, column] > 0.5 else "black"
            axes.text(column, row, text, ha="center", va="center", color=colour, fontsize=font_size)
    figure.tight_layout()
    _save(figure, path)
