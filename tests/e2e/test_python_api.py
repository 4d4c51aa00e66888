"""textnn.load(run): the run's commands from Python, returning Python values equal to what the commands give."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import textnn
from tests.conftest import write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus
from textnn.errors import TextnnError

TRAIN = "train: {epochs: 2, batch_size: 16, threads: 1, progress: false, bootstrap_samples: 0, device: cpu}\n"


def train(folder, config: str) -> str:
    (folder / "config.yaml").write_text(config + TRAIN, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "textnn", "train", "config.yaml", "--run-dir", "run"], cwd=folder,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return str(folder / "run")


def cli(folder, *args, stdin=None) -> str:
    proc = subprocess.run([sys.executable, "-m", "textnn", *args], cwd=folder, input=stdin, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_classifier_predicts_and_evaluates_as_its_commands_do(tmp_path):
    write_sentiment_tsv(tmp_path / "train.tsv", 120, seed=1)
    write_sentiment_tsv(tmp_path / "dev.tsv", 30, seed=2)
    run_dir = train(tmp_path, "task: classification\ndata: {train: train.tsv, dev: dev.tsv}\n"
                              "model: {name: cbow, preset: tiny}\n")
    run = textnn.load(run_dir)
    texts = ["good great film", "awful dull plot"]
    answers = run.predict(texts)
    assert answers == [json.loads(line) for line in cli(tmp_path, "predict", "run", stdin="\n".join(texts)).splitlines()]
    assert all(isinstance(a, dict) and a["label"] in ("0", "1") for a in answers)
    assert run.predict("good great film") == answers[:1]  # one string is one text, not its characters
    metrics = run.evaluate(tmp_path / "dev.tsv")
    printed = json.loads(cli(tmp_path, "evaluate", "run", "--data", "dev.tsv", "--json", "--bootstrap", "0"))
    assert metrics["accuracy"] == pytest.approx(printed["accuracy"])
    with pytest.raises(TextnnError, match="translation run"):
        run.translate(["good"])
    one_at_a_time = textnn.load(run_dir, batch_size=1)  # the commands' --batch-size: same answers
    for alone, together in zip(one_at_a_time.predict(texts), answers):
        assert alone["label"] == together["label"]
        assert alone["probabilities"] == pytest.approx(together["probabilities"], abs=1e-5)
    assert one_at_a_time.evaluate(tmp_path / "dev.tsv")["accuracy"] == metrics["accuracy"]
    with pytest.raises(TextnnError, match="batch-size"):
        textnn.load(run_dir, batch_size=0)


def test_a_language_model_generates_what_textnn_generate_prints(tmp_path):
    (tmp_path / "text.txt").write_text("the cat sat on the mat .\nthe dog sat on the log .\n" * 40, encoding="utf-8")
    run_dir = train(tmp_path, "task: language_modeling\ndata: {format: text, train: text.txt, tokenizer: whitespace, "
                              "bptt: 8}\nmodel: {name: rnn_lm, preset: tiny}\n")
    text = textnn.load(run_dir).generate("the cat", method="sample", max_tokens=6, seed=3)
    printed = cli(tmp_path, "generate", "run", "--prompt", "the cat", "--max-tokens", "6", "--seed", "3")
    assert isinstance(text, str) and text.startswith("the cat") and text == printed.strip()


def test_a_translation_run_translates_as_textnn_translate_does(tmp_path):
    write_corpus(tmp_path, "train", 200, seed=1)
    run_dir = train(tmp_path, "task: translation\ndata: {format: parallel, train: train, source: de, target: en, "
                              "bpe_vocab_size: 300}\nmodel: {name: seq2seq, preset: tiny}\n")
    sentences = (tmp_path / "train.de").read_text(encoding="utf-8").splitlines()[:3]
    run = textnn.load(run_dir)
    for beam in (1, 3):
        translated = run.translate(sentences, beam_size=beam)
        args = ["--beam", str(beam)] if beam > 1 else []
        assert translated == cli(tmp_path, "translate", "run", "-", *args, stdin="\n".join(sentences)).splitlines()
        assert len(translated) == 3 and all(isinstance(t, str) for t in translated)
