"""Perplexity over a whole stream equals a hand computation: explicit log-softmax over every position."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import LanguageModelingTask

TEXT = "".join(f"the {w} sat on the {v} .\n" for w, v in zip("cat dog bird cow fox".split() * 8,
                                                           "mat rug log bed box".split() * 8))
DEV = "the dog sat on the box .\nthe cow sat on a mat .\n\nthe fox ran .\n" * 3


def word_task(tmp_path: Path, model: str, bptt: int, head: dict | None = None, **data) -> LanguageModelingTask:
    (tmp_path / "train.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "dev.txt").write_text(DEV, encoding="utf-8")
    config = config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": "whitespace", "bptt": bptt, **data},
        "model": {"name": model, "preset": "tiny"}, "head": head or {}, "train": {"progress": False}}, "test")
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
    from textnn.experiment import train
    from textnn.front import evaluate_run

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


@pytest.mark.parametrize("model_name", ["nplm", "rnn_lm", "awd_lstm", "transformer_xl"])
def test_an_encoder_that_carries_state_is_evaluated_as_one_sequential_stream_by_default(tmp_path, model_name):
    """The reported number must not depend on how many rows evaluation reads: by default it is the
    sequential one, every token read after everything before it in the file."""
    task = word_task(tmp_path, model_name, bptt=4)
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = task.splits["dev"].ids.tolist()
    with torch.no_grad():
        default = task.evaluate(model, "dev")
        sequential = task.evaluate(model, "dev", streams=1)
        batched = task.evaluate(model, "dev", streams=5)
        by_hand = hand_nll(model, ids)
    assert default == sequential
    assert batched["tokens"] == default["tokens"] and batched["loss"] != pytest.approx(default["loss"], rel=1e-6)
    if model_name != "transformer_xl":  # XL's memory is bounded: its sequential context is not the whole file
        assert default["loss"] == pytest.approx(by_hand / (len(ids) - 1), rel=1e-5)


@pytest.mark.parametrize("bptt,stride", [(8, 4), (8, 3), (8, 8), (6, 1), (16, 5)])
def test_gpt_is_evaluated_in_overlapping_windows_as_a_hand_loop_computes(tmp_path, bptt, stride):
    """Each target scored once, by the window that first reaches it: the first window scores its own
    targets, window k (start k * stride) only its last `stride`, with bptt - stride tokens before them."""
    task = word_task(tmp_path, "gpt", bptt, eval_stride=stride)
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = task.splits["dev"].ids.tolist()
    total, shortest_context = 0.0, len(ids)
    with torch.no_grad():
        for j in range(1, len(ids)):  # target ids[j]
            start = 0 if j <= bptt else math.ceil((j - bptt) / stride) * stride
            window = ids[start:min(start + bptt, len(ids) - 1)]
            logits = model(torch.tensor([window])).logits[0, j - 1 - start]  # [V]
            total -= float(torch.log_softmax(logits.double(), dim=-1)[ids[j]])
            if j > bptt:
                shortest_context = min(shortest_context, j - start)
        metrics = task.evaluate(model, "dev")
    assert metrics["tokens"] == len(ids) - 1
    assert metrics["loss"] == pytest.approx(total / (len(ids) - 1), rel=1e-5)
    if len(ids) - 1 > bptt:
        assert shortest_context >= bptt - stride + 1  # the context a target gets, itself's input included


@pytest.mark.parametrize("model_name", ["nplm", "rnn_lm", "awd_lstm", "gpt", "transformer_xl"])
def test_the_adaptive_softmax_gives_exact_perplexities_for_every_word_level_family(tmp_path, model_name):
    """Evaluation through the loss-only path (no [B, T, V] scores) equals the full log-probabilities."""
    bptt = 16 if model_name == "gpt" else 100  # GPT's tiny context is 16: back-to-back windows of it
    task = word_task(tmp_path, model_name, bptt, head={"softmax": "adaptive", "cutoffs": [5, 12]})
    torch.manual_seed(0)
    model = task.build_model().eval()
    assert type(model.head).__name__ == "AdaptiveLMHead"
    ids = task.splits["dev"].ids.tolist()
    with torch.no_grad():
        metrics = task.evaluate(model, "dev", streams=1)
        log_probs = model(torch.tensor([ids[:bptt]])).logits[0]  # [T, V]
        by_hand = sum(hand_nll(model, ids[s:s + bptt + 1]) for s in range(0, len(ids) - 1, bptt))
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(len(log_probs)), atol=1e-5)
    assert metrics["loss"] == pytest.approx(by_hand / (len(ids) - 1), rel=1e-5)
