"""Language-model streams: cached reading, batchify, fixed and variable BPTT, stateful windows, holdout, lr_scale."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textnn.data import streams
from textnn.data.streams import EOS, batchify, bptt_lengths, read_file_stream, to_vocab_ids, vocab_from_counts
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.models.base import ModelOutput
from textnn.resolve import config_from_dict
from textnn.runs import RunDir
from textnn.tasks.language_modeling import LanguageModelingTask
from textnn.training.trainer import Trainer

WORDS = "the cat sat on a mat while the dog ran after a ball and the bird sang".split()


def word_text(lines: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(" ".join(rng.choice(WORDS, size=rng.integers(0, 9))) + "\n" for _ in range(lines))


def lm_config(tmp_path: Path, train_text: str, dev_text: str | None = None, **sections) -> object:
    (tmp_path / "train.txt").write_text(train_text, encoding="utf-8")
    data = {"format": "text", "train": str(tmp_path / "train.txt"), "tokenizer": "whitespace", "bptt": 6}
    if dev_text is not None:
        (tmp_path / "dev.txt").write_text(dev_text, encoding="utf-8")
        data["dev"] = str(tmp_path / "dev.txt")
    return config_from_dict({
        "task": "language_modeling", "data": {**data, **sections.get("data", {})},
        "model": sections.get("model", {"name": "rnn_lm", "preset": "tiny"}),
        "train": {"batch_size": 3, "progress": False, "device": "cpu", **sections.get("train", {})}}, "test")


# --- reading -------------------------------------------------------------------------------------------

def test_word_stream_has_eos_per_line_and_maps_onto_the_vocabulary(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("b a\n\nc a b\n", encoding="utf-8")
    stream = read_file_stream(path, Tokenizer("whitespace"))
    assert [stream.types[i] for i in stream.ids] == ["b", "a", EOS, EOS, "c", "a", "b", EOS]
    vocab = Vocab([PAD, UNK, EOS, "a", "b"])  # no "c": it becomes <unk>
    assert to_vocab_ids(stream, vocab).tolist() == [4, 3, 2, 2, 1, 3, 4, 2]


def test_char_stream_keeps_every_character_including_newlines_and_non_ascii(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("héllo\nwörld\n", encoding="utf-8")
    stream = read_file_stream(path, Tokenizer("char"))
    assert "".join(stream.types[i] for i in stream.ids) == "héllo\nwörld\n"


def test_second_read_comes_from_the_npy_cache_without_reading_the_file(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text(word_text(50), encoding="utf-8")
    first = read_file_stream(path, Tokenizer("whitespace"))
    cache = Path(os.environ["TEXTNN_CACHE"])
    assert len(list(cache.glob("*.npy"))) == 1 and len(list(cache.glob("*.json"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(streams, "read_lines", fail)
    second = read_file_stream(path, Tokenizer("whitespace"))
    assert second.types == first.types and np.array_equal(second.ids, first.ids)
    with pytest.raises(AssertionError, match="read again"):  # another tokenizer is another entry
        read_file_stream(path, Tokenizer("char"))


@pytest.mark.parametrize("min_freq,max_size", [(1, 0), (2, 0), (1, 6), (3, 4)])
def test_vocab_from_counts_equals_vocab_build(min_freq, max_size):
    tokens = "b a c a b d e e a f g g h".split() + [EOS, EOS]  # ties at 2 and 1: broken alphabetically
    types = list(dict.fromkeys(tokens))
    counts = np.array([Counter(tokens)[t] for t in types])
    specials = (PAD, UNK, EOS)
    expected = Vocab.build([tokens], min_freq=min_freq, max_size=max_size, specials=specials)
    assert vocab_from_counts(types, counts, min_freq, max_size, specials).itos == expected.itos


# --- batchify and window lengths -------------------------------------------------------------------------

@pytest.mark.parametrize("n,rows", [(20, 3), (21, 4), (5, 8), (101, 1)])
def test_batchify_lays_out_rows_and_every_token_but_the_first_is_a_target_once(n, rows):
    ids = torch.arange(100, 100 + n)
    inputs, targets, mask = batchify(ids, rows, pad_id=0)
    b = min(rows, n - 1)
    assert inputs.shape == targets.shape == mask.shape == (b, -(-(n - 1) // b))
    assert targets[mask].tolist() == ids[1:].tolist()  # row-major: each row is a contiguous piece
    assert inputs[mask].tolist() == ids[:-1].tolist()
    assert (inputs[~mask] == 0).all() and mask.sum() == n - 1
    assert not mask[:-1].logical_not().any()  # only the last row is padded, at its end


def test_fixed_lengths_cut_a_row_into_bptt_windows():
    assert bptt_lengths(20, 6) == [6, 6, 6, 2]
    assert bptt_lengths(18, 6) == [6, 6, 6]


def test_variable_lengths_follow_the_paper_and_are_reproducible_per_seed_and_epoch():
    bptt, total = 70, 100_000
    lengths = bptt_lengths(total, bptt, variable=True, seed=3, epoch=1)
    assert sum(lengths) == total
    assert lengths == bptt_lengths(total, bptt, variable=True, seed=3, epoch=1)
    assert lengths != bptt_lengths(total, bptt, variable=True, seed=3, epoch=2)
    assert lengths != bptt_lengths(total, bptt, variable=True, seed=4, epoch=1)
    body = np.array(lengths[:-1])  # the last window is cut by the row's end
    assert body.min() >= 5 and body.max() <= bptt + 20
    half = (body < 0.75 * bptt).mean()  # windows drawn around bptt / 2: 5% of them
    assert 0.02 < half < 0.09
    full = body[body >= 0.75 * bptt]
    assert abs(full.mean() - (bptt - 0.5)) < 0.5 and 4.0 < full.std() < 6.0  # int(N(70, 5)) truncates


# --- the task's training batches ---------------------------------------------------------------------------

@pytest.mark.parametrize("variable", [False, True])
def test_stateful_epoch_reads_every_training_target_exactly_once_in_order(tmp_path, variable):
    config = lm_config(tmp_path, word_text(60), data={"bptt_variable": variable}, train={"seed": 5})
    task = LanguageModelingTask.from_data(config)
    train = task.splits["train"].ids
    inputs, targets, _ = batchify(train, 3, task.vocab.pad_id)
    for epoch in (0, 1):
        batches = task.train_batches(epoch)
        assert [b.reset for b in batches] == [True] + [False] * (len(batches) - 1)
        assert all(b.carry for b in batches)
        seen_targets = torch.cat([b.targets for b in batches], dim=1)  # windows side by side: [B, L]
        seen_mask = torch.cat([b.mask for b in batches], dim=1)
        assert torch.equal(seen_targets, targets) and torch.equal(torch.cat([b.ids for b in batches], 1), inputs)
        assert seen_targets[seen_mask].tolist() == train[1:].tolist()  # each target once, in stream order
        assert sum(b.count for b in batches) == len(train) - 1
        for b in batches:
            assert b.lr_scale == (b.ids.size(1) / 6 if variable else 1.0)
    first, second = task.train_batches(0), task.train_batches(1)
    if variable:
        assert [b.ids.size(1) for b in first] != [b.ids.size(1) for b in second]
        again = LanguageModelingTask.from_data(config).train_batches(1)
        assert [b.ids.size(1) for b in again] == [b.ids.size(1) for b in second]
    else:
        assert all(b.ids.size(1) == 6 for b in first[:-1])


def test_variable_bptt_needs_stateful_rows(tmp_path):
    with pytest.raises(TextnnError, match="data.bptt_variable"):  # when the config is read
        lm_config(tmp_path, word_text(30), data={"bptt_variable": True, "stateful": False})


class StateRecorder(nn.Module):
    """A language model's interface with uniform logits plus a trainable bias; its state is the
    window's last ids times a parameter."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.scale = nn.Parameter(torch.ones(()))
        self.received: list[torch.Tensor | None] = []

    def forward(self, ids: torch.Tensor, state=None, mask=None, targets=None) -> ModelOutput:
        self.received.append(state)
        logits = self.bias.expand(*ids.shape, -1)  # [B, T, V]
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")  # [B*T]
        return ModelOutput(logits=None, state=ids[:, -1:].float() * self.scale,  # [B, 1], with a grad_fn
                           loss=(nll * mask.reshape(-1)).sum())


def test_loss_carries_the_detached_state_between_windows_and_restarts_each_epoch(tmp_path):
    task = LanguageModelingTask.from_data(lm_config(tmp_path, word_text(60)))
    model = StateRecorder(len(task.vocab))
    for epoch in (0, 1):
        batches = task.train_batches(epoch)
        model.received.clear()
        for batch in batches:
            task.loss(model, batch).backward()
        assert model.received[0] is None  # zeros at the start of every epoch
        for previous, state in zip(batches, model.received[1:]):
            assert torch.equal(state, previous.ids[:, -1:].float())  # what the window before it left
            assert not state.requires_grad  # detached: truncated BPTT
    windows = task.train_batches(0)
    model.received.clear()
    task.loss(model, windows[1])
    task.loss(model, windows[0])
    assert model.received[1] is None  # reset wins even when a state is held


def test_independent_windows_never_carry_a_state(tmp_path):
    task = LanguageModelingTask.from_data(lm_config(tmp_path, word_text(60), data={"stateful": False}))
    model = StateRecorder(len(task.vocab))
    for batch in task.train_batches(0):
        task.loss(model, batch)
    assert model.received and all(state is None for state in model.received)


def test_trainer_scales_the_step_learning_rate_by_the_first_batch_of_the_group(tmp_path):
    config = lm_config(tmp_path, word_text(60), data={"bptt_variable": True},
                       train={"optimizer": "sgd", "lr": 0.5, "grad_accum": 2})
    task = LanguageModelingTask.from_data(config)
    run = RunDir(tmp_path / "run")
    run.create(config, resume=False)
    trainer = Trainer(task, task.build_model(), config.train, run)
    batches = task.train_batches(0)
    scaled = next(i for i in range(len(batches) - 1) if batches[i].lr_scale != 1.0)
    trainer._train_step(batches[scaled:scaled + 2], step=0)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * batches[scaled].lr_scale)


def test_the_planned_steps_add_up_every_epoch_of_variable_bptt(tmp_path):
    """Variable-length windows cut each epoch differently: the run's steps (what schedules and the
    progress bar span) are the sum over its epochs, not the first epoch's count times the epochs."""
    config = lm_config(tmp_path, word_text(80), data={"bptt_variable": True},
                       train={"epochs": 3, "grad_accum": 2, "scheduler": "linear"})
    task = LanguageModelingTask.from_data(config)
    windows = [len(task.train_batches(epoch)) for epoch in range(3)]
    assert len({-(-n // 2) for n in windows}) > 1  # the epochs really differ in steps
    run = RunDir(tmp_path / "run")
    run.create(config, resume=False)
    trainer = Trainer(task, task.build_model(), config.train, run)
    assert trainer.total_steps == sum(-(-n // 2) for n in windows)  # ceil(windows / grad_accum) per epoch
    result = trainer.fit()
    assert result.steps == trainer.total_steps == run.status()["total_steps"]


# --- holdout -------------------------------------------------------------------------------------------------

def test_holdout_keeps_the_final_fraction_as_dev_and_builds_the_vocabulary_from_the_rest(tmp_path):
    text = word_text(90) + "zebra zebra quokka\n"  # words that only occur in the held-out tail
    config = lm_config(tmp_path, text, data={"holdout": 0.1})
    task = LanguageModelingTask.from_data(config)
    full = read_file_stream(config.data.train, Tokenizer("whitespace"))
    n = len(full.ids)
    cut = n - round(0.1 * n)
    train, dev = task.splits["train"].ids, task.splits["dev"].ids
    assert len(train) == cut and len(dev) == n - cut
    assert "zebra" not in task.vocab.stoi and "quokka" not in task.vocab.stoi
    assert task.vocab.decode(dev[-4:].tolist()) == [UNK, UNK, UNK, EOS]
    words = [full.types[i] for i in full.ids]
    assert task.vocab.decode(train.tolist()) == words[:cut]
    # With a dev file, the holdout is ignored and all of train is trained on.
    with_dev = LanguageModelingTask.from_data(lm_config(tmp_path, text, word_text(5, seed=1), data={"holdout": 0.1}))
    assert len(with_dev.splits["train"].ids) == n


def test_holdout_too_small_raises(tmp_path):
    with pytest.raises(TextnnError, match="data.holdout"):
        LanguageModelingTask.from_data(lm_config(tmp_path, "a b c d e f g h i j k l\n", data={"holdout": 0.01}))


def test_holdout_split_is_evaluated_as_the_dev_set(tmp_path):
    config = lm_config(tmp_path, word_text(90), data={"holdout": 0.2})
    task = LanguageModelingTask.from_data(config)
    torch.manual_seed(0)
    model = task.build_model().eval()
    assert task.has_split("dev")
    assert task.evaluate(model, "dev")["tokens"] == len(task.splits["dev"].ids) - 1



def test_resume_from_an_epoch_boundary_is_exact_with_stateful_rows_variable_bptt_and_ntasgd(tmp_path):
    """The carried state restarts at every epoch start, so a run resumed there continues exactly.

    NT-ASGD starts averaging within the first epoch, so the averages (optimizer state `ax`) cross the
    resume too (the test checks that it did). The first run ends at an evaluation of the schedule (its
    step count is a multiple of eval_every), so it may be continued with the larger budget.
    """
    from safetensors.torch import load_file

    from textnn.experiment import train

    def config(epochs: int):
        return lm_config(tmp_path, word_text(80), word_text(10, seed=1), data={"bptt_variable": True},
                         model={"name": "awd_lstm", "preset": "tiny"},
                         train={"epochs": epochs, "optimizer": "ntasgd", "lr": 2.0, "ntasgd_nonmono": 0,
                                "eval_every": 2, "log_every": 1, "bootstrap_samples": 0, "seed": 3,
                                "keep_checkpoint": "last"})

    train(config(2), tmp_path / "whole")
    train(config(1), tmp_path / "split")
    train(config(2), tmp_path / "split", resume=True)
    whole = load_file(str(tmp_path / "whole" / "checkpoint" / "last.safetensors"))
    split = load_file(str(tmp_path / "split" / "checkpoint" / "last.safetensors"))
    assert whole.keys() == split.keys() and any(key.startswith("optim.") for key in whole)
    assert any(key.endswith(".ax") for key in whole)  # NT-ASGD was averaging
    for key in whole:
        torch.testing.assert_close(split[key], whole[key], rtol=0, atol=0, msg=key)
