"""Fine-tuning a tiny BERT in process: the first-sub-word alignment of tagging and its mapping back to
words, and sentence-pair regression (STS-B shaped) with its correlations."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from textnn.experiment import seed_everything
from textnn.metrics import pearson, spearman
from textnn.resolve import config_from_dict
from textnn.tasks.classification import ClassificationTask
from textnn.tasks.tagging import TaggingTask
from tests.conftest import SUBWORD_CONLL

CONLL = SUBWORD_CONLL


def tagging_task(tmp_path, max_length: int = 0) -> TaggingTask:
    path = tmp_path / "ner.txt"
    path.write_text(CONLL * 3, encoding="utf-8")
    config = config_from_dict({"task": "tagging", "model": {"name": "bert", "preset": "tiny"},
                               "data": {"train": str(path), "dev": str(path), "tokenizer": "wordpiece",
                                        "wordpiece_vocab_size": 40, "max_length": max_length, "cache": False},
                               "head": {"output": "softmax"}}, "test")
    return TaggingTask.from_data(config)


def test_each_word_is_read_from_its_first_piece(tmp_path):
    task = tagging_task(tmp_path)
    data = task.splits["train"]
    split_words = 0
    for sentence, pieces, first in zip(data.sentences, data.pieces, data.first):
        assert len(first) == len(sentence.tokens) and pieces[0] == task.vocab.stoi["[CLS]"]
        ends = [*first[1:], len(pieces) - 1]  # a word's pieces run up to the next word's first piece
        for word, start, end in zip(sentence.tokens, first, ends):
            expected = task.vocab.encode(task.tokenizer(word))
            assert pieces[start:end].tolist() == expected
            split_words += len(expected) > 1
    assert split_words  # a 40-piece vocabulary splits some words, so the test sees multi-piece words


def test_predictions_come_back_one_per_word_and_the_cut_is_counted(tmp_path, capsys):
    task = tagging_task(tmp_path, max_length=6)  # [CLS] + 4 pieces + [SEP]: the long sentences are cut
    assert "tagged from the [SEP] state" in capsys.readouterr().err
    data = task.splits["dev"]
    assert all(f[-1] <= len(p) - 1 for p, f in zip(data.pieces, data.first))
    seed_everything(0)
    model = task.build_model()
    predicted, loss = task.decode_tags(model, data)
    assert [len(tags) for tags in predicted] == [len(s.tokens) for s in data.sentences]
    assert math.isfinite(loss)
    metrics = task.evaluate(model, "dev")
    assert 0.0 <= metrics["span_f1"] <= 1.0 and metrics["tokens"] == sum(len(s.tokens) for s in data.sentences)


def test_pair_regression_packs_pairs_and_reports_correlations(tmp_path):
    rng = random.Random(0)
    words = "a man is playing the guitar woman slicing an onion dog runs".split()
    rows = [f"{' '.join(rng.choices(words, k=5))}\t{' '.join(rng.choices(words, k=4))}\t{rng.uniform(0, 5):.2f}"
            for _ in range(12)]
    path = tmp_path / "sts.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8")
    config = config_from_dict({"task": "classification", "model": {"name": "bert", "preset": "tiny"},
                               "data": {"train": str(path), "dev": str(path), "text_column": "sentence1",
                                        "text_pair_column": "sentence2", "label_column": "score", "regression": True,
                                        "tokenizer": "wordpiece", "wordpiece_vocab_size": 50, "cache": False},
                               "train": {"bootstrap_samples": 0}}, "test")
    task = ClassificationTask.from_data(config)
    assert task.default_metric == "pearson" and task.splits["train"].segments is not None
    seed_everything(0)
    model = task.build_model()
    values = task.regression_values(model, task.splits["dev"])
    gold = np.asarray(task.splits["dev"].labels)
    metrics = task.evaluate(model, "dev")
    assert metrics["pearson"] == pytest.approx(pearson(values, gold))
    assert metrics["spearman"] == pytest.approx(spearman(values, gold))
    assert metrics["mse"] == pytest.approx(float(np.mean((values - gold) ** 2)))
    batch = task.train_batches(0)[0]
    assert task.loss(model, batch).item() > 0


def test_head_sentence_pooled_reads_the_mean_of_the_token_states_not_the_pooler(tmp_path):
    import torch

    from textnn.data.batching import pad
    from textnn.errors import TextnnError
    from textnn.modules.pooling import masked_mean

    path = tmp_path / "sst.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(
        ["a good film", "a bad plot here", "good", "the worst film of the year"] * 3)), encoding="utf-8")
    raw = {"task": "classification", "model": {"name": "bert", "preset": "tiny"},
           "data": {"train": str(path), "dev": str(path), "tokenizer": "wordpiece", "wordpiece_vocab_size": 40,
                    "cache": False},
           "head": {"sentence": "pooled", "pooling": "mean"}, "train": {"bootstrap_samples": 0}}
    task = ClassificationTask.from_data(config_from_dict(raw, "test"))
    seed_everything(0)
    model = task.build_model().eval()
    data = task.splits["dev"]
    ids, mask = pad(data.ids[:4], task.vocab.pad_id)  # [4, T] each
    with torch.no_grad():
        out = model.encoder(ids, mask)
        sentence = model.sentence(ids, mask)
    assert torch.allclose(sentence, masked_mean(out.tokens, mask))
    assert not torch.allclose(sentence[:, :out.sentence.size(1)], out.sentence)  # the pooler is not read
    raw["model"], raw["data"]["tokenizer"] = {"name": "cnn", "preset": "tiny"}, "word"
    with pytest.raises(TextnnError, match="head.sentence: pooled pools per-token states"):
        config_from_dict(raw, "test")
