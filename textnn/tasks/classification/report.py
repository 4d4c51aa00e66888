"""A classifier's part of the report and of what `textnn evaluate` prints (`ClassificationReport`, a part
of `ClassificationTask`): the confusion matrix, as a plot and as text."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ClassificationReport:
    """`report_sections` and `format_metrics` of `ClassificationTask` (its labels)."""

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        """The confusion matrix of the split, as a plot."""
        from textnn.viz.plots import plot_confusion_matrix

        if "confusion_matrix" not in metrics:
            return []
        plot_confusion_matrix(np.asarray(metrics["confusion_matrix"]), self.labels,
                              run_path / f"confusion_{split}.png", title=f"{run_path.name} ({split})")
        return [f"![confusion matrix](confusion_{split}.png)", ""]

    def format_metrics(self, metrics: dict) -> list[str]:
        lines = super().format_metrics({k: v for k, v in metrics.items() if k != "confusion_matrix"})
        if "confusion_matrix" in metrics:
            lines.append("confusion matrix (rows = gold, columns = predicted):")
            lines += confusion_lines(metrics["confusion_matrix"], self.labels)
        return lines


def confusion_lines(matrix: list[list[int]], labels: list[str]) -> list[str]:
    """A confusion matrix as text, each row and column headed by its class label (cut to 12 characters,
    so that a long label does not push the counts apart)."""
    names = [str(label)[:12] for label in labels]
    width = max(6, *(len(name) for name in names), *(len(str(n)) for row in matrix for n in row))
    side = max(len(name) for name in names)
    header = "  " + " " * side + " " + " ".join(name.rjust(width) for name in names)
    return [header] + ["  " + name.ljust(side) + " " + " ".join(f"{n:{width}d}" for n in row)
                       for name, row in zip(names, matrix)]
