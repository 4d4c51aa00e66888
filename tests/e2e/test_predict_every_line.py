"""Output line N answers input line N: a blank input line gets its own output line, for every task's
`predict` and for `translate`, from a file and from standard input.

JSON-lines output marks it `"empty": true`, with the task's other keys empty (null, or [] for lists);
translation writes an empty line.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_bert_tasks_cli import squad_fixture
from tests.e2e.test_streams_and_places import textnn
from tests.e2e.test_tagging_cli import write_toy_ner
from tests.e2e.test_translation_cli import write_corpus
from textnn.cli import main

TRAIN = "train: {max_steps: 3, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n"
CONFIGS = {
    "classify": "task: classification\ndata: {format: tsv, train: ROOT/train.tsv}\nmodel: {name: dan, preset: tiny}\n",
    "regress": "task: classification\ndata: {format: tsv, train: ROOT/train.tsv, regression: true}\n"
               "model: {name: dan, preset: tiny}\n",
    "tag": "task: tagging\ndata: {format: conll, train: ROOT/ner.txt, tag_scheme: iob1}\n"
           "model: {name: rnn_tagger, preset: tiny}\n",
    "qa": "task: qa\ndata: {train: ROOT/squad.json, max_length: 48, doc_stride: 16, max_query_length: 12, "
          "wordpiece_vocab_size: 150}\nmodel: {name: bert, preset: tiny}\n",
    "translate": "task: translation\ndata: {format: parallel, train: ROOT/mt, source: de, target: en, "
                 "bpe_vocab_size: 200}\nmodel: {name: seq2seq, preset: tiny}\n",
}
CONTEXT = "The treaty was signed in Oslo in 1905. It ended the union."
INPUTS = {  # two lines to answer around blank ones (an empty line, then one of spaces)
    "classify": ["a good and lovely film", "", "the plot was awful", "   "],
    "regress": ["a good and lovely film", "", "the plot was awful", "   "],
    "tag": ["John visited Paris .", "", "Mary lives in Oslo now .", "   "],
    "qa": [f"Where was the treaty signed?\t{CONTEXT}", "", json.dumps({"question": "When?", "context": CONTEXT}),
           "   "],
    "translate": ["ein hund sitzt", "", "eine katze läuft auf dem tisch", "   "],
}
EMPTY = {  # the keys of an answer, as a blank line gets them
    "classify": {"text": None, "label": None, "probabilities": None},
    "regress": {"text": None, "value": None},
    "tag": {"tokens": [], "tags": [], "spans": []},
    "qa": {"question": None, "answer": None, "start": None, "score": None},
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("every-line")
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)
    write_toy_ner(root / "ner.txt", 30, seed=1)
    squad_fixture(root / "squad.json", articles=3, seed=1)
    write_corpus(root, "mt", 60, seed=1)
    for name, text in CONFIGS.items():
        (root / f"{name}.yaml").write_text(text.replace("ROOT", str(root)) + TRAIN, encoding="utf-8")
        assert main(["train", str(root / f"{name}.yaml"), "--run-dir", str(root / name)]) == 0
    return root


@pytest.mark.parametrize("source", ["file", "stdin"])
@pytest.mark.parametrize("task", list(INPUTS))
def test_every_input_line_gets_its_output_line(root, tmp_path, task, source):
    lines = INPUTS[task]
    command = "translate" if task == "translate" else "predict"
    if source == "file":
        (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        proc = textnn(command, str(root / task), str(tmp_path / "input.txt"))
    else:
        proc = textnn(command, str(root / task), input=("\n".join(lines) + "\n").encode())
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode().split("\n")
    assert out[-1] == "" and len(out[:-1]) == len(lines), out
    for line, answer in zip(lines, out):
        if task == "translate":
            assert answer == "" or line.strip()  # a tiny model may translate a line to nothing, too
            continue
        row = json.loads(answer)
        if line.strip():
            assert "empty" not in row and set(EMPTY[task]) <= set(row)
        else:
            assert row == {**EMPTY[task], "empty": True}
