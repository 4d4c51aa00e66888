"""BERT's tasks through the real CLI on tiny fixtures: pre-training then a classifier that starts from
it, span QA trained and asked questions, NER with a tiny BERT."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import SUBWORD_CONLL

REPO = Path(__file__).resolve().parents[2]
TRAIN = ("train: {max_steps: 3, batch_size: 8, lr: 1.0e-3, progress: false, bootstrap_samples: 0, threads: 1, "
         "log_every: 1}")
WORDS = "the a river city music team film war king song game north old new people year first".split()


def cli(root: Path, *args, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=root, env=env, input=input,
                          capture_output=True, text=True, timeout=300)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize() + " ."


def pretrain(root: Path, rng: random.Random, documents: int, data_option: str) -> None:
    """A tiny BERT pre-trained for 3 steps on `documents` random documents into root/pre."""
    docs = ["\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(4)) for _ in range(documents)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (root / "pre.yaml").write_text(
        "task: pretraining\ndata: {train: corpus.txt, dev: corpus.txt, wordpiece_vocab_size: 120, max_length: 32,"
        f" {data_option}}}\nmodel: {{name: bert, preset: tiny}}\n" + TRAIN + "\n", encoding="utf-8")
    proc = cli(root, "train", "pre.yaml", "--run-dir", "pre")
    assert proc.returncode == 0, proc.stderr


def test_pretrain_then_classify_from_the_pretrained_run(tmp_path):
    rng = random.Random(0)
    pretrain(tmp_path, rng, 12, "whole_word_masking: true")
    records = [json.loads(line) for line in (tmp_path / "pre" / "metrics.jsonl").read_text().splitlines()]
    dev = [r for r in records if "mlm_accuracy" in r]
    assert dev and all(0 <= r["mlm_accuracy"] <= 1 and 0 <= r["nsp_accuracy"] <= 1 for r in dev)
    assert all(r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"]) for r in dev)

    (tmp_path / "cls.tsv").write_text("sentence\tlabel\n" + "".join(f"{sentence(rng)}\t{i % 2}\n" for i in range(16)),
                                      encoding="utf-8")
    (tmp_path / "cls.yaml").write_text(
        "task: classification\ndata: {format: tsv, train: cls.tsv, dev: cls.tsv, max_length: 24}\n"
        "model: {init_from: pre}\n" + TRAIN.replace("lr: 1.0e-3", "lr: 1.0e-9") + "\n", encoding="utf-8")
    proc = cli(tmp_path, "train", "cls.yaml", "--run-dir", "cls")
    assert proc.returncode == 0, proc.stderr
    pre = load_file(str(tmp_path / "pre" / "model.safetensors"))
    encoder = {k for k in pre if k.startswith("encoder.")}
    loaded = re.search(r"loaded (\d+) encoder tensors; new here: ([^;]*);", proc.stderr)
    assert loaded and int(loaded.group(1)) == len(encoder)
    assert all(name.startswith("head.") for name in loaded.group(2).split(", "))
    assert (tmp_path / "cls" / "vocab.json").read_text() == (tmp_path / "pre" / "vocab.json").read_text()
    assert UNTRAINED_POOLER not in proc.stderr  # next-sentence prediction trained the pooler
    tuned = load_file(str(tmp_path / "cls" / "model.safetensors"))
    # at lr 1e-9 the encoder stays where pre-training left it
    assert all((tuned[k] - pre[k]).abs().max() < 1e-5 for k in encoder)


def test_pretraining_from_a_pretraining_run_goes_on_with_its_mlm_head(tmp_path):
    # More MLM on new text (task-adaptive pre-training) from a pre-training run: its MLM head scores the
    # inherited vocabulary, so it must carry over bit for bit, not start again from random weights
    rng = random.Random(2)
    pretrain(tmp_path, rng, 8, "nsp: false")
    (tmp_path / "task.txt").write_text("\n".join(sentence(rng) for _ in range(40)) + "\n", encoding="utf-8")
    (tmp_path / "more.yaml").write_text(
        "task: pretraining\ndata: {train: task.txt, dev: task.txt, max_length: 32, nsp: false}\n"
        "model: {init_from: pre}\n" + TRAIN.replace("max_steps: 3", "max_steps: 1").replace("lr: 1.0e-3", "lr: 1.0e-9")
        + "\n", encoding="utf-8")
    proc = cli(tmp_path, "train", "more.yaml", "--run-dir", "more")
    assert proc.returncode == 0, proc.stderr
    pre, more = (load_file(str(tmp_path / run / "model.safetensors")) for run in ("pre", "more"))
    head = sorted(name for name in pre if name.startswith("head.mlm."))
    assert head and sorted(name for name in more if name.startswith("head.mlm.")) == head
    loaded = re.search(r"loaded (\d+) encoder and head tensors; new here: ([^;]*); left out: (.*)", proc.stderr)
    assert loaded and int(loaded.group(1)) == len(pre) and loaded.group(2) == loaded.group(3) == "none"
    # one step at lr 1e-9: the head is where pre-training left it (a fresh head would be far from it)
    assert all((more[name] - pre[name]).abs().max() < 1e-5 for name in head)
    assert (tmp_path / "more" / "vocab.json").read_text() == (tmp_path / "pre" / "vocab.json").read_text()


UNTRAINED_POOLER = "was pre-trained without next-sentence prediction"


def test_a_classifier_on_the_pooler_of_a_pretraining_without_nsp_is_told_to_pool_the_tokens(tmp_path):
    rng = random.Random(1)
    pretrain(tmp_path, rng, 8, "nsp: false")
    (tmp_path / "cls.tsv").write_text("sentence\tlabel\n" + "".join(f"{sentence(rng)}\t{i % 2}\n" for i in range(8)),
                                      encoding="utf-8")
    (tmp_path / "cls.yaml").write_text(
        "task: classification\ndata: {format: tsv, train: cls.tsv, dev: cls.tsv, max_length: 24}\n"
        "model: {init_from: pre}\n" + TRAIN + "\n", encoding="utf-8")
    told = cli(tmp_path, "train", "cls.yaml", "--run-dir", "cls")
    assert told.returncode == 0, told.stderr
    note = [line for line in told.stderr.splitlines() if UNTRAINED_POOLER in line]
    assert len(note) == 1 and "head.sentence=pooled head.pooling=mean" in note[0]
    pooled = cli(tmp_path, "train", "cls.yaml", "--run-dir", "pooled", "head.sentence=pooled", "head.pooling=mean")
    assert pooled.returncode == 0, pooled.stderr
    assert UNTRAINED_POOLER not in pooled.stderr


def squad_fixture(path: Path, articles: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    cities = ["Paris", "Oslo", "Lima", "Quito", "Seoul", "Cairo", "Dakar", "Hanoi"]
    data = []
    for a in range(articles):
        paragraphs = []
        for _ in range(2):
            city, year = rng.choice(cities), str(rng.randint(1800, 2000))
            filler = " ".join(sentence(rng) for _ in range(4))
            context = f"{filler} The treaty was signed in {city} in {year}. {filler}"
            paragraphs.append({"context": context, "qas": [
                {"id": f"{a}-{len(paragraphs)}-w", "question": "Where was the treaty signed?",
                 "answers": [{"text": city, "answer_start": context.index(city)}]},
                {"id": f"{a}-{len(paragraphs)}-y", "question": "When was the treaty signed?",
                 "answers": [{"text": year, "answer_start": context.index(year)}]}]})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return data


def test_qa_trains_evaluates_and_answers_from_the_context(tmp_path):
    data = squad_fixture(tmp_path / "squad.json", articles=5, seed=1)
    (tmp_path / "qa.yaml").write_text(
        "task: qa\ndata: {train: squad.json, holdout_articles: 1, max_length: 48, doc_stride: 16, max_query_length: 12,"
        " wordpiece_vocab_size: 150}\nmodel: {name: bert, preset: tiny}\n" + TRAIN + "\n", encoding="utf-8")
    proc = cli(tmp_path, "train", "qa.yaml", "--run-dir", "qa")
    assert proc.returncode == 0, proc.stderr
    proc = cli(tmp_path, "evaluate", "qa", "--data", "squad.json")
    assert proc.returncode == 0, proc.stderr
    questions = sum(len(p["qas"]) for a in data for p in a["paragraphs"])
    assert re.search(rf"questions: {questions}\b", proc.stdout)
    assert re.search(r"answers_outside_context: 0\b", proc.stdout)
    contexts = [p["context"] for a in data for p in a["paragraphs"]]
    lines = [json.dumps({"question": "Where was the treaty signed?", "context": contexts[0]}),
             f"When was the treaty signed?\t{contexts[1]}"]
    proc = cli(tmp_path, "predict", "qa", input="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(answers) == 2
    for answer, context in zip(answers, contexts[:2]):
        assert answer["answer"] and context[answer["start"]:answer["start"] + len(answer["answer"])] == answer["answer"]


CONLL = SUBWORD_CONLL


def test_ner_with_a_tiny_bert_tags_every_conll_word(tmp_path):
    (tmp_path / "ner.txt").write_text(CONLL * 4, encoding="utf-8")
    (tmp_path / "ner.yaml").write_text(
        "task: tagging\ndata: {format: conll, train: ner.txt, dev: ner.txt, tag_scheme: iob1, tokenizer: wordpiece,"
        " wordpiece_vocab_size: 60}\nmodel: {name: bert, preset: tiny}\nhead: {output: crf}\n" + TRAIN + "\n",
        encoding="utf-8")
    proc = cli(tmp_path, "train", "ner.yaml", "--run-dir", "ner")
    assert proc.returncode == 0, proc.stderr
    proc = cli(tmp_path, "predict", "ner", "--output-format", "jsonl", input="John Smithson visited unbelievably Paris\n")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert row["tokens"] == ["John", "Smithson", "visited", "unbelievably", "Paris"]
    assert len(row["tags"]) == 5
