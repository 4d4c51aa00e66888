"""A run directory whose files were damaged, cut short, edited or swapped for another run's.

Every command that reads a run must answer with ONE line naming the file and what is wrong, exit code 2,
and never a traceback; `--resume` on a damaged checkpoint must leave a finished run marked finished.
The commands run through `main()` in this process, so a traceback would surface here as an exception.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_tagging_cli import write_toy_ner
from textnn.cli import main

CONFIGS = {
    "classification": ("task: classification\n"
                       "data: {format: tsv, train: ROOT/train.tsv, dev: ROOT/dev.tsv}\n"
                       "model: {name: cnn, preset: tiny}\n"),
    "tagging": ("task: tagging\n"
                "data: {format: conll, train: ROOT/ner_train.txt, dev: ROOT/ner_dev.txt, tag_scheme: iob1}\n"
                "model: {name: rnn_tagger, preset: tiny}\n"),
    "language_modeling": ("task: language_modeling\n"
                          "data: {format: text, train: ROOT/lm.txt, dev: ROOT/lm.txt, tokenizer: whitespace, bptt: 8}\n"
                          "model: {name: rnn_lm, preset: tiny}\n"),
}
TRAIN = "train: {epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, keep_checkpoint: last}\n"
DEV = {"classification": "dev.tsv", "tagging": "ner_dev.txt", "language_modeling": "lm.txt"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 16, seed=2)
    write_toy_ner(root / "ner_train.txt", 20, seed=1)
    write_toy_ner(root / "ner_dev.txt", 6, seed=2)
    (root / "lm.txt").write_text("".join(f"the cat sat on mat {i % 7}\n" for i in range(60)), encoding="utf-8")
    for task, text in CONFIGS.items():
        (root / f"{task}.yaml").write_text((text + TRAIN).replace("ROOT", str(root)), encoding="utf-8")
        assert main(["train", str(root / f"{task}.yaml"), "--run-dir", str(root / task)]) == 0
    return root


def copy_run(runs: Path, task: str, tmp_path: Path) -> Path:
    target = tmp_path / task
    shutil.copytree(runs / task, target)
    return target


def one_line_error(capsys, code: int, *expected: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "binary": lambda data: b"\x00\xff\xfe binary",
    "json-object": lambda data: b"{}",
    "json-list-of-numbers": lambda data: b"[1, 2, 3]",
    "json-string": lambda data: b'"text"',
    "wrong-field-types": lambda data: b'{"tokens": 5, "unk": 3, "kind": 7, "tags": 1, "lowercase": "no"}',
}
RUN_FILES = [("classification", "vocab.json"), ("classification", "tokenizer.json"), ("classification", "labels.json"),
             ("tagging", "vocab.json"), ("tagging", "chars.json"), ("tagging", "tags.json"),
             ("tagging", "tokenizer.json"), ("language_modeling", "vocab.json"),
             ("language_modeling", "tokenizer.json")]


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("task,name", RUN_FILES, ids=[f"{t}-{n}" for t, n in RUN_FILES])
def test_a_damaged_run_json_file_is_one_error_naming_it(runs, tmp_path, capsys, monkeypatch, task, name, damage):
    run = copy_run(runs, task, tmp_path)
    path = run / name
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    monkeypatch.chdir(runs)
    one_line_error(capsys, main(["evaluate", str(run), "--data", DEV[task], "--bootstrap", "0"]), str(path))


@pytest.mark.parametrize("task,name", RUN_FILES, ids=[f"{t}-{n}" for t, n in RUN_FILES])
def test_a_missing_run_file_is_one_error_naming_it(runs, tmp_path, capsys, monkeypatch, task, name):
    run = copy_run(runs, task, tmp_path)
    (run / name).unlink()
    monkeypatch.chdir(runs)
    one_line_error(capsys, main(["evaluate", str(run), "--data", DEV[task], "--bootstrap", "0"]),
                   str(run / name), "missing")


def test_weights_of_another_run_name_the_parameter_and_both_shapes(runs, tmp_path, capsys, monkeypatch):
    run = copy_run(runs, "language_modeling", tmp_path)
    shutil.copy(runs / "classification" / "model.safetensors", run / "model.safetensors")
    monkeypatch.chdir(runs)
    line = one_line_error(capsys, main(["evaluate", str(run), "--data", "lm.txt"]), str(run / "model.safetensors"),
                          "encoder.embedding.weight")
    assert line.count("(") >= 2  # both shapes


def test_truncated_weights_are_one_error(runs, tmp_path, capsys, monkeypatch):
    run = copy_run(runs, "classification", tmp_path)
    data = (run / "model.safetensors").read_bytes()
    (run / "model.safetensors").write_bytes(data[: len(data) - 10])
    monkeypatch.chdir(runs)
    one_line_error(capsys, main(["evaluate", str(run), "--data", "dev.tsv"]), str(run / "model.safetensors"))


@pytest.mark.parametrize("edit", [
    ("tokenizer: whitespace", "tokenizer: char"),  # still loads, but would read text unlike in training
    ("model:", "modle:"),  # a section renamed away
    ("hidden_size: 16", "hidden_size: 32"),  # a shape the weights do not have
])
def test_an_edited_config_is_one_error(runs, tmp_path, capsys, monkeypatch, edit):
    run = copy_run(runs, "language_modeling", tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace(*edit), encoding="utf-8")
    monkeypatch.chdir(runs)
    one_line_error(capsys, main(["evaluate", str(run), "--data", "lm.txt"]))


def test_a_config_cut_short_is_one_error(runs, tmp_path, capsys, monkeypatch):
    run = copy_run(runs, "language_modeling", tmp_path)
    config = run / "config.yaml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text[: text.index("\ntrain:")], encoding="utf-8")
    monkeypatch.chdir(runs)
    one_line_error(capsys, main(["evaluate", str(run), "--data", "lm.txt"]), str(config), "train")


@pytest.mark.parametrize("damage", ["truncated", "binary", "another-run"])
def test_a_damaged_checkpoint_on_resume_is_one_error_and_the_run_stays_finished(runs, tmp_path, capsys,
                                                                                monkeypatch, damage):
    run = copy_run(runs, "language_modeling", tmp_path)
    checkpoint = run / "checkpoint" / "last.safetensors"
    if damage == "another-run":
        shutil.copy(runs / "classification" / "checkpoint" / "last.safetensors", checkpoint)
    else:
        checkpoint.write_bytes(DAMAGE[damage](checkpoint.read_bytes()))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    monkeypatch.chdir(runs)
    code = main(["train", "language_modeling.yaml", "--run-dir", str(run), "--resume", "train.epochs=2"])
    one_line_error(capsys, code, str(checkpoint))
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_a_damaged_status_file_on_resume_is_one_error(runs, tmp_path, capsys, monkeypatch):
    run = copy_run(runs, "language_modeling", tmp_path)
    (run / "run.json").write_text('{"status": "fin', encoding="utf-8")
    monkeypatch.chdir(runs)
    code = main(["train", "language_modeling.yaml", "--run-dir", str(run), "--resume", "train.epochs=2"])
    one_line_error(capsys, code, str(run / "run.json"))


def test_a_metrics_line_cut_off_by_a_kill_does_not_stop_a_resume(runs, tmp_path, capsys, monkeypatch):
    run = copy_run(runs, "language_modeling", tmp_path)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 99, "lo')  # the process died mid-write
    monkeypatch.chdir(runs)
    assert main(["train", "language_modeling.yaml", "--run-dir", str(run), "--resume", "train.epochs=2"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records and all(isinstance(r, dict) for r in records)
