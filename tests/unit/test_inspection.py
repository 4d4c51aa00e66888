"""`viz.inspection.inspect`: what `textnn serve`'s inspect endpoint answers, checked on tiny trained runs.

Attention comes back as layers x heads x rows x columns with every row a probability distribution;
a translation's rows are its output tokens and its columns its source tokens; the LSTM cell view's
values are the very ones `textnn visualize` colours the text by (read back from the page it writes).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus
from textnn.resolve import config_from_dict
from textnn.experiment import load_run, train
from textnn.limits import InputTooLarge
from textnn.viz import NothingToShow
from textnn.viz.inspection import inspect, kind_of
from textnn.viz.lstm_cells import SHOW_CHARS, _levels, excerpt, write_cell_view

CODE = 'def f(x):\n    """Doc."""\n    return [x, (x + 1)]  # two\n\n\nclass A:\n    y = "s"\n' * 6
TRAIN = {"max_steps": 2, "log_every": 1, "batch_size": 8, "progress": False, "device": "cpu",
         "bootstrap_samples": 0}


def trained(tmp_path: Path, name: str, task: str, data: dict, model: dict) -> tuple:
    config = config_from_dict({"task": task, "data": data, "model": {"preset": "tiny", **model}, "train": TRAIN},
                              name)
    run, _ = train(config, tmp_path / name)
    return load_run(run.path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inspect")
    (root / "code.txt").write_text(CODE, encoding="utf-8")
    write_sentiment_tsv(root / "train.tsv", 60, seed=1)
    write_corpus(root, "mt", 60, seed=1)
    return root


def lm(folder: Path, model: dict) -> tuple:
    return trained(folder, f"lm_{'_'.join(map(str, model.values()))}", "language_modeling",
                   {"format": "text", "train": str(folder / "code.txt"), "tokenizer": "char", "bptt": 16}, model)


def check_distributions(attention: np.ndarray, rows: int, columns: int, layers: int, heads: int) -> None:
    assert attention.shape == (layers, heads, rows, columns)
    assert np.all(attention >= 0) and np.allclose(attention.sum(axis=-1), 1.0, atol=1e-3)


def test_a_bert_classifier_shows_each_layer_and_head_over_its_cls_text_sep(folder):
    config, task, model = trained(folder, "bert_cls", "classification",
                                  {"format": "tsv", "train": str(folder / "train.tsv"),
                                   "dev": str(folder / "train.tsv"), "wordpiece_vocab_size": 80, "max_length": 24},
                                  {"name": "bert"})
    assert kind_of(task, model) == "self_attention"
    found = inspect(task, model, "good great film")
    tokens = found["tokens"]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) >= 4
    check_distributions(np.array(found["attention"]), len(tokens), len(tokens), config.model.n_layers,
                        config.model.n_heads)


def test_a_gpt_language_model_attends_only_backwards(folder):
    config, task, model = lm(folder, {"name": "gpt"})
    found = inspect(task, model, "def f(x):")
    attention = np.array(found["attention"])
    assert found["kind"] == "self_attention" and found["tokens"] == list("def f(x):")
    check_distributions(attention, 9, 9, config.model.n_layers, config.model.n_heads)
    assert np.all(np.triu(attention, k=1) == 0)  # causal: nothing above the diagonal
    with pytest.raises(InputTooLarge, match="at most"):  # the tiny GPT's context is shorter than this
        inspect(task, model, "x" * 200)


def test_a_transformer_translation_shows_output_rows_over_source_columns(folder):
    config, task, model = trained(folder, "mt", "translation",
                                  {"format": "parallel", "train": str(folder / "mt"), "dev": str(folder / "mt"),
                                   "source": "de", "target": "en", "bpe_vocab_size": 120}, {"name": "transformer_mt"})
    source = (folder / "mt.de").read_text(encoding="utf-8").splitlines()[0]
    found = inspect(task, model, source)
    assert found["kind"] == "source_attention" and found["source"][-1] == "</s>" and found["target"][-1] == "</s>"
    assert found["layers"] == [f"layer{n}" for n in range(1, config.model.n_layers + 1)]
    check_distributions(np.array(found["attention"]), len(found["target"]), len(found["source"]),
                        config.model.n_layers, config.model.n_heads)
    assert found["translation"] == task.translate_lines(model, [source], task.decoding_config())[0][0][0]


def levels_on_page(page: str) -> dict[str, list[int]]:
    """Each cell block's heading -> the colour level of every character (a ↵ stands for its newline)."""
    blocks = re.findall(r"<h2>(.*?)</h2>\n<pre>(.*?)</pre>", page, flags=re.S)
    found = {}
    for heading, pre in blocks:
        levels = []
        for level, chunk in re.findall(r'<span class="c(\d+)(?: nl)?">(.*?)</span>', pre, flags=re.S):
            levels += [int(level)] * len(html.unescape(chunk))
        found[html.unescape(heading)] = levels
    return found


def test_the_cell_view_values_are_those_visualize_colours(folder, tmp_path):
    loaded = lm(folder, {"name": "rnn_lm", "cell": "lstm"})
    config, task, model = loaded
    text = CODE[:300]
    found = inspect(task, model, text)
    assert found["kind"] == "cells" and found["text"] == text
    assert sum(found["layer_sizes"]) == 2 * config.model.hidden_size
    page = write_cell_view(folder / "lm_rnn_lm_lstm", loaded, text, tmp_path / "cells.html").path.read_text("utf-8")
    drawn = levels_on_page(page)
    start, end = excerpt(text, SHOW_CHARS)  # the part of the text the page shows
    assert [cell["label"] for cell in found["cells"]] == list(drawn)
    for cell in found["cells"]:
        assert len(cell["values"]) == len(text) and all(-1 <= v <= 1 for v in cell["values"])
        assert _levels(np.array(cell["values"][start:end])).tolist() == drawn[cell["label"]], cell["label"]
    features = [cell["feature"] for cell in found["cells"]]
    assert "in_string" in features and features.count("random") == 2


def test_runs_with_nothing_to_show_say_what_is_needed(folder):
    _, task, model = trained(folder, "cbow", "classification", {"format": "tsv", "train": str(folder / "train.tsv"),
                                                                 "dev": str(folder / "train.tsv")}, {"name": "cbow"})
    assert kind_of(task, model) is None
    with pytest.raises(NothingToShow, match="LSTM language model"):
        inspect(task, model, "good film")
    _, task, model = lm(folder, {"name": "rnn_lm", "cell": "gru"})
    with pytest.raises(NothingToShow, match="GRU has no memory cells"):
        inspect(task, model, "x = 1\n")
