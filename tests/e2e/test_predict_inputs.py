"""`predict` and `translate` read inputs as users hold them: JSON lines (one object per line, the text in a
named field) for every task, and the run's own training table (its header says so) for translation as
for classification; one output line per input line, the same answers as for the plain text, and a
line that breaks the format named with its number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SUBWORD_CONLL, write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus


def textnn(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def trained(folder: Path, config: str) -> Path:
    (folder / "run.yaml").write_text(config, encoding="utf-8")
    done = textnn("train", "run.yaml", "--run-dir", "run", cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def answers(folder: Path, command: str, text: str, *flags: str) -> tuple[list[str], str]:
    done = textnn(command, "run", *flags, cwd=folder, stdin=text)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines(), done.stderr


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("classifier")
    write_sentiment_tsv(folder / "train.tsv", 200, seed=1)
    write_sentiment_tsv(folder / "dev.tsv", 40, seed=2)
    return trained(folder, "task: classification\n"
                           "data: {format: tsv, train: train.tsv, dev: dev.tsv, text_column: sentence}\n"
                           "model: {name: dan, preset: tiny}\n"
                           "train: {batch_size: 16, max_steps: 20, progress: false, bootstrap_samples: 0}\n")


def test_a_classifier_reads_json_lines_from_its_text_column_or_text(classifier):
    plain, _ = answers(classifier, "predict", "a good lovely film\n\nawful and dull\n")
    for key in ("sentence", "text"):
        lines = "\n".join([json.dumps({key: "a good lovely film", "id": 7}), "",
                           json.dumps({key: "awful and dull"})]) + "\n"
        read, said = answers(classifier, "predict", lines)
        assert "read as JSON lines" in said and "'sentence' or 'text'" in said
        assert len(read) == 3 and json.loads(read[1])["empty"] is True
        assert [json.loads(x)["probabilities"] for x in read] == [json.loads(x)["probabilities"] for x in plain]
        assert json.loads(read[0])["text"] == "a good lovely film"  # the field, not the JSON line


def test_a_line_that_breaks_json_lines_is_named(classifier):
    done = textnn("predict", "run", cwd=classifier, stdin='{"text": "good"}\nplain words\n')
    assert done.returncode != 0 and "<stdin>:2: not a JSON object" in done.stderr
    done = textnn("predict", "run", cwd=classifier, stdin='{"text": "good"}\n{"words": "good"}\n')
    assert done.returncode != 0 and "<stdin>:2: the object has none of the fields 'sentence', 'text'" in done.stderr


def test_plain_text_that_merely_starts_with_a_brace_is_still_text(classifier):
    read, said = answers(classifier, "predict", "{not json} good film\n")
    assert "JSON lines" not in said and json.loads(read[0])["text"] == "{not json} good film"


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tagger")
    sentences = SUBWORD_CONLL.split("\n\n", 1)[1]
    (folder / "train.conll").write_text("-DOCSTART- -X- O O\n\n" + (sentences + "\n") * 10, encoding="utf-8")
    (folder / "dev.conll").write_text(SUBWORD_CONLL, encoding="utf-8")
    return trained(folder, "task: tagging\n"
                           "data: {format: conll, train: train.conll, dev: dev.conll}\n"
                           "model: {name: rnn_tagger, preset: tiny, char_encoder: none}\n"
                           "train: {batch_size: 4, max_steps: 30, lr: 0.01, progress: false, bootstrap_samples: 0}\n")


def test_a_tagger_reads_json_lines_of_tokens_or_text(tagger):
    plain, _ = answers(tagger, "predict", "John Smithson visited Paris .\n\nReuters reported .\n")
    lines = "\n".join([json.dumps({"tokens": ["John", "Smithson", "visited", "Paris", "."],
                                   "tags": ["I-PER", "I-PER", "O", "I-LOC", "O"]}), "",
                       json.dumps({"text": "Reuters reported ."})]) + "\n"
    read, said = answers(tagger, "predict", lines)
    assert "read as JSON lines" in said and len(read) == 3
    rows = [json.loads(x) for x in read]
    assert [r["tags"] for r in rows] == [json.loads(x)["tags"] for x in plain]
    assert rows[0]["gold"] == ["I-PER", "I-PER", "O", "I-LOC", "O"] and "gold" not in rows[2]
    assert rows[1]["empty"] is True
    # its own output read back: the tokens are kept as given, its tags become the gold
    again, _ = answers(tagger, "predict", read[0] + "\n", "--input-format", "jsonl")
    assert json.loads(again[0])["gold"] == rows[0]["tags"]


def test_a_tagger_names_a_bad_json_line(tagger):
    bad = json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n"
    done = textnn("predict", "run", cwd=tagger, stdin=bad)
    assert done.returncode != 0 and "<stdin>:1: 'tags' must be a list of strings, one per token (2)" in done.stderr


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("translator")
    for name, pairs, seed in (("train", 200, 1), ("dev", 20, 2)):
        prefix = write_corpus(folder, name, pairs, seed)
        de = Path(f"{prefix}.de").read_text(encoding="utf-8").splitlines()
        en = Path(f"{prefix}.en").read_text(encoding="utf-8").splitlines()
        rows = ["de\ten"] + [f"{s}\t{t}" for s, t in zip(de, en)]
        (folder / f"{name}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return trained(folder, "task: translation\n"
                           "data: {format: tsv, train: train.tsv, dev: dev.tsv, source: de, target: en, "
                           "tokenizer: word}\n"
                           "model: {name: seq2seq, preset: tiny}\n"
                           "train: {batch_size: 16, max_steps: 20, progress: false, metric: bleu}\n")


def test_a_translator_reads_its_training_table_and_json_lines(translator):
    rows = (translator / "dev.tsv").read_text(encoding="utf-8").splitlines()
    sources = [row.split("\t")[0] for row in rows[1:6]]
    plain, _ = answers(translator, "translate", "\n".join(sources) + "\n")
    table, said = answers(translator, "translate", "\n".join(rows[:6]) + "\n")
    assert "header of the run's training table; translating its 'de' column" in said
    assert table == plain and len(plain) == 5
    for key in ("de", "source", "text"):
        read, said = answers(translator, "translate", "".join(json.dumps({key: s}) + "\n" for s in sources))
        assert "read as JSON lines" in said and read == plain
