"""`textnn demo` end to end: a short real run through the CLI, then its printed numbers and files."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import yaml


def _demo(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textnn", "demo", "--minutes", "0.15", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=600)


def test_demo_reports_bpc_samples_and_writes_cells_and_loss_curve(tmp_path):
    run_dir = tmp_path / "demo"
    proc = _demo(run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout

    bpc = float(re.search(r"^held-out bpc: (\d+\.\d+) ", out, re.MULTILINE).group(1))
    vocab = len(json.loads((run_dir / "vocab.json").read_text(encoding="utf-8"))["tokens"])
    assert 0 < bpc < 1.2 * math.log2(vocab)  # a few seconds of training: near uniform at worst

    sample = re.search(r"^sample \(temperature 0\.8, prompt 'def '\):\n-+\n(.*?)\n-+\n", out, re.MULTILINE | re.DOTALL)
    assert sample and sample.group(1).startswith("def ") and len(sample.group(1)) >= 300

    page = (run_dir / "cells.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<section>") >= 5 and "inside a string literal" in page and "r = " in page
    assert (run_dir / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {run_dir / 'cells.html'}" in out and f"wrote {run_dir / 'loss.png'}" in out

    # The corpus lives in the run, and the saved config points at it.
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    assert config["task"] == "language_modeling" and config["model"]["name"] == "char_lstm_lm"
    assert Path(config["data"]["train"]) == run_dir / "corpus" / "train.txt"
    train_text = Path(config["data"]["train"]).read_text(encoding="utf-8")
    dev_text = Path(config["data"]["dev"]).read_text(encoding="utf-8")
    assert "# file: " in train_text and "def " in dev_text
    train_files = set(re.findall(r"^# file: (\S+)$", train_text, re.MULTILINE))
    dev_files = set(re.findall(r"^# file: (\S+)$", dev_text, re.MULTILINE))
    assert dev_files and not train_files & dev_files  # held-out files are never trained on
    assert not any(part in ("test", "tests") for f in train_files | dev_files for part in f.split("/")[:-1])
    assert not list(tmp_path.glob(".demo-corpus-*"))  # the staging folder is gone

    # A second run never overwrites the first.
    again = _demo(run_dir)
    assert again.returncode == 2 and "already exists" in again.stderr and "--run-dir" in again.stderr
