"""Classification metrics over integer class ids: accuracy, precision/recall/F1, MCC, confusion matrix.

Every score is computed from a confusion matrix, and the confusion-matrix maths accepts leading batch
dimensions. The single-call functions use a batch of one; `bootstrap_ci` uses the `batched` form
attached to each entry of `CLASSIFICATION_METRICS` to score a thousand resamples in a few numpy calls.

Conventions (the same as scikit-learn's with `zero_division=0`):
- a ratio whose denominator is 0 (precision of a class never predicted, recall of a class never
  seen) is 0.0;
- F1 is computed per class as 2 tp / (2 tp + fp + fn), which equals 2 P R / (P + R) whenever that is
  defined and is 0.0 when tp = 0;
- macro averages run over the classes that occur in `y_true` or `y_pred`, or over all
  `num_classes` classes when that is given.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import numpy as np

from textnn.errors import TextnnError

ClassIds = Union[Sequence[int], np.ndarray]

_AVERAGES = ("macro", "micro", "binary")


# ---------------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------------


def _as_class_ids(values: ClassIds, name: str) -> np.ndarray:
    """A 1-D int64 array of class ids, or a TextnnError that says what is wrong with `values`."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise TextnnError(
            f"{name} has shape {tuple(array.shape)}; pass a 1-D list or array with one class id "
            "per example"
        )
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind == "b":
        return array.astype(np.int64)
    if array.dtype.kind == "f":
        # Floats that are whole numbers (e.g. labels read back from JSON as 1.0) are accepted.
        non_integral = np.flatnonzero(~np.isfinite(array) | (array != np.round(array)))
        if non_integral.size:
            index = int(non_integral[0])
            raise TextnnError(
                f"{name}[{index}] = {array[index].item()!r} is not a class id; pass integer class ids "
                "(argmax the scores first if these are probabilities)"
            )
        array = array.astype(np.int64)
    elif array.dtype.kind not in "iu":
        raise TextnnError(
            f"{name} has values of type {array.dtype} (first: {array[0].item()!r}); pass integer class "
            "ids, mapping label strings to ids with the run's label vocabulary"
        )
    array = array.astype(np.int64, copy=False)
    negative = np.flatnonzero(array < 0)
    if negative.size:
        index = int(negative[0])
        raise TextnnError(
            f"{name}[{index}] = {int(array[index])} is negative; class ids run from 0 to "
            "num_classes - 1"
        )
    return array


def _check_pair(y_true: ClassIds, y_pred: ClassIds) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as int64 arrays of the same, non-zero length."""
    true_ids = _as_class_ids(y_true, "y_true")
    pred_ids = _as_class_ids(y_pred, "y_pred")
    if true_ids.shape[0] != pred_ids.shape[0]:
        raise TextnnError(
            f"y_true has {true_ids.shape[0]} labels but y_pred has {pred_ids.shape[0]}; pass "
            "exactly one prediction per example"
        )
    if true_ids.shape[0] == 0:
        raise TextnnError("no examples to score (y_true and y_pred are empty); check the data split")
    return true_ids, pred_ids


def _resolve_num_classes(
    true_ids: np.ndarray, pred_ids: np.ndarray, num_classes: int | None
) -> int:
    """`num_classes` checked against the ids, or inferred as the largest id + 1."""
    largest = int(max(true_ids.max(), pred_ids.max()))
    if num_classes is None:
        return largest + 1
    if int(num_classes) < 1:
        raise TextnnError(f"num_classes = {num_classes}; it must be at least 1")
    if largest >= num_classes:
        name, values = ("y_true", true_ids) if true_ids.max() == largest else ("y_pred", pred_ids)
        index = int(np.flatnonzero(values == largest)[0])
        raise TextnnError(
            f"{name}[{index}] = {largest} is outside [0, {num_classes}) for num_classes = "
            f"{num_classes}; raise num_classes or check the label vocabulary"
        )
    return int(num_classes)


# ---------------------------------------------------------------------------------------------------
# Confusion-matrix maths (works on [..., C, C])
# ---------------------------------------------------------------------------------------------------


def _batched_confusion(true_ids: np.ndarray, pred_ids: np.ndarray, num_classes: int) -> np.ndarray:
    """Confusion matrices [B, C, C] for id arrays [B, N], in one bincount.

    Each (row, true, pred) triple gets a unique bin `row * C * C + true * C + pred`.
    """
    batch = true_ids.shape[0]
    cells = num_classes * num_classes
    offsets = (np.arange(batch, dtype=np.int64) * cells)[:, None]
    flat = offsets + true_ids * num_classes + pred_ids
    counts = np.bincount(flat.ravel(), minlength=batch * cells)
    return counts.reshape(batch, num_classes, num_classes)


def _safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, with 0.0 where the denominator is 0 (sklearn's zero_division=0)."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.zeros(np.broadcast(numerator, denominator).shape, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def _ratios(
    tp: np.ndarray, fp: np.ndarray, fn: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(precision, recall, F1) from true-positive, false-positive and false-negative counts."""
    return _safe_divide(tp, tp + fp), _safe_divide(tp, tp + fn), _safe_divide(2 * tp, 2 * tp + fp + fn)


def _prf_from_confusion(
    confusion: np.ndarray, average: str, positive: int, all_classes: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(precision, recall, f1), each of shape confusion.shape[:-2]."""
    true_positive = np.diagonal(confusion, axis1=-2, axis2=-1).astype(np.float64)
    predicted = confusion.sum(axis=-2)  # column sums: how often each class was predicted
    actual = confusion.sum(axis=-1)  # row sums: how often each class is the truth
    false_positive = predicted - true_positive
    false_negative = actual - true_positive
    if average == "binary":
        tp = true_positive[..., positive]
        fp = false_positive[..., positive]
        fn = false_negative[..., positive]
        return _ratios(tp, fp, fn)
    if average == "micro":
        # Classes absent from both inputs add zero to every sum, so no mask is needed here.
        tp = true_positive.sum(axis=-1)
        fp = false_positive.sum(axis=-1)
        fn = false_negative.sum(axis=-1)
        return _ratios(tp, fp, fn)
    precision, recall, f1 = _ratios(true_positive, false_positive, false_negative)
    if all_classes:
        counted = np.ones_like(precision)
    else:
        counted = ((predicted + actual) > 0).astype(np.float64)
    n_counted = counted.sum(axis=-1)
    return (
        _safe_divide((precision * counted).sum(axis=-1), n_counted),
        _safe_divide((recall * counted).sum(axis=-1), n_counted),
        _safe_divide((f1 * counted).sum(axis=-1), n_counted),
    )


def _mcc_from_confusion(confusion: np.ndarray) -> np.ndarray:
    """Multi-class Matthews correlation (Gorodkin 2004, "Comparing two K-category assignments by a
    K-category correlation coefficient", eq. 8 in the confusion-matrix form):

        MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2))

    with c = correct, s = total, p_k = times k was predicted, t_k = times k was the truth. It equals
    the two-class MCC for C = 2. 0.0 where the denominator is 0 (one input uses a single class).
    Float64 throughout: s^2 times s^2 overflows int64 from about 55k examples.
    """
    confusion = confusion.astype(np.float64)
    correct = np.trace(confusion, axis1=-2, axis2=-1)
    total = confusion.sum(axis=(-2, -1))
    predicted = confusion.sum(axis=-2)
    actual = confusion.sum(axis=-1)
    numerator = correct * total - (predicted * actual).sum(axis=-1)
    pred_spread = total**2 - (predicted**2).sum(axis=-1)
    true_spread = total**2 - (actual**2).sum(axis=-1)
    denominator = np.sqrt(pred_spread * true_spread)
    # Rounding can push |MCC| a hair past 1 for perfect agreement.
    return np.clip(_safe_divide(numerator, denominator), -1.0, 1.0)


# ---------------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------------


def confusion_matrix(y_true: ClassIds, y_pred: ClassIds, num_classes: int) -> np.ndarray:
    """Counts [num_classes, num_classes] (int64); entry [i, j] = examples of true class i predicted
    as class j (rows = truth, columns = prediction, as in scikit-learn)."""
    true_ids, pred_ids = _check_pair(y_true, y_pred)
    num_classes = _resolve_num_classes(true_ids, pred_ids, num_classes)
    return _batched_confusion(true_ids[None, :], pred_ids[None, :], num_classes)[0]


def accuracy(y_true: ClassIds, y_pred: ClassIds) -> float:
    """Fraction of examples whose predicted class id equals the true one."""
    true_ids, pred_ids = _check_pair(y_true, y_pred)
    return float(np.mean(true_ids == pred_ids))


def precision_recall_f1(
    y_true: ClassIds,
    y_pred: ClassIds,
    average: str = "macro",
    positive: int = 1,
    num_classes: int | None = None,
) -> dict[str, float]:
    """Precision, recall and F1 as `{"precision": p, "recall": r, "f1": f}`.

    average:
      "macro"  - unweighted mean of the per-class scores, over the classes present in either input
                 (over all `num_classes` classes when that is given, absent ones scoring 0);
      "micro"  - pooled counts over classes; for single-label data all three equal the accuracy;
      "binary" - the scores of class `positive` alone (one-vs-rest if there are more classes).
    Zero denominators give 0.0, as scikit-learn's `zero_division=0`.
    """
    if average not in _AVERAGES:
        raise TextnnError(f"average = {average!r}; use one of {', '.join(_AVERAGES)}")
    true_ids, pred_ids = _check_pair(y_true, y_pred)
    classes = _resolve_num_classes(true_ids, pred_ids, num_classes)
    if average == "binary":
        if positive < 0 or (num_classes is not None and positive >= num_classes):
            raise TextnnError(
                f"positive = {positive} is not a class id below num_classes = {num_classes}; "
                "pass the id of the positive class"
            )
        # A positive class that never occurs still gets a column (all zeros, scores 0.0).
        classes = max(classes, positive + 1)
    confusion = _batched_confusion(true_ids[None, :], pred_ids[None, :], classes)
    precision, recall, f1 = _prf_from_confusion(confusion, average, positive, num_classes is not None)
    return {"precision": float(precision[0]), "recall": float(recall[0]), "f1": float(f1[0])}


def matthews_corrcoef(y_true: ClassIds, y_pred: ClassIds) -> float:
    """Matthews correlation coefficient in [-1, 1], multi-class form of Gorodkin (2004); 0.0 when
    undefined (all truths or all predictions are one class)."""
    true_ids, pred_ids = _check_pair(y_true, y_pred)
    classes = _resolve_num_classes(true_ids, pred_ids, None)
    confusion = _batched_confusion(true_ids[None, :], pred_ids[None, :], classes)
    return float(_mcc_from_confusion(confusion)[0])


# ---------------------------------------------------------------------------------------------------
# The metric table: name -> fn(y_true, y_pred) -> float, each with a `batched` form for bootstrap_ci
# ---------------------------------------------------------------------------------------------------


def _batched_classes(true_ids: np.ndarray, pred_ids: np.ndarray, at_least: int = 1) -> int:
    """Number of confusion-matrix columns for [B, N] id arrays (ids assumed already checked)."""
    return max(int(true_ids.max()) + 1, int(pred_ids.max()) + 1, at_least)


def _macro_f1(y_true: ClassIds, y_pred: ClassIds) -> float:
    """Macro-averaged F1 over the classes present in either input."""
    return precision_recall_f1(y_true, y_pred, average="macro")["f1"]


def _micro_f1(y_true: ClassIds, y_pred: ClassIds) -> float:
    """Micro-averaged F1 (pooled counts)."""
    return precision_recall_f1(y_true, y_pred, average="micro")["f1"]


def _binary_f1(y_true: ClassIds, y_pred: ClassIds) -> float:
    """F1 of the positive class 1."""
    return precision_recall_f1(y_true, y_pred, average="binary", positive=1)["f1"]


def _accuracy_batched(true_ids: np.ndarray, pred_ids: np.ndarray) -> np.ndarray:
    return (true_ids == pred_ids).mean(axis=-1)


def _f1_batched(average: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def batched(true_ids: np.ndarray, pred_ids: np.ndarray) -> np.ndarray:
        classes = _batched_classes(true_ids, pred_ids, at_least=2)
        confusion = _batched_confusion(true_ids, pred_ids, classes)
        return _prf_from_confusion(confusion, average, positive=1, all_classes=False)[2]

    return batched


def _mcc_batched(true_ids: np.ndarray, pred_ids: np.ndarray) -> np.ndarray:
    confusion = _batched_confusion(true_ids, pred_ids, _batched_classes(true_ids, pred_ids))
    return _mcc_from_confusion(confusion)


# `fn.batched(y_true [B, N], y_pred [B, N]) -> scores [B]` must agree with calling `fn` row by row;
# bootstrap_ci uses it when present (tests check the agreement).
accuracy.batched = _accuracy_batched  # type: ignore[attr-defined]
_macro_f1.batched = _f1_batched("macro")  # type: ignore[attr-defined]
_micro_f1.batched = _f1_batched("micro")  # type: ignore[attr-defined]
_binary_f1.batched = _f1_batched("binary")  # type: ignore[attr-defined]
matthews_corrcoef.batched = _mcc_batched  # type: ignore[attr-defined]

CLASSIFICATION_METRICS: dict[str, Callable[[ClassIds, ClassIds], float]] = {
    "accuracy": accuracy,
    "macro_f1": _macro_f1,
    "micro_f1": _micro_f1,
    "f1": _binary_f1,
    "mcc": matthews_corrcoef,
}
