"""Metrics against scikit-learn / scipy references and hand-derived values."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn import metrics as skm

from textnn.errors import TextnnError
from textnn.metrics import (
    CLASSIFICATION_METRICS,
    HIGHER_IS_BETTER,
    METRICS,
    REGRESSION_METRICS,
    accuracy,
    average_ranks,
    bootstrap_ci,
    confusion_matrix,
    matthews_corrcoef,
    pearson,
    precision_recall_f1,
    spearman,
)

FAST = settings(max_examples=40, deadline=None)


@st.composite
def label_pairs(draw, max_classes: int = 6, max_len: int = 40):
    """(y_true, y_pred) lists of class ids below a drawn number of classes."""
    classes = draw(st.integers(1, max_classes))
    length = draw(st.integers(1, max_len))
    ids = st.integers(0, classes - 1)
    y_true = draw(st.lists(ids, min_size=length, max_size=length))
    y_pred = draw(st.lists(ids, min_size=length, max_size=length))
    return y_true, y_pred, classes


def _sklearn(fn, *args, **kwargs):
    """Call a scikit-learn metric without its warnings about single-label inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# --- classification ---------------------------------------------------------------------------------


@FAST
@given(label_pairs())
def test_accuracy_matches_sklearn(pair):
    y_true, y_pred, _ = pair
    assert accuracy(y_true, y_pred) == pytest.approx(skm.accuracy_score(y_true, y_pred))


@FAST
@given(label_pairs(), st.sampled_from(["macro", "micro"]))
def test_precision_recall_f1_matches_sklearn(pair, average):
    y_true, y_pred, _ = pair
    ours = precision_recall_f1(y_true, y_pred, average=average)
    precision, recall, f1, _ = _sklearn(
        skm.precision_recall_fscore_support, y_true, y_pred, average=average, zero_division=0
    )
    assert ours["precision"] == pytest.approx(precision)
    assert ours["recall"] == pytest.approx(recall)
    assert ours["f1"] == pytest.approx(f1)


@FAST
@given(label_pairs())
def test_macro_over_all_classes_when_num_classes_given(pair):
    y_true, y_pred, classes = pair
    total_classes = classes + 2  # two classes that never occur, each scoring 0
    ours = precision_recall_f1(y_true, y_pred, average="macro", num_classes=total_classes)
    precision, recall, f1, _ = _sklearn(
        skm.precision_recall_fscore_support,
        y_true,
        y_pred,
        average="macro",
        labels=list(range(total_classes)),
        zero_division=0,
    )
    assert (ours["precision"], ours["recall"], ours["f1"]) == pytest.approx((precision, recall, f1))


@FAST
@given(label_pairs(max_classes=2))
def test_binary_matches_sklearn(pair):
    y_true, y_pred, _ = pair
    ours = precision_recall_f1(y_true, y_pred, average="binary", positive=1)
    precision, recall, f1, _ = _sklearn(
        skm.precision_recall_fscore_support,
        y_true,
        y_pred,
        average="binary",
        pos_label=1,
        labels=[0, 1],
        zero_division=0,
    )
    assert (ours["precision"], ours["recall"], ours["f1"]) == pytest.approx((precision, recall, f1))
    assert CLASSIFICATION_METRICS["f1"](y_true, y_pred) == pytest.approx(f1)


def test_binary_scores_by_hand():
    # tp = 2 (indices 2, 3), fp = 1 (index 1), fn = 0, tn = 1.
    scores = precision_recall_f1([0, 0, 1, 1], [0, 1, 1, 1], average="binary")
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(1.0)
    assert scores["f1"] == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    # Positive class 0 instead: tp = 1, fp = 0, fn = 1.
    scores = precision_recall_f1([0, 0, 1, 1], [0, 1, 1, 1], average="binary", positive=0)
    assert (scores["precision"], scores["recall"], scores["f1"]) == pytest.approx((1.0, 0.5, 2 / 3))


def test_zero_division_gives_zero():
    # Class 1 never predicted and never true: every ratio has a zero denominator.
    scores = precision_recall_f1([0, 0, 0], [0, 0, 0], average="binary", positive=1)
    assert scores == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    # Class 1 true but never predicted: precision 0/0 -> 0, recall 0/2.
    scores = precision_recall_f1([1, 1, 0], [0, 0, 0], average="binary")
    assert scores == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_micro_f1_equals_accuracy_for_single_label():
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 5, 300)
    y_pred = rng.integers(0, 5, 300)
    assert CLASSIFICATION_METRICS["micro_f1"](y_true, y_pred) == pytest.approx(accuracy(y_true, y_pred))


@FAST
@given(label_pairs())
def test_mcc_matches_sklearn_multiclass(pair):
    y_true, y_pred, _ = pair
    expected = _sklearn(skm.matthews_corrcoef, y_true, y_pred)
    assert matthews_corrcoef(y_true, y_pred) == pytest.approx(expected, abs=1e-12)


def test_mcc_by_hand_and_edge_cases():
    # tp = 2, tn = 1, fp = 1, fn = 0: (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)).
    assert matthews_corrcoef([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx(2 / math.sqrt(3 * 2 * 2 * 1))
    assert matthews_corrcoef([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    # Undefined (one side uses a single class): 0.0, as sklearn.
    assert matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
    assert matthews_corrcoef([0, 1, 2], [2, 2, 2]) == 0.0


def test_all_one_class_inputs():
    y = [2, 2, 2, 2]
    assert accuracy(y, y) == 1.0
    assert CLASSIFICATION_METRICS["macro_f1"](y, y) == pytest.approx(
        _sklearn(skm.f1_score, y, y, average="macro", zero_division=0)
    )
    assert CLASSIFICATION_METRICS["macro_f1"](y, y) == 1.0
    assert CLASSIFICATION_METRICS["mcc"](y, y) == 0.0


def test_mcc_large_counts_do_not_overflow():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 3, 200_000)
    y_pred = np.where(rng.random(200_000) < 0.7, y_true, rng.integers(0, 3, 200_000))
    assert matthews_corrcoef(y_true, y_pred) == pytest.approx(skm.matthews_corrcoef(y_true, y_pred))


@FAST
@given(label_pairs())
def test_confusion_matrix_matches_sklearn(pair):
    y_true, y_pred, classes = pair
    ours = confusion_matrix(y_true, y_pred, num_classes=classes + 1)
    expected = skm.confusion_matrix(y_true, y_pred, labels=list(range(classes + 1)))
    np.testing.assert_array_equal(ours, expected)


def test_confusion_matrix_orientation():
    # One example of true class 0 predicted as 2: row 0 (truth), column 2 (prediction).
    matrix = confusion_matrix([0], [2], num_classes=3)
    assert matrix[0, 2] == 1 and matrix.sum() == 1


def test_float_class_ids_that_are_whole_numbers_are_accepted():
    assert accuracy(np.array([1.0, 0.0]), [1, 1]) == 0.5


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: accuracy([0, 1], [0]), "y_true has 2 labels but y_pred has 1"),
        (lambda: accuracy([], []), "no examples"),
        (lambda: accuracy([0, -1], [0, 1]), "y_true[1] = -1"),
        (lambda: accuracy([0, 1], [0.5, 1]), "y_pred[0] = 0.5"),
        (lambda: accuracy(["a"], ["a"]), "integer class ids"),
        (lambda: accuracy([[0, 1]], [[0, 1]]), "shape (1, 2)"),
        (lambda: confusion_matrix([0, 3], [0, 1], num_classes=3), "y_true[1] = 3 is outside [0, 3)"),
        (lambda: precision_recall_f1([0], [0], average="weighted"), "'weighted'"),
        (
            lambda: precision_recall_f1([0], [0], average="binary", positive=4, num_classes=2),
            "positive = 4",
        ),
    ],
)
def test_classification_errors(call, fragment):
    with pytest.raises(TextnnError) as info:
        call()
    assert fragment in str(info.value)


# --- correlation ------------------------------------------------------------------------------------


@FAST
@given(st.integers(2, 60), st.integers(0, 2**31 - 1))
def test_pearson_matches_scipy(length, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=length)
    y = 0.5 * x + rng.normal(size=length)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-10)


@FAST
@given(st.integers(2, 60), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_spearman_with_ties_matches_scipy(length, distinct, seed):
    rng = np.random.default_rng(seed)
    # Few distinct values force many ties on both sides.
    x = rng.integers(0, distinct + 1, length).astype(float)
    y = rng.integers(0, 4, length) + 0.5 * x
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert spearman(x, y) == 0.0  # scipy gives nan here; we define it as 0.0
    else:
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-10)


def test_average_ranks_match_scipy_rankdata():
    rng = np.random.default_rng(5)
    values = rng.integers(0, 6, size=(7, 25)).astype(float)
    np.testing.assert_allclose(average_ranks(values), stats.rankdata(values, axis=1))
    np.testing.assert_allclose(average_ranks(values[0]), stats.rankdata(values[0]))


def test_correlation_by_hand():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Monotone but not linear: Spearman 1, Pearson below 1.
    assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [1, 8, 27, 64]) < 0.99
    # Ranks of [10, 20, 20, 30] are [1, 2.5, 2.5, 4]; Pearson of those with [1, 2, 3, 4]:
    # centred ranks [-1.5, 0, 0, 1.5], centred y [-1.5, -0.5, 0.5, 1.5] -> 4.5 / sqrt(4.5 * 5).
    assert spearman([10, 20, 20, 30], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))


def test_constant_input_gives_zero_correlation():
    assert pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]) == 0.0
    assert spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) == 0.0


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: pearson([1.0, 2.0], [1.0]), "x has 2 values but y has 1"),
        (lambda: pearson([1.0], [1.0]), "at least 2"),
        (lambda: spearman([1.0, float("nan")], [1.0, 2.0]), "x[1] = nan"),
        (lambda: pearson(["a", "b"], [1.0, 2.0]), "not a number"),
    ],
)
def test_correlation_errors(call, fragment):
    with pytest.raises(TextnnError) as info:
        call()
    assert fragment in str(info.value)


# --- tables -----------------------------------------------------------------------------------------


def test_metric_tables():
    assert set(CLASSIFICATION_METRICS) == {"accuracy", "macro_f1", "micro_f1", "f1", "mcc"}
    assert set(REGRESSION_METRICS) == {"pearson", "spearman"}
    assert set(METRICS) == set(CLASSIFICATION_METRICS) | set(REGRESSION_METRICS)
    assert all(HIGHER_IS_BETTER[name] for name in METRICS)
    assert HIGHER_IS_BETTER["loss"] is False and HIGHER_IS_BETTER["perplexity"] is False


@pytest.mark.parametrize("name", sorted(METRICS))
def test_batched_forms_agree_with_single_calls(name):
    fn = METRICS[name]
    rng = np.random.default_rng(11)
    if name in REGRESSION_METRICS:
        truths = rng.integers(0, 4, size=(20, 15)).astype(float)  # ties included
        predictions = truths + rng.normal(size=(20, 15))
        truths[3] = 1.0  # a constant row
    else:
        truths = rng.integers(0, 4, size=(20, 15))
        predictions = np.where(rng.random((20, 15)) < 0.6, truths, rng.integers(0, 4, size=(20, 15)))
        truths[3] = 2  # a row where class 1 and class 0 never occur in the truth
    expected = [fn(t, p) for t, p in zip(truths, predictions)]
    np.testing.assert_allclose(fn.batched(truths, predictions), expected, atol=1e-12)


# --- bootstrap --------------------------------------------------------------------------------------


def _noisy_predictions(n: int, accuracy_level: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 3, n)
    wrong = (y_true + rng.integers(1, 3, n)) % 3
    y_pred = np.where(rng.random(n) < accuracy_level, y_true, wrong)
    return y_true, y_pred


@pytest.mark.parametrize("name", sorted(CLASSIFICATION_METRICS))
def test_bootstrap_interval_contains_point_estimate(name):
    fn = CLASSIFICATION_METRICS[name]
    y_true, y_pred = _noisy_predictions(400, 0.75, seed=1)
    low, high = bootstrap_ci(fn, y_true, y_pred, n_samples=500)
    assert low < fn(y_true, y_pred) < high


def test_bootstrap_matches_normal_approximation_for_accuracy():
    # For accuracy p over n examples the interval is close to p +- 1.96 sqrt(p (1 - p) / n).
    y_true, y_pred = _noisy_predictions(2000, 0.8, seed=2)
    p = accuracy(y_true, y_pred)
    half_width = 1.96 * math.sqrt(p * (1 - p) / len(y_true))
    low, high = bootstrap_ci(accuracy, y_true, y_pred, n_samples=2000)
    assert low == pytest.approx(p - half_width, abs=0.004)
    assert high == pytest.approx(p + half_width, abs=0.004)


def test_bootstrap_narrows_with_more_data():
    small = bootstrap_ci(accuracy, *_noisy_predictions(100, 0.8, seed=3))
    large = bootstrap_ci(accuracy, *_noisy_predictions(4000, 0.8, seed=3))
    assert (large[1] - large[0]) < 0.5 * (small[1] - small[0])


def test_bootstrap_is_reproducible_with_a_seed():
    y_true, y_pred = _noisy_predictions(300, 0.7, seed=4)
    first = bootstrap_ci(CLASSIFICATION_METRICS["macro_f1"], y_true, y_pred, seed=7)
    again = bootstrap_ci(CLASSIFICATION_METRICS["macro_f1"], y_true, y_pred, seed=7)
    other = bootstrap_ci(CLASSIFICATION_METRICS["macro_f1"], y_true, y_pred, seed=8)
    assert first == again
    assert first != other


@pytest.mark.parametrize("name", sorted(METRICS))
def test_bootstrap_vectorised_path_equals_per_resample_calls(name):
    fn = METRICS[name]
    rng = np.random.default_rng(6)
    if name in REGRESSION_METRICS:
        y_true = rng.normal(size=60)
        y_pred = y_true + rng.normal(size=60)
    else:
        y_true, y_pred = _noisy_predictions(60, 0.7, seed=6)

    def unbatched(t, p):  # a plain function: no `batched` attribute, one call per resample
        return fn(t, p)

    fast = bootstrap_ci(fn, y_true, y_pred, n_samples=200, seed=3)
    slow = bootstrap_ci(unbatched, y_true, y_pred, n_samples=200, seed=3)
    assert fast == pytest.approx(slow, abs=1e-12)


def test_bootstrap_over_several_resample_chunks():
    # Many examples force several resample chunks; the interval must still be well formed.
    y_true, y_pred = _noisy_predictions(20_000, 0.9, seed=9)
    low, high = bootstrap_ci(accuracy, y_true, y_pred, n_samples=300)
    assert low < accuracy(y_true, y_pred) < high


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"confidence": 1.0}, "confidence = 1.0"),
        ({"n_samples": 0}, "n_samples = 0"),
        ({"y_pred": [0, 1]}, "y_true has 3 entries but y_pred has 2"),
    ],
)
def test_bootstrap_errors(kwargs, fragment):
    arguments = {"metric_fn": accuracy, "y_true": [0, 1, 1], "y_pred": [0, 1, 0], **kwargs}
    with pytest.raises(TextnnError) as info:
        bootstrap_ci(**arguments)
    assert fragment in str(info.value)
