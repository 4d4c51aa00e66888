"""Metrics: plain functions `fn(y_true, y_pred) -> float` over numpy arrays, named in one table.

`METRICS` maps every metric name a config or CLI may use to its function; `HIGHER_IS_BETTER` says
which direction is an improvement, for early stopping and best-checkpoint selection. Names the
trainer and tasks report themselves ("loss", "perplexity", "bpc") are listed there too, as lower-is-better.
"""

from __future__ import annotations

from typing import Callable

from textnn.metrics.bootstrap import bootstrap_ci
from textnn.metrics.classification import (
    CLASSIFICATION_METRICS,
    accuracy,
    confusion_matrix,
    matthews_corrcoef,
    precision_recall_f1,
)
from textnn.metrics.correlation import REGRESSION_METRICS, average_ranks, pearson, spearman
from textnn.metrics.spans import SPAN_METRICS, span_f1, span_precision, span_recall, span_scores, token_accuracy

METRICS: dict[str, Callable] = {**CLASSIFICATION_METRICS, **REGRESSION_METRICS}

HIGHER_IS_BETTER: dict[str, bool] = {
    **{name: True for name in METRICS},
    "loss": False,
    "perplexity": False,
    "bpc": False,
    "bleu": True,  # translation (sacreBLEU on decoded text, metrics/bleu.py)
    "chrf": True,
    **{name: True for name in SPAN_METRICS},  # tagging (conlleval); their inputs are tag sequences, not ids
}

__all__ = [
    "CLASSIFICATION_METRICS",
    "HIGHER_IS_BETTER",
    "METRICS",
    "REGRESSION_METRICS",
    "SPAN_METRICS",
    "accuracy",
    "average_ranks",
    "bootstrap_ci",
    "confusion_matrix",
    "matthews_corrcoef",
    "pearson",
    "precision_recall_f1",
    "spearman",
    "span_f1",
    "span_precision",
    "span_recall",
    "span_scores",
    "token_accuracy",
]
