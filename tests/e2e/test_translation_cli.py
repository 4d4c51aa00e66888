"""Translation through the real CLI: train tiny seq2seq and transformer_mt runs on a generated parallel
corpus, then `translate` (file and stdin, greedy and beam n-best), `evaluate`, `visualize`, bad input."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import shared_data
from textnn import registry

SOURCE_WORDS = "ein hund eine katze sitzt läuft auf dem der tisch rot blau".split()
TARGET_WORDS = "a dog a cat sits runs on the the table red blue".split()


def write_corpus(folder: Path, name: str, pairs: int, seed: int) -> Path:
    rng = random.Random(seed)
    source, target = [], []
    for _ in range(pairs):
        words = [rng.randrange(len(SOURCE_WORDS)) for _ in range(rng.randint(2, 6))]
        source.append(" ".join(SOURCE_WORDS[i] for i in words))
        target.append(" ".join(TARGET_WORDS[i] for i in words) + ".")
    (folder / f"{name}.de").write_text("\n".join(source) + "\n", encoding="utf-8")
    (folder / f"{name}.en").write_text("\n".join(target) + "\n", encoding="utf-8")
    return folder / name


def textnn(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textnn", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def family(name: str) -> str:
    if name not in registry.ENCODERS:
        pytest.skip(f"model family {name} is not registered in this tree")
    return name


@pytest.fixture(scope="module", params=["seq2seq", "transformer_mt"])
def trained(request, tmp_path_factory) -> tuple[Path, str]:
    """A run of a tiny model of each family, trained a few dozen steps (selected on greedy dev BLEU)."""
    name = family(request.param)
    folder = tmp_path_factory.mktemp(name)
    write_corpus(folder, "train", 300, seed=1)
    write_corpus(folder, "dev", 30, seed=2)
    (folder / "mt.yaml").write_text(
        "task: translation\n"
        "data: {format: parallel, train: train, dev: dev, source: de, target: en, bpe_vocab_size: 300}\n"
        f"model: {{name: {name}, preset: tiny}}\n"
        "head: {label_smoothing: 0.1}\n"
        "train: {batch_size: 16, epochs: 2, lr: 0.005, metric: bleu, progress: false, device: cpu, log_every: 5}\n",
        encoding="utf-8")
    proc = textnn("train", "mt.yaml", "--run-dir", "run", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, proc.stdout


def test_training_reports_bleu_chrf_and_perplexity_and_selects_on_bleu(trained):
    folder, stdout = trained
    status = json.loads((folder / "run" / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished" and status["metric"] == "bleu"
    assert {"bleu", "chrf", "perplexity", "loss"} <= set(status["dev"])
    assert 0.0 <= status["dev"]["bleu"] <= 100.0 and status["dev"]["perplexity"] >= 1.0
    report = (folder / "run" / "report.md").read_text(encoding="utf-8")
    assert "BLEU signature (greedy): `nrefs:1|case:mixed" in report
    assert (folder / "run" / "tokenizer.json").is_file() and (folder / "run" / "vocab.json").is_file()


def test_translate_a_file_greedily_and_stdin_with_beam_nbest(trained):
    folder, _ = trained
    sources = (folder / "dev.de").read_text(encoding="utf-8").splitlines()[:5]
    (folder / "input.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
    proc = textnn("translate", "run", "input.de", "-o", "out.en", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    greedy = (folder / "out.en").read_text(encoding="utf-8").splitlines()
    assert len(greedy) == len(sources)
    assert not any("Ġ" in line or "<s>" in line or "</s>" in line for line in greedy)  # plain text out

    proc = textnn("translate", "run", "--beam", "3", "--n-best", "2", cwd=folder, stdin="\n".join(sources) + "\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]  # the n-best format `generate` writes too
    assert [row["source"] for row in rows] == sources
    for row in rows:
        assert len(row["hypotheses"]) == 2 and row["scores"][0] >= row["scores"][1]  # best first

    old = textnn("translate", "run", "--beam", "3", "--nbest", "2", cwd=folder, stdin="\n".join(sources) + "\n")
    assert old.returncode == 0 and old.stdout == proc.stdout  # the old spelling, for one release
    assert old.stderr.startswith("note: --nbest is deprecated") and "use --n-best" in old.stderr


def test_evaluate_a_pair_of_files_prints_bleu_chrf_perplexity_and_signature(trained):
    folder, _ = trained
    proc = textnn("evaluate", "run", "--data", "dev", "--json", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads(proc.stdout)
    assert metrics["sentences"] == 30 and metrics["decoding"] == "greedy"
    assert metrics["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    proc = textnn("evaluate", "run", "--data", "dev", "--beam", "3", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for key in ("bleu", "chrf", "perplexity", "bleu_signature", "decoding"):
        assert re.search(rf"^\s*{key}: \S", proc.stdout, re.MULTILINE), proc.stdout
    assert "beam 3" in proc.stdout


def test_visualize_draws_the_source_attention(trained):
    folder, _ = trained
    proc = textnn("visualize", "run", "--text", "ein hund sitzt auf dem tisch", "--output-dir", "views", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = [Path(folder, line.removeprefix("wrote ")) for line in proc.stdout.splitlines()]
    assert written and all(path.suffix == ".png" and path.read_bytes()[:4] == b"\x89PNG" for path in written)


@pytest.mark.parametrize("broken,expected", [
    ("short", r"train\.de has 30 lines but train\.en has 29 .*train\.en:30"),
    ("empty", r"train\.en:7: empty target side"),
])
def test_bad_parallel_input_exits_2_with_one_line(tmp_path, broken, expected):
    family("seq2seq")
    write_corpus(tmp_path, "train", 30, seed=3)
    lines = (tmp_path / "train.en").read_text(encoding="utf-8").splitlines()
    if broken == "short":
        lines = lines[:-1]
    else:
        lines[6] = ""
    (tmp_path / "train.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "mt.yaml").write_text("task: translation\ndata: {train: train, tokenizer: whitespace}\n"
                                      "model: {name: seq2seq, preset: tiny}\n", encoding="utf-8")
    proc = textnn("train", "mt.yaml", "--run-dir", "run", cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and re.search(expected, proc.stderr), proc.stderr
    assert not (tmp_path / "run").exists()


def test_multi30k_trains_a_few_steps_and_scores_bleu(tmp_path):
    """The real data end to end: joint BPE on 29,000 pairs, a few steps, greedy BLEU on val."""
    family("seq2seq")
    prefix = shared_data("multi30k", "train.de.gz").parent
    (tmp_path / "mt.yaml").write_text(
        "task: translation\n"
        f"data: {{train: {prefix}/train, dev: {prefix}/val, source: de, target: en, bpe_vocab_size: 1000,"
        " batch_tokens: 800}\n"
        "model: {name: seq2seq, preset: tiny}\n"
        "train: {max_steps: 4, metric: bleu, progress: false, device: cpu, bootstrap_samples: 0}\n",
        encoding="utf-8")
    proc = textnn("train", "mt.yaml", "--run-dir", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert status["steps"] == 4 and 0.0 <= status["dev"]["bleu"] <= 100.0 and status["dev"]["chrf"] > 0.0
