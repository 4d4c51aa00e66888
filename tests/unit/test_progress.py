"""Progress: one rule for the bars of training, evaluation and decoding (training/progress.py), the stage
lines of the work before training (textnn/progress.py), and --quiet's switch over all of them."""

from __future__ import annotations

import gzip
import io
import re

import numpy as np
import pytest
import torch

from textnn import progress
from textnn.data import cache, readers
from textnn.data.parallel import read_parallel
from textnn.data.tokenizers import Tokenizer
from textnn.interop.vectors import read_vectors
from textnn.training.progress import counting_batches, progress_bar


def test_counting_batches_counts_each_call_of_the_model_and_leaves_no_hook(capsys):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    with counting_batches(model, "evaluate run") as bar:
        for _ in range(5):
            model(torch.zeros(4, 3))  # the inner layers' calls are not batches
        assert bar.n == 5
    assert "evaluate run" in capsys.readouterr().err
    assert not model._forward_hooks
    model(torch.zeros(1, 3))  # no bar any more: nothing written
    assert capsys.readouterr().err == ""


def test_the_bar_never_replaces_what_the_model_returns(capsys):
    """A forward hook's return value, when not None, replaces the module's output; a bar's update returns True
    whenever it redraws (here: at every call)."""
    model = torch.nn.Linear(3, 2)
    inputs = torch.ones(4, 3)
    with counting_batches(model, "evaluate run") as bar:
        bar.mininterval, bar.miniters = 0, 0  # redraw at every update
        outputs = [model(inputs) for _ in range(3)]
    assert all(isinstance(output, torch.Tensor) and output.shape == (4, 2) for output in outputs)
    assert torch.equal(outputs[0], model(inputs))


def test_a_bar_that_is_off_writes_nothing(capsys):
    with progress_bar("decode", "sentence", total=10, enabled=False) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""


# --- stages and --quiet (textnn/progress.py) ---------------------------------------------------------

SECONDS = r"in \d+\.\ds"


@pytest.fixture
def quiet():
    """--quiet for one test, off again afterwards whatever happens."""
    progress.set_quiet(True)
    yield
    progress.set_quiet(False)


def stderr_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_stage_in_a_log_is_two_lines_with_its_count_and_seconds(capsys):
    with progress.stage("read things", unit="line", total=5000) as stage:
        for _ in range(5000):
            stage.update()
    start, end = stderr_lines(capsys)  # never a line per update, and no bar: stderr is not a terminal
    assert start == "read things ..."
    assert re.fullmatch(rf"read things: 5,000 lines {SECONDS}", end)


def test_a_stage_ends_with_its_summary_and_a_failed_one_with_no_end_line(capsys):
    with progress.stage("train a thing") as stage:
        stage.summary = "42 tokens"
    assert re.fullmatch(rf"train a thing: 42 tokens {SECONDS}", stderr_lines(capsys)[1])
    with pytest.raises(ValueError):
        with progress.stage("break a thing"):
            raise ValueError("broken")
    assert stderr_lines(capsys) == ["break a thing ..."]  # the error says the rest


def test_on_a_terminal_a_counting_stage_draws_a_bar_between_its_lines(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with progress.stage("read things", unit="line", total=3) as stage:
        stage.update(3)
    written = terminal.getvalue()
    assert written.startswith("read things ...\n") and "0/3 [" in written  # the bar, drawn at its start
    assert re.search(rf"\rread things: 3 lines {SECONDS}\n$", written)  # where the bar was


def test_quiet_silences_stages_and_bars_but_they_still_count(capsys, quiet):
    with progress.stage("read things", unit="line") as stage:
        stage.update(7)
    assert stage.count == 7
    with progress_bar("train run", "step", total=3) as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""


def test_a_stage_that_is_off_writes_nothing(capsys):
    with progress.stage("read things", enabled=False):
        pass
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_training_a_tokenizer_says_when_it_starts_and_its_vocabulary_size_when_it_ends(capsys, kind):
    lines = ["the cat sat on the mat", "a dog ran under the rug"] * 20
    if kind == "bpe":
        tokenizer = Tokenizer.train_bpe(lines, 300, ("<pad>", "<unk>"))
    else:
        tokenizer = Tokenizer.train_wordpiece(iter(lines), 60)
    name = {"bpe": "BPE", "wordpiece": "WordPiece"}[kind]
    start, end = stderr_lines(capsys)
    assert start.startswith(f"train {name} tokenizer") and start.endswith(" ...")
    size = len(tokenizer.vocabulary())
    assert re.fullmatch(rf"train {name} tokenizer \(.*\): {size:,} tokens from {len(lines)} lines {SECONDS}", end)


def test_training_a_tokenizer_under_quiet_prints_nothing(capsys, quiet):
    Tokenizer.train_bpe(["the cat sat"] * 5, 280, ("<pad>",))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["vectors.txt", "vectors.txt.gz", "vectors.bin"])
def test_reading_a_vector_file_is_a_stage_with_its_word_counts(tmp_path, capsys, name):
    path = tmp_path / name
    rows = {"cat": [0.5, 1.0], "dog": [1.5, -2.0], "mat": [0.0, 0.25]}
    if name.endswith(".bin"):
        path.write_bytes(b"3 2\n" + b"".join(word.encode() + b" " + np.asarray(vector, "<f4").tobytes() + b"\n"
                                             for word, vector in rows.items()))
    else:
        text = "".join(f"{word} {vector[0]} {vector[1]}\n" for word, vector in rows.items())
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    words, matrix = read_vectors(path, wanted={"cat", "mat", "bird"})
    assert words == ["cat", "mat"] and matrix.shape == (2, 2)
    start, end = stderr_lines(capsys)
    assert start == f"read vectors {path} ..."
    assert re.fullmatch(rf"read vectors {re.escape(str(path))}: 3 words of dimension 2, 2 of them in the "
                        rf"vocabulary {SECONDS}", end)


def test_preparing_a_large_file_says_whether_it_came_from_the_cache(tmp_path, capsys, monkeypatch):
    data = tmp_path / "train.txt"
    data.write_text("a b c\n", encoding="utf-8")
    assert cache.cached(data, {"kind": "test"}, lambda: [1]) == [1]
    assert capsys.readouterr().err == ""  # a small file is prepared without a word
    monkeypatch.setattr(readers, "LARGE_DATA_BYTES", 1)  # every file is large now
    assert cache.cached(data, {"kind": "test"}, lambda: [2]) == [1]
    assert re.fullmatch(rf"prepare {re.escape(str(data))}: read from the cache {SECONDS}", stderr_lines(capsys)[1])
    assert cache.cached(data, {"kind": "other"}, lambda: [3]) == [3]
    assert re.fullmatch(rf"prepare {re.escape(str(data))}: prepared and cached for the next run {SECONDS}",
                        stderr_lines(capsys)[1])
    types, ids = cache.cached_array(data, {"kind": "array"}, lambda: (["a"], [0, 0]), enabled=False)
    assert types == ["a"] and stderr_lines(capsys)[1].startswith(f"prepare {data}: prepared in ")


def test_reading_a_large_classification_file_is_a_stage(tmp_path, capsys, monkeypatch):
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n", encoding="utf-8")
    monkeypatch.setattr(readers, "LARGE_DATA_BYTES", 1)
    assert len(readers.read_classification(data, "tsv")) == 2
    start, end = stderr_lines(capsys)
    assert start == f"read {data} ..." and re.fullmatch(rf"read {re.escape(str(data))}: 2 examples {SECONDS}", end)


def test_reading_large_parallel_files_is_a_stage(tmp_path, capsys, monkeypatch):
    (tmp_path / "train.de").write_text("ein Hund\n\nzwei Katzen\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a dog\n\ntwo cats\n", encoding="utf-8")
    prefix = str(tmp_path / "train")
    assert len(read_parallel(prefix, "parallel", "de", "en", warn=False)) == 2
    assert capsys.readouterr().err == ""  # small files are read without a word
    monkeypatch.setattr(readers, "LARGE_DATA_BYTES", 1)
    assert len(read_parallel(prefix, "parallel", "de", "en", warn=False)) == 2
    start, end = stderr_lines(capsys)
    files = f"{prefix}.de + {prefix}.en"
    assert start == f"read {files} ..." and re.fullmatch(rf"read {re.escape(files)}: 2 sentence pairs {SECONDS}", end)
