"""Examples with nothing to classify (a label but no text, or a text with no tokens) are skipped,
counted and reported in one warning per file; `predict` input keeps the error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textnn.data.readers import Record
from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.tasks.classification import ClassificationTask

ROWS = [("good film", "1"), ("", "0"), ("bad film", "0"), ("   ", "1"), ("a fine film", "1"), ("dull", "0")]


def jsonl_line(text: str, label: str) -> str:
    return json.dumps({"sentence": text, "label": label})


# format -> (file text, lines of the examples with no text)
FILES = {
    "tsv": ("sentence\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in ROWS), [3, 5]),
    "csv": ("sentence,label\n" + "".join(f"{t},{label}\n" for t, label in ROWS), [3, 5]),
    "jsonl": ("".join(jsonl_line(t, label) + "\n" for t, label in ROWS), [2, 4]),
    "fasttext": ("".join(f"__label__{label} {t}\n" for t, label in ROWS), [2, 4]),
    "label_text": ("".join(f"{label} {t}\n" for t, label in ROWS), [2, 4]),  # as in the MPQA and CR files
}


def make_config(tmp_path: Path, fmt: str, train: str, dev: str = "", **data):
    (tmp_path / f"train.{fmt}").write_text(train, encoding="utf-8")
    (tmp_path / f"dev.{fmt}").write_text(dev or FILES[fmt][0].replace("film", "movie"), encoding="utf-8")
    return config_from_dict({"task": "classification",
                             "data": {"format": fmt, "train": str(tmp_path / f"train.{fmt}"),
                                      "dev": str(tmp_path / f"dev.{fmt}"), **data},
                             "model": {"name": "cbow", "preset": "tiny"}}, "test")


@pytest.mark.parametrize("fmt", list(FILES))
def test_a_line_with_a_label_and_no_text_is_skipped_and_reported_once_per_file(tmp_path, fmt, capsys):
    text, empty_lines = FILES[fmt]
    task = ClassificationTask.from_data(make_config(tmp_path, fmt, text))
    kept = task.splits["train"].records
    assert [r.text for r in kept] == [t for t, _ in ROWS if t.strip()]
    assert len(task.splits["dev"].records) == 4
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2  # one for train, one for dev: each file has two empty examples
    train_path = str(tmp_path / f"train.{fmt}")
    (train_warning,) = [w for w in warnings if f" {train_path}:" in w]
    assert f"skipped 2 of 6 examples: 2 with a label but no text (lines {empty_lines[0]}, {empty_lines[1]})" \
        in train_warning


def test_a_text_with_no_tokens_is_skipped_and_reported_in_the_same_warning(tmp_path, capsys, monkeypatch):
    # No built-in tokenizer turns a non-blank text into no tokens; a stand-in that drops "dull" does.
    real = Tokenizer.__call__
    monkeypatch.setattr(Tokenizer, "__call__", lambda self, text: [] if text == "dull" else real(self, text))
    config = make_config(tmp_path, "label_text", FILES["label_text"][0], cache=False)
    task = ClassificationTask.from_data(config)
    assert [r.line for r in task.splits["train"].records] == [1, 3, 5]
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "train.label_text" in line]
    assert warning == (f"warning: {tmp_path / 'train.label_text'}: skipped 3 of 6 examples: 2 with a label but no "
                       f"text (lines 2, 4), 1 whose text has no tokens (line 6); fix or remove those lines to use them")
    # predict input: an error, not a skip (every input line is owed an output line)
    record = Record("dull", None, None, "<stdin>", 1)
    with pytest.raises(TextnnError, match=r"<stdin>:1: the text has no tokens"):
        task.encode([record], [(task.tokenizer(record.text), None)], require_known_labels=False)


def test_a_file_with_no_text_at_all_is_an_error(tmp_path):
    config = make_config(tmp_path, "label_text", "1\n0 \n\n1\t\n")
    with pytest.raises(TextnnError, match=r"no examples: every line has a label but no text \(lines 1, 2, 4\)"):
        ClassificationTask.from_data(config)
