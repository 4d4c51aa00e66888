"""The tagging task without a trained model: features, vocabularies, scheme conversion, batches, scoring."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from textnn.data.conll import MAX_WORD_CHARS
from textnn.errors import TextnnError
from textnn.models.base import ModelOutput
from textnn.modules.heads import TaggerHead
from textnn.resolve import config_from_dict
from textnn.tasks.tagging import CASINGS, TaggingTask, casing

# Every word has one tag wherever it occurs, so a word -> tag lookup is a perfect tagger.
TRAIN = """\
-DOCSTART- -X- O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
visited VBD I-VP O
New NNP I-NP I-LOC
York NNP I-NP I-LOC
Oslo NNP I-NP B-LOC
. . O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O
"""

DEV = """\
Peter NNP I-NP I-PER
visited VBD I-VP O
Oslo NNP I-NP I-LOC
New NNP I-NP B-LOC
York NNP I-NP I-LOC
. . O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
Supercalifragilisticexpialidocious-Corp NNP I-NP I-XYZ
. . O O
"""


def make_task(tmp_path: Path, **data) -> TaggingTask:
    (tmp_path / "train.conll").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "dev.conll").write_text(DEV, encoding="utf-8")
    raw = {"task": "tagging",
           "data": {"format": "conll", "train": str(tmp_path / "train.conll"), "dev": str(tmp_path / "dev.conll"),
                    "tag_scheme": "iob1", "train_tag_scheme": "bioes", **data},
           "model": {"name": "rnn_tagger", "preset": "tiny"}, "train": {"batch_size": 2, "seed": 3}}
    return TaggingTask.from_data(config_from_dict(raw, "test"))


@pytest.mark.parametrize("token, name", [
    ("london", "lower"), ("e-mail", "lower"), ("U.S.", "UPPER"), ("A", "UPPER"), ("London", "Title"),
    ("McDonald", "mixed"), ("1996", "numeric"), ("1996-08-30", "mostly_numeric"), ("F-16", "has_digit"),
    ("--", "punctuation"), ("(", "punctuation"), ("東京", "other"),
])
def test_casing_categories(token, name):
    assert CASINGS[casing(token)] == name
    assert casing(token) != 0  # 0 is padding


def test_vocabularies_and_training_tags(tmp_path, capsys):
    task = make_task(tmp_path, lowercase=True)
    assert "peter" in task.vocab.stoi and "Peter" not in task.vocab.stoi  # words lower-cased ...
    assert "P" in task.chars.stoi and task.chars.pad_id == 0 and task.chars.unk_id == 1  # ... characters not
    assert task.tags == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B-MISC", "I-MISC", "E-MISC", "S-MISC",
                         "B-ORG", "I-ORG", "E-ORG", "S-ORG", "B-PER", "I-PER", "E-PER", "S-PER"]
    train = task.splits["train"]
    # IOB1 "I-LOC I-LOC B-LOC" (New York | Oslo) is two chunks: B-LOC E-LOC S-LOC in BIOES
    assert [task.tags[i] for i in train.tags[0]] == ["B-PER", "E-PER", "O", "B-LOC", "E-LOC", "S-LOC", "O"]
    assert [CASINGS[c] for c in train.casing[0][:3]] == ["Title", "Title", "lower"]
    assert task.chars.decode(train.chars[0][1][:9]) == list("Blackburn")
    # dev holds a type never seen in training: reported, and O for the loss
    assert "1 tokens are in chunks of types never seen in training (XYZ)" in capsys.readouterr().err
    assert task.tags[task.splits["dev"].tags[1][2]] == "O"


def test_long_words_are_cut_for_the_character_encoder(tmp_path):
    task = make_task(tmp_path)
    chars = task.splits["dev"].chars[1]
    assert chars.shape == (4, MAX_WORD_CHARS)
    cut = "Supercalifragilisticexpialidocious-Corp"[:MAX_WORD_CHARS]
    # characters never seen in training are <unk>; the rest of the word is dropped
    assert task.chars.decode(chars[2]) == [ch if ch in task.chars.stoi else "<unk>" for ch in cut]
    assert (chars[0][len("EU"):] == 0).all()


def test_train_batches_depend_only_on_seed_and_epoch(tmp_path):
    task = make_task(tmp_path)
    first, again, other = task.train_batches(0), task.train_batches(0), task.train_batches(1)
    assert [b.index for b in first] == [b.index for b in again]
    assert all(torch.equal(a.words, b.words) and torch.equal(a.chars, b.chars) for a, b in zip(first, again))
    assert sorted(i for b in first for i in b.index) == sorted(i for b in other for i in b.index) == [0, 1]
    for batch in first:
        lengths = [len(task.splits["train"].words[i]) for i in batch.index]
        assert batch.mask.sum(1).tolist() == lengths and batch.count == len(lengths)
        assert batch.words.shape == batch.casing.shape == batch.tags.shape == batch.mask.shape
        assert batch.chars.shape[:2] == batch.words.shape
        assert (batch.words[~batch.mask] == 0).all() and (batch.chars[~batch.mask] == 0).all()


class LookupTagger(nn.Module):
    """A stand-in model: each word id maps to a fixed tag id (emissions one-hot), no context; a softmax
    tagging head gives the likelihood and the decoding."""

    def __init__(self, table: dict[int, int], vocab_size: int, tags: list[str]):
        super().__init__()
        scores = torch.zeros(vocab_size, len(tags))
        for word, tag in table.items():
            scores[word, tag] = 10.0
        self.scores = nn.Parameter(scores)
        self.head = TaggerHead(1, tags, "bioes", output="softmax")

    def forward(self, words, chars, casing, mask, tags=None):
        emissions = self.scores[words]  # [B, T, K]
        loss = self.head.nll(emissions, tags, mask).sum() if tags is not None else None
        return ModelOutput(logits=emissions, loss=loss)


def test_evaluation_converts_back_to_the_file_scheme(tmp_path):
    task = make_task(tmp_path)
    train = task.splits["train"]
    table = {int(w): int(t) for words, tags in zip(train.words, train.tags) for w, t in zip(words, tags)}
    model = LookupTagger(table, len(task.vocab), task.tags)
    dev = task.splits["dev"]
    # The lookup reproduces every bioes tag, so after conversion back to IOB1 every predicted chunk is
    # right; the gold XYZ chunk can never be predicted (the unknown word gets O): 4 of 5 gold chunks.
    predicted, _ = task.decode_tags(model, dev)
    assert predicted[0] == ["I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "O"]  # "Oslo New York": B- in IOB1
    metrics = task.evaluate(model, "dev", bootstrap_samples=50)
    assert (metrics["correct_spans"], metrics["gold_spans"], metrics["predicted_spans"]) == (4, 5, 4)
    assert metrics["span_precision"] == 1.0 and metrics["span_recall"] == pytest.approx(0.8)
    assert metrics["token_accuracy"] == pytest.approx(9 / 10)
    assert metrics["per_type"]["XYZ"]["gold"] == 1 and metrics["per_type"]["XYZ"]["correct"] == 0
    assert metrics["span_f1_ci_low"] <= metrics["span_f1"] <= metrics["span_f1_ci_high"]
    assert metrics["sentences"] == 2 and metrics["loss"] > 0


@pytest.mark.parametrize("data, words", [
    ({"format": "tsv"}, "reads conll"),
    ({"tokenizer": "char"}, "word or whitespace"),
    ({"max_length": -1}, "data.max_length"),
    ({"features_layers": "first"}, "data.features_layers"),
    ({"tokenizer": "wordpiece"}, "only a sub-word encoder"),  # a word-level tagger does not read pieces
    ({"features_from": "nowhere"}, "data.features_from=nowhere: no directory nowhere here"),  # read as a model id
    ({"features_from": "./nowhere"}, "data.features_from=./nowhere: no run"),
])
def test_unsupported_settings_are_refused(tmp_path, data, words):
    with pytest.raises(TextnnError, match=words):
        make_task(tmp_path, **data)
