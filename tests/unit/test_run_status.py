"""run.json tells the truth: a run whose process died shows as `died`, a live run cannot be resumed or
started over under it, commands on an unfinished run say that its weights are the best so far, and a
run is `finished` only once its report is written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from textnn import experiment
from textnn.cli import main
from textnn.runs import STALE_SECONDS, RunDir


def write_status(run: RunDir, **info) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    run.status_file.write_text(json.dumps({"status": "running", **info}), encoding="utf-8")


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


@pytest.mark.parametrize("host,pid,age,expected", [
    ("here", "own", 0, "running"),  # this process: alive
    ("here", "dead", 0, "died"),  # its process is gone, though the heartbeat is fresh
    ("elsewhere", "dead", 0, "running"),  # another machine's pid says nothing here; its heartbeat is fresh
    ("elsewhere", "own", STALE_SECONDS + 60, "died"),  # no heartbeat for too long
    ("here", "own", STALE_SECONDS + 60, "died"),
])
def test_a_running_run_whose_process_is_gone_or_silent_shows_as_died(tmp_path, host, pid, age, expected):
    run = RunDir(tmp_path / "run")
    write_status(run, host=socket.gethostname() if host == "here" else "another-machine",
                 pid=os.getpid() if pid == "own" else dead_pid(), heartbeat=time.time() - age)
    assert run.effective_status() == expected
    assert run.status()["status"] == "running"  # the file is not rewritten by reading it


def test_a_run_without_heartbeat_from_an_older_textnn_is_not_taken_for_live(tmp_path):
    run = RunDir(tmp_path / "run")
    write_status(run)
    assert run.effective_status() == "died"


def test_the_training_process_records_itself_and_renews_its_heartbeat(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.set_status("running", total_steps=3)
    first = run.status()
    assert first["pid"] == os.getpid() and first["host"] == socket.gethostname() and first["total_steps"] == 3
    stop = run.start_heartbeat(every=0.01)
    try:
        deadline = time.time() + 60
        while run.status()["heartbeat"] == first["heartbeat"] and time.time() < deadline:
            time.sleep(0.05)
        assert run.status()["heartbeat"] > first["heartbeat"]
    finally:
        stop()
    run.set_status("interrupted", step=2)
    before = run.status()
    run.beat()  # a run no longer running keeps the heartbeat it stopped with
    assert run.status() == before


@pytest.fixture
def config(tmp_path) -> Path:
    write_sentiment_tsv(tmp_path / "train.tsv", 24, seed=1)
    write_sentiment_tsv(tmp_path / "dev.tsv", 8, seed=2)
    path = tmp_path / "dan.yaml"
    path.write_text(f"task: classification\ndata: {{format: tsv, train: {tmp_path / 'train.tsv'}, "
                    f"dev: {tmp_path / 'dev.tsv'}}}\nmodel: {{name: dan, preset: tiny}}\n"
                    "train: {epochs: 1, batch_size: 8, progress: false, threads: 1, bootstrap_samples: 0}\n")
    return path


def test_a_live_run_is_neither_resumed_nor_started_over(tmp_path, config, capsys):
    run = tmp_path / "run"
    assert main(["train", str(config), "train.keep_checkpoint=last", "--run-dir", str(run)]) == 0
    status = RunDir(run).status()
    write_status(RunDir(run), **{**status, "status": "running", "pid": os.getpid(), "heartbeat": time.time()})
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", str(config), "--run-dir", str(run), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {run}: the run is still training (process {os.getpid()} on {socket.gethostname()}); "
                   f"stop it first (Ctrl-C, or kill {os.getpid()})")
    (run / "checkpoint" / "last.safetensors").unlink()  # as if it had not reached its first checkpoint yet
    assert main(["train", str(config), "--run-dir", str(run), "--resume"]) == 2
    assert "still training" in capsys.readouterr().err
    assert all(p.read_bytes() == data for p, data in before.items() if p.exists())


def test_a_finished_run_without_its_checkpoint_is_not_started_over(tmp_path, config, capsys):
    run = tmp_path / "run"
    assert main(["train", str(config), "--run-dir", str(run)]) == 0
    assert not (run / "checkpoint").exists()  # train.keep_checkpoint=none: removed once finished, the weights stay
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", str(config), "--run-dir", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "its checkpoint was removed" in err and f"model.init_from={run}" in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_run_is_finished_only_once_its_report_is_written(tmp_path, config, monkeypatch):
    seen = []
    write_report = experiment.write_report

    def report(run, *args):
        seen.append(run.status()["status"])
        write_report(run, *args)
        seen.append(run.status()["status"])

    monkeypatch.setattr(experiment, "write_report", report)
    assert main(["train", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    assert seen == ["running", "running"]
    assert RunDir(tmp_path / "run").status()["status"] == "finished"
    assert RunDir(tmp_path / "run").status()["steps"] == 3


def test_commands_on_an_unfinished_run_warn_once_that_its_weights_are_the_best_so_far(tmp_path, capsys):
    lines = ["the cat sat on the mat", "a dog ran under the rug"] * 10
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "lm.yaml"
    config.write_text(f"task: language_modeling\ndata: {{format: text, train: {tmp_path / 'train.txt'}, "
                      f"tokenizer: whitespace, bptt: 4}}\nmodel: {{name: rnn_lm, preset: tiny}}\n"
                      "train: {epochs: 1, batch_size: 2, progress: false, threads: 1}\n")
    run = tmp_path / "run"
    assert main(["train", str(config), "--run-dir", str(run)]) == 0
    commands = [["generate", str(run), "--max-tokens", "3", "--seed", "1"],
                ["evaluate", str(run), "--data", str(tmp_path / "train.txt")]]
    capsys.readouterr()
    for command in commands:  # finished: no warning
        assert main(command) == 0
        assert "warning" not in capsys.readouterr().err
    for status in ("interrupted", "died"):
        info = RunDir(run).status()
        info.update(status="interrupted") if status == "interrupted" else info.update(
            status="running", host=socket.gethostname(), pid=dead_pid())
        RunDir(run).status_file.write_text(json.dumps(info), encoding="utf-8")
        for command in commands:
            assert main(command) == 0
            err = capsys.readouterr().err.splitlines()
            assert [line for line in err if "warning" in line] == [
                f"warning: {run} is not finished (status: {status}); using its best weights so far"]


WRONG_TYPES = {"status": 5, "steps": "many", "best": "0.9", "metric": ["accuracy"], "dev": "good"}


@pytest.mark.parametrize("json_output", [False, True], ids=["table", "json"])
def test_runs_lists_every_run_when_one_run_json_holds_a_field_of_the_wrong_type(tmp_path, capsys, json_output):
    """One run.json edited by hand must not cost the listing of every run: each run with a field of the
    wrong type is listed as damaged, with what can be read of it, between the runs that are fine."""
    good = {"status": "finished", "metric": "accuracy", "best": 0.75, "steps": 12, "dev": {"accuracy": 0.75}}
    for name, info in {"a-good": good, **{f"b-{key}": {**good, key: value} for key, value in WRONG_TYPES.items()},
                       "c-good": good}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text("task: classification\ndata: {}\nmodel: {name: dan}\nhead: {}\n"
                                                     "train: {}\n", encoding="utf-8")
        (tmp_path / name / "run.json").write_text(json.dumps(info), encoding="utf-8")
    assert main(["runs", str(tmp_path), *(["--json"] if json_output else [])]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if json_output:
        rows = {row["name"]: row for row in map(json.loads, out.splitlines())}
        status = {name: row["status"] for name, row in rows.items()}
        assert all(rows[f"b-{key}"][key] is None for key in ("steps", "best", "metric"))
        assert rows["b-steps"]["best"] == 0.75 and rows["b-best"]["steps"] == 12 and rows["b-status"]["model"] == "dan"
    else:
        status = {line.split()[0]: line.split()[3] for line in out.splitlines()}
        assert "12 steps" in next(line for line in out.splitlines() if line.startswith("b-metric"))
    assert status == {"a-good": "finished", "b-status": "damaged", "b-steps": "damaged", "b-best": "damaged",
                      "b-metric": "damaged", "b-dev": "finished", "c-good": "finished"}
