"""ULMFiT's parts (Howard & Ruder 2018) against the paper: slanted triangular rates (eq. 3), concat
pooling, the classifier's batch-normed blocks, BPT3C, gradual unfreezing of a classifier, a language
model read from a classifier's table and a language model started from another one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from conftest import write_sentiment_tsv
from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.models.base import InputSpec
from textnn.modules.dropout import Dropout
from textnn.modules.heads import BatchNorm, ClassifierHead
from textnn.modules.pooling import concat_pool, last_valid, masked_max, masked_mean
from textnn.registry import model_entry
from textnn.resolve import config_from_dict
from textnn.runs import RunDir
from textnn.tasks.classification import Classifier, ClassificationHeadConfig, ClassificationTask, classifier_head
from textnn.tasks.language_modeling import EOS, LanguageModelingTask
from textnn.training.optim import lr_factor, slanted_triangular
from textnn.training.trainer import Trainer


# ------------------------------------------------------------------------------ slanted triangular


def paper_stlr(t: int, T: int, cut_frac: float, ratio: float) -> float:
    """Howard & Ruder (2018) eq. 3, written out as printed, divided by eta_max."""
    cut = math.floor(T * cut_frac)
    p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
    return (1 + p * (ratio - 1)) / ratio


@pytest.mark.parametrize("total,cut_frac,ratio", [(100, 0.1, 32), (1000, 0.1, 32), (60, 0.25, 8), (300, 0.2, 10)])
def test_stlr_is_equation_3_of_the_paper(total, cut_frac, ratio):
    config = TrainConfig(scheduler="triangular", stlr_cut_frac=cut_frac, stlr_ratio=ratio)
    factors = [lr_factor(t, total, config) for t in range(total)]
    for t, factor in enumerate(factors):
        assert factor == pytest.approx(paper_stlr(t, total, cut_frac, ratio), rel=1e-12, abs=1e-12), t
    cut = math.floor(total * cut_frac)
    assert factors[0] == pytest.approx(1 / ratio) and factors[cut] == pytest.approx(1.0)  # from eta/ratio to eta
    assert max(factors) == factors[cut]
    assert all(a < b for a, b in zip(factors[:cut], factors[1:cut + 1]))  # a short rise,
    assert all(a > b for a, b in zip(factors[cut:], factors[cut + 1:]))  # then a long fall


def test_stlr_never_falls_below_the_floor_when_the_cut_is_not_whole():
    # T * cut_frac = 10.5: the formula as printed would end below eta / ratio (at t = T - 1: p < 0)
    assert paper_stlr(104, 105, 0.1, 32) < 1 / 32
    factors = [slanted_triangular(t, 105, 0.1, 32) for t in range(105)]
    assert min(factors) >= 1 / 32 and factors[10] == 1.0
    assert slanted_triangular(29, 100, 0.29, 32) == 1.0  # floor(0.29 * 100) is 29, not 28


def test_warmup_steps_set_the_rising_edge_and_bad_stlr_options_are_refused():
    config = TrainConfig(scheduler="triangular", warmup_steps=5, stlr_ratio=4)
    assert lr_factor(5, 50, config) == 1.0 and lr_factor(0, 50, config) == pytest.approx(0.25)
    for key, value in (("stlr_cut_frac", 0.0), ("stlr_cut_frac", 1.0), ("stlr_ratio", 0.5),
                       ("stlr_ratio", float("inf"))):
        with pytest.raises(TextnnError, match=f"train.{key}"):
            TrainConfig(**{key: value})


# ---------------------------------------------------------------------------------- concat pooling


def test_concat_pooling_is_last_max_mean_of_the_real_tokens_and_ignores_padding():
    x = torch.tensor([[[1.0, -2.0], [3.0, 4.0], [-5.0, 0.0]],
                      [[2.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])  # [2, 3, 2]
    mask = torch.tensor([[True, True, True], [True, False, False]])
    expected = torch.tensor([[-5.0, 0.0, 3.0, 4.0, -1 / 3, 2 / 3],
                             [2.0, 6.0, 2.0, 6.0, 2.0, 6.0]])  # [last; max; mean]
    torch.testing.assert_close(concat_pool(x, mask), expected)
    poisoned = x.clone()
    poisoned[1, 1:] = torch.tensor([1e6, float("nan")])  # whatever sits at padding never shows
    torch.testing.assert_close(concat_pool(poisoned, mask), expected)
    wide = torch.cat([x, torch.full((2, 4, 2), 7.0)], dim=1)  # padded further
    torch.testing.assert_close(concat_pool(wide, F.pad(mask, (0, 4))), expected)
    torch.testing.assert_close(concat_pool(x, mask), torch.cat([last_valid(x, mask), masked_max(x, mask),
                                                                masked_mean(x, mask)], dim=-1))


# ---------------------------------------------------------------------------------- the head


def ulmfit_head_config(**extra) -> ClassificationHeadConfig:
    return ClassificationHeadConfig(**{"pooling": "concat", "hidden": 5, "activation": "relu", "batch_norm": True,
                                       "dropout": 0.4, "hidden_dropout": 0.1, **extra})


def test_ulmfit_head_is_batch_norm_dropout_linear_relu_then_batch_norm_dropout_linear():
    head = ClassifierHead(6, 3, hidden=5, dropout=0.4, hidden_dropout=0.1, activation="relu", batch_norm=True)
    kinds = [type(m) for m in head.net]
    assert kinds == [BatchNorm, Dropout, nn.Linear, nn.ReLU, BatchNorm, Dropout, nn.Linear]
    assert [head.net[1].p, head.net[5].p] == [0.4, 0.1]
    torch.manual_seed(0)
    head.train()
    for _ in range(3):  # running statistics that differ from 0 and 1
        head(torch.randn(8, 6) * 3 + 1)
    head.eval()
    x = torch.randn(4, 6)
    norm1, linear1, norm2, linear2 = head.net[0], head.net[2], head.net[4], head.net[6]

    def normed(h, bn):
        return (h - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias

    expected = linear2(normed(torch.relu(linear1(normed(x, norm1))), norm2))
    torch.testing.assert_close(head(x), expected)


def test_a_head_has_only_the_layers_its_options_ask_for():
    plain = ClassifierHead(6, 3, hidden=5, dropout=0.2)
    assert not any(isinstance(m, nn.BatchNorm1d) for m in plain.modules())
    assert [type(m) for m in plain.net] == [Dropout, nn.Linear, nn.Tanh, Dropout, nn.Linear]
    assert plain.net[3].p == 0.2  # hidden_dropout None: head.dropout on both
    assert ClassificationHeadConfig().hidden_dropout_or_none is None
    assert ClassificationHeadConfig(hidden_dropout=0.0).hidden_dropout_or_none == 0.0
    for key, value in (("activation", "gelu"), ("hidden_dropout", 1.0), ("hidden_dropout", -0.5),
                       ("pooling", "attention"), ("bptt", -1)):
        with pytest.raises(TextnnError, match=f"head.{key}"):
            ClassificationHeadConfig(**{key: value})


def test_batch_norm_reads_a_training_batch_of_one_with_its_running_statistics():
    torch.manual_seed(0)
    norm = BatchNorm(4)
    norm.train()
    norm(torch.randn(16, 4) * 2 + 3)
    before = (norm.running_mean.clone(), norm.running_var.clone())
    one = torch.randn(1, 4)
    out = norm(one)
    assert torch.equal(norm.running_mean, before[0]) and torch.equal(norm.running_var, before[1])
    norm.eval()
    torch.testing.assert_close(out, norm(one))


# ---------------------------------------------------------------------------------- BPT3C


def awd_classifier(bptt: int, pooling: str = "concat", seed: int = 0, vocab: int = 30) -> Classifier:
    config_cls, encoder_cls, presets = model_entry("awd_lstm")
    torch.manual_seed(seed)
    encoder = encoder_cls(presets["tiny"].options(), InputSpec(vocab_size=vocab, pad_id=0))
    head_cfg = ulmfit_head_config(pooling=pooling, bptt=bptt)
    return Classifier(encoder, classifier_head(encoder, 2, head_cfg), pooling, bptt=bptt)


def padded_batch(lengths: list[int], vocab: int = 30, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, vocab, (n,), generator=gen)
        mask[row, :n] = True
    return ids, mask


@pytest.mark.parametrize("bptt", [1, 3, 4, 20])
def test_bpt3c_windows_give_the_states_of_one_pass(bptt):
    model = awd_classifier(bptt).eval()
    whole = awd_classifier(0).eval()  # same seed: the same weights, reading everything at once
    ids, mask = padded_batch([11, 4, 7, 1])
    with torch.no_grad():
        windows = model.windowed_states(ids, mask)
        one_pass = whole.encoder(ids, mask).tokens
        torch.testing.assert_close(windows, one_pass, atol=1e-6, rtol=0)
        torch.testing.assert_close(model(ids, mask).logits, whole(ids, mask).logits, atol=1e-6, rtol=0)


def test_bpt3c_gradients_stop_at_the_carried_state():
    """Tokens only in the first window reach h_T only through the state carried into the second, which
    is detached: with last-state pooling their embeddings get no gradient; with concat pooling their own
    states are pooled and they do; read in one pass, they do either way."""
    vocab = 30
    first = torch.tensor([[1, 2, 3, 4]])  # ids seen only in the first window
    ids = torch.cat([first, torch.tensor([[10, 11, 12, 13]])], dim=1)  # [1, 8]
    mask = torch.ones_like(ids, dtype=torch.bool)

    def first_window_gradient(bptt: int, pooling: str) -> torch.Tensor:
        model = awd_classifier(bptt, pooling, vocab=vocab).eval()  # eval: no dropout; gradients still flow
        F.cross_entropy(model(ids, mask).logits, torch.tensor([1])).backward()
        return model.encoder.embedding.weight.grad[first[0]].abs().sum()

    assert first_window_gradient(4, "last") == 0
    assert first_window_gradient(4, "concat") > 0
    assert first_window_gradient(0, "last") > 0


def test_head_bptt_needs_an_encoder_that_carries_a_state():
    raw = {"task": "classification", "data": {"train": "t.tsv"}, "head": {"bptt": 70}}
    for name in ("awd_lstm", "rnn_lm", "transformer_xl"):
        assert config_from_dict({**raw, "model": {"name": name}}, "x.yaml").head.bptt == 70
    for name in ("gpt", "cnn", "bert"):
        with pytest.raises(TextnnError, match=f"head.bptt.*{name} does not; use one of .*awd_lstm"):
            config_from_dict({**raw, "model": {"name": name}}, "x.yaml")


# ------------------------------------------------------------------------ gradual unfreezing


def test_gradual_unfreezing_of_the_ulmfit_classifier_keeps_frozen_groups_bit_identical(tmp_path):
    data = {"train": str(write_sentiment_tsv(tmp_path / "train.tsv", 64, seed=1)), "lowercase": True}
    config = config_from_dict({
        "task": "classification", "data": data, "model": {"name": "awd_lstm", "preset": "tiny"},
        "head": {"pooling": "concat", "hidden": 6, "activation": "relu", "batch_norm": True, "dropout": 0.2,
                 "bptt": 4},
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.01, "layer_lr_decay": 1 / 2.6,
                  "unfreeze": 1, "unfreeze_unit": "step", "scheduler": "triangular", "batch_size": 8,
                  "device": "cpu", "progress": False}}, "test")
    task = ClassificationTask.from_data(config)
    run = RunDir(tmp_path / "run")
    run.create(config, resume=False)
    trainer = Trainer(task, task.build_model(), config.train, run)
    groups = trainer.optimizer.param_groups
    assert [(g["name"], g["depth"]) for g in groups] == [("embedding", 4), ("lstm1", 3), ("lstm2", 2), ("lstm3", 1),
                                                         ("head", 0)]
    for step, batch in enumerate(task.train_batches(0)[:6]):
        before = [[p.detach().clone() for p in g["params"]] for g in groups]
        trainer._train_step([batch], step=step)
        for group, old in zip(groups, before):
            unchanged = all(torch.equal(p, q) for p, q in zip(group["params"], old))
            assert unchanged == (group["depth"] > step), (step, group["name"])  # the top step + 1 groups train
            if unchanged:
                assert all(not trainer.optimizer.state[p] for p in group["params"])
        rates = [g["lr"] for g in groups]
        trained = [r for g, r in zip(groups, rates) if g["depth"] <= step]
        assert all(upper / lower == pytest.approx(2.6) for lower, upper in zip(trained, trained[1:]))


# ----------------------------------------------------- the language model on a classifier's text


def lm_config(tmp_path: Path, train: Path, dev: Path | None = None, **data) -> object:
    return config_from_dict({
        "task": "language_modeling",
        "data": {"train": str(train), **({"dev": str(dev)} if dev else {}), "bptt": 4, **data},
        "model": {"name": "rnn_lm", "preset": "tiny"},
        "train": {"batch_size": 2, "progress": False, "max_steps": 2, "bootstrap_samples": 0}}, "test")


def test_the_language_model_reads_the_text_column_of_a_table(tmp_path):
    table = tmp_path / "train.tsv"
    table.write_text("sentence\tlabel\nthe film is good\t1\n\t0\na dull plot\t0\n", encoding="utf-8")
    config = lm_config(tmp_path, table, format="tsv", tokenizer="whitespace")
    task = LanguageModelingTask.from_data(config)
    assert task.vocab.decode(task.splits["train"].ids.tolist()) == \
        ["the", "film", "is", "good", EOS, "a", "dull", "plot", EOS]  # labels never read; the empty row is left out
    headless = tmp_path / "cola.tsv"  # CoLA's layout: no header, the text in column 3
    headless.write_text("gj04\t1\t\tthe film is good\ncj99\t0\t*\tgood is film the\n", encoding="utf-8")
    config = lm_config(tmp_path, headless, dev=headless, format="tsv", tokenizer="whitespace", header=False,
                       text_column="3")
    task = LanguageModelingTask.from_data(config)
    assert task.vocab.decode(task.splits["dev"].ids.tolist()) == \
        ["the", "film", "is", "good", EOS, "good", "is", "film", "the", EOS]
    with pytest.raises(TextnnError, match="text_column"):
        LanguageModelingTask.from_data(lm_config(tmp_path, table, format="tsv", text_column="review"))


def test_a_language_model_started_from_one_keeps_its_output_layer_vocabulary_and_head_options(tmp_path, capsys):
    from textnn.experiment import _start_encoder, train
    from textnn.resolve import starts_with_head

    text = tmp_path / "wiki.txt"
    text.write_text("the cat sat on the mat .\nthe dog ran .\n" * 30, encoding="utf-8")
    general = lm_config(tmp_path, text, tokenizer="whitespace")
    general.head.softmax, general.head.cutoffs, general.head.div_value = "adaptive", [4], 2.0
    first, _ = train(general, tmp_path / "general")
    table = write_sentiment_tsv(tmp_path / "target.tsv", 40, seed=3)
    raw = {"task": "language_modeling", "data": {"format": "tsv", "train": str(table), "bptt": 4},
           "model": {"init_from": str(first.path)}, "train": {"progress": False}}
    config = config_from_dict(raw, "test")
    assert (config.head.softmax, config.head.cutoffs, config.head.div_value) == ("adaptive", [4], 2.0)
    assert starts_with_head(config)
    task = LanguageModelingTask.from_data(config)
    assert task.vocab.itos == LanguageModelingTask.from_run(first.path, config).vocab.itos  # "good" is <unk> here
    model = task.build_model()
    _start_encoder(model, config.start, with_head=starts_with_head(config))
    saved = load_file(str(first.path / "model.safetensors"))
    own = model.state_dict()
    assert sum(name.startswith("head.") for name in saved) >= 3  # the adaptive softmax's own weights
    assert own.keys() == saved.keys() and all(torch.equal(own[name], saved[name]) for name in saved)
    assert f"loaded {len(saved)} encoder and head tensors; new here: none" in capsys.readouterr().err
    with pytest.raises(TextnnError, match="head.softmax='full' differs from the run.*the head comes from that run"):
        config_from_dict({**raw, "head": {"softmax": "full"}}, "test")
    classifier = config_from_dict({"task": "classification", "data": {"train": str(table)},
                                   "model": {"init_from": str(first.path)}}, "test")
    assert not starts_with_head(classifier)  # a classifier puts its own head on the encoder
