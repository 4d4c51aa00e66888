"""Language models through the real CLI: `textnn train` on a tiny text file, then `textnn evaluate`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

WORDS = "the a cat dog sat ran on under mat rug and then".split()


def write_corpus(folder: Path) -> tuple[Path, Path]:
    lines = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)) for i in range(300)]
    train, dev = folder / "train.txt", folder / "dev.txt"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dev.write_text("\n".join(lines[:40:3]) + "\n", encoding="utf-8")
    return train, dev


def textnn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def printed(output: str, key: str) -> str:
    match = re.search(rf"^\s*{key}: (\S+)$", output, re.MULTILINE)
    assert match, f"{key} not printed in:\n{output}"
    return match.group(1)


@pytest.mark.parametrize("model,extra", [
    ("nplm", []),
    ("rnn_lm", ["data.tokenizer=bpe", "data.bpe_vocab_size=270"]),
    ("awd_lstm", ["train.optimizer=ntasgd", "train.lr=5", "train.ntasgd_nonmono=1", "data.bptt_variable=true",
                  "train.clip_norm=0.25"]),
])
def test_train_then_evaluate_prints_perplexity_and_token_counts(tmp_path, model, extra):
    train, dev = write_corpus(tmp_path)
    (tmp_path / "lm.yaml").write_text(
        "task: language_modeling\n"
        f"data: {{format: text, train: {train.name}, dev: {dev.name}, tokenizer: whitespace, bptt: 8}}\n"
        f"model: {{name: {model}}}\n"
        "train: {batch_size: 4, epochs: 2, eval_every: 10, log_every: 5, progress: false, device: cpu,\n"
        "        keep_checkpoint: last}\n",  # the NT-ASGD check reads the finished run's checkpoint
        encoding="utf-8")
    proc = textnn("train", "lm.yaml", "model.preset=tiny", *extra, "--run-dir", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished" and status["metric"] == "perplexity"
    dev_tokens = sum(len(line.split()) + 1 for line in dev.read_text(encoding="utf-8").splitlines())
    if model == "awd_lstm":  # NT-ASGD heard every dev evaluation; variable BPTT scaled the logged lr
        with safe_open(str(tmp_path / "run" / "checkpoint" / "last.safetensors"), framework="pt") as handle:
            groups = json.loads(handle.metadata()["optim_groups"])
        records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        dev_scores = [r["perplexity"] for r in records if r["split"] == "dev"]
        history, averaging = groups[0]["history"], groups[0]["averaging"]
        assert history == pytest.approx(dev_scores[:len(history)]) and len(dev_scores) >= 2
        assert len(history) < len(dev_scores) if averaging else len(history) == len(dev_scores)  # stops once on
        rates = {r["lr"] for r in records if r["split"] == "train"}
        assert len(rates) > 1 and all(0 < rate <= 5 * (8 + 20) / 8 for rate in rates)

    evaluated = textnn("evaluate", "run", "--data", dev.name, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    out = evaluated.stdout
    perplexity = float(printed(out, "perplexity"))
    assert perplexity == pytest.approx(status["dev"]["perplexity"], rel=1e-5)
    assert 1.0 < perplexity < 3 * len(WORDS)
    if "data.tokenizer=bpe" in extra:
        assert int(printed(out, "words")) == dev_tokens - 1  # the word-level count of the same text
        assert int(printed(out, "tokens")) > dev_tokens - 1
        assert float(printed(out, "word_perplexity")) > perplexity
        saved = json.loads((tmp_path / "run" / "tokenizer.json").read_text(encoding="utf-8"))
        assert saved["kind"] == "bpe"
    else:
        assert int(printed(out, "tokens")) == dev_tokens - 1


def test_evaluate_reads_one_sequential_stream_unless_streams_are_asked_for(tmp_path):
    """By default (and with `--streams 1`) the file is read in order from its first token: the number
    equals the task's own sequential evaluation of the loaded run. `--streams 16` reads 16 rows side by
    side, each restarting from a zero state, which gives another number."""
    import torch

    from textnn.experiment import load_run

    train, dev = write_corpus(tmp_path)
    (tmp_path / "lm.yaml").write_text(
        "task: language_modeling\n"
        f"data: {{format: text, train: {train.name}, dev: {train.name}, tokenizer: whitespace, bptt: 8}}\n"
        "model: {name: rnn_lm, preset: tiny}\n"
        "train: {batch_size: 4, epochs: 1, log_every: 5, progress: false, device: cpu}\n", encoding="utf-8")
    assert textnn("train", "lm.yaml", "--run-dir", "run", cwd=tmp_path).returncode == 0
    default = textnn("evaluate", "run", "--data", train.name, "--json", cwd=tmp_path)
    sequential = textnn("evaluate", "run", "--data", train.name, "--streams", "1", "--json", cwd=tmp_path)
    batched = textnn("evaluate", "run", "--data", train.name, "--streams", "16", "--json", cwd=tmp_path)
    assert default.returncode == sequential.returncode == batched.returncode == 0, default.stderr + batched.stderr
    first, seq, bat = (json.loads(p.stdout) for p in (default, sequential, batched))
    assert first == seq and seq["tokens"] == bat["tokens"]
    from textnn.experiment import in_run_precision

    config, task, model = load_run(tmp_path / "run")
    with torch.no_grad(), in_run_precision(config, model):  # the precision the run trained in, as the command
        expected = task.evaluate(model, task.encode_file(str(train)), streams=1)
    assert seq["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    assert seq["loss"] != pytest.approx(bat["loss"], rel=1e-9)  # 16 rows restart 15 times from zero state
