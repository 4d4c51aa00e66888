"""Perplexity over a whole stream equals a hand computation: explicit log-softmax over every position."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from textnn.config import config_from_dict
from textnn.tasks.language_modeling import LanguageModelingTask

TEXT = "".join(f"the {w} sat on the {v} .\n" for w, v in zip("cat dog bird cow fox".split() * 8,
                                                           "mat rug log bed box".split() * 8))
DEV = "the dog sat on the box .\nthe cow sat on a mat .\n\nthe fox ran .\n" * 3


def word_task(tmp_path: Path, model: str, bptt: int) -> LanguageModelingTask:
    (tmp_path / "train.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "dev.txt").write_text(DEV, encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": "whitespace", "bptt": bptt},
        "model": {"name": model, "preset": "tiny"}, "train": {"progress": False}}, "test")
    return LanguageModelingTask.from_data(config)


def hand_nll(model, ids: list[int]) -> float:
    """-sum log p(ids[t] | ids[:t]) for t >= 1, from one forward pass over the whole stream."""
    logits = model(torch.tensor([ids[:-1]])).logits[0]  # [1, N-1, V] -> [N-1, V]
    log_probs = torch.log_softmax(logits.double(), dim=-1)  # [N-1, V]
    return -sum(float(log_probs[t, ids[t + 1]]) for t in range(len(ids) - 1))


@pytest.mark.parametrize("model_name", ["nplm", "rnn_lm", "awd_lstm"])
@pytest.mark.parametrize("bptt", [4, 7, 100])  # 100: one window holds the whole dev stream
def test_perplexity_equals_the_hand_computed_nll_over_the_whole_stream(tmp_path, model_name, bptt):
    task = word_task(tmp_path, model_name, bptt)
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = task.splits["dev"].ids.tolist()
    words = sum(len(line.split()) + 1 for line in DEV.splitlines())  # <eos> counts as a token
    assert len(ids) == words
    with torch.no_grad():
        total = hand_nll(model, ids)
        metrics = task.evaluate(model, "dev", streams=1)
    assert metrics["tokens"] == words - 1  # every token but the first is predicted once
    assert metrics["loss"] == pytest.approx(total / (words - 1), rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(total / (words - 1)), rel=1e-5)
    assert "bpc" not in metrics and "word_perplexity" not in metrics
    # Rows side by side: each row is its own stream, its first target predicted from its first input.
    with torch.no_grad():
        three = task.evaluate(model, "dev", streams=3)
        length = math.ceil((len(ids) - 1) / 3)
        by_hand = sum(hand_nll(model, ids[s:s + length + 1]) for s in range(0, len(ids) - 1, length))
    assert three["tokens"] == words - 1
    assert three["loss"] == pytest.approx(by_hand / (words - 1), rel=1e-5)


def test_evaluate_run_reads_a_new_file_with_the_runs_vocabulary(tmp_path):
    from textnn.experiment import evaluate_run, train

    task = word_task(tmp_path, "rnn_lm", 5)
    config = task.config
    config.train.max_steps = 3
    run, result = train(config, tmp_path / "run")
    other = tmp_path / "other.txt"
    other.write_text("the zebra sat .\n", encoding="utf-8")  # zebra was never seen: <unk>
    metrics = evaluate_run(run.path, str(other))
    assert metrics["tokens"] == 4  # the <unk> sat . <eos>: five tokens, four predicted
    again = evaluate_run(run.path, config.data.dev)
    assert again["perplexity"] == pytest.approx(result.dev["perplexity"], rel=1e-6)
