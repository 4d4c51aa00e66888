"""Precision is a property of the run, through the commands a user runs, on both kinds of CPU.

The kind of CPU is forced with TEXTNN_NATIVE_BF16 (1: counts as one with native bf16, where `auto` picks
bf16; 0: as one without, where it picks float32), so each test runs the same here whatever the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv

REPO = Path(__file__).resolve().parents[2]
CONFIG = ("task: classification\ndata: {format: tsv, train: train.tsv, dev: dev.tsv}\n"
          "model: {name: cnn, preset: tiny}\n"
          "train: {max_steps: 6, eval_every: 3, batch_size: 16, threads: 1, progress: false, bootstrap_samples: 0, "
          "tensorboard: false, keep_checkpoint: last}\n")


def textnn(*args: str, cwd: Path, native: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "TEXTNN_NATIVE_BF16": "1" if native else "0"}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("precision")
    write_sentiment_tsv(root / "train.tsv", 200, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 120, seed=2)
    (root / "c.yaml").write_text(CONFIG, encoding="utf-8")
    return root


def legs(run: Path) -> list[tuple[int, str]]:
    return [(leg["from_step"], leg["precision"]) for leg in json.loads((run / "run.json").read_text())["precision_legs"]]


@pytest.mark.parametrize("trained_native", [False, True], ids=["trained-fp32", "trained-bf16"])
def test_evaluate_on_the_other_kind_of_cpu_gives_the_numbers_training_recorded(root, trained_native):
    run = f"run_{int(trained_native)}"
    ok(textnn("train", "c.yaml", "--run-dir", run, cwd=root, native=trained_native))
    trained_in = "bf16" if trained_native else "fp32"
    assert legs(root / run) == [(0, trained_in)]
    recorded = json.loads((root / run / "run.json").read_text())["dev"]
    for native in (trained_native, not trained_native):
        done = ok(textnn("evaluate", run, "--data", "dev.tsv", "--json", "--bootstrap", "0", cwd=root, native=native))
        metrics = json.loads(done.stdout)
        assert metrics["accuracy"] == recorded["accuracy"] and metrics["loss"] == pytest.approx(recorded["loss"],
                                                                                             rel=1e-6)
        notes = [line for line in done.stderr.splitlines() if line.startswith("precision:")]
        # one line where this machine alone would choose otherwise, none where it would not
        assert notes == ([] if native == trained_native else [notes[0]]), done.stderr
        if notes:
            assert notes[0].startswith(f"precision: {trained_in}, as the run trained")
    # --precision asks for the other one, and says so where it is not the machine's own choice
    other = "fp32" if trained_native else "bf16"
    done = ok(textnn("evaluate", run, "--data", "dev.tsv", "--json", "--bootstrap", "0", "--precision", other,
                     cwd=root, native=trained_native))
    assert f"precision: {other}, as --precision asks" in done.stderr
    assert json.loads(done.stdout)["loss"] != recorded["loss"]  # bf16 rounds what float32 does not


def test_predict_and_the_python_api_use_the_runs_precision(root):
    ok(textnn("train", "c.yaml", "--run-dir", "api_run", cwd=root, native=False))
    lines = "good great film\nawful dull plot\n"
    (root / "in.txt").write_text(lines, encoding="utf-8")
    on_fp32 = ok(textnn("predict", "api_run", "in.txt", cwd=root, native=False)).stdout
    on_bf16 = ok(textnn("predict", "api_run", "in.txt", cwd=root, native=True)).stdout
    assert on_fp32 == on_bf16 and len(on_fp32.splitlines()) == 2
    script = ("import json, textnn\nrun = textnn.load('api_run')\n"
              "print(run.config.train.precision)\n"
              "print(json.dumps(textnn.load('api_run', precision='bf16').config.train.precision))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TEXTNN_NATIVE_BF16": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fp32", '"bf16"']


def test_resume_keeps_the_runs_precision_and_records_an_asked_switch(root):
    ok(textnn("train", "c.yaml", "train.max_steps=3", "--run-dir", "legs", cwd=root, native=False))
    assert legs(root / "legs") == [(0, "fp32")]
    # on a CPU where auto means bf16, the run goes on in its own float32, and says so
    done = ok(textnn("train", "--resume", "--run-dir", "legs", "train.max_steps=6", cwd=root, native=True))
    assert "goes on in fp32, the precision it trained in" in done.stderr
    assert "precision: float32" in done.stderr
    assert legs(root / "legs") == [(0, "fp32"), (3, "fp32")]
    # a switch asked for is taken, and recorded as a leg of its own
    done = ok(textnn("train", "--resume", "--run-dir", "legs", "train.max_steps=9", "train.precision=bf16", cwd=root,
                     native=True))
    assert "precision: bf16 autocast" in done.stderr
    assert legs(root / "legs") == [(0, "fp32"), (3, "fp32"), (6, "bf16")]
    # the commands now compute in the last leg's precision
    done = ok(textnn("evaluate", "legs", "--data", "dev.tsv", "--bootstrap", "0", cwd=root, native=False))
    assert "precision: bf16, as the run trained" in done.stderr and "emulated" in done.stderr


def test_a_bf16_run_does_not_go_on_silently_in_float32_where_bf16_is_not_native(root):
    ok(textnn("train", "c.yaml", "train.max_steps=3", "--run-dir", "bf16_run", cwd=root, native=True))
    done = textnn("train", "--resume", "--run-dir", "bf16_run", "train.max_steps=6", cwd=root, native=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "the run trained in bf16" in done.stderr and "train.precision=fp32" in done.stderr
    assert legs(root / "bf16_run") == [(0, "bf16")]  # nothing changed
    ok(textnn("train", "--resume", "--run-dir", "bf16_run", "train.max_steps=6", "train.precision=fp32", cwd=root,
              native=False))
    assert legs(root / "bf16_run") == [(0, "bf16"), (3, "fp32")]
