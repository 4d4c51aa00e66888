"""`predict` and `translate` read inputs as users hold them: JSON lines (one object per line, the text in a
named field) for every task, and the run's own training table (its header says so) for translation as
for classification; one output line per input line, the same answers as for the plain text, and a
line that breaks the format named with its number."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import textnn as textnn_api
from tests.conftest import SUBWORD_CONLL, write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus
from textnn.errors import TextnnError


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


# ------------------------------------------------------------------------------------- inputs read as written

def refused(folder: Path, command: str, text: str, *expected: str, flags: tuple = ()) -> None:
    done = textnn(command, "run", *flags, cwd=folder, stdin=text)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    for part in expected:
        assert part in done.stderr.strip().splitlines()[-1], (part, done.stderr)


@pytest.fixture(scope="module")
def csv_classifier(tmp_path_factory) -> Path:
    """A classifier trained on a CSV file with standard quoting (data.quoting: true)."""
    folder = tmp_path_factory.mktemp("csv-classifier")
    write_sentiment_tsv(folder / "train.tsv", 120, seed=1)
    rows = [line.split("\t") for line in (folder / "train.tsv").read_text(encoding="utf-8").splitlines()]
    with open(folder / "train.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return trained(folder, "task: classification\n"
                           "data: {format: csv, train: train.csv, quoting: true}\n"
                           "model: {name: dan, preset: tiny}\n"
                           "train: {batch_size: 16, max_steps: 5, progress: false, bootstrap_samples: 0}\n")


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_a_table_in_the_training_csv_format_gives_one_text_per_row_as_quoted(csv_classifier, end):
    """A quoted field may hold the delimiter or a line break; a bare CR ends a line as in old Mac files."""
    table = end.join(["sentence,label", '"a good\nlovely film",1', '"awful, dull",0', "", "plain words,1"]) + end
    read, said = answers(csv_classifier, "predict", table)
    assert "header of the run's training table" in said
    rows = [json.loads(x) for x in read]
    assert [row["text"] for row in rows] == ["a good\nlovely film", "awful, dull", None, "plain words"]


def test_only_the_training_tables_whole_header_line_is_taken_for_a_header(classifier, csv_classifier):
    for folder, first in ((classifier, "sentence"), (classifier, "sentence\tlabel\tid"), (csv_classifier, "sentence"),
                          (csv_classifier, '"sentence"'), (csv_classifier, "label,sentence")):
        read, said = answers(folder, "predict", f"{first}\ngood film\n")
        assert "header" not in said and [json.loads(x)["text"] for x in read] == [first, "good film"]
    # the Python API reads texts: not even the header line itself is taken for one
    run = textnn_api.load(classifier / "run")
    assert [a.text for a in run.predict(["sentence\tlabel", "good film"])] == ["sentence\tlabel", "good film"]


def test_json_lines_commit_at_the_first_line(classifier, translator):
    refused(classifier, "predict", '{"id": 3}\n{"sentence": "good"}\n', "<stdin>:1: the object has none of the "
            "fields 'sentence', 'text'")
    refused(translator, "translate", '{"en": "a dog"}\n', "<stdin>:1: the object has none of the fields")


@pytest.mark.parametrize("first", ["x" * 200_000, "good\rbad\rfine", "good " * 2_000_000 + "end"])
def test_a_long_first_line_or_one_with_a_bare_cr_is_one_text(classifier, first):
    read, _ = answers(classifier, "predict", first + "\nawful plot\n")
    assert len(read) == 2 and json.loads(read[0])["text"] == first
    run = textnn_api.load(classifier / "run")
    assert [a.text for a in run.predict(["good\nfilm", "bad\rplot"])] == ["good\nfilm", "bad\rplot"]


@pytest.mark.parametrize("command", ["predict", "translate"])
def test_deeply_nested_json_lines_are_one_line_naming_it(classifier, tagger, translator, command):
    deep = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for folder in ((classifier, tagger) if command == "predict" else (translator,)):
        refused(folder, command, '{"text": "good"}\n' + deep + "\n", "<stdin>:2", "nested too deeply")
        refused(folder, command, deep + "\n", "<stdin>:1", "nested too deeply")


@pytest.mark.parametrize("token", ["New York", "tab\there", "line\nbreak", "trailing "])
def test_conll_output_refuses_a_token_holding_white_space(tagger, token):
    line = json.dumps({"tokens": ["John", token, "."]}) + "\n"
    refused(tagger, "predict", line, "<stdin>:1", "white space", "--output-format jsonl",
            flags=("--output-format", "conll"))
    read, _ = answers(tagger, "predict", line)  # JSON lines output holds any token
    assert json.loads(read[0])["tokens"][1] == token


def test_the_python_api_refuses_what_the_commands_refuse(classifier, translator):
    run = textnn_api.load(classifier / "run")
    for items in (["good", 5], [None], [b"good"]):
        with pytest.raises(TextnnError, match="not a string"):
            run.predict(items)
    translating = textnn_api.load(translator / "run")
    for beam in (0, -5):
        with pytest.raises(TextnnError, match="beam_size"):
            translating.translate(["ein hund"], beam_size=beam)


@pytest.fixture(scope="module")
def headless_classifier(tmp_path_factory) -> Path:
    """A classifier trained on a TSV table without header whose text is its 4th column (GLUE CoLA's layout:
    source, label, original label, sentence)."""
    folder = tmp_path_factory.mktemp("headless-classifier")
    write_sentiment_tsv(folder / "rows.tsv", 120, seed=1)
    rows = [line.split("\t") for line in (folder / "rows.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    (folder / "train.tsv").write_text("".join(f"src{i}\t{label}\t\t{text}\n" for i, (text, label) in enumerate(rows)),
                                      encoding="utf-8")
    return trained(folder, "task: classification\n"
                           "data: {format: tsv, train: train.tsv, header: false, text_column: '3', label_column: '1'}\n"
                           "model: {name: dan, preset: tiny}\n"
                           "train: {batch_size: 16, max_steps: 5, progress: false, bootstrap_samples: 0}\n")


def test_a_table_like_the_headless_training_table_is_read_by_its_columns_from_its_first_row(headless_classifier):
    rows = (headless_classifier / "train.tsv").read_text(encoding="utf-8").splitlines()[:3]
    read, said = answers(headless_classifier, "predict", "\n".join(rows) + "\n")
    assert [json.loads(x)["text"] for x in read] == [row.split("\t")[3] for row in rows]
    assert "no header line" in said and "column 3" in said
    # fewer columns than training read (the label's among them): plain text, one text per line
    for text in ("good film", "good\tfilm", "a\tb\tgood film"):
        read, said = answers(headless_classifier, "predict", text + "\n")
        assert [json.loads(x)["text"] for x in read] == [text] and "table" not in said
    # a later row with fewer fields is named, as in a table with header
    done = textnn("predict", "run", cwd=headless_classifier, stdin=rows[0] + "\nshort\trow\n")
    assert done.returncode != 0 and "<stdin>:2" in done.stderr and "first row" in done.stderr
