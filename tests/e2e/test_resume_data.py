"""`--resume` goes on with the data files the run started with: a training or dev file edited in place since
(longer, shorter, or the same size with other content) is refused with one line that names the file and
what changed, and the run is left as it was; a file only touched or copied back (a new time, the same
content) resumes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_sentiment_tsv

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{epochs: 1, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0, keep_checkpoint: last}}
"""


def textnn(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "textnn", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def snapshot(run: Path) -> dict:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}


def test_a_resume_on_edited_data_is_refused_and_one_on_the_same_content_goes_on(tmp_path: Path) -> None:
    train = write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    dev = write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2)
    config = tmp_path / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev), encoding="utf-8")
    run = tmp_path / "run"
    first = textnn("train", str(config), "--run-dir", str(run))
    assert first.returncode == 0, first.stderr
    original = {path: Path(path).read_bytes() for path in (train, dev)}
    before = snapshot(run)

    def edited(path: str, content: bytes, what: str) -> None:
        Path(path).write_bytes(content)
        refused = textnn("train", str(config), "--run-dir", str(run), "--resume")
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"error: {path} (data.") and what in lines[0], lines[0]
        assert "model.init_from=" in lines[0]  # the way on with the new data
        assert snapshot(run) == before  # nothing written
        Path(path).write_bytes(original[path])

    text = original[train]
    edited(train, text + text.splitlines(keepends=True)[0], f"{len(text) + len(text.splitlines(True)[0]):,} bytes, "
                                                            f"were {len(text):,}")  # a line appended
    edited(train, text[:-20], f"bytes, were {len(text):,}")  # cut short
    swapped = text.replace(b"\t1", b"\t0", 1) if b"\t1" in text else text.replace(b"\t0", b"\t1", 1)
    edited(train, swapped, "the same size")  # a label corrected in place: the size is unchanged
    dev_text = original[dev]
    edited(dev, dev_text[::-1], "the same size")

    # restored above (a new modification time, the original content): the run goes on
    os.utime(train, ns=(0, 10**18))
    resumed = textnn("train", str(config), "--run-dir", str(run), "--resume")
    assert resumed.returncode == 0, resumed.stderr


def test_a_resume_whose_rebuilt_vocabulary_differs_from_the_runs_is_refused(tmp_path: Path) -> None:
    """The task rebuilds its tokenizer and vocabulary from the data on --resume; where they come out other
    than the run's own (a WordPiece trained again after the data cache was cleared can), the checkpoint's
    rows would meet other words: refused, the run's files as they were."""
    train = write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    dev = write_sentiment_tsv(tmp_path / "dev.tsv", 16, seed=2)
    config = tmp_path / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev), encoding="utf-8")
    run = tmp_path / "run"
    assert textnn("train", str(config), "--run-dir", str(run)).returncode == 0
    vocab = run / "vocab.json"
    text = vocab.read_text(encoding="utf-8")
    first, second = re.findall(r'"([a-z]+)"', text)[:2]  # two words of the vocabulary change places
    vocab.write_text(text.replace(f'"{first}"', '"\0"').replace(f'"{second}"', f'"{first}"').replace('"\0"', f'"{second}"'),
                     encoding="utf-8")
    before = snapshot(run)
    refused = textnn("train", str(config), "--run-dir", str(run), "--resume")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and lines[-1].startswith(f"error: {vocab}: the vocab built from the data"), refused.stderr
    assert f"model.init_from={run}" in lines[-1]
    assert snapshot(run) == before
