"""Span-level precision, recall and F1 as the CoNLL shared tasks' conlleval script computes them.

Chunks come from `textnn.data.conll.spans` (conlleval's start/end rules: a stray I- tag opens a
chunk, a type change or a B- tag closes one, iob1 and iob2 read alike). A predicted chunk is correct
when a gold chunk has the same type and starts and ends at the same tokens; conlleval's
token-by-token bookkeeping of "both chunks started together and ended together with equal types"
counts exactly these pairs, because its start and end rules cut each sequence into the same chunks.
Sentence boundaries end every chunk.

  precision = correct / predicted chunks, recall = correct / gold chunks (0 when the count is 0),
  F1 = 2 P R / (P + R) (0 when P + R = 0), micro-averaged over all chunks; per type the same with
  that type's chunks. Token accuracy = tokens whose tag string equals the gold tag string / tokens.

All values are fractions in [0, 1] (conlleval prints percentages). Unlike conlleval run on a file
that keeps its `-DOCSTART-` lines, those lines are not tokens here, so they do not count towards
token accuracy.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from textnn.data.conll import spans
from textnn.errors import TextnnError
from textnn.metrics.bootstrap import bootstrap_ci

SPAN_METRICS = ("span_f1", "span_precision", "span_recall", "token_accuracy")

# Columns of the per-sentence count table that every score is computed from.
CORRECT, GOLD, PREDICTED, CORRECT_TOKENS, TOKENS = range(5)


def _check(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> None:
    if len(gold) != len(predicted):
        raise TextnnError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones; pass one "
                          f"predicted tag sequence per sentence")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise TextnnError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted tags; pass one "
                              f"predicted tag per token")


def sentence_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    scheme: str = "iob2") -> np.ndarray:
    """Per sentence [correct chunks, gold chunks, predicted chunks, correct tokens, tokens] (int64 [N, 5]).

    Every score is a ratio of sums of these columns, which is what lets the bootstrap resample
    sentences cheaply.
    """
    _check(gold, predicted)
    table = np.zeros((len(gold), 5), dtype=np.int64)
    for i, (g, p) in enumerate(zip(gold, predicted)):
        gold_spans, pred_spans = set(spans(g, scheme)), set(spans(p, scheme))
        table[i] = (len(gold_spans & pred_spans), len(gold_spans), len(pred_spans),
                    sum(a == b for a, b in zip(g, p)), len(g))
    return table


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def scores_from_counts(totals: np.ndarray) -> dict[str, np.ndarray]:
    """The four metrics from summed counts [..., 5] (any leading dims; floats or arrays out)."""
    totals = np.asarray(totals, dtype=np.float64)
    precision = _ratio(totals[..., CORRECT], totals[..., PREDICTED])
    recall = _ratio(totals[..., CORRECT], totals[..., GOLD])
    f1 = _ratio(2 * precision * recall, precision + recall)
    return {"span_precision": precision, "span_recall": recall, "span_f1": f1,
            "token_accuracy": _ratio(totals[..., CORRECT_TOKENS], totals[..., TOKENS])}


def span_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str = "iob2") -> dict:
    """conlleval's report as a dict: the four overall metrics, chunk counts and a per-type breakdown.

    per_type maps each type found in gold or predictions to {precision, recall, f1, gold, predicted,
    correct}.
    """
    _check(gold, predicted)
    found_gold: Counter = Counter()
    found_pred: Counter = Counter()
    correct: Counter = Counter()
    table = np.zeros(5, dtype=np.int64)
    for g, p in zip(gold, predicted):
        gold_spans, pred_spans = set(spans(g, scheme)), set(spans(p, scheme))
        found_gold.update(kind for kind, _, _ in gold_spans)
        found_pred.update(kind for kind, _, _ in pred_spans)
        correct.update(kind for kind, _, _ in gold_spans & pred_spans)
        table += (len(gold_spans & pred_spans), len(gold_spans), len(pred_spans),
                  sum(a == b for a, b in zip(g, p)), len(g))
    result: dict = {name: float(value) for name, value in scores_from_counts(table).items()}
    result.update(gold_spans=int(table[GOLD]), predicted_spans=int(table[PREDICTED]),
                  correct_spans=int(table[CORRECT]), tokens=int(table[TOKENS]))
    per_type = {}
    for kind in sorted(set(found_gold) | set(found_pred)):
        counts = np.array([correct[kind], found_gold[kind], found_pred[kind], 0, 0])
        scores = scores_from_counts(counts)
        per_type[kind] = {"precision": float(scores["span_precision"]), "recall": float(scores["span_recall"]),
                          "f1": float(scores["span_f1"]), "gold": found_gold[kind],
                          "predicted": found_pred[kind], "correct": correct[kind]}
    result["per_type"] = per_type
    return result


def span_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str = "iob2") -> float:
    """Micro span F1 over all chunks (conlleval's overall FB1, as a fraction)."""
    return float(scores_from_counts(sentence_counts(gold, predicted, scheme).sum(0))["span_f1"])


def span_precision(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str = "iob2") -> float:
    """Correct predicted chunks / predicted chunks."""
    return float(scores_from_counts(sentence_counts(gold, predicted, scheme).sum(0))["span_precision"])


def span_recall(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str = "iob2") -> float:
    """Correct predicted chunks / gold chunks."""
    return float(scores_from_counts(sentence_counts(gold, predicted, scheme).sum(0))["span_recall"])


def token_accuracy(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> float:
    """Tokens whose predicted tag equals the gold tag, over all tokens."""
    return float(scores_from_counts(sentence_counts(gold, predicted).sum(0))["token_accuracy"])


def span_bootstrap_ci(counts: np.ndarray, metric: str, n_samples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of a span metric, resampling sentences (rows of `counts`).

    Resampling whole sentences keeps each chunk with its context; a corpus-level ratio like F1 is
    recomputed from the resampled sums, the way Koehn (2004) resamples sentences for BLEU.
    """
    if metric not in SPAN_METRICS:
        raise TextnnError(f"no bootstrap for {metric!r}; choose one of {', '.join(SPAN_METRICS)}")

    def score(rows: np.ndarray, _unused: np.ndarray) -> float:
        return float(scores_from_counts(counts[rows].sum(0))[metric])

    score.batched = lambda rows, _unused: scores_from_counts(counts[rows].sum(1))[metric]  # rows [B, N]
    index = np.arange(len(counts))
    return bootstrap_ci(score, index, index, n_samples=n_samples, seed=seed)


def per_type_table(per_type: dict, markdown: bool = False) -> str:
    """The per-type breakdown as an aligned text table (or markdown), one row per entity type."""
    header = ["type", "precision", "recall", "f1", "gold", "predicted", "correct"]
    rows = [[kind, f"{v['precision']:.4f}", f"{v['recall']:.4f}", f"{v['f1']:.4f}", str(v["gold"]),
             str(v["predicted"]), str(v["correct"])] for kind, v in per_type.items()]
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     for row in [header, *rows])
