"""`textnn generate` and `textnn visualize` as a user runs them, on a tiny GPT and a tiny LSTM LM.

Both models are trained by the real CLI on a small generated text; every check reads what the
commands print or write. Exit code 2 and a one-line message for the errors a user can make.
"""

from __future__ import annotations

import os
import random
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import write_sentiment_tsv
from textnn.cli import main

WORDS = "the a cat dog sat ran on under mat log and then slept barked quietly today".split()
MODELS = ("gpt", "rnn_lm")
PNG = b"\x89PNG\r\n\x1a\n"

CONFIG = """\
task: language_modeling
data: {{format: text, train: {train}, dev: {dev}, tokenizer: char, bptt: 16}}
model: {{name: {model}, preset: tiny}}
train: {{optimizer: adam, lr: 0.01, max_steps: 25, batch_size: 8, eval_every: 25, threads: 1, progress: false,
         bootstrap_samples: 0}}
"""


def write_text(path: Path, lines: int, seed: int) -> Path:
    """Lower-case sentences of a small fixed word list, one per line (no capital letters anywhere)."""
    rng = random.Random(seed)
    text = "".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + ".\n" for _ in range(lines))
    path.write_text(text, encoding="utf-8")
    return path


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.train = write_text(root / "train.txt", 150, seed=1)
        self.dev = write_text(root / "dev.txt", 30, seed=2)
        self.env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
                    "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def config(self, model: str) -> Path:
        path = self.root / f"{model}.yaml"
        path.write_text(CONFIG.format(train=self.train, dev=self.dev, model=model), encoding="utf-8")
        return path

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("generate"))


@pytest.fixture(scope="module")
def runs(ws) -> dict[str, Path]:
    """A trained run per model, by name."""
    out = {}
    for model in MODELS:
        run = ws.root / "runs" / model
        proc = ws.cli("train", ws.config(model), "--run-dir", run)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[model] = run
    return out


@pytest.mark.parametrize("model", MODELS)
def test_a_seed_repeats_the_samples_and_another_seed_changes_them(ws, runs, model):
    def generate(seed: int) -> subprocess.CompletedProcess:
        proc = ws.cli("generate", runs[model], "--prompt", "the cat ", "--max-tokens", 80, "--seed", seed)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc

    first, again, other = generate(3), generate(3), generate(4)
    assert first.stdout == again.stdout and first.stdout != other.stdout
    assert first.stdout.startswith("the cat ") and len(first.stdout) > len("the cat ") + 40
    assert "seed" not in first.stderr  # a given seed is not announced


def test_without_a_seed_the_drawn_seed_is_printed_and_repeats_the_samples(ws, runs):
    proc = ws.cli("generate", runs["gpt"], "--prompt", "a dog", "--max-tokens", 60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seed = re.search(r"seed (\d+) \(repeat these samples with --seed \1\)", proc.stderr).group(1)
    repeat = ws.cli("generate", runs["gpt"], "--prompt", "a dog", "--max-tokens", 60, "--seed", seed)
    assert repeat.stdout == proc.stdout


def test_greedy_num_samples_and_stop_at_eos_match_the_library(ws, runs):
    from textnn.experiment import generate_run
    from textnn.generation import DecodingConfig

    proc = ws.cli("generate", runs["gpt"], "--prompt", "the dog", "--greedy", "--max-tokens", 30, "--num-samples", 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = generate_run(runs["gpt"], "the dog", DecodingConfig(method="greedy", max_tokens=30, stop_at_eos=False),
                            num_samples=2)
    assert proc.stdout == "".join(f"=== sample {i} of 2 ===\n{text}\n" for i, text in enumerate(expected.samples, 1))
    assert expected.samples[0] == expected.samples[1]  # greedy: no randomness between samples

    proc = ws.cli("generate", runs["rnn_lm"], "--prompt", "the", "--max-tokens", 200, "--num-samples", 3,
                  "--seed", 5, "--stop-at-eos", "--top-k", 5, "--top-p", 0.9, "--temperature", 0.8)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = generate_run(runs["rnn_lm"], "the", DecodingConfig(method="sample", max_tokens=200, temperature=0.8,
                                                                  top_k=5, top_p=0.9, seed=5, stop_at_eos=True),
                            num_samples=3)
    samples = re.split(r"=== sample \d of 3 ===\n", proc.stdout)[1:]
    assert [s.rstrip("\n") for s in samples] == expected.samples
    assert all("\n" not in text for text in expected.samples)  # each stops at its line end


@pytest.mark.parametrize("model", MODELS)
def test_beam_search_prints_its_best_text_or_its_n_best_hypotheses_as_the_library_finds_them(ws, runs, model):
    from textnn.experiment import generate_run
    from textnn.generation import DecodingConfig

    proc = ws.cli("generate", runs[model], "--prompt", "the cat ", "--beam", 3, "--max-tokens", 40)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = generate_run(runs[model], "the cat ", DecodingConfig(method="beam", beam_size=3, max_tokens=40,
                                                                    stop_at_eos=False))
    assert proc.stdout == expected.samples[0] + "\n" and len(expected.continuations[0]) == 40
    assert proc.stderr == ""  # beam search draws nothing: no seed to announce

    proc = ws.cli("generate", runs[model], "--prompt", "a dog", "--beam", 4, "--n-best", 3, "--length-penalty", 1.0,
                  "--max-tokens", 60, "--stop-at-eos")
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = generate_run(runs[model], "a dog", DecodingConfig(method="beam", beam_size=4, n_best=3, max_tokens=60,
                                                                 length_penalty=1.0, stop_at_eos=True))
    [line] = proc.stdout.splitlines()  # the n-best format of every command: one JSON line per input
    found = json.loads(line)
    assert found["prompt"] == "a dog" and found["scores"] == pytest.approx(expected.scores, abs=1e-4)
    assert found["hypotheses"] == expected.samples and len(set(expected.samples)) == 3


def test_visualize_gpt_writes_a_heatmap_per_layer_and_an_index(ws, runs):
    out = ws.root / "views-gpt"
    proc = ws.cli("visualize", runs["gpt"], "--text", "the cat sat.", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    layers = yaml.safe_load((runs["gpt"] / "config.yaml").read_text(encoding="utf-8"))["model"]["n_layers"]
    pngs = sorted(out.glob("layer_*.png"))
    assert [p.name for p in pngs] == [f"layer_{i}.png" for i in range(1, layers + 1)]
    assert all(p.read_bytes()[:8] == PNG for p in pngs)
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and all(f'src="{p.name}"' in page for p in pngs)
    assert f"wrote {out / 'index.html'}" in proc.stdout

    text_file = ws.root / "short.txt"
    text_file.write_text("a dog ran.\n", encoding="utf-8")
    proc = ws.cli("visualize", runs["gpt"], text_file)  # default folder: <run>/views
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (runs["gpt"] / "views" / "index.html").is_file() and (runs["gpt"] / "views" / "layer_1.png").is_file()


def test_visualize_lstm_writes_the_cell_view(ws, runs):
    out = ws.root / "views-lstm"
    proc = ws.cli("visualize", runs["rnn_lm"], "--text", "the cat sat on the mat.\na dog barked.\n", "--output", out)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the old spelling of --output-dir, for one release
    assert proc.stderr.startswith("note: --output is deprecated") and "use --output-dir" in proc.stderr
    page = (out / "cells.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<section>" in page
    assert f"wrote {out / 'cells.html'}" in proc.stdout


def test_user_errors_exit_2_with_one_line(ws, runs, monkeypatch, capsys):
    train = write_sentiment_tsv(ws.root / "sentiment.tsv", 60, seed=1)
    classifier = ws.root / "classifier.yaml"
    classifier.write_text(f"task: classification\ndata: {{format: tsv, train: {train}}}\n"
                          "model: {name: bow, preset: tiny}\n"
                          "train: {epochs: 1, log_every: 1, threads: 1, progress: false, bootstrap_samples: 0}\n", encoding="utf-8")
    assert ws.cli("train", classifier, "--run-dir", ws.root / "runs" / "bow").returncode == 0
    long_text = "the cat sat on the mat and then slept."  # 38 characters; the tiny GPT has 16 positions
    cases = [
        (("generate", ws.root / "runs" / "bow", "--prompt", "good"), "needs a language model run"),
        (("generate", runs["gpt"], "--prompt", "QXZ"), "none of the 3 token"),
        (("generate", runs["gpt"], "--top-p", 0), "top_p"),
        (("generate", ws.root / "runs" / "missing"), "not found"),
        (("generate", runs["gpt"], "--beam", 0), "argument --beam: got 0, expected an integer >= 1"),
        (("generate", runs["gpt"], "--beam", 2, "--n-best", 3), "n_best (--n-best) must be an integer in [1, beam_size"),
        (("generate", runs["gpt"], "--beam", 2, "--greedy"), "--beam and --greedy"),
        (("generate", runs["gpt"], "--beam", 2, "--temperature", 0.7), "does not draw"),
        (("generate", runs["gpt"], "--beam", 2, "--num-samples", 2), "--n-best"),
        (("generate", runs["gpt"], "--n-best", 2), "add --beam K"),
        (("generate", runs["gpt"], "--greedy", "--top-k", 5), "does not draw"),
        (("generate", runs["gpt"], "--temperature", 0), "temperature (--temperature) must be a number > 0"),
        (("visualize", runs["gpt"], "--text", long_text), "at most 16"),
        (("visualize", ws.root / "runs" / "bow", "--text", "good"), "needs a language model run"),
        (("train", ws.config("gpt"), "data.bptt=32", "--run-dir", ws.root / "runs" / "too-long"), "lower data.bptt"),
    ]
    # The first case as a user meets it (a process of its own), the rest in this process: starting Python
    # and torch for each quick refusal would cost more than all of them together.
    first = ws.cli(*cases[0][0])
    assert first.returncode == 2 and first.stderr.strip().splitlines()[-1].startswith("error: "), first.stderr
    assert cases[0][1] in first.stderr
    monkeypatch.setenv("TEXTNN_CACHE", str(ws.root / "cache"))
    for args, message in cases[1:]:
        code, stderr = in_process(capsys, *args)
        assert code == 2, (args, stderr[-2000:])
        lines = stderr.strip().splitlines()
        assert message in lines[-1] and lines[-1].startswith("error: "), (args, stderr[-2000:])
    code, stderr = in_process(capsys, "visualize", runs["gpt"])  # neither --text nor a file
    assert code == 2 and "--text" in stderr


def in_process(capsys, *args) -> tuple[int, str]:
    """`textnn ARGS` run by textnn.cli.main in this process: its exit code and what it printed on stderr."""
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stopped:  # argparse's own refusals
        code = stopped.code
    return code, capsys.readouterr().err
