"""SQuAD v1.1 exact match and F1, by the rules of the official evaluation script (evaluate-v1.1.py,
Rajpurkar et al. 2016 §5).

An answer is normalised before comparison: lower-cased, punctuation (Python's string.punctuation)
removed, the articles a / an / the removed as whole words, whitespace collapsed. Exact match is 1
when the normalised prediction equals a normalised reference; F1 is over the bag of normalised
tokens (shared counts, as collections.Counter's intersection). Each question takes the maximum over
its reference answers; the corpus scores are the means over questions (fractions in [0, 1] here,
the script prints percentages).
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace (the official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def f1(prediction: str, reference: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def best_over_references(metric, prediction: str, references: list[str]) -> float:
    return max(metric(prediction, reference) for reference in references)


def squad_scores(predictions: list[str], references: list[list[str]]) -> dict[str, float]:
    """Mean exact match and F1 over questions (each the best over its references)."""
    if len(predictions) != len(references) or not predictions:
        raise ValueError("squad_scores needs one prediction per question and at least one question")
    em = [best_over_references(exact_match, p, refs) for p, refs in zip(predictions, references)]
    scores = [best_over_references(f1, p, refs) for p, refs in zip(predictions, references)]
    return {"exact_match": sum(em) / len(em), "f1": sum(scores) / len(scores)}
