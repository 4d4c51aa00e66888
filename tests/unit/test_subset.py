"""data.train_subset: N training examples drawn with the seed (learning curves over labelled-set size)."""

from __future__ import annotations

import pytest

from tests.conftest import write_sentiment_tsv
from textnn.data.subset import subset_indices
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.tasks.classification import ClassificationTask


def test_the_same_seed_draws_the_same_rows_and_another_seed_others():
    first = subset_indices(1000, 100, seed=1, origin="t.tsv")
    assert first == subset_indices(1000, 100, seed=1, origin="t.tsv")
    assert len(set(first)) == 100 and first == sorted(first) and all(0 <= i < 1000 for i in first)
    other = subset_indices(1000, 100, seed=2, origin="t.tsv")
    assert other != first and len(set(first) & set(other)) < 40  # two independent draws share ~10
    assert subset_indices(1000, 1000, seed=3, origin="t.tsv") == list(range(1000))


def test_more_rows_than_the_file_has_is_refused_naming_the_file():
    with pytest.raises(TextnnError, match="t.tsv has 10"):
        subset_indices(10, 11, seed=0, origin="t.tsv")


def _task(tmp_path, **data) -> ClassificationTask:
    raw = {"task": "classification",
           "data": {"train": str(write_sentiment_tsv(tmp_path / "train.tsv", 200, seed=1)), **data},
           "model": {"name": "cbow", "preset": "tiny"}, "train": {"seed": 4, "progress": False}}
    return ClassificationTask.from_data(config_from_dict(raw, "subset"))


def test_a_classifier_trains_on_the_drawn_rows_and_a_kfold_dev_stays_apart(tmp_path):
    full = _task(tmp_path, kfold=5)
    task = _task(tmp_path, kfold=5, train_subset=40)
    train_lines = {r.line for r in task.splits["train"].records}
    dev_lines = {r.line for r in task.splits["dev"].records}
    assert len(train_lines) == 40
    assert train_lines <= {r.line for r in full.splits["train"].records}  # drawn from the training folds
    assert not train_lines & dev_lines  # never a dev row
    assert dev_lines == {r.line for r in full.splits["dev"].records}  # the dev fold is untouched
    again = _task(tmp_path, kfold=5, train_subset=40)
    assert {r.line for r in again.splits["train"].records} == train_lines
