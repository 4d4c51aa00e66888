"""A run reads raw text by the word rules it was trained with, which its tokenizer.json names: a tagger
trained now keeps the words of every script whole and splits English clitics only where they are English;
the same run as an older textnn wrote it (rules 3) splits raw text exactly as that textnn did. CoNLL input
is the words as given, under any rules."""

from __future__ import annotations

import json

from tests.e2e.test_predict_inputs import answers, trained
from textnn.data.tokenizers import WORD_RULES_VERSION

SENTENCES = [("Jacobus van 't Hoff won .", "I-PER I-PER I-PER I-PER O O"),
             ("नमस्ते दुनिया", "O I-LOC"),
             ("I do n't know the café .", "O O O O O O O")]
RAW = "Jacobus van 't Hoff won .\nनमस्ते दुनिया\nI don’t know the cafe\u0301 .\n"  # a curly apostrophe, an NFD é
NOW = [["Jacobus", "van", "'t", "Hoff", "won", "."], ["नमस्ते", "दुनिया"],
       ["I", "do", "n't", "know", "the", "caf\u00e9", "."]]
RULES_3 = [["Jacobus", "va", "n't", "Hoff", "won", "."], ["नमस", "्", "त", "े", "द", "ु", "न", "ि", "य", "ा"],
           ["I", "don", "’", "t", "know", "the", "cafe", "\u0301", "."]]
GIVEN = [["van", "'t", "Hoff"], ["cafe\u0301", "’t"]]  # CoNLL words, read as they are


def tokens_read(folder, text: str, input_format: str) -> list[list[str]]:
    lines, _ = answers(folder, "predict", text, "--input-format", input_format)
    return [json.loads(line)["tokens"] for line in lines]


def test_a_run_reads_raw_text_by_the_word_rules_it_was_trained_with(tmp_path):
    conll = "".join("\n".join(f"{word} {tag}" for word, tag in zip(text.split(), tags.split())) + "\n\n"
                    for text, tags in SENTENCES * 8)
    (tmp_path / "train.conll").write_text(conll, encoding="utf-8")
    folder = trained(tmp_path, "task: tagging\n"
                               "data: {format: conll, train: train.conll, dev: train.conll}\n"
                               "model: {name: rnn_tagger, preset: tiny, char_encoder: none}\n"
                               "train: {batch_size: 4, max_steps: 4, progress: false, bootstrap_samples: 0}\n")
    given = "\n\n".join("\n".join(words) for words in GIVEN) + "\n"
    saved = folder / "run" / "tokenizer.json"
    assert json.loads(saved.read_text(encoding="utf-8"))["rules"] == WORD_RULES_VERSION
    assert tokens_read(folder, RAW, "text") == NOW
    assert tokens_read(folder, given, "conll") == GIVEN

    # the same run as a textnn of word rules 3 wrote it
    saved.write_text(json.dumps({**json.loads(saved.read_text(encoding="utf-8")), "rules": 3}), encoding="utf-8")
    assert tokens_read(folder, RAW, "text") == RULES_3
    assert tokens_read(folder, given, "conll") == GIVEN
