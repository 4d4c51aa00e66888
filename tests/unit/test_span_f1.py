"""Span precision/recall/F1 as conlleval computes them: hand-worked cases, and conlleval's own counting
loop (written out below from its published rules) against `span_scores` on random tag sequences."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textnn.errors import TextnnError
from textnn.metrics import HIGHER_IS_BETTER
from textnn.metrics.spans import (SPAN_METRICS, per_type_table, sentence_counts, span_bootstrap_ci, span_f1,
                                  span_precision, span_recall, span_scores, token_accuracy)


def test_iob1_chunk_starts_and_b_between_same_types():
    # gold (IOB1): I-PER I-PER | B-PER | O | I-LOC  -> PER[0,2) PER[2,3) LOC[4,5): 3 chunks
    # pred:        I-PER I-PER   I-PER   O   I-LOC  -> PER[0,3) LOC[4,5): 2 chunks
    # only LOC matches: P = 1/2, R = 1/3, F1 = 2 * (1/2)(1/3) / (1/2 + 1/3) = 0.4
    # tokens: position 2 differs (B-PER vs I-PER) -> 4/5
    gold = [["I-PER", "I-PER", "B-PER", "O", "I-LOC"]]
    pred = [["I-PER", "I-PER", "I-PER", "O", "I-LOC"]]
    scores = span_scores(gold, pred, "iob1")
    assert scores["span_precision"] == pytest.approx(1 / 2)
    assert scores["span_recall"] == pytest.approx(1 / 3)
    assert scores["span_f1"] == pytest.approx(0.4)
    assert scores["token_accuracy"] == pytest.approx(4 / 5)
    assert scores["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold": 2, "predicted": 1,
                                         "correct": 0}
    assert scores["per_type"]["LOC"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "gold": 1, "predicted": 1,
                                         "correct": 1}


def test_b_between_same_types_in_iob2():
    # gold: B-PER B-PER -> two one-token chunks; pred: B-PER I-PER -> one two-token chunk
    # no chunk shares both ends: P = 0/1, R = 0/2, F1 = 0; tokens: the second differs -> 1/2
    scores = span_scores([["B-PER", "B-PER"]], [["B-PER", "I-PER"]], "iob2")
    assert (scores["gold_spans"], scores["predicted_spans"], scores["correct_spans"]) == (2, 1, 0)
    assert scores["span_f1"] == 0.0 and scores["token_accuracy"] == 0.5


def test_type_change_inside_a_chunk_splits_it():
    # pred B-ORG I-ORG I-LOC: the I-LOC follows another type, so conlleval closes ORG[0,2) and opens
    # LOC[2,3). gold ORG[0,3) matches neither: P = 0/2, R = 0/1, F1 = 0
    scores = span_scores([["B-ORG", "I-ORG", "I-ORG"]], [["B-ORG", "I-ORG", "I-LOC"]], "iob2")
    assert (scores["gold_spans"], scores["predicted_spans"], scores["correct_spans"]) == (1, 2, 0)
    assert scores["per_type"]["LOC"]["predicted"] == 1 and scores["per_type"]["LOC"]["gold"] == 0
    assert scores["span_precision"] == scores["span_recall"] == scores["span_f1"] == 0.0


def test_stray_i_tag_starts_a_chunk():
    # gold O I-MISC I-MISC O: the stray I- after O opens MISC[1,3) (conlleval's O->I start rule);
    # pred O B-MISC I-MISC O: MISC[1,3) too -> a correct chunk although one tag string differs
    scores = span_scores([["O", "I-MISC", "I-MISC", "O"]], [["O", "B-MISC", "I-MISC", "O"]], "iob2")
    assert scores["span_f1"] == 1.0 and scores["correct_spans"] == 1
    assert scores["token_accuracy"] == pytest.approx(3 / 4)


def test_empty_predictions_score_zero_not_nan():
    # no predicted chunks: precision 0/0 -> 0 (conlleval's convention), recall 0/2, F1 0;
    # the 3 O tokens of 5 are right
    gold = [["I-PER", "O", "O"], ["O", "I-LOC"]]
    pred = [["O", "O", "O"], ["O", "O"]]
    scores = span_scores(gold, pred, "iob1")
    assert (scores["span_precision"], scores["span_recall"], scores["span_f1"]) == (0.0, 0.0, 0.0)
    assert scores["token_accuracy"] == pytest.approx(3 / 5)
    nothing = span_scores([["O"]], [["O"]], "iob1")
    assert nothing["span_f1"] == 0.0 and nothing["per_type"] == {} and nothing["token_accuracy"] == 1.0


def test_sentence_boundaries_end_chunks():
    # I-PER at the end of one sentence and at the start of the next are two chunks, not one
    scores = span_scores([["O", "I-PER"], ["I-PER", "O"]], [["O", "I-PER"], ["I-PER", "O"]], "iob1")
    assert scores["gold_spans"] == scores["correct_spans"] == 2


def test_per_type_and_micro_average():
    # gold: PER[0,1) LOC[2,4) | ORG[0,1) PER[1,2)     pred: PER[0,1) LOC[2,3) | ORG[0,1) LOC[1,2)
    # correct: PER[0,1), ORG[0,1) -> micro P = 2/4, R = 2/4, F1 = 0.5
    # PER: gold 2, pred 1, correct 1 -> P 1, R 0.5, F1 2/3; LOC: gold 1, pred 2, correct 0; ORG: all 1
    gold = [["B-PER", "O", "B-LOC", "I-LOC"], ["B-ORG", "B-PER"]]
    pred = [["B-PER", "O", "B-LOC", "O"], ["B-ORG", "B-LOC"]]
    scores = span_scores(gold, pred, "bio")
    assert scores["span_f1"] == pytest.approx(0.5)
    per = scores["per_type"]
    assert list(per) == ["LOC", "ORG", "PER"]
    assert (per["PER"]["precision"], per["PER"]["recall"], per["PER"]["f1"]) == pytest.approx((1.0, 0.5, 2 / 3))
    assert (per["LOC"]["gold"], per["LOC"]["predicted"], per["LOC"]["correct"], per["LOC"]["f1"]) == (1, 2, 0, 0.0)
    assert per["ORG"]["f1"] == 1.0
    # the single-number functions agree with the report
    assert span_f1(gold, pred, "bio") == scores["span_f1"]
    assert span_precision(gold, pred, "bio") == scores["span_precision"]
    assert span_recall(gold, pred, "bio") == scores["span_recall"]
    assert token_accuracy(gold, pred) == scores["token_accuracy"] == pytest.approx(4 / 6)
    table = per_type_table(per).splitlines()
    assert table[0].split() == ["type", "precision", "recall", "f1", "gold", "predicted", "correct"]
    assert table[3].split() == ["PER", "1.0000", "0.5000", "0.6667", "2", "1", "1"]


def test_bioes_chunks():
    # S-PER S-PER are two chunks; pred B-PER E-PER is one: nothing correct
    scores = span_scores([["S-PER", "S-PER"]], [["B-PER", "E-PER"]], "bioes")
    assert (scores["gold_spans"], scores["predicted_spans"], scores["correct_spans"]) == (2, 1, 0)


def test_mismatched_lengths_are_errors():
    with pytest.raises(TextnnError, match="2 gold sentences but 1"):
        span_scores([["O"], ["O"]], [["O"]])
    with pytest.raises(TextnnError, match="sentence 0: 2 gold tags but 1"):
        span_scores([["O", "O"]], [["O"]])


def test_metric_directions_are_registered():
    assert all(HIGHER_IS_BETTER[name] for name in SPAN_METRICS)


def test_bootstrap_interval_brackets_the_score_and_is_reproducible():
    rng = np.random.default_rng(0)
    gold, pred = [], []
    for _ in range(200):
        sentence = [str(t) for t in rng.choice(["O", "B-PER", "I-PER", "B-LOC"], size=6)]
        gold.append(sentence)
        pred.append([t if rng.random() < 0.8 else "O" for t in sentence])
    counts = sentence_counts(gold, pred, "bio")
    value = span_f1(gold, pred, "bio")
    low, high = span_bootstrap_ci(counts, "span_f1", n_samples=300, seed=3)
    assert low < value < high and high - low < 0.2
    assert span_bootstrap_ci(counts, "span_f1", n_samples=300, seed=3) == (low, high)
    # the vectorised path equals scoring each resample on its own
    index = np.random.default_rng(5).integers(0, len(gold), size=(4, len(gold)))
    for row in index:
        again = span_f1([gold[i] for i in row], [pred[i] for i in row], "bio")
        totals = counts[row].sum(0)
        assert again == pytest.approx(2 * totals[0] / (totals[1] + totals[2]))


# ------------------------------------------------------------------------------------------------ conlleval


def _parse(tag: str) -> tuple[str, str]:
    """conlleval splits a tag at its first hyphen; a tag without one has the empty type."""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def _end_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    pairs = {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
    return (prev, tag) in pairs or (prev not in ("O", ".") and prev_type != kind) or prev in ("[", "]")


def _start_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    pairs = {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}
    return (prev, tag) in pairs or (tag not in ("O", ".") and prev_type != kind) or tag in ("[", "]")


def conlleval_counts(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """conlleval's streaming count: a chunk is correct when both sides start one together with the same
    type and both end it together; a sentence boundary reads as an O token that is not counted."""
    stream = []
    for gs, ps in zip(gold, pred):
        stream += [(g, p, False) for g, p in zip(gs, ps)] + [("O", "O", True)]  # True: sentence boundary
    correct, found_gold, found_pred = Counter(), Counter(), Counter()
    correct_tags = tokens = 0
    in_correct = False
    last_gold, last_pred, last_gold_type, last_pred_type = "O", "O", "", ""
    for g, p, boundary in stream:
        gold_tag, gold_type = _parse(g)
        pred_tag, pred_type = _parse(p)
        if in_correct:
            gold_ends = _end_of_chunk(last_gold, gold_tag, last_gold_type, gold_type)
            pred_ends = _end_of_chunk(last_pred, pred_tag, last_pred_type, pred_type)
            if gold_ends and pred_ends and last_pred_type == last_gold_type:
                in_correct = False
                correct[last_gold_type] += 1
            elif gold_ends != pred_ends or pred_type != gold_type:
                in_correct = False
        gold_starts = _start_of_chunk(last_gold, gold_tag, last_gold_type, gold_type)
        pred_starts = _start_of_chunk(last_pred, pred_tag, last_pred_type, pred_type)
        if gold_starts and pred_starts and pred_type == gold_type:
            in_correct = True
        if gold_starts:
            found_gold[gold_type] += 1
        if pred_starts:
            found_pred[pred_type] += 1
        if not boundary:
            tokens += 1
            correct_tags += gold_tag == pred_tag and gold_type == pred_type
        last_gold, last_pred, last_gold_type, last_pred_type = gold_tag, pred_tag, gold_type, pred_type
    if in_correct:
        correct[last_gold_type] += 1
    return {"correct": correct, "gold": found_gold, "pred": found_pred, "correct_tags": correct_tags,
            "tokens": tokens}


TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]


@st.composite
def tagged_corpus(draw):
    """Gold and predicted tag sequences of random sentences, well formed or not, often near each other."""
    gold, pred = [], []
    for _ in range(draw(st.integers(1, 4))):
        length = draw(st.integers(1, 10))
        g = draw(st.lists(st.sampled_from(TAGS), min_size=length, max_size=length))
        p = [t if draw(st.booleans()) else draw(st.sampled_from(TAGS)) for t in g]
        gold.append(g)
        pred.append(p)
    return gold, pred


@settings(max_examples=400, deadline=None)
@given(tagged_corpus(), st.sampled_from(["iob1", "iob2"]))
def test_equals_conlleval_counting_on_random_sequences(corpus, scheme):
    gold, pred = corpus
    expected = conlleval_counts(gold, pred)
    scores = span_scores(gold, pred, scheme)
    assert scores["correct_spans"] == sum(expected["correct"].values())
    assert scores["gold_spans"] == sum(expected["gold"].values())
    assert scores["predicted_spans"] == sum(expected["pred"].values())
    assert scores["tokens"] == expected["tokens"]
    assert scores["token_accuracy"] == pytest.approx(expected["correct_tags"] / expected["tokens"])
    for kind, row in scores["per_type"].items():
        assert (row["correct"], row["gold"], row["predicted"]) == (
            expected["correct"][kind], expected["gold"][kind], expected["pred"][kind])
    # conlleval's overall figures from its counts
    found, guessed, right = (sum(expected[k].values()) for k in ("gold", "pred", "correct"))
    precision = right / guessed if guessed else 0.0
    recall = right / found if found else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    assert scores["span_f1"] == pytest.approx(f1)
