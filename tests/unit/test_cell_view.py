"""`write_cell_view`: the LSTM cell page for any LSTM language-model run (char or word, rnn_lm or awd_lstm)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from textnn.errors import TextnnError
from textnn.experiment import load_run
from textnn.resolve import config_from_dict
from textnn.viz.lstm_cells import FEATURES, cell_name, excerpt, write_cell_view

CODE = 'def f(x):\n    """Doc."""\n    return [x, (x + 1)]  # two\n\n\nclass A:\n    y = "s"\n' * 10


def trained_run(tmp_path: Path, model: dict, tokenizer: str) -> Path:
    from textnn.experiment import train

    (tmp_path / "train.txt").write_text(CODE, encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "tokenizer": tokenizer, "bptt": 16},
        "model": {"preset": "tiny", **model},
        "train": {"max_steps": 1, "log_every": 1, "batch_size": 2, "progress": False, "device": "cpu"}}, "test")
    run, _ = train(config, tmp_path / "run")
    return run.path


def sections(page: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", page)


def test_char_rnn_lm_run_gets_one_block_per_matched_cell(tmp_path):
    run = trained_run(tmp_path, {"name": "rnn_lm"}, "char")
    view = write_cell_view(run, load_run(run), CODE[:400], tmp_path / "cells.html", random_cells=1, seed=0)
    page = view.path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert len(view.matches) == len(view.labels) == len(sections(page)) == len(FEATURES) + 1
    assert view.characters == 400
    assert "inside a string literal" in page and "picked at random" in page
    assert all(re.match(r"layer [12], cell \d+: ", label) for label in view.labels)  # tiny: 2 layers of 16


def test_word_awd_lstm_run_colours_each_words_characters(tmp_path):
    run = trained_run(tmp_path, {"name": "awd_lstm"}, "whitespace")
    text = 'def f(x):\n    y = "s" zebra\n'
    view = write_cell_view(run, load_run(run), text, tmp_path / "cells.html", random_cells=0)
    # tokens: def f(x): <eos> y = "s" <unk> <eos>, each word then a space, <eos> a newline
    assert view.characters == len('def f(x): \ny = "s" <unk> \n')
    page = view.path.read_text(encoding="utf-8")
    assert "&lt;unk&gt;" in page and len(sections(page)) == len(view.matches) >= 1
    assert all(re.match(r"layer [123], cell \d+: ", label) for label in view.labels)


@pytest.mark.parametrize("model", [{"name": "nplm"}, {"name": "rnn_lm", "cell": "gru"}])
def test_models_without_lstm_cells_are_refused_with_a_clear_error(tmp_path, model):
    run = trained_run(tmp_path, model, "char")
    with pytest.raises(TextnnError, match="LSTM|memory cells"):
        write_cell_view(run, load_run(run), "x = 1\n", tmp_path / "cells.html")


def test_cell_names_follow_layers_of_different_sizes_and_excerpt_starts_at_a_paragraph():
    assert cell_name(0, [16, 16, 8]) == "layer 1, cell 0"
    assert cell_name(17, [16, 16, 8]) == "layer 2, cell 1"
    assert cell_name(39, [16, 16, 8]) == "layer 3, cell 7"
    with pytest.raises(IndexError):
        cell_name(40, [16, 16, 8])
    text = "plain words here\n\n" + 'x = "s" (1, [2])  # c\n' * 3
    start, end = excerpt(text, 50)
    assert start in (0, text.index("x = ")) and text[end - 1] == "\n" and end - start <= 50
