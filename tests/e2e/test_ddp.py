"""Several processes through the real CLI: torchrun starts 2 gloo processes on the CPU.

Two processes with batch B each must train exactly what one process trains on the union of their
batches (grad_accum 2 with batch B, or batch 2B for stateful streams), with process 0 alone writing
the run; a run interrupted under torchrun resumes to the weights of an uninterrupted one.
Every parameter of a model gets a gradient (DDP's requirement here; see training/distributed.py):
a run holds only the head its task uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_lm_cli import write_corpus
from tests.e2e.test_resume import _step_of
from tests.e2e.test_tagging_cli import write_toy_ner
from textnn.resolve import load_config
from textnn.tasks.language_modeling import LanguageModelingTask

LM = """\
task: language_modeling
data: {{format: text, train: {train}, dev: {dev}, tokenizer: whitespace, bptt: 8, stateful: {stateful}}}
model: {{name: rnn_lm, preset: tiny, dropout: {dropout}}}
train: {{batch_size: 4, epochs: {epochs}, eval_every: 10, checkpoint_every: {checkpoint_every}, log_every: 5,
         progress: false, device: cpu, threads: 1, keep_checkpoint: last}}
"""
TAGGER = """\
task: tagging
data: {{format: conll, train: {train}, dev: {dev}, tag_scheme: iob1, train_tag_scheme: bioes}}
model: {{name: rnn_tagger, preset: tiny, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.02, epochs: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0,
         keep_checkpoint: last}}
"""
CLASSIFIER = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}{pair}}}
model: {{name: {model}, preset: tiny}}
head: {{dropout: 0.0}}
train: {{optimizer: adam, lr: 0.01, epochs: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0,
         keep_checkpoint: last}}
"""


def _command(processes: int, *args: str) -> list[str]:
    textnn = ["-m", "textnn", "train", *args]
    if processes == 1:
        return [sys.executable, *textnn]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
            *textnn]


def _env(root: Path) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TEXTNN_CACHE": str(root / "cache"), "PYTHONUNBUFFERED": "1"}


def train(root: Path, processes: int, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(_command(processes, *args), capture_output=True, text=True, cwd=root, env=_env(root),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def assert_same_training(one: Path, two: Path, exact: bool) -> None:
    """Same final weights, optimizer state and step count; the same metric records, written once."""
    for name in ("model.safetensors", "checkpoint/last.safetensors"):
        expected, got = load_file(str(one / name)), load_file(str(two / name))
        # A carried state is per process (one of 2B rows, or two of B rows): compared between runs of as many
        keys = [k for k in expected if not k.startswith("rng.") and (exact or not k.startswith("carried."))]
        assert keys and set(keys) <= set(got)
        for key in keys:
            if exact:
                assert torch.equal(expected[key], got[key]), (name, key)
            else:  # the same sums added in another order
                torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-6, msg=f"{name} {key}")
    status_one = json.loads((one / "run.json").read_text())
    status_two = json.loads((two / "run.json").read_text())
    assert status_two["status"] == "finished" and status_two["steps"] == status_one["steps"] > 1
    # Process 1 writes nothing: each record once, in the order one process writes them; the logged train
    # loss is the whole step's (summed over both processes), so it matches too.
    expected, got = records(one), records(two)
    assert [(r["split"], r["step"]) for r in got] == [(r["split"], r["step"]) for r in expected]
    for a, b in zip(expected, got):
        assert b.get("loss") == pytest.approx(a.get("loss"), rel=1e-5)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    train_file, dev_file = write_corpus(root)
    for stateful in ("false", "true"):
        (root / f"lm_{stateful}.yaml").write_text(LM.format(train=train_file, dev=dev_file, stateful=stateful,
                                                             dropout=0.0, epochs=2, checkpoint_every=0))
    (root / "lm_resume.yaml").write_text(LM.format(train=train_file, dev=dev_file, stateful="false", dropout=0.1,
                                                   epochs=4, checkpoint_every=1))
    for name, model, pair in (("cnn", "cnn", False), ("pair", "cbow", True)):
        train_file = write_sentiment_tsv(root / f"{name}_train.tsv", 60, seed=1, pair=pair)
        dev_file = write_sentiment_tsv(root / f"{name}_dev.tsv", 20, seed=2, pair=pair)
        (root / f"{name}.yaml").write_text(CLASSIFIER.format(train=train_file, dev=dev_file, model=model,
                                                               pair=", text_pair_column: sentence2" if pair else ""))
    (root / "tagger.yaml").write_text(TAGGER.format(train=write_toy_ner(root / "ner_train.txt", 120, seed=1),
                                                    dev=write_toy_ner(root / "ner_dev.txt", 30, seed=2, unseen=0.3)))
    return root


def test_two_processes_train_what_one_trains_on_both_their_batches(root):
    # An odd number of micro-batches: process 1 has none in each epoch's last step and joins it with weight 0.
    task = LanguageModelingTask.from_data(load_config(str(root / "lm_false.yaml"), ["train.batch_size=5"]))
    assert len(task.train_batches(0)) % 2 == 1
    two = train(root, 2, "lm_false.yaml", "train.batch_size=5", "--run-dir", "two")
    train(root, 1, "lm_false.yaml", "train.batch_size=5", "train.grad_accum=2", "--run-dir", "one")
    assert_same_training(root / "one", root / "two", exact=False)
    assert two.stdout.count("run: two") == 1  # process 0 alone reports
    assert json.loads((root / "two" / "run.json").read_text())["tokens_per_second"] > 0


def test_stateful_streams_give_each_process_its_own_rows(root):
    # In float32: one process's 8 rows against two processes' 4 are the same sums in another order there,
    # where bf16 rounds the products of batches of other shapes apart, and an LSTM carries the difference
    # over 40 steps past any tolerance that would still catch a row read by the wrong process.
    train(root, 2, "lm_true.yaml", "train.precision=fp32", "--run-dir", "two_rows")
    train(root, 1, "lm_true.yaml", "train.precision=fp32", "train.batch_size=8", "--run-dir", "one_rows")
    assert_same_training(root / "one_rows", root / "two_rows", exact=False)
    # Stopped mid-epoch (at a scheduled evaluation, so that the run may go on) and resumed: each process
    # takes back the state its rows carried, which process 0 saved for both.
    train(root, 2, "lm_true.yaml", "train.precision=fp32", "train.max_steps=10", "--run-dir", "two_rows_resumed")
    assert 10 < json.loads((root / "two_rows" / "run.json").read_text())["steps"] // 2  # epoch 1 of 2
    train(root, 2, "lm_true.yaml", "--run-dir", "two_rows_resumed", "--resume", "train.max_steps=0")
    assert_same_training(root / "two_rows", root / "two_rows_resumed", exact=True)


@pytest.mark.parametrize("config", ["cnn", "pair"])
def test_classifiers_single_and_pair(root, config):
    """Kim's CNN (max-norm on the head after each step) and a sentence-pair CBOW: no unused parameter."""
    train(root, 2, f"{config}.yaml", "--run-dir", f"two_{config}")
    train(root, 1, f"{config}.yaml", "train.grad_accum=2", "--run-dir", f"one_{config}")
    assert_same_training(root / f"one_{config}", root / f"two_{config}", exact=False)


def test_a_crf_tagger_whose_loss_calls_a_model_method(root):
    train(root, 2, "tagger.yaml", "--run-dir", "two_tagger")
    train(root, 1, "tagger.yaml", "train.grad_accum=2", "--run-dir", "one_tagger")
    assert_same_training(root / "one_tagger", root / "two_tagger", exact=False)


def _running_past_a_checkpoint(root: Path, run: Path) -> subprocess.Popen:
    """A 2-process torchrun training of lm_resume.yaml into `run`, returned once its checkpoint holds step 12
    or more and it is still training (to be stopped by the test)."""
    proc = subprocess.Popen(_command(2, "lm_resume.yaml", "--run-dir", str(run)), cwd=root, env=_env(root),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checkpoint = run / "checkpoint" / "last.safetensors"
    deadline = time.time() + 300
    while _step_of(checkpoint) < 12 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be stopped; make the run longer"
    return proc


def test_ctrl_c_under_torchrun_then_resume_gives_the_uninterrupted_weights(root):
    # Dropout is on: process 1 draws from its own generator, which the resume must restart where it was.
    train(root, 2, "lm_resume.yaml", "--run-dir", "reference")
    run = root / "interrupted"
    proc = _running_past_a_checkpoint(root, run)
    checkpoint = run / "checkpoint" / "last.safetensors"
    proc.send_signal(signal.SIGINT)  # torchrun passes it on to both processes
    _, err = proc.communicate(timeout=120)
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted", err[-3000:]
    assert err.count("checkpoint saved") == 1 and "torchrun --nproc_per_node 2 -m textnn" in err
    total = json.loads((root / "reference" / "run.json").read_text())["steps"]
    assert 0 < _step_of(checkpoint) < total

    train(root, 2, "lm_resume.yaml", "--run-dir", str(run), "--resume")
    assert_same_training(root / "reference", run, exact=True)

    refused = subprocess.run(_command(1, "lm_resume.yaml", "--run-dir", str(run), "--resume"), cwd=root,
                             env=_env(root), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "trained by 2 process(es)" in refused.stderr


def _worker_pid(launcher: int, rank: int) -> int | None:
    """The pid of torchrun's worker process `rank` (a child of the launcher `launcher`), read from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the worker through /proc")
def test_a_worker_killed_under_torchrun_is_one_line_and_the_run_resumes_exactly(root):
    """kill -9 of process 1: process 0 says in one line which process stopped, that the checkpoint is
    intact and how to go on (not gloo's traceback), and --resume gives the uninterrupted weights."""
    if not (root / "reference" / "run.json").is_file():
        train(root, 2, "lm_resume.yaml", "--run-dir", "reference")
    run = root / "worker_killed"
    proc = _running_past_a_checkpoint(root, run)
    os.kill(_worker_pid(proc.pid, 1), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "[rank0]" not in err and "gloo" not in err, err[-3000:]  # torchrun's own summary follows, as it is
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    for text in ("process 0 of 2", "process 1 stopped", "checkpoint is intact", "--resume",
                 "torchrun --nproc_per_node 2 -m textnn"):
        assert text in errors[0], (text, errors[0])
    assert json.loads((run / "run.json").read_text())["status"] == "failed"

    train(root, 2, "lm_resume.yaml", "--run-dir", str(run), "--resume")
    assert_same_training(root / "reference", run, exact=True)
