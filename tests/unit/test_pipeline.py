"""The one text pipeline (tasks/pipeline.py): what each task's tokenizer and vocabulary are built from."""

import pytest

from textnn.data.tokenizers import CLS, MASK, SEP, Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.tasks import pipeline

TEXTS = ["the cat sat", "the dog sat", "a cat ran"]


def classification(tmp_path, **data):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    return config_from_dict({"task": "classification", "model": {"name": "cnn", "preset": "tiny"},
                             "data": {"train": str(train), **data}}, "test")


def test_eval_batches_hold_at_least_64_examples(tmp_path):
    config = classification(tmp_path)
    config.train.batch_size = 8
    assert pipeline.eval_batch_size(config) == 64
    config.train.batch_size = 100
    assert pipeline.eval_batch_size(config) == 100


@pytest.mark.parametrize("packs", [False, True])
def test_a_vocabulary_built_from_training_tokens_has_the_specials_its_encoder_reads(tmp_path, packs):
    config = classification(tmp_path)
    tokenizer, start = pipeline.tokenizer(config, lambda: TEXTS, {})
    assert start is None and tokenizer.kind == "word"
    vocab = pipeline.vocabulary(config, tokenizer, None, lambda: (t.split() for t in TEXTS), packs=packs)
    specials = [PAD, UNK, CLS, SEP, MASK] if packs else [PAD, UNK]
    assert vocab.itos[:len(specials)] == specials
    assert {"the", "cat", "sat", "dog", "a", "ran"} <= set(vocab.itos)


def test_a_start_vocabulary_grows_by_frequent_new_words_only_when_asked(tmp_path):
    config = classification(tmp_path)
    start = Vocab.build([["the", "cat"]], specials=(PAD, UNK))
    tokens = lambda: [["the", "dog", "dog", "bird"], ["dog", "bird", "owl"]]  # noqa: E731
    tokenizer = Tokenizer("word", False)
    assert pipeline.vocabulary(config, tokenizer, start, tokens).itos == start.itos
    grown = pipeline.vocabulary(config, tokenizer, start, tokens, extend=2)
    assert grown.itos == start.itos + ["dog", "bird"]  # most frequent first, "owl" (once) left out


def test_a_packing_encoder_needs_cls_and_sep_in_a_start_vocabulary(tmp_path):
    config = classification(tmp_path)
    start = Vocab.build([["the", "cat"]], specials=(PAD, UNK))
    with pytest.raises(TextnnError, match=r"\[CLS\]"):
        pipeline.vocabulary(config, Tokenizer("word", False), start, lambda: [], packs=True)


def test_a_wordpiece_is_trained_once_per_file_and_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTNN_CACHE", str(tmp_path / "cache"))
    config = classification(tmp_path, tokenizer="wordpiece", wordpiece_vocab_size=40)
    first, _ = pipeline.tokenizer(config, lambda: TEXTS * 5, {"reader": "test"})

    def again():
        raise AssertionError("trained a second time")

    second, _ = pipeline.tokenizer(config, again, {"reader": "test"})
    assert first.to_dict() == second.to_dict()
    assert pipeline.vocabulary(config, second, None, lambda: []).itos == second.vocabulary()
