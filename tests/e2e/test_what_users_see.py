"""What a user sees and types, through the real CLI: bars on a terminal wherever a command works for a
while (dev evaluation inside `train`, `predict`/`translate` over a file), one vocabulary of options
(`-q` after the command too, `evaluate RUN FILE`, `generate -o`, `compare --output-dir`), gzip on
standard input, and what `runs` and `report.md` say of a run."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_first_hour import Workspace

CLASSIFIER = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv}
model: {name: bow, preset: tiny}
train: {epochs: 1, batch_size: 16, threads: 1, bootstrap_samples: 0, eval_every: 5}
"""


def on_a_terminal(ws: Workspace, *args: str) -> tuple[str, str]:
    """(stdout, stderr) of the CLI with stderr a 120-column terminal (where bars are drawn) and stdout a pipe."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "textnn", *map(str, args)], cwd=ws.root, env=ws.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    err = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed the terminal: it is done
            break
        if not chunk:
            break
        err += chunk
    out = proc.stdout.read().decode()
    assert proc.wait(timeout=300) == 0, err.decode(errors="replace")[-3000:]
    os.close(leader)
    return out, err.decode(errors="replace")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    """A classifier run trained with dev evaluations every 5 steps (runs/clf), and its data."""
    ws = Workspace(tmp_path_factory.mktemp("users_see"))
    write_sentiment_tsv(ws.root / "train.tsv", 200, seed=1)
    write_sentiment_tsv(ws.root / "dev.tsv", 40, seed=2)
    ws.write("clf.yaml", CLASSIFIER)
    ws.ok("train", "clf.yaml", "--run-dir", "runs/clf")
    ws.write("lm.txt", "the cat sat on the mat .\nthe dog ran in the park .\n" * 20)
    ws.write("lm.yaml", "task: language_modeling\ndata: {format: text, train: lm.txt, tokenizer: char, bptt: 16}\n"
             "model: {name: rnn_lm, preset: tiny}\ntrain: {epochs: 1, batch_size: 4, max_steps: 3, progress: false}\n")
    ws.ok("train", "lm.yaml", "--run-dir", "runs/lm")
    return ws


# ------------------------------------------------------------------------------------------ gzip stdin

def test_gzip_on_standard_input_is_read_as_a_gzip_file_is(ws):
    text = "a great film\n\nawful and dull\n"
    plain = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                           input=text.encode(), capture_output=True, timeout=300)
    packed = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                            input=gzip.compress(text.encode()), capture_output=True, timeout=300)
    assert packed.returncode == 0, packed.stderr.decode()[-2000:]
    assert packed.stdout == plain.stdout and len(plain.stdout.splitlines()) == 3
    cut = subprocess.run([sys.executable, "-m", "textnn", "predict", "runs/clf"], cwd=ws.root, env=ws.env,
                         input=gzip.compress(text.encode() * 50)[:30], capture_output=True, timeout=300)
    assert cut.returncode == 2 and "<stdin>: not a valid gzip stream" in cut.stderr.decode()
    assert "NUL" not in cut.stderr.decode() and "Traceback" not in cut.stderr.decode()
