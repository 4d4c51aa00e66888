"""A run killed at any step and resumed finishes with exactly the weights of an uninterrupted run."""

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
from textnn.cli import main
from textnn.runs import RunDir

# DAN has word dropout and dropout (so the RNG state matters), Adam has moments, the linear schedule
# depends on the step, grad_accum=2 makes the data position land mid-group.
CONFIG = """\
task: classification
data: {{format: tsv, train: {train}, dev: {dev}}}
model: {{name: dan, preset: tiny}}
train: {{optimizer: adam, lr: 0.01, scheduler: linear, warmup_steps: 5, epochs: 12, batch_size: 4,
         grad_accum: 2, eval_every: 37, checkpoint_every: 1, progress: false, bootstrap_samples: 0,
         keep_checkpoint: last{extra}}}
"""
# The same run with parameter groups: one more of DAN's layer groups trains every 20 steps, so a run
# stopped at step 40 or later is resumed with its embeddings still frozen (they join at step 60).
EXTRA = {"adam-linear": "",
         "unfreezing": ", weight_decay: 0.01, no_decay: true, layer_lr_decay: 0.3846, unfreeze: 20,"
                       " unfreeze_unit: step"}


def _cli(*args: str, cache: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TEXTNN_CACHE": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "textnn", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module", params=list(EXTRA))
def setup(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"resume-{request.param}")
    train = write_sentiment_tsv(root / "train.tsv", 200, seed=1)
    dev = write_sentiment_tsv(root / "dev.tsv", 40, seed=2)
    config = root / "dan.yaml"
    config.write_text(CONFIG.format(train=train, dev=dev, extra=EXTRA[request.param]))
    reference = _cli("train", str(config), "--run-dir", str(root / "reference"), cache=root / "cache")
    out, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err
    return root, config


def _step_of(checkpoint: Path) -> int:
    from safetensors import safe_open

    try:
        with safe_open(str(checkpoint), framework="pt") as handle:
            return json.loads(handle.metadata()["trainer"])["step"]
    except Exception:  # not written yet
        return -1


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_killed_run_resumes_to_identical_weights(setup, sig, capsys):
    _kill_and_resume(setup, sig, capsys)


@pytest.mark.parametrize("setup", ["adam-linear"], indirect=True)
def test_sigterm_is_handled_as_ctrl_c(setup, capsys):
    """What `docker stop`, Slurm and Kubernetes send before they kill: the step finishes, a checkpoint is saved."""
    _kill_and_resume(setup, signal.SIGTERM, capsys)


def _kill_and_resume(setup, sig: signal.Signals, capsys) -> None:
    root, config = setup
    run_dir = root / f"interrupted-{sig.name}"
    proc = _cli("train", str(config), "--run-dir", str(run_dir), cache=root / "cache")
    checkpoint = run_dir / "checkpoint" / "last.safetensors"
    deadline = time.time() + 120
    while _step_of(checkpoint) < 40 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be interrupted; make the run longer"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    status = json.loads((run_dir / "run.json").read_text())["status"]
    if sig == signal.SIGKILL:
        assert status == "running"  # really died mid-run: its process is gone, so it shows as died
        assert RunDir(run_dir).effective_status() == "died"
    else:  # exit status 130 or 143, as a process stopped by the signal
        assert proc.returncode == 128 + sig, err
        assert status == "interrupted"
        assert "checkpoint saved" in err and "--resume" in err
    assert not (run_dir / "report.md").exists()
    # Its best weights so far can be used, with one line saying that they are not final.
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--data", str(root / "dev.tsv"), "--bootstrap", "0"]) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warning == [f"warning: {run_dir} is not finished (status: {'died' if sig == signal.SIGKILL else status});"
                       f" using its best weights so far"]

    stopped_at = _step_of(checkpoint)
    total = json.loads((root / "reference" / "run.json").read_text())["steps"]
    assert 0 < stopped_at < total

    resumed = _cli("train", str(config), "--run-dir", str(run_dir), "--resume", cache=root / "cache")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    expected = load_file(str(root / "reference" / "checkpoint" / "last.safetensors"))
    got = load_file(str(checkpoint))
    weights = [k for k in expected if k.startswith("model.")]
    assert weights
    for key in weights:
        assert torch.equal(expected[key], got[key]), key
    for key in [k for k in expected if k.startswith("optim.")]:
        assert torch.equal(expected[key], got[key]), key
    best_expected = load_file(str(root / "reference" / "model.safetensors"))
    best_got = load_file(str(run_dir / "model.safetensors"))
    assert all(torch.equal(best_expected[k], best_got[k]) for k in best_expected)
    # metrics.jsonl holds the records of the uninterrupted run, but for the timings: the training losses
    # (at steps 1, 2, 4, ..., 32 before train.log_every's 50, then every 50), the evaluations, the final ones
    reference, resumed = (without_timings(RunDir(path).read_metrics()) for path in (root / "reference", run_dir))
    assert reference == resumed
    assert [r["step"] for r in reference if r["split"] == "train"][:7] == [1, 2, 4, 8, 16, 32, 50]


def without_timings(records: list[dict]) -> list[dict]:
    return [{key: value for key, value in record.items() if key not in ("seconds", "eval_seconds", "tokens_per_s")}
            for record in records]


@pytest.mark.parametrize("setup", ["adam-linear"], indirect=True)
def test_resume_refuses_a_changed_config(setup, tmp_path):
    root, config = setup
    proc = _cli("train", str(config), "--run-dir", str(root / "reference"), "--resume", "train.lr=0.5",
                cache=root / "cache")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "train.lr" in err and "new --run-dir" in err


# --- every task, stopped at several steps -------------------------------------------------------------
# Each run below is stopped after `train.max_steps` steps and continued with `--resume train.max_steps=0`
# (no limit; max_steps may change on resume: it bounds the run, not its course); the checkpoint is all the stopped run leaves,
# so this is what a run killed after that step's checkpoint resumes from. No dev set: nothing is
# evaluated between the steps, so the stopped run ends exactly where the checkpoint was written.
LM_WORDS = "the a cat dog sat ran on under mat rug and then".split()
TASKS = {
    "classification": ("task: classification\ndata: {{format: tsv, train: {root}/train.tsv}}\n"
                       "model: {{name: dan, preset: tiny}}\n", 8),
    "tagging": ("task: tagging\ndata: {{format: conll, train: {root}/train.conll}}\n"
                "model: {{name: rnn_tagger, preset: tiny}}\n", 8),
    "lm-stateful": ("task: language_modeling\ndata: {{format: text, train: {root}/train.txt, tokenizer: whitespace,"
                    " bptt: 6}}\nmodel: {{name: rnn_lm, preset: tiny}}\n", 4),
    "lm-awd-variable": ("task: language_modeling\ndata: {{format: text, train: {root}/train.txt, tokenizer: "
                        "whitespace, bptt: 6, bptt_variable: true}}\nmodel: {{name: awd_lstm, preset: tiny}}\n", 4),
    "lm-windows": ("task: language_modeling\ndata: {{format: text, train: {root}/train.txt, tokenizer: whitespace,"
                   " bptt: 6, stateful: false}}\nmodel: {{name: rnn_lm, preset: tiny}}\n", 4),
    "transformer-xl": ("task: language_modeling\ndata: {{format: text, train: {root}/train.txt, tokenizer: "
                       "whitespace, bptt: 6}}\nmodel: {{name: transformer_xl, preset: tiny}}\n", 4),
}
TRAIN = ("train: {{optimizer: adam, lr: 0.01, epochs: 2, batch_size: {batch}, checkpoint_every: 1, progress: false,"
         " threads: 1, log_every: 1, seed: 3, keep_checkpoint: last}}\n")


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    from tests.e2e.test_tagging_cli import write_toy_ner

    root = tmp_path_factory.mktemp("resume-tasks")
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)  # 5 steps an epoch, as for every task here
    # (but variable BPTT, whose window lengths vary)
    write_toy_ner(root / "train.conll", 40, seed=1)
    lines = [" ".join(LM_WORDS[(i * 7 + j * 3) % len(LM_WORDS)] for j in range(3 + i % 5)) for i in range(20)]
    (root / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")  # 5 windows of 4 x 6 tokens
    return root


def _train_in_process(config: Path, run: Path, *args: str) -> None:
    assert main(["train", str(config), "--run-dir", str(run), *args]) == 0


@pytest.fixture(scope="module")
def task_references(task_files):
    return {}


@pytest.mark.parametrize("stop_at", [2, 5, 7], ids=["epoch-1-mid", "epoch-end", "epoch-2-mid"])
@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_resumes_to_identical_weights_from_mid_epoch(task_files, task_references, task, stop_at):
    root = task_files
    text, batch = TASKS[task]
    config = root / f"{task}.yaml"
    config.write_text(text.format(root=root) + TRAIN.format(batch=batch), encoding="utf-8")
    if task not in task_references:
        _train_in_process(config, root / f"{task}-reference")
        task_references[task] = load_file(str(root / f"{task}-reference" / "checkpoint" / "last.safetensors"))
    expected = task_references[task]
    run = root / f"{task}-stopped-{stop_at}"
    _train_in_process(config, run, f"train.max_steps={stop_at}")
    assert _step_of(run / "checkpoint" / "last.safetensors") == stop_at
    _train_in_process(config, run, "--resume", "train.max_steps=0")  # the run's own is the stop's: lift it
    got = load_file(str(run / "checkpoint" / "last.safetensors"))
    assert _step_of(run / "checkpoint" / "last.safetensors") == _step_of(
        root / f"{task}-reference" / "checkpoint" / "last.safetensors") > stop_at
    keys = [k for k in expected if k.startswith(("model.", "optim."))]
    assert keys
    for key in keys:
        assert torch.equal(expected[key], got[key]), key


# A process that trains `config` into `run` and is killed (SIGKILL, nothing handled) as its third step
# begins: before its first checkpoint, which this config writes at the end of the epoch.
KILLED_AT_STEP_3 = """\
import os, signal, sys
from textnn.cli import main
from textnn.training.trainer import Trainer
train_step = Trainer._train_step
def dies_at_step_3(self, group, step, epoch=0):
    if step == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return train_step(self, group, step, epoch)
Trainer._train_step = dies_at_step_3
main(["train", sys.argv[1], "--run-dir", sys.argv[2]])
"""


def test_a_run_killed_before_its_first_checkpoint_starts_over_on_resume(tmp_path, capsys):
    write_sentiment_tsv(tmp_path / "train.tsv", 40, seed=1)
    config = tmp_path / "dan.yaml"
    config.write_text(f"task: classification\ndata: {{format: tsv, train: {tmp_path / 'train.tsv'}}}\n"
                      "model: {name: dan, preset: tiny}\n"
                      "train: {epochs: 2, batch_size: 8, log_every: 1, progress: false, threads: 1, keep_checkpoint: last}\n")
    run = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_STEP_3, str(config), str(run)], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (run / "checkpoint" / "last.safetensors").exists()
    assert [r["step"] for r in RunDir(run).read_metrics()] == [1, 2]
    assert RunDir(run).effective_status() == "died"

    # A plain rerun is refused (the directory is a run) and points to --resume, which starts it over.
    assert main(["train", str(config), "--run-dir", str(run)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", str(config), "--run-dir", str(run), "--resume"]) == 0
    assert f"{run}: the run stopped before its first checkpoint, so there is nothing to resume; starting it " \
           f"over" in capsys.readouterr().err
    _train_in_process(config, tmp_path / "reference")
    expected = load_file(str(tmp_path / "reference" / "checkpoint" / "last.safetensors"))
    got = load_file(str(run / "checkpoint" / "last.safetensors"))
    for key in [k for k in expected if k.startswith(("model.", "optim."))]:
        assert torch.equal(expected[key], got[key]), key
    # the dead attempt's records are gone: each is written once, with the loss of the new attempt
    steps_and_losses = [[(r["split"], r["step"], r.get("loss")) for r in RunDir(path).read_metrics()]
                        for path in (run, tmp_path / "reference")]
    assert steps_and_losses[0] == steps_and_losses[1]
    assert RunDir(run).effective_status() == "finished"
