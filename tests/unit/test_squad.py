"""SQuAD scoring (metrics/squad.py) and the pieces of the qa task: span search, windows, reading."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from textnn.errors import TextnnError
from textnn.metrics.squad import exact_match, f1, normalize_answer, squad_scores
from textnn.tasks.qa import answer_pieces, best_span, read_squad, window_starts


@pytest.mark.parametrize("text, normalised", [
    ("The Denver Broncos", "denver broncos"),  # lower case, article gone
    ("  an   apple, a day!", "apple day"),  # punctuation and articles, whitespace collapsed
    ("Theater", "theater"),  # "the" only as a whole word
    ("U.S.-based", "usbased"),  # punctuation removed, not turned into spaces
    ("A", ""),
])
def test_normalisation_follows_the_official_rules(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Broncos!", "Broncos") == 1.0
    assert exact_match("Denver Broncos", "Broncos") == 0.0
    # prediction "denver broncos" vs gold "broncos": precision 1/2, recall 1 -> F1 2/3
    assert f1("Denver Broncos", "the Broncos") == pytest.approx(2 / 3)
    # a repeated token counts as often as both sides have it: shared {x: 1, y: 1} -> P = R = 2/3
    assert f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1("", "something") == 0.0
    scores = squad_scores(["Denver Broncos", "nothing"], [["Broncos", "Denver Broncos"], ["the answer"]])
    assert scores == {"exact_match": pytest.approx(0.5), "f1": pytest.approx(0.5)}


def test_best_span_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        t = int(rng.integers(5, 25))
        start, end = rng.normal(size=t), rng.normal(size=t)
        lo, hi = int(rng.integers(0, t - 2)), t
        lo_hi = (lo, int(rng.integers(lo + 1, hi + 1)))
        max_answer = int(rng.integers(1, 6))
        s, e, score = best_span(start, end, *lo_hi, max_answer)
        brute = max(((start[a] + end[b], a, b) for a, b in itertools.product(range(*lo_hi), repeat=2)
                     if a <= b < a + max_answer), key=lambda x: x[0])
        assert (s, e) == (brute[1], brute[2]) and score == pytest.approx(brute[0])


@pytest.mark.parametrize("n, room, stride", [(1, 5, 2), (10, 10, 3), (11, 10, 3), (50, 7, 3), (100, 30, 128)])
def test_windows_cover_every_context_token(n, room, stride):
    spans = window_starts(n, room, stride)
    covered = set()
    for first, length in spans:
        assert 1 <= length <= room
        covered.update(range(first, first + length))
    assert covered == set(range(n))
    assert spans[-1][0] + spans[-1][1] == n
    assert all(b[0] - a[0] == min(a[1], stride) for a, b in zip(spans, spans[1:]))  # one stride apart


def test_answer_pieces_overlap_the_answer_characters():
    spans = [(0, 3), (4, 9), (9, 12), (13, 17)]  # "The Denver's ship" as "The" "Denve" "##r's" "ship"
    assert answer_pieces(spans, 4, "Denver") == (1, 2)
    assert answer_pieces(spans, 13, "ship") == (3, 3)


def test_answers_outside_their_context_are_counted(tmp_path):
    context = "Denver won the title in 2016."
    data = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0},
                                                         {"text": "Denver", "answer_start": 5}]},
        {"id": "2", "question": "When?", "answers": [{"text": "1999", "answer_start": 24}]},
    ]}]}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    questions, outside = read_squad(str(path))
    assert outside == 2  # the second "Denver" start and "1999" point elsewhere
    assert [q.answer_start for q in questions] == [0, -1]
    assert questions[1].answers == ["1999"]  # still scored against its reference
    path.write_text("{\"no\": 1}", encoding="utf-8")
    with pytest.raises(TextnnError, match="not a SQuAD JSON"):
        read_squad(str(path))
