"""Progress through the real CLI: the work before training says when it starts and ends in a log, and
`textnn --quiet` says none of it while printing the same results."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FILLER, NEGATIVE, POSITIVE, write_sentiment_tsv

CONFIG = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv, tokenizer: wordpiece, wordpiece_vocab_size: 120,
       vectors: vectors.txt}
model: {name: cnn, preset: tiny, mode: non-static, embedding_dim: 3}
train: {epochs: 1, batch_size: 16, threads: 1, bootstrap_samples: 0}
"""
# The stage lines of this run: WordPiece training and the vector file (read for the embedding rows).
STAGES = ("train WordPiece tokenizer", "read vectors vectors.txt")


def workspace(folder: Path) -> Path:
    """Toy data, a vector file for its words and the config, in `folder`."""
    folder.mkdir()
    write_sentiment_tsv(folder / "train.tsv", 60, seed=1)
    write_sentiment_tsv(folder / "dev.tsv", 20, seed=2)
    rng = random.Random(0)
    (folder / "vectors.txt").write_text("".join(f"{word} {rng.random():.3f} {rng.random():.3f} {rng.random():.3f}\n"
                                                for word in sorted({*FILLER, *POSITIVE, *NEGATIVE})), encoding="utf-8")
    (folder / "c.yaml").write_text(CONFIG, encoding="utf-8")
    return folder


def textnn(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in `folder`, with stderr a pipe (not a terminal) and a cache of the folder's own."""
    proc = subprocess.run([sys.executable, "-m", "textnn", *args], cwd=folder, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TEXTNN_CACHE": str(folder / "cache"), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def without_seconds(text: str) -> str:
    """Output with its wall times (`0.3s`) blanked: the one thing two equal runs may differ in."""
    return re.sub(r"\d+(\.\d+)?s\b", "Ns", text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[subprocess.CompletedProcess]]:
    """Train then evaluate, plainly, and under --quiet (-q for evaluate).

    The `tokenizers` library's WordPiece trainer does not give the same vocabulary twice from the same
    lines (its ties come out in hash order), so the quiet run and the plain one it is compared with
    share the trained WordPiece: the quiet one trains it (silently) into its cache, and the plain one
    reads it from a copy of that cache. A third, plain, run with a fresh cache shows every stage.
    """
    root = tmp_path_factory.mktemp("progress")
    fresh, quiet = workspace(root / "fresh"), workspace(root / "quiet")
    out = {"quiet": [textnn(quiet, "--quiet", "train", "c.yaml", "--run-dir", "run"),
                     textnn(quiet, "-q", "evaluate", "run", "--data", "dev.tsv")]}
    shutil.copytree(quiet, root / "plain", ignore=shutil.ignore_patterns("run"))
    out["plain"] = [textnn(root / "plain", "train", "c.yaml", "--run-dir", "run"),
                    textnn(quiet, "evaluate", "run", "--data", "dev.tsv")]
    out["fresh"] = [textnn(fresh, "train", "c.yaml", "--run-dir", "run")]
    return out


def test_in_a_log_each_stage_before_training_is_one_start_and_one_end_line(runs):
    stderr = runs["fresh"][0].stderr
    for name in STAGES:
        lines = [line for line in stderr.splitlines() if line.startswith(name)]
        assert len(lines) == 2 and lines[0].endswith(" ..."), stderr
        assert re.search(r": .+ in \d+\.\ds$", lines[1]), lines[1]
    assert re.search(r"train WordPiece tokenizer .*: 120 tokens from 60 lines in", stderr)
    assert "train run:" in stderr  # training's own bar, as before
    assert "evaluate run:" in runs["plain"][1].stderr


def test_quiet_prints_no_progress_and_the_same_results(runs):
    assert "read vectors vectors.txt ..." in runs["plain"][0].stderr
    for plain, quiet in zip(runs["plain"], runs["quiet"]):
        assert without_seconds(quiet.stdout) == without_seconds(plain.stdout) and plain.stdout
        assert not any(name in quiet.stderr for name in (*STAGES, "train run:", "evaluate run:", "%|")), quiet.stderr
    assert "vectors vectors.txt: 20 of 120 vocabulary tokens found" in runs["quiet"][0].stderr  # a result, kept
