"""The language-modelling task: streams, vocabulary, training windows, stateful evaluation, trainer wiring."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from textnn.data.vocab import UNK
from textnn.errors import TextnnError
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import EOS, LanguageModelingTask

CODE = '''def add(a, b):
    """Return a + b."""
    return a + b  # simple


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y
'''


def make_config(tmp_path: Path, tokenizer: str = "char", bptt: int = 8, batch_size: int = 4, seed: int = 0,
                train_text: str = CODE * 6, dev_text: str = CODE.replace("a", "q") * 2, stateful: bool = True,
                head: dict | None = None, **train):
    (tmp_path / "train.txt").write_text(train_text, encoding="utf-8")
    (tmp_path / "dev.txt").write_text(dev_text, encoding="utf-8")
    return config_from_dict({
        "task": "language_modeling",
        "data": {"format": "text", "train": str(tmp_path / "train.txt"), "dev": str(tmp_path / "dev.txt"),
                 "tokenizer": tokenizer, "bptt": bptt, "stateful": stateful},
        "model": {"name": "char_lstm_lm", "preset": "tiny"}, "head": head or {},
        "train": {"batch_size": batch_size, "seed": seed, "progress": False, "bootstrap_samples": 0, **train},
    }, "test")


def test_char_stream_keeps_newlines_and_rare_characters_become_unk(tmp_path):
    config = make_config(tmp_path, bptt=3, train_text="aab\nab\naa\n", dev_text="abz\n")
    task = LanguageModelingTask.from_data(config)
    assert task.decode(task.splits["train"].ids.tolist()) == "aab\nab\naa\n"
    assert task.decode(task.splits["dev"].ids.tolist()) == "ab<unk>\n"  # z never seen in training
    config.data.min_freq = 3  # a: 5, newline: 3, b: 2
    task = LanguageModelingTask.from_data(config)
    assert task.decode(task.splits["train"].ids.tolist()) == "aa<unk>\na<unk>\naa\n"
    assert task.default_metric == "bpc"


def test_word_stream_ends_every_line_with_eos(tmp_path):
    config = make_config(tmp_path, tokenizer="word", bptt=2, train_text="the cat sat\n\nthe dog\n", dev_text="a cat\n")
    task = LanguageModelingTask.from_data(config)
    tokens = task.vocab.decode(task.splits["train"].ids.tolist())
    assert tokens == ["the", "cat", "sat", EOS, EOS, "the", "dog", EOS]
    assert task.vocab.decode(task.splits["dev"].ids.tolist()) == ["<unk>", "cat", EOS]
    assert task.decode(task.splits["train"].ids.tolist()) == "the cat sat\n\nthe dog\n"
    assert task.default_metric == "perplexity"


def test_windows_cover_the_stream_and_targets_are_inputs_shifted_by_one(tmp_path):
    """data.stateful=false: independent windows, shuffled, from a moving offset."""
    task = LanguageModelingTask.from_data(make_config(tmp_path, bptt=8, batch_size=4, stateful=False))
    stream = task.splits["train"].ids
    n = len(stream)
    offsets = set()
    for epoch in range(4):
        batches = task.train_batches(epoch)
        starts = batches.starts.tolist()  # window start positions, in batch order
        for k, batch in enumerate(batches):
            assert batch.ids.shape == batch.targets.shape and batch.ids.size(1) == 8
            assert batch.ids.size(0) <= 4 and batch.count == batch.num_tokens == batch.ids.numel()
            assert torch.equal(batch.ids[:, 1:], batch.targets[:, :-1])
            for row, s in enumerate(starts[4 * k:4 * k + 4]):
                assert torch.equal(batch.ids[row], stream[s:s + 8])
                assert torch.equal(batch.targets[row], stream[s + 1:s + 9])
        assert sum(len(b.ids) for b in batches) == len(starts)
        covered = sorted(starts)
        offset = covered[0]
        offsets.add(offset)
        assert 0 <= offset < 8
        assert covered == list(range(offset, offset + 8 * len(covered), 8))  # contiguous, no overlap
        assert n - 1 - (covered[-1] + 8) < 8  # fewer than bptt targets left over at the end
        assert starts != covered  # shuffled
    assert len(offsets) > 1  # the window grid moves between epochs


def test_same_epoch_gives_the_same_batches_and_epochs_differ(tmp_path):
    config = make_config(tmp_path, bptt=8, batch_size=4, seed=3, stateful=False)
    task, again = LanguageModelingTask.from_data(config), LanguageModelingTask.from_data(config)

    def windows(t, epoch):
        return [b.ids for b in t.train_batches(epoch)]

    for epoch in (0, 1, 5):
        assert all(torch.equal(a, b) for a, b in zip(windows(task, epoch), windows(again, epoch), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(windows(task, 0), windows(task, 1)))
    sliced = task.train_batches(0)[1:3]
    assert isinstance(sliced, list) and torch.equal(sliced[0].ids, windows(task, 0)[1])


def _hand_nll(model, ids: torch.Tensor) -> tuple[float, int]:
    """Sum of -log p(token | everything before it in `ids`) by one full forward pass; and the count."""
    logits = model(ids[None, :-1]).logits[0]  # [1, N-1, V] -> [N-1, V]
    return float(F.cross_entropy(logits, ids[1:], reduction="sum")), len(ids) - 1


@pytest.mark.parametrize("bptt", [5, 8, 50])
def test_evaluation_equals_hand_computed_mean_nll(tmp_path, bptt):
    config = make_config(tmp_path, bptt=bptt)
    task = LanguageModelingTask.from_data(config)
    torch.manual_seed(0)
    model = task.build_model().eval()
    ids = task.splits["dev"].ids
    with torch.no_grad():
        total, count = _hand_nll(model, ids)
        sequential = task.evaluate(model, "dev", streams=1)
        assert sequential["tokens"] == count == len(ids) - 1
        assert sequential["loss"] == pytest.approx(total / count, rel=1e-5)
        assert sequential["perplexity"] == pytest.approx(math.exp(total / count), rel=1e-5)
        assert sequential["bpc"] == pytest.approx(total / count / math.log(2), rel=1e-5)
        # Three contiguous segments side by side: each token is predicted from its segment's prefix.
        length = math.ceil((len(ids) - 1) / 3)
        parts = [_hand_nll(model, ids[s:s + length + 1]) for s in range(0, len(ids) - 1, length)]
        three = task.evaluate(model, "dev", streams=3)
        assert three["tokens"] == sum(c for _, c in parts) == len(ids) - 1
        assert three["loss"] == pytest.approx(sum(t for t, _ in parts) / (len(ids) - 1), rel=1e-5)
    # Padding never counts, whatever the split: the default (several streams) is close to exact.
    assert task.evaluate(model, "dev")["tokens"] == len(ids) - 1


def test_loss_is_a_sum_over_count_targets(tmp_path):
    task = LanguageModelingTask.from_data(make_config(tmp_path))
    torch.manual_seed(0)
    model = task.build_model().eval()
    batch = task.train_batches(0)[0]
    logits = model(batch.ids).logits
    expected = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1), reduction="sum")
    torch.testing.assert_close(task.loss(model, batch), expected)


def test_an_adaptive_softmax_run_trains_saves_and_evaluates_as_it_trained(tmp_path):
    from textnn.experiment import load_run, train
    from textnn.front import evaluate_run

    adaptive = {"softmax": "adaptive", "cutoffs": [8, 20], "div_value": 2.0}
    config = make_config(tmp_path, head=adaptive, max_steps=4, eval_every=2)
    run, result = train(config, tmp_path / "run")
    assert math.isfinite(result.dev["bpc"])
    _, _, model = load_run(run.path)
    assert type(model.head).__name__ == "AdaptiveLMHead"
    assert evaluate_run(run.path, config.data.dev)["bpc"] == pytest.approx(result.dev["bpc"], rel=1e-6)
    task = LanguageModelingTask.from_data(config)
    model = task.build_model()
    task.loss(model, task.train_batches(0)[0]).backward()
    assert all(p.grad is not None for p in model.parameters())  # every cluster got a target
    with pytest.raises(TextnnError, match="head.cutoffs.*vocabulary has"):
        LanguageModelingTask.from_data(make_config(tmp_path, head={"softmax": "adaptive", "cutoffs": [8, 500]})).build_model()
    with pytest.raises(TextnnError, match="head.cutoffs"):
        make_config(tmp_path, head={"softmax": "adaptive", "cutoffs": [20, 8]})


def test_extend_vocab_is_refused_beside_an_adaptive_softmax(tmp_path):
    """The adaptive softmax's clusters follow the vocabulary's frequency order, which words appended
    at its end would break: a run started from one may not grow its vocabulary."""
    from textnn.experiment import train

    adaptive = {"softmax": "adaptive", "cutoffs": [8, 20], "div_value": 2.0}
    run, _ = train(make_config(tmp_path, tokenizer="word", head=adaptive, max_steps=2), tmp_path / "run")
    raw = {"task": "language_modeling", "model": {"init_from": str(run.path)}, "train": {"progress": False},
           "data": {"format": "text", "train": str(tmp_path / "train.txt"), "bptt": 8, "extend_vocab": 1}}
    with pytest.raises(TextnnError, match="data.extend_vocab: the adaptive softmax"):
        config_from_dict(raw, "test")
    raw["data"]["extend_vocab"] = 0
    assert config_from_dict(raw, "test").head.softmax == "adaptive"  # the refusal is the added words'


def test_bad_format_and_too_short_text_raise(tmp_path):
    with pytest.raises(TextnnError, match="data.format.*text, tsv, csv"):
        config_from_dict({"task": "language_modeling", "data": {"format": "jsonl"},
                          "model": {"name": "char_lstm_lm", "preset": "tiny"}}, "test")
    with pytest.raises(TextnnError, match="data.bptt"):
        LanguageModelingTask.from_data(make_config(tmp_path, bptt=500, train_text="short text\n"))


def test_train_save_load_and_evaluate_through_the_experiment(tmp_path):
    from textnn.experiment import load_run, train
    from textnn.front import evaluate_run

    config = make_config(tmp_path, max_steps=6, eval_every=3, log_every=1)
    run, result = train(config, tmp_path / "run")
    assert result.steps == 6 and result.metric_name == "bpc"
    assert set(result.dev) >= {"loss", "perplexity", "bpc", "tokens"}
    assert [r["step"] for r in run.read_metrics() if r["split"] == "dev"] == [3, 6]
    _, task, model = load_run(run.path)
    assert task.vocab.itos == LanguageModelingTask.from_data(config).vocab.itos
    again = evaluate_run(run.path, config.data.dev)
    assert again["bpc"] == pytest.approx(result.dev["bpc"], rel=1e-6)


def raw_config(data: dict | None = None, train: dict | None = None, model: dict | None = None) -> dict:
    return {"task": "language_modeling", "data": data or {},
            "model": model or {"name": "char_lstm_lm", "preset": "tiny"}, "train": train or {}}


def test_stream_options_are_the_tasks_data_section_and_checked_when_read():
    config = config_from_dict(raw_config(), "test")
    assert config.data.format == "text" and (config.data.bptt, config.data.stateful) == (128, True)
    for key, value in [("bptt", 0), ("holdout", 1.0), ("holdout", -0.1), ("bpe_vocab_size", 1)]:
        with pytest.raises(TextnnError, match=f"data.{key}"):
            config_from_dict(raw_config({key: value}), "test")
    with pytest.raises(TextnnError, match="data.bptt_variable.*data.stateful"):
        config_from_dict(raw_config({"bptt_variable": True, "stateful": False}), "test")


@pytest.mark.parametrize("tokenizer,extra", [("char", ["bpc"]), ("word", []), ("whitespace", []),
                                             ("bpe", ["word_perplexity"])])
def test_reported_metrics_follow_the_tokenizer_and_train_metric_must_be_one_of_them(tokenizer, extra):
    config = config_from_dict(raw_config({"tokenizer": tokenizer}), "test")
    assert LanguageModelingTask.metrics_for(config) == ["loss", "perplexity", *extra]
    task = LanguageModelingTask(config, None, None)
    assert not any(task.higher_is_better(metric) for metric in LanguageModelingTask.metrics_for(config))
    for metric in ("bpc", "word_perplexity"):
        if metric in extra:
            assert config_from_dict(raw_config({"tokenizer": tokenizer}, {"metric": metric}), "test").train.metric
        else:
            with pytest.raises(TextnnError, match=f"train.metric.*{metric}"):
                config_from_dict(raw_config({"tokenizer": tokenizer}, {"metric": metric}), "test")


def test_init_from_reads_new_text_with_the_runs_tokenizer_and_vocabulary(tmp_path):
    """ULMFiT's second stage: a language model fine-tuned on new text starts from another run. Its
    vocabulary is the run's (new words are <unk>), not one rebuilt from the new data.train; the
    encoder weights load by name, and only the head's bias is new."""
    from textnn.experiment import train
    from textnn.transfer import open_start

    (tmp_path / "first").mkdir()
    first = make_config(tmp_path / "first", tokenizer="word", max_steps=2)
    run, _ = train(first, tmp_path / "run")
    (tmp_path / "new.txt").write_text("return zebra + self\n" * 40, encoding="utf-8")  # zebra: not in CODE
    raw = {"task": "language_modeling", "data": {"format": "text", "train": str(tmp_path / "new.txt"), "bptt": 8},
           "model": {"init_from": str(run.path)}, "train": {"progress": False}}
    config = config_from_dict(raw, "test")
    assert (config.model_name, config.data.tokenizer) == ("char_lstm_lm", "word")
    task = LanguageModelingTask.from_data(config)
    assert task.vocab.itos == LanguageModelingTask.from_run(run.path, first).vocab.itos
    assert "zebra" not in task.vocab.stoi
    assert task.vocab.decode(task.splits["train"].ids[:5].tolist()) == ["return", UNK, "+", "self", EOS]
    raw["model"] = {"name": "char_lstm_lm", "preset": "tiny"}  # the same text read afresh has its own vocabulary
    assert "zebra" in LanguageModelingTask.from_data(config_from_dict(raw, "test")).vocab.stoi
    model = task.build_model()
    report = open_start(run.path, "test").load_into(model)
    assert report["loaded"] and all(name.startswith("encoder.") for name in report["loaded"])
    assert report["new"] == ["head.decoder.bias", "head.decoder.weight"]  # tiny rnn_lm: untied
