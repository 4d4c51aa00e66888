"""Percentile bootstrap confidence intervals for any per-example metric.

The test set is treated as a sample from the population of examples: resampling example indices
with replacement and re-scoring gives the sampling distribution of the metric, and its
alpha/2 and 1 - alpha/2 quantiles are the interval (Efron and Tibshirani 1993, "An Introduction to
the Bootstrap", ch. 13, the percentile interval). Koehn (2004) uses the same resampling for MT.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from textnn import limits
from textnn.errors import TextnnError

# Resamples are drawn and scored in chunks of at most this many (resample, example) cells, so
# memory stays around a hundred MB however large the test set is.
_MAX_CHUNK_CELLS = 4_000_000


def bootstrap_ci(
    metric_fn: Callable,
    y_true,
    y_pred,
    n_samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """(low, high) percentile-bootstrap interval of `metric_fn(y_true, y_pred)`.

    Draws `n_samples` resamples of the example indices (with replacement, same size as the data)
    from `numpy.random.default_rng(seed)`, so equal arguments give equal intervals. If `metric_fn`
    has a `batched(y_true[B, N], y_pred[B, N]) -> scores[B]` attribute (every entry of
    `textnn.metrics.METRICS` does) the resamples are scored in a few vectorised calls; otherwise
    `metric_fn` is called once per resample.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise TextnnError(f"n_samples = {n_samples!r}; pass a positive whole number such as 1000")
    limits.check_count(n_samples, "bootstrap", "n_samples")  # one score is kept per resample
    if not 0.0 < confidence < 1.0:
        raise TextnnError(
            f"confidence = {confidence!r}; pass a level strictly between 0 and 1, e.g. 0.95"
        )
    truths = np.asarray(y_true)
    predictions = np.asarray(y_pred)
    if truths.ndim != 1 or predictions.ndim != 1:
        raise TextnnError(
            f"y_true has shape {tuple(truths.shape)} and y_pred {tuple(predictions.shape)}; pass "
            "1-D lists or arrays with one entry per example"
        )
    if truths.shape[0] != predictions.shape[0]:
        raise TextnnError(
            f"y_true has {truths.shape[0]} entries but y_pred has {predictions.shape[0]}; pass one "
            "prediction per example"
        )
    n_examples = truths.shape[0]
    if n_examples == 0:
        raise TextnnError("no examples to resample (y_true and y_pred are empty); check the data split")
    # Scoring the full data first checks the inputs once with the metric's own messages, so the
    # vectorised path (which skips per-resample checks) only ever sees valid data.
    metric_fn(truths, predictions)

    rng = np.random.default_rng(seed)
    batched = getattr(metric_fn, "batched", None)
    chunk = max(1, min(n_samples, _MAX_CHUNK_CELLS // n_examples))
    scores = np.empty(n_samples, dtype=np.float64)
    for start in range(0, n_samples, chunk):
        size = min(chunk, n_samples - start)
        indices = rng.integers(0, n_examples, size=(size, n_examples))  # [resamples, examples]
        if batched is not None:
            scores[start : start + size] = batched(truths[indices], predictions[indices])
        else:
            for offset, row in enumerate(indices):
                scores[start + offset] = metric_fn(truths[row], predictions[row])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(scores, [tail, 1.0 - tail])
    return float(low), float(high)
