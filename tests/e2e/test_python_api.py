"""textnn.load(run): the run's commands from Python, returning Python values equal to what the commands give
(predict and translate: the task's typed predictions, whose fields are what the commands print)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

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


def same_values(ours, printed) -> bool:
    """Whether a Python value equals what a command printed as JSON: floats to the printed digits (a
    separate process may differ in the last bits of float32 sums), the rest exactly."""
    if isinstance(ours, float) and isinstance(printed, (int, float)):
        return ours == pytest.approx(printed, rel=1e-5, abs=1e-6)
    if isinstance(ours, dict) and isinstance(printed, dict):
        return ours.keys() == printed.keys() and all(same_values(ours[key], printed[key]) for key in ours)
    if isinstance(ours, (list, tuple)) and isinstance(printed, list):
        return len(ours) == len(printed) and all(map(same_values, ours, printed))
    return ours == printed


def printed_fields(prediction) -> dict:
    """A prediction's fields as the command prints them: those that are None (a single text's text_pair) left out."""
    return {key: value for key, value in asdict(prediction).items() if value is not None}


def test_a_classifier_predicts_and_evaluates_as_its_commands_do(tmp_path):
    write_sentiment_tsv(tmp_path / "train.tsv", 120, seed=1)
    write_sentiment_tsv(tmp_path / "dev.tsv", 30, seed=2)
    run_dir = train(tmp_path, "task: classification\ndata: {train: train.tsv, dev: dev.tsv}\n"
                              "model: {name: cbow, preset: tiny}\n")
    run = textnn.load(run_dir)
    texts = ["good great film", "awful dull plot"]
    answers = run.predict(texts)
    printed = [json.loads(line) for line in cli(tmp_path, "predict", "run", stdin="\n".join(texts)).splitlines()]
    assert same_values([printed_fields(a) for a in answers], printed)
    assert all(isinstance(a, run.task.Prediction) and a.label in ("0", "1") for a in answers)
    probabilities = [p for answer in answers for p in answer.probabilities.values()]
    assert all(isinstance(p, float) for p in probabilities)
    assert any(p != round(p, 6) for p in probabilities)  # not rounded as the printed JSON is
    assert sum(answers[0].probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    # a blank text has no prediction; a typed example is read as its text is
    assert run.predict(["good great film", "  "]) == [answers[0], None]
    assert run.predict([run.Example(text="good great film")]) == answers[:1]
    # one string is one text, not its characters (compared with a list of that one text: the same batch shape,
    # so the same sums; a batch of two may differ in the last float32 digits)
    assert run.predict("good great film") == run.predict(["good great film"])
    assert same_values(run.predict("good great film"), answers[:1])
    metrics = run.evaluate(tmp_path / "dev.tsv")  # with the command's bootstrap interval, as it prints it
    printed = json.loads(cli(tmp_path, "evaluate", "run", "--data", "dev.tsv", "--json"))
    assert "accuracy_ci_low" in printed and same_values(metrics, printed)
    assert "accuracy_ci_low" not in run.evaluate(tmp_path / "dev.tsv", bootstrap_samples=0)
    with pytest.raises(TextnnError, match="translation run"):
        run.translate(["good"])
    one_at_a_time = textnn.load(run_dir, batch_size=1)  # the commands' --batch-size: same answers
    for alone, together in zip(one_at_a_time.predict(texts), answers):
        assert alone.label == together.label
        assert alone.probabilities == pytest.approx(together.probabilities, abs=1e-5)
    assert one_at_a_time.evaluate(tmp_path / "dev.tsv", bootstrap_samples=0)["accuracy"] == metrics["accuracy"]
    with pytest.raises(TextnnError, match="batch-size"):
        textnn.load(run_dir, batch_size=0)


def test_a_character_model_generates_what_textnn_generate_prints_by_default(tmp_path):
    """The README's call on a character model, whose end of sequence is a newline: sampled, 200 new tokens
    and on past line ends, as the command does, not the prompt alone; a list of prompts is one text each,
    as `generate RUN FILE` gives them."""
    (tmp_path / "text.txt").write_text("ROMEO:\nthe cat sat on the mat.\nJULIET:\nthe dog sat on the log.\n" * 30,
                                       encoding="utf-8")
    run_dir = train(tmp_path, "task: language_modeling\ndata: {format: text, train: text.txt, tokenizer: char, "
                              "bptt: 16}\nmodel: {name: rnn_lm, preset: tiny}\n")
    run = textnn.load(run_dir)
    text = run.generate("ROMEO:", seed=3)
    printed = cli(tmp_path, "generate", "run", "--prompt", "ROMEO:", "--seed", "3")
    assert isinstance(text, str) and text == printed.removesuffix("\n")
    assert text.startswith("ROMEO:") and len(text) > len("ROMEO:") and "\n" in text
    assert run.generate("ROMEO:", max_tokens=6, method="greedy") == cli(
        tmp_path, "generate", "run", "--prompt", "ROMEO:", "--max-tokens", "6", "--greedy").removesuffix("\n")
    (tmp_path / "prompts.txt").write_text("ROMEO:\nJULIET:\n", encoding="utf-8")
    texts = run.generate(["ROMEO:", "JULIET:"], max_tokens=30, seed=3)
    rows = [json.loads(line) for line in cli(tmp_path, "generate", "run", "prompts.txt", "--max-tokens", "30",
                                              "--seed", "3").splitlines()]
    assert texts == [row["text"] for row in rows] and texts[1].startswith("JULIET:")
    assert run.generate(["ROMEO:"], max_tokens=30, seed=3)[0] == run.generate("ROMEO:", max_tokens=30, seed=3)
    assert len(run.generate(["ROMEO:"], max_tokens=5, seed=3, num_samples=2)[0]) == 2  # a list of samples


def test_the_api_takes_the_commands_defaults():
    """textnn.load and its methods default to what the commands do when a flag is left out."""
    import inspect

    from textnn.api import Run
    from textnn.cli import parse

    predict, evaluate = parse(["predict", "RUN"]), parse(["evaluate", "RUN", "--data", "dev.tsv"])
    generate = parse(["generate", "RUN"])
    assert inspect.signature(textnn.load).parameters["device"].default == predict.device == "auto"
    assert inspect.signature(Run).parameters["device"].default == evaluate.device
    assert inspect.signature(Run.evaluate).parameters["bootstrap_samples"].default == evaluate.bootstrap
    assert textnn.defaults.GENERATE == {"method": "sample", "max_tokens": generate.max_tokens,
                                        "stop_at_eos": generate.stop_at_eos}


def test_a_translation_run_translates_as_textnn_translate_does(tmp_path):
    write_corpus(tmp_path, "train", 200, seed=1)
    run_dir = train(tmp_path, "task: translation\ndata: {format: parallel, train: train, source: de, target: en, "
                              "bpe_vocab_size: 300}\nmodel: {name: seq2seq, preset: tiny}\n")
    sentences = (tmp_path / "train.de").read_text(encoding="utf-8").splitlines()[:3]
    run = textnn.load(run_dir)
    for beam in (1, 3):
        translated = run.translate(sentences, beam_size=beam)
        args = ["--beam", str(beam)] if beam > 1 else []
        assert [t.translation for t in translated] == cli(tmp_path, "translate", "run", "-", *args,
                                                           stdin="\n".join(sentences)).splitlines()
        assert len(translated) == 3 and all(t.source == s and isinstance(t.translation, str)
                                            for t, s in zip(translated, sentences))
