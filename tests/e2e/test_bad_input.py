"""Mistakes a user can make give exit code 2 and ONE line on stderr: `error: <where>: <what>; <what to do>`.

No traceback, and no run directory left behind that could pass for a run. Each case runs the CLI's
`main()` in this process (a traceback would surface here as an uncaught exception); a few cases also
run as `python -m textnn` in a subprocess, to pin down what the real entry point prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import write_sentiment_tsv
from textnn.cli import main

CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: cnn, preset: tiny}}
train: {{epochs: 1, batch_size: 16, threads: 1, progress: false, bootstrap_samples: 0{extra}}}
"""

# Words that start the "what to do" part of a message.
REMEDY = re.compile(r"did you mean|\b(check|fix|set|use|give|add|remove|re-encode|choose|point|pass|run|"
                    r"finish|delete)\b", re.IGNORECASE)


class Files:
    """Good training and dev files and a config that trains on them; each case spoils one thing."""

    def __init__(self, root: Path):
        self.root = root
        self.train = write_sentiment_tsv(root / "train.tsv", 40, seed=1)
        self.dev = write_sentiment_tsv(root / "dev.tsv", 20, seed=2)
        self.run_dir = root / "run"

    def config(self, name: str = "cfg", extra: str = "", text: str = "") -> Path:
        path = self.root / f"{name}.yaml"
        path.write_text(text or CONFIG.format(train=self.train, dev=self.dev, extra=extra), encoding="utf-8")
        return path

    def train_args(self, *overrides: str, config: Path | None = None) -> list[str]:
        return ["train", str(config or self.config()), "--run-dir", str(self.run_dir), *overrides]

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.root / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path

    def not_a_run(self) -> Path:
        folder = self.root / "not_a_run"
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text("some other directory\n")
        return folder


@dataclass
class Case:
    id: str
    args: Callable[[Files], list[str]]  # the command line
    expect: Callable[[Files], list[str]]  # what the one error line must contain


GOOD = "sentence\tlabel\na good and great film\t1\nan awful and dull plot\t0\n"
RAGGED = GOOD + "a fine film\t1\tx\n"  # line 4 has a third field
LATIN1 = "sentence\tlabel\ngood\t1\nna\xefve plot\t0\n".encode("latin-1")  # not UTF-8 on line 3
UNSEEN_DEV = GOOD.replace("\t0", "\t2")  # label 2 on line 3, never in training

CASES = [
    Case("missing-data-file",
         lambda f: f.train_args(f"data.train={f.root / 'no_such_file.tsv'}"),
         lambda f: [str(f.root / "no_such_file.tsv")]),
    Case("empty-data-file",
         lambda f: f.train_args(f"data.train={f.write('empty.tsv', '')}"),
         lambda f: [str(f.root / "empty.tsv"), "empty"]),
    Case("header-only-data-file",
         lambda f: f.train_args(f"data.train={f.write('header.tsv', GOOD.splitlines()[0])}"),
         lambda f: [str(f.root / "header.tsv"), "header"]),
    Case("unknown-column",
         lambda f: f.train_args("data.text_column=sentense"),
         lambda f: [f"{f.train}:1", "'sentense'", "did you mean 'sentence'"]),
    Case("ragged-tsv-line",
         lambda f: f.train_args(f"data.train={f.write('ragged.tsv', RAGGED)}"),
         lambda f: [f"{f.root / 'ragged.tsv'}:4"]),
    Case("non-utf8-bytes",
         lambda f: f.train_args(f"data.train={f.write('latin1.tsv', LATIN1)}"),
         lambda f: [f"{f.root / 'latin1.tsv'}:3", "UTF-8"]),
    Case("dev-label-unseen-in-training",
         lambda f: f.train_args(f"data.train={f.write('t.tsv', GOOD)}", f"data.dev={f.write('d.tsv', UNSEEN_DEV)}"),
         lambda f: [f"{f.root / 'd.tsv'}:3", "'2'"]),
    Case("config-typo-in-yaml",
         lambda f: f.train_args(config=f.config("typo", extra=", lrr: 0.1")),
         lambda f: [str(f.root / "typo.yaml"), "train.lrr", "did you mean 'lr'"]),
    Case("config-typo-on-command-line",
         lambda f: f.train_args("train.lrr=0.1"),
         lambda f: ["command line", "train.lrr", "did you mean 'lr'"]),
    Case("non-numeric-value",
         lambda f: f.train_args("train.lr=abc"),
         lambda f: ["train.lr", "'abc'", "number"]),
    Case("fractional-integer",
         lambda f: f.train_args("train.epochs=2.5"),
         lambda f: ["train.epochs", "'2.5'", "integer"]),
    # Values torch would reject, or that would only fail mid-run, once the run directory existed.
    *[Case(f"bad-{key.replace('_', '-')}-{label}",
           (lambda f, extra=extra: f.train_args(*extra)),
           (lambda f, key=key, shown=shown: [f"train.{key}", shown]))
      for key, label, extra, shown in [
          ("device", "unknown", ["train.device=tpu"], "'tpu'"),
          ("device", "absent-gpu", ["train.device=cuda:99"], "cuda:99"),
          ("lr", "inf", ["train.lr=inf"], "inf"),
          ("lr", "nan", ["train.lr=nan"], "nan"),
          ("weight_decay", "negative", ["train.weight_decay=-0.1"], "-0.1"),
          ("momentum", "negative", ["train.optimizer=sgd", "train.momentum=-0.5"], "-0.5"),
          ("adadelta_rho", "above-1", ["train.optimizer=adadelta", "train.adadelta_rho=1.5"], "1.5"),
          ("adam_beta1", "one", ["train.adam_beta1=1"], "1.0"),
          ("max_minutes", "nan", ["train.max_minutes=nan"], "nan"),
          ("max_minutes", "negative", ["train.max_minutes=-1"], "-1"),
          ("clip_norm", "nan", ["train.clip_norm=nan"], "nan"),
      ]],
    Case("unknown-model-name",
         lambda f: f.train_args("model.name=cnnn"),
         lambda f: ["model.name", "'cnnn'", "did you mean 'cnn'", "rnn"]),
    Case("unknown-section-in-yaml",
         lambda f: f.train_args(config=f.config("section", text=CONFIG.format(
             train=f.train, dev=f.dev, extra="").replace("train: {", "trian: {"))),
         lambda f: [str(f.root / "section.yaml"), "'trian'", "did you mean 'train'"]),
    Case("unknown-section-on-command-line",
         lambda f: f.train_args("trian.lr=0.1"),
         lambda f: ["command line", "'trian'", "did you mean 'train'"]),
    Case("evaluate-a-directory-that-is-not-a-run",
         lambda f: ["evaluate", str(f.not_a_run()), "--data", str(f.dev)],
         lambda f: [str(f.root / "not_a_run"), "not a textnn run"]),
    Case("predict-with-a-directory-that-is-not-a-run",
         lambda f: ["predict", str(f.not_a_run()), str(f.dev)],
         lambda f: [str(f.root / "not_a_run"), "not a textnn run"]),
    Case("evaluate-a-missing-run-directory",
         lambda f: ["evaluate", str(f.root / "runs" / "nope"), "--data", str(f.dev)],
         lambda f: [str(f.root / "runs" / "nope"), "not found"]),
]


def check_error(code: int, stderr: str, files: Files, case: Case) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("error: ")
    for expected in case.expect(files):
        assert expected in line, f"{expected!r} not in {line!r}"
    assert REMEDY.search(line), f"the message does not say what to do: {line!r}"
    # nothing that could pass for a run: for train, no directory at all
    assert not files.run_dir.exists()
    assert not any(p.name in ("model.safetensors", "report.md") for p in files.root.rglob("*"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_line_and_exit_code_2(case, tmp_path, monkeypatch, capsys):
    files = Files(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = case.args(files)
    before = sorted(p for p in tmp_path.rglob("*"))
    code = main(args)  # any exception escaping here is the traceback a user would see
    captured = capsys.readouterr()
    check_error(code, captured.err, files, case)
    assert captured.out == ""
    if args[0] in ("evaluate", "predict"):
        assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written into the directory given


# Each costs a torch start-up; the config checks run here too because several of them used to end in
# a traceback only the real entry point shows the way a user sees it.
SUBPROCESS_CASES = [c for c in CASES if c.id == "ragged-tsv-line" or c.id.startswith("bad-")]


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES])
def test_the_real_entry_point_prints_the_same(case, tmp_path):
    files = Files(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "textnn", *case.args(files)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    check_error(proc.returncode, proc.stderr, files, case)
    assert proc.stdout == ""
