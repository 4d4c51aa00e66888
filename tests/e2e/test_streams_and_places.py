"""Input read lazily and answered as it comes; unwritable places and suspicious text as one-line errors.

`predict` reads its input in parts and writes each part's answers at once, so an endless input piped
into `head` ends as soon as `head` has its lines (checked with a timeout, not a timed assertion). A
place that cannot be written (a full disk, a size limit, a file where a directory should be) is one
error, exit code 2, and leaves no temporary file and no run that looks finished.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
from pathlib import Path

import pytest

import textnn.tasks.base as task_base
from tests.conftest import write_sentiment_tsv
from tests.e2e.test_tagging_cli import write_toy_ner
from textnn.cli import main

REPO = Path(__file__).resolve().parents[2]
CLASSIFY = ("task: classification\ndata: {format: tsv, train: ROOT/train.tsv, dev: ROOT/dev.tsv}\n"
            "model: {name: cnn, preset: tiny}\n"
            "train: {epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n")
TAG = ("task: tagging\ndata: {format: conll, train: ROOT/ner.txt, dev: ROOT/ner.txt, tag_scheme: iob1}\n"
       "model: {name: rnn_tagger, preset: tiny}\n"
       "train: {epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("streams")
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 16, seed=2)
    write_toy_ner(root / "ner.txt", 30, seed=1)
    for name, text in (("classify", CLASSIFY), ("tag", TAG)):
        (root / f"{name}.yaml").write_text(text.replace("ROOT", str(root)), encoding="utf-8")
        assert main(["train", str(root / f"{name}.yaml"), "--run-dir", str(root / name)]) == 0
    return root


def textnn(*args: str, stdin=None, input: bytes | None = None, limit_bytes: int = 0, cwd: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}

    def set_limit() -> None:
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "textnn", *args], stdin=stdin, input=input, capture_output=True,
                          env=env, cwd=cwd, timeout=timeout, preexec_fn=set_limit)


def one_line_error(proc: subprocess.CompletedProcess, *expected: str, progress: bool = False) -> str:
    """The command failed with exit code 2 and one error line (after `train`'s progress lines, if `progress`)."""
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert (len(lines) >= 1 if progress else len(lines) == 1) and lines[-1].startswith("error: "), err
    assert sum(line.startswith("error: ") for line in lines) == 1, err
    for text in expected:
        assert text in lines[-1], f"{text!r} not in {lines[-1]!r}"
    return lines[-1]


# ---------------------------------------------------------------------------------------------- streaming

@pytest.mark.parametrize("run,line", [("classify", "a good movie"), ("tag", "John visited Paris .")])
def test_an_endless_input_into_head_ends_at_once(root, run, line):
    """`yes TEXT | textnn predict RUN | head -3`: all of the input would never fit in memory."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = f"yes {line!r} | {sys.executable} -m textnn predict {root / run} | head -3"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, env=env, timeout=120)
    rows = [json.loads(row) for row in proc.stdout.decode().splitlines()]
    assert len(rows) == 3
    assert "Traceback" not in proc.stderr.decode()


def test_answers_come_out_before_the_input_ends(root):
    """The first part's answers are written while standard input is still open."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "textnn", "predict", str(root / "classify")], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b"a good movie\n" * task_base.PREDICT_CHUNK_LINES)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a guard against waiting forever, not a timing
        assert ready, "no answer while the input stays open"
        first = proc.stdout.readline()
        assert json.loads(first)["text"] == "a good movie"
    finally:
        proc.kill()
        proc.communicate(timeout=60)


LM = ("task: language_modeling\ndata: {format: text, train: ROOT/lm.txt, dev: ROOT/lm.txt, bptt: 8}\n"
      "model: {name: rnn_lm, preset: tiny}\n"
      "train: {max_steps: 3, batch_size: 4, eval_every: 3, threads: 1, progress: false, bootstrap_samples: 0}\n")


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    """A tiny word-level LSTM language model, three steps trained: enough to generate from."""
    root = tmp_path_factory.mktemp("lm")
    (root / "lm.txt").write_text("the cat sat on the mat .\nthe dog ran .\n" * 20, encoding="utf-8")
    (root / "lm.yaml").write_text(LM.replace("ROOT", str(root)), encoding="utf-8")
    assert main(["train", str(root / "lm.yaml"), "--run-dir", str(root / "run")]) == 0
    return root / "run"


def test_generate_an_endless_file_of_prompts_into_head_ends_at_once(lm):
    """`yes the | textnn generate RUN - | head -3`: one JSON line per prompt, written as they are done."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = f"yes the | {sys.executable} -m textnn generate {lm} - --max-tokens 4 --seed 5 | head -3"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, env=env, timeout=120)
    rows = [json.loads(row) for row in proc.stdout.decode().splitlines()]
    assert len(rows) == 3 and all(row["prompt"] == "the" and row["text"].startswith("the") for row in rows)
    assert "Traceback" not in proc.stderr.decode()


def test_generate_file_lines_are_what_generate_gives_for_each_prompt_alone(lm, tmp_path):
    """Line i is sampled with seed SEED + i - 1; an empty line is an empty prompt."""
    (tmp_path / "prompts.txt").write_text("the cat\n\nthe dog\r\n", encoding="utf-8")
    proc = textnn("generate", str(lm), str(tmp_path / "prompts.txt"), "--max-tokens", "5", "--seed", "7")
    assert proc.returncode == 0, proc.stderr.decode()
    rows = [json.loads(row) for row in proc.stdout.decode().splitlines()]
    assert [row["prompt"] for row in rows] == ["the cat", "", "the dog"]
    for seed, row in enumerate(rows, start=7):
        alone = textnn("generate", str(lm), "--prompt", row["prompt"], "--max-tokens", "5", "--seed", str(seed))
        assert alone.stdout.decode().rstrip("\n") == row["text"]
    beam = textnn("generate", str(lm), str(tmp_path / "prompts.txt"), "--max-tokens", "3", "--beam", "2",
                  "--n-best", "2")
    rows = [json.loads(row) for row in beam.stdout.decode().splitlines()]
    assert len(rows) == 3 and all(len(row["hypotheses"]) == len(row["scores"]) == 2 for row in rows)


@pytest.mark.parametrize("data,where", [(b"the cat\nna\xefve\n", ":2"), ("the cat\n".encode("utf-16"), ":1")])
def test_generate_file_bad_bytes_are_an_error_as_in_predict(root, lm, tmp_path, data, where):
    from_stdin = textnn("generate", str(lm), "-", "--greedy", "--max-tokens", "2", input=data)
    line = one_line_error(from_stdin, "<stdin>" + where)
    assert from_stdin.stdout.count(b"\n") <= 1  # at most the answer to the good line before it
    predicted = one_line_error(textnn("predict", str(root / "classify"), input=data), "<stdin>" + where)
    assert predicted == line
    (tmp_path / "in.txt").write_bytes(data)
    from_file = textnn("generate", str(lm), str(tmp_path / "in.txt"), "--greedy", "--max-tokens", "2")
    assert one_line_error(from_file, f"{tmp_path / 'in.txt'}{where}").split(where)[1] == line.split(where)[1]


def predict_lines(capsys, *args: str) -> list[str]:
    assert main(["predict", *args]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("run,data,extra", [("classify", "dev.tsv", []), ("tag", "ner.txt", []),
                                            ("tag", "ner.txt", ["--output-format", "conll"])])
def test_answers_read_in_small_parts_equal_answers_read_at_once(root, capsys, monkeypatch, run, data, extra):
    whole = predict_lines(capsys, str(root / run), str(root / data), *extra)
    monkeypatch.setattr(task_base, "PREDICT_CHUNK_LINES", 3)
    parts = predict_lines(capsys, str(root / run), str(root / data), *extra)
    assert parts == whole and len(whole) > 10


def test_an_error_late_in_the_input_names_its_line(root, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(task_base, "PREDICT_CHUNK_LINES", 2)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good film\n" * 5 + b"na\xefve plot\n")
    assert main(["predict", str(root / "classify"), str(bad)]) == 2
    assert f"{bad}:6" in capsys.readouterr().err


@pytest.mark.parametrize("data,where", [(b"good film\nna\xefve plot\n", ":2"),
                                        ("good film\n".encode("utf-16"), ":1"),
                                        (b"good\x00film\n", ":1")])
def test_bad_bytes_on_standard_input_are_an_error_as_in_a_file(root, tmp_path, data, where):
    from_stdin = textnn("predict", str(root / "classify"), input=data)
    line = one_line_error(from_stdin, "<stdin>" + where)
    assert from_stdin.stdout.count(b"\n") <= 1  # at most the answer to the good line before it
    (tmp_path / "in.txt").write_bytes(data)
    from_file = textnn("predict", str(root / "classify"), str(tmp_path / "in.txt"))
    assert one_line_error(from_file, f"{tmp_path / 'in.txt'}{where}").split(where)[1] == line.split(where)[1]


# ---------------------------------------------------------------------------------------------- unwritable

def test_output_to_a_full_disk_is_one_error(root, tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is not available on this system")
    # plain text in (a table in the run's training format would add a line saying how it is read)
    (tmp_path / "in.txt").write_text("".join(f"a good and fine movie {i}\n" for i in range(200)), encoding="utf-8")
    one_line_error(textnn("predict", str(root / "classify"), str(tmp_path / "in.txt"), "-o", "/dev/full"),
                   "/dev/full", "full")


def test_output_past_a_size_limit_leaves_no_file(root, tmp_path):
    rows = "".join(f"a good and fine movie {i}\n" for i in range(3000))
    (tmp_path / "in.txt").write_text(rows, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    proc = textnn("predict", str(root / "classify"), str(tmp_path / "in.txt"), "-o", str(out), limit_bytes=20_000)
    one_line_error(proc, str(out), "ulimit")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # neither the output nor its temporary file


def test_a_run_past_a_size_limit_is_one_error_and_not_finished(root, tmp_path):
    proc = textnn("train", str(root / "classify.yaml"), "--run-dir", str(tmp_path / "run"), limit_bytes=30_000)
    one_line_error(proc, "ulimit", progress=True)
    status = json.loads((tmp_path / "run" / "run.json").read_text()) if (tmp_path / "run" / "run.json").exists() \
        else {}
    assert status.get("status") != "finished"
    assert not (tmp_path / "run" / "report.md").exists()
    assert not [p for p in (tmp_path / "run").rglob(".*tmp-*")]


def test_a_run_dir_that_is_a_file_is_one_error_and_the_file_is_kept(root, tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    assert main(["train", str(root / "classify.yaml"), "--run-dir", str(target)]) == 2
    assert str(target) in capsys.readouterr().err
    assert target.read_text() == "keep me\n"


def test_a_run_dir_under_a_file_is_one_error(root, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["train", str(root / "classify.yaml"), "--run-dir", str(tmp_path / "file" / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "file" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories, so chmod cannot make "
                                               "one unwritable here (the size-limit tests cover the error path)")
@pytest.mark.parametrize("what", ["parent", "output"])
def test_a_read_only_directory_is_one_error(root, tmp_path, capsys, what):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if what == "parent":
            code = main(["train", str(root / "classify.yaml"), "--run-dir", str(locked / "run")])
        else:
            code = main(["predict", str(root / "classify"), str(root / "dev.tsv"), "-o", str(locked / "out.jsonl")])
        assert code == 2
        assert str(locked) in capsys.readouterr().err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


# ---------------------------------------------------------------------------------------------- suspicious text

@pytest.mark.parametrize("content,expected", [
    ("sentence\tlabel\ngood film\t1\nbad plot\t0\n".encode("utf-16"), "UTF-16"),
    ("sentence\tlabel\ngood film\t1\nbad plot\t0\n".encode("utf-16-le"), "UTF-16"),
    (b"sentence\tlabel\ngood film\t1\nbad\x00plot\t0\n", ":3"),
])
def test_utf16_or_nul_bytes_in_a_data_file_are_an_error(root, tmp_path, capsys, content, expected):
    (tmp_path / "train.tsv").write_bytes(content)
    code = main(["train", str(root / "classify.yaml"), "--run-dir", str(tmp_path / "run"),
                 f"data.train={tmp_path / 'train.tsv'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "train.tsv") in err and expected in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("config", ["classify", "tag"])
def test_a_min_freq_that_leaves_only_specials_names_the_option(root, tmp_path, capsys, config):
    code = main(["train", str(root / f"{config}.yaml"), "--run-dir", str(tmp_path / "run"), "data.min_freq=100000"])
    assert code == 2
    assert "data.min_freq" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_language_model_min_freq_that_leaves_only_specials_names_the_option(tmp_path, capsys):
    (tmp_path / "lm.txt").write_text("the cat sat\n" * 20, encoding="utf-8")
    (tmp_path / "lm.yaml").write_text(
        f"task: language_modeling\ndata: {{format: text, train: {tmp_path / 'lm.txt'}, dev: {tmp_path / 'lm.txt'}, "
        "tokenizer: whitespace, bptt: 4, min_freq: 1000}\nmodel: {name: rnn_lm, preset: tiny}\n"
        "train: {epochs: 1, threads: 1, progress: false}\n", encoding="utf-8")
    assert main(["train", str(tmp_path / "lm.yaml"), "--run-dir", str(tmp_path / "run")]) == 2
    assert "data.min_freq" in capsys.readouterr().err
