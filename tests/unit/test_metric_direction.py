"""Each task owns its metrics' directions: a lower-is-better metric keeps the lowest dev score, a
metric the task does not report is refused before anything is written, NaN never wins."""

from __future__ import annotations

import math

import pytest

from textnn import registry
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.training.trainer import is_better


@pytest.mark.parametrize("task, metric, higher", [
    ("classification", "accuracy", True), ("classification", "loss", False), ("classification", "mcc", True),
    ("tagging", "span_f1", True), ("tagging", "loss", False),
    ("language_modeling", "perplexity", False), ("language_modeling", "word_perplexity", False),
    ("language_modeling", "bpc", False),
])
def test_every_task_knows_the_direction_of_its_metrics(task, metric, higher):
    assert registry.task_class(task).metric_directions[metric] is higher


def test_selection_follows_the_direction_and_never_takes_nan():
    assert is_better(90.0, 100.0, higher_is_better=False) and not is_better(110.0, 100.0, higher_is_better=False)
    assert is_better(0.9, 0.8, higher_is_better=True) and not is_better(0.7, 0.8, higher_is_better=True)
    assert not is_better(math.nan, None, higher_is_better=True) and not is_better(math.nan, 1.0, higher_is_better=False)
    assert is_better(5.0, None, higher_is_better=False)


@pytest.mark.parametrize("task, data, metric", [
    ("classification", {"train": "t.tsv"}, "span_f1"),
    ("tagging", {"train": "t.conll"}, "accuracy"),
    ("language_modeling", {"train": "t.txt", "tokenizer": "word"}, "bpc"),  # bpc only for characters
    ("language_modeling", {"train": "t.txt", "tokenizer": "char"}, "word_perplexity"),  # only for bpe
])
def test_a_metric_the_task_does_not_report_is_refused_up_front(task, data, metric):
    model = {"classification": "cbow", "tagging": "rnn_tagger", "language_modeling": "rnn_lm"}[task]
    raw = {"task": task, "data": data, "model": {"name": model, "preset": "tiny"}, "train": {"metric": metric}}
    with pytest.raises(TextnnError, match=f"train.metric: task {task} does not report '{metric}'"):
        config_from_dict(raw, "x.yaml")
