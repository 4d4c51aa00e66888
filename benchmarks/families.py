"""The model families the speed benchmarks time, each on its task with synthetic data of realistic shape.

A Kim CNN classifier (SST-2-sized batches), BERT-Mini (4 x 256) classifying sentences of 5-40 words,
a GPT language model (preset small, 128-token windows), the Multi30k Transformer (preset small) and
the AWD-LSTM language model of ULMFiT's stage (a) (preset cpu): the five families of the CPU-speed
work. Words are drawn Zipf-like from 33,000 types, so vocabularies and the LM output layers have
WikiText-2's size and nothing needs downloading.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from textnn import registry
from textnn.resolve import config_from_dict
from textnn.training.optim import build_optimizer

WORDS = [f"w{i}" for i in range(33_000)]


def add_step_options(parser: argparse.ArgumentParser, compared: str) -> None:
    """The options of a benchmark that times training steps of each family, two ways (`compared`: what
    the repeats alternate between): --steps, --repeats, --threads, --families."""
    parser.add_argument("--steps", type=int, default=6, help="training steps per measurement")
    parser.add_argument("--repeats", type=int, default=3, help=f"measurements per {compared} (median kept)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--families", nargs="*", default=None, help="subset of: cnn bert_mini gpt transformer_mt awd_lstm")


def _sentences(path: Path, n: int, low: int, high: int, seed: int, label: bool) -> Path:
    rng = random.Random(seed)
    lines = ["sentence\tlabel"] if label else []
    for _ in range(n):
        # Zipf-like word choice, so vocabularies and sentence lengths look like text
        words = " ".join(WORDS[min(int(rng.paretovariate(0.9)) - 1, len(WORDS) - 1)] for _ in range(rng.randint(low, high)))
        lines.append(f"{words}\t{rng.randint(0, 1)}" if label else words)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def family_configs(root: Path) -> dict[str, dict]:
    """Raw configs of the families timed; data written into `root`."""
    sst = str(_sentences(root / "cls.tsv", 2000, 5, 40, 1, label=True))
    text = str(_sentences(root / "lm.txt", 3000, 20, 80, 2, label=False))
    _sentences(root / "mt.de", 2000, 8, 20, 3, False), _sentences(root / "mt.en", 2000, 8, 20, 4, False)
    train = {"device": "cpu", "progress": False, "bootstrap_samples": 0, "threads": 0}
    return {
        "cnn": {"task": "classification", "data": {"train": sst, "tokenizer": "whitespace"},
                "model": {"name": "cnn", "preset": "paper", "embedding_dim": 300}, "train": {**train, "batch_size": 50}},
        "bert_mini": {"task": "classification", "data": {"train": sst, "tokenizer": "wordpiece",
                                                          "wordpiece_vocab_size": 8000},
                      "model": {"name": "bert", "preset": "mini"}, "train": {**train, "batch_size": 32}},
        "gpt": {"task": "language_modeling", "data": {"format": "text", "train": text, "tokenizer": "whitespace",
                                                      "bptt": 128},
                "model": {"name": "gpt", "preset": "small"}, "train": {**train, "batch_size": 16}},
        "transformer_mt": {"task": "translation", "data": {"format": "parallel", "train": str(root / "mt"),
                                                             "tokenizer": "whitespace"},
                           "model": {"name": "transformer_mt", "preset": "small"}, "train": {**train, "batch_size": 64}},
        "awd_lstm": {"task": "language_modeling", "data": {"format": "text", "train": text, "tokenizer": "whitespace",
                                                           "bptt": 35},
                     "model": {"name": "awd_lstm", "preset": "cpu"}, "train": {**train, "batch_size": 20}},
    }


def build(raw: dict, name: str, seed: int = 0):
    """(task, model, optimizer) of one family's raw config, the model initialised from `seed`."""
    config = config_from_dict(raw, name)
    task = registry.task_class(config.task).from_data(config)
    torch.manual_seed(seed)
    model = task.build_model()
    return task, model, build_optimizer(model, config.train, torch.device("cpu"))
