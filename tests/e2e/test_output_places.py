"""Every output textnn writes follows one rule (files.open_output): a regular file by atomic replace, never
through a symbolic link; a character device or a pipe in place, never replaced; anything else refused before
any work. Devices here are made with mknod in a private folder (copies of /dev/null's and /dev/full's
numbers), never the machine's own /dev. docs/RELIABILITY.md, "Hostile use", the rows of the third pass."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.test_hostile_use import one_line, root, runs, textnn  # noqa: F401 (fixtures)
from tests.e2e.test_links_in_a_run import trained  # noqa: F401 (fixture)
from textnn.cli import main

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def device_like(path: Path, original: str) -> Path:
    """A character device at `path` with the numbers of `original` (/dev/null: takes every write; /dev/full:
    refuses every write with ENOSPC); skipped where this process may not make device nodes."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.stat(original).st_rdev)
    except (PermissionError, FileNotFoundError) as err:
        pytest.skip(f"cannot make a device node here: {err}")
    return path


def is_device_like(path: Path, original: str) -> bool:
    found = os.lstat(path)
    return stat.S_ISCHR(found.st_mode) and found.st_rdev == os.stat(original).st_rdev


@contextlib.contextmanager
def fifo_read(path: Path):
    """A FIFO at `path` whose reading end is open (so a writer's open does not wait) and drained by a thread
    (so a writer never blocks on a full pipe); yields a list that holds the bytes read once the block ends.
    Nothing here waits without a bound, whatever the writer does."""
    os.mkfifo(path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            if select.select([descriptor], [], [], 0.05)[0]:
                data = os.read(descriptor, 1 << 16)
                chunks.append(data) if data else time.sleep(0.02)  # b"": no writer at this moment

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield chunks
    finally:
        done.set()
        reader.join(timeout=5)
        with contextlib.suppress(BlockingIOError):
            chunks.append(os.read(descriptor, 1 << 20))
        os.close(descriptor)


# ------------------------------------------------------------------------------------------------ item 1

def test_compare_writes_a_device_and_a_pipe_in_place_and_never_replaces_them(root, runs, tmp_path, capsys):
    """`compare --plot DEVICE --markdown FIFO` (as root this once turned /dev/full into a PNG): both written in
    place, both still what they were."""
    runs("classification")  # writes ROOT/classification.yaml
    device = device_like(tmp_path / "null", "/dev/null")
    with fifo_read(tmp_path / "table.fifo") as read:
        code = main(["compare", str(root / "classification.yaml"), "--runs-dir", str(tmp_path / "compare"),
                     "--plot", str(device), "--markdown", str(tmp_path / "table.fifo")])
    assert code == 0, capsys.readouterr().err
    assert is_device_like(device, "/dev/null")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "table.fifo").st_mode)
    assert b"".join(read).decode().startswith("| config |")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare", "null", "table.fifo"]  # no temporary left


def test_a_full_device_is_one_line_and_stays_a_device(runs, root, tmp_path, capsys):
    full = device_like(tmp_path / "full", "/dev/full")
    code = main(["predict", str(runs("classification")), str(root / "train.tsv"), "-o", str(full)])
    one_line(code, capsys.readouterr().err, str(full), "the disk is full")
    assert is_device_like(full, "/dev/full")


@pytest.mark.parametrize("option", ["--plot", "--markdown"])
def test_compare_onto_a_socket_is_refused_before_any_training(root, runs, tmp_path, capsys, monkeypatch, option):
    runs("classification")
    monkeypatch.chdir(tmp_path)  # a short name: a socket's path is limited to about 100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("out.sock")
        code = main(["compare", str(root / "classification.yaml"), "--runs-dir", "compare", option, "out.sock"])
        one_line(code, capsys.readouterr().err, option, "a socket is in the way")
    assert not (tmp_path / "compare").exists()


# ------------------------------------------------------------------------------------------------ item 3

def test_a_linked_lock_file_is_refused_and_its_target_left_alone(root, runs, tmp_path, capsys):
    runs("classification")
    outside = tmp_path / "notes.txt"
    outside.write_text("a file of the user's\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(outside)
    code = main(["train", str(root / "classification.yaml"), "--run-dir", str(tmp_path / "run")])
    one_line(code, capsys.readouterr().err, ".lock", "symbolic link")
    assert outside.read_text() == "a file of the user's\n"


@pytest.mark.parametrize("folder", ["checkpoint", "tensorboard"])
def test_a_linked_run_folder_is_refused_on_resume_and_its_target_left_alone(trained, folder):
    """checkpoint/ or tensorboard/ replaced by a link to a folder outside the run: the resume would write
    its checkpoints (or event files) through it; it is refused, one line, and the folder is as it was."""
    own = trained / "run" / folder
    assert own.is_dir(), f"the run has no {folder}/"
    outside = trained / f"outside-{folder}"
    own.rename(outside)
    own.symlink_to(outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    done = textnn("train", "config.yaml", "--run-dir", "run", "--resume", "--extend", "train.max_steps=4",
                  cwd=trained)
    one_line(done.returncode, done.stderr, f"{folder}: a symbolic link", "remove the link")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


# ------------------------------------------------------------------------------------------------ item 5

def test_visualize_into_a_folder_that_holds_files_is_refused_before_the_run_is_read(runs, tmp_path, capsys):
    folder = tmp_path / "views"
    folder.mkdir()
    (folder / "index.html").write_text("my page\n")
    (folder / "layer_1.png").write_text("my picture\n")
    code = main(["visualize", str(runs("language_modeling")), "--text", "the cat", "--output-dir", str(folder)])
    one_line(code, capsys.readouterr().err, str(folder), "not empty")
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"index.html": "my page\n",
                                                                  "layer_1.png": "my picture\n"}
    (tmp_path / "empty").mkdir()  # an empty folder (or a new one) is written
    code = main(["visualize", str(runs("language_modeling")), "--text", "the cat", "--output-dir",
                 str(tmp_path / "empty")])
    assert code == 0 and (tmp_path / "empty" / "cells.html").is_file()


# ------------------------------------------------------------------------------------------------ item 6

@pytest.mark.parametrize("command", ["predict", "translate"])
def test_sigterm_while_writing_an_output_file_leaves_no_temporary(root, runs, tmp_path, command):
    """SIGTERM (`kill PID`) while `-o` is being written ends as Ctrl-C does: the temporary file is removed,
    and the output file is not made."""
    run, line = (runs("classification"), b"a good film\n") if command == "predict" else (runs("translation"),
                                                                                         b"ein haus\n")
    process = subprocess.Popen([sys.executable, "-m", "textnn", command, str(run), "-", "-o", "out.txt"],
                               cwd=tmp_path, env=ENV, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        process.stdin.write(line)
        process.stdin.flush()  # the standard input stays open: the command waits for more lines
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".out.txt.tmp-*")):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM and b"Traceback" not in stderr, stderr
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ item 19

LONG = "x" * 300  # one name longer than a file system's 255 bytes
PLACES = {  # every place a command takes a path, with a name too long in it
    "train CONFIG": ["train", f"TMP/{LONG}.yaml"],
    "train --run-dir": ["train", "ROOT/classification.yaml", "--run-dir", f"TMP/{LONG}"],
    "evaluate RUN": ["evaluate", f"TMP/{LONG}", "--data", "ROOT/train.tsv"],
    "predict -o": ["predict", "RUN", "ROOT/train.tsv", "-o", f"TMP/{LONG}"],
    "runs DIR": ["runs", f"TMP/{LONG}"],
    "export OUT": ["export", "RUN", f"TMP/{LONG}"],
    "visualize RUN": ["visualize", f"TMP/{LONG}", "--text", "the cat"],
    "compare CONFIG": ["compare", f"TMP/{LONG}.yaml"],
    "generate RUN": ["generate", f"TMP/{LONG}", "--prompt", "the"],
}


@pytest.mark.parametrize("name", list(PLACES))
def test_a_name_too_long_for_the_file_system_is_one_line(root, runs, tmp_path, capsys, name):
    run = runs("classification")
    argv = [a.replace("RUN", str(run)).replace("ROOT", str(root)).replace("TMP", str(tmp_path)) for a in PLACES[name]]
    code = main(argv)
    one_line(code, capsys.readouterr().err, "bytes long, more than the file system allows", "255 bytes")


# ------------------------------------------------------------------------------------------------ item 20

def test_a_closed_standard_output_is_one_line_and_an_output_file_is_still_written(runs, root, tmp_path):
    closed = {"env": ENV, "capture_output": False, "stderr": subprocess.PIPE, "timeout": 300,
              "preexec_fn": lambda: os.close(1)}  # `textnn ... >&-`
    done = subprocess.run([sys.executable, "-m", "textnn", "explain"], **closed)
    one_line(done.returncode, done.stderr.decode(), "standard output", "closed")
    done = subprocess.run([sys.executable, "-m", "textnn", "predict", str(runs("classification")),
                           str(root / "train.tsv"), "-o", str(tmp_path / "out.jsonl")], **closed)
    assert done.returncode == 0, done.stderr.decode()
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 40  # the file's rows, below its header
