"""Correlation metrics for regression-style tasks (STS-B, word similarity): Pearson and Spearman.

Both return 0.0 when a correlation is undefined (one input is constant), the same convention as
MCC: a constant predictor has no linear or rank association with the truth, and a finite score keeps
model selection and averaging over runs well defined. Like the classification metrics, each has a
`batched` form over rows of [B, N] arrays that `bootstrap_ci` uses.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import numpy as np

from textnn.errors import TextnnError

Values = Union[Sequence[float], np.ndarray]


def _as_values(values: Values, name: str) -> np.ndarray:
    """A 1-D float64 array of finite numbers, or a TextnnError naming the bad entry."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TextnnError(f"{name} holds a value that is not a number ({err}); pass floats") from None
    if array.ndim != 1:
        raise TextnnError(
            f"{name} has shape {tuple(array.shape)}; pass a 1-D list or array with one value per "
            "example"
        )
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        index = int(bad[0])
        raise TextnnError(
            f"{name}[{index}] = {array[index]} is not finite; remove or fix that example"
        )
    return array


def _check_pair(x: Values, y: Values) -> tuple[np.ndarray, np.ndarray]:
    xs = _as_values(x, "x")
    ys = _as_values(y, "y")
    if xs.shape[0] != ys.shape[0]:
        raise TextnnError(
            f"x has {xs.shape[0]} values but y has {ys.shape[0]}; pass one prediction per example"
        )
    if xs.shape[0] < 2:
        raise TextnnError(
            f"a correlation needs at least 2 examples, got {xs.shape[0]}; check the data split"
        )
    return xs, ys


def _pearson_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of [B, N] arrays; 0.0 for rows where either side is constant."""
    # Exactly constant rows are caught before centring: subtracting a mean that is not exactly
    # representable leaves rounding noise, whose "correlation" would be meaningless.
    constant = (np.ptp(xs, axis=-1) == 0) | (np.ptp(ys, axis=-1) == 0)
    x_centred = xs - xs.mean(axis=-1, keepdims=True)
    y_centred = ys - ys.mean(axis=-1, keepdims=True)
    covariance = (x_centred * y_centred).sum(axis=-1)
    scale = np.sqrt((x_centred**2).sum(axis=-1) * (y_centred**2).sum(axis=-1))
    r = np.zeros(xs.shape[:-1], dtype=np.float64)
    np.divide(covariance, scale, out=r, where=(scale > 0) & ~constant)
    return np.clip(r, -1.0, 1.0)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N along the last axis, tied values sharing the mean of their ranks ("fractional"
    ranking, as Spearman's coefficient with ties requires). Works on [N] and [B, N]."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    order = np.argsort(values, axis=-1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=-1)
    positions = np.broadcast_to(np.arange(n), values.shape)
    starts_group = np.ones(values.shape, dtype=bool)
    starts_group[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends_group = np.ones(values.shape, dtype=bool)
    ends_group[..., :-1] = starts_group[..., 1:]
    # First position of each element's tie group: running max of the group-start positions.
    first = np.maximum.accumulate(np.where(starts_group, positions, 0), axis=-1)
    # Last position: running min of group-end positions, taken from the right.
    last = np.flip(
        np.minimum.accumulate(np.flip(np.where(ends_group, positions, n - 1), axis=-1), axis=-1),
        axis=-1,
    )
    ranks = np.empty(values.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=-1)
    return ranks


def pearson(x: Values, y: Values) -> float:
    """Pearson's linear correlation coefficient r in [-1, 1]; 0.0 if either input is constant."""
    xs, ys = _check_pair(x, y)
    return float(_pearson_rows(xs[None, :], ys[None, :])[0])


def spearman(x: Values, y: Values) -> float:
    """Spearman's rank correlation: Pearson's r of the average ranks (ties share their mean rank);
    0.0 if either input is constant."""
    xs, ys = _check_pair(x, y)
    return float(_pearson_rows(average_ranks(xs)[None, :], average_ranks(ys)[None, :])[0])


def _pearson_batched(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    return _pearson_rows(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64))


def _spearman_batched(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    return _pearson_rows(average_ranks(xs), average_ranks(ys))


pearson.batched = _pearson_batched  # type: ignore[attr-defined]
spearman.batched = _spearman_batched  # type: ignore[attr-defined]

REGRESSION_METRICS: dict[str, Callable[[Values, Values], float]] = {
    "pearson": pearson,
    "spearman": spearman,
}
