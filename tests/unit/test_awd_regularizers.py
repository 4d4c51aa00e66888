"""AWD-LSTM's regularisers: weight drop on the fused kernel, locked and embedding dropout, AR/TAR, memory cells."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.models.awd_lstm import PRESETS
from textnn.modules.dropout import dropout
from textnn.modules.rnn import LockedDropout, WeightDrop, embedding_dropout, lstm_memory_cells
from textnn.tasks.language_modeling import LanguageModel, LMBatch, LanguageModelingTask, language_model


def weight_dropped_lstm(p: float = 0.5, seed: int = 0) -> WeightDrop:
    torch.manual_seed(seed)
    return WeightDrop(nn.LSTM(5, 7, batch_first=True), ["weight_hh_l0"], p)


def plain_copy(wd: WeightDrop, weight_hh: torch.Tensor) -> nn.LSTM:
    lstm = nn.LSTM(5, 7, batch_first=True)
    lstm.load_state_dict(wd.module.state_dict())
    with torch.no_grad():
        lstm.weight_hh_l0.copy_(weight_hh)
    return lstm


def test_weight_drop_equals_nn_lstm_with_the_same_masked_weights():
    wd = weight_dropped_lstm().train()
    x = torch.randn(3, 6, 5)
    torch.manual_seed(123)
    out, (h, c) = wd(x)
    torch.manual_seed(123)  # the same draw: the mask the forward call used
    masked = dropout(wd.module.weight_hh_l0.detach(), 0.5, training=True)
    assert (masked == 0).any() and (masked != 0).any()
    ref_out, (ref_h, ref_c) = plain_copy(wd, masked)(x)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(c, ref_c, rtol=0, atol=0)


def test_weight_drop_draws_a_new_mask_per_call_in_training_and_none_in_eval():
    wd = weight_dropped_lstm()
    x = torch.randn(2, 5, 5)
    wd.train()
    assert not torch.allclose(wd(x)[0], wd(x)[0])
    wd.eval()
    plain = plain_copy(wd, wd.module.weight_hh_l0.detach())
    torch.testing.assert_close(wd(x)[0], wd(x)[0], rtol=0, atol=0)
    torch.testing.assert_close(wd(x)[0], plain(x)[0], rtol=0, atol=0)


def test_weight_drop_runs_the_fused_lstm_kernel_and_trains_the_raw_weight():
    """One aten::lstm call per forward, no per-step cell op: the fused kernel, not a Python loop."""
    wd = weight_dropped_lstm().train()
    x = torch.randn(2, 9, 5)
    with torch.profiler.profile() as prof:
        out, _ = wd(x)
    names = [event.name for event in prof.events()]
    assert names.count("aten::lstm") == 1
    assert not any("lstm_cell" in name for name in names)
    out.sum().backward()
    assert wd.module.weight_hh_l0.grad is not None and wd.module.weight_hh_l0.grad.abs().sum() > 0
    assert set(wd.state_dict()) == {f"module.{k}" for k in nn.LSTM(5, 7).state_dict()}  # names unchanged


def test_locked_dropout_shares_one_mask_over_time_and_is_the_identity_in_eval():
    drop = LockedDropout(0.5).train()
    x = torch.ones(4, 10, 16)
    y = drop(x)
    assert torch.equal(y, y[:, :1].expand_as(y))  # the same units dropped at every step
    assert set(y.unique().tolist()) <= {0.0, 2.0}  # kept units scaled by 1 / (1 - p)
    assert not torch.equal(y[0], y[1])  # but a different mask per sequence
    assert not torch.equal(drop(x), y)  # and per call
    assert torch.equal(drop.eval()(x), x)


def test_embedding_dropout_drops_whole_word_types_and_scales_the_rest():
    weight = torch.randn(12, 4)
    ids = torch.tensor([[1, 2, 1, 3, 2, 1, 4, 5, 6, 7, 8, 9]])
    torch.manual_seed(0)
    out = embedding_dropout(weight, ids, 0.5, training=True)[0]  # [T, E]
    dropped = out.abs().sum(dim=1) == 0
    assert dropped.any() and not dropped.all()
    for word in ids[0].unique():
        rows = out[ids[0] == word]
        assert torch.equal(rows, rows[:1].expand_as(rows))  # every occurrence of a word alike
        assert torch.allclose(rows[0], torch.zeros(4)) or torch.allclose(rows[0], 2 * weight[word])
    torch.testing.assert_close(embedding_dropout(weight, ids, 0.5, training=False), F.embedding(ids, weight))


def no_dropout_model(**overrides) -> LanguageModel:
    torch.manual_seed(0)
    values = {"dropout": 0.0, "dropout_hidden": 0.0, "dropout_input": 0.0, "dropout_embedding": 0.0,
              "weight_drop": 0.0, **overrides}
    return language_model("awd_lstm", PRESETS["tiny"].options(**values), 17)


def test_ar_and_tar_match_their_definitions():
    """Without dropout, the dropped and raw final outputs are the same: alpha * mean(h^2) + beta * mean(dh^2)."""
    model = no_dropout_model(alpha=2.0, beta=1.0).train()
    ids = torch.randint(0, 17, (3, 8), generator=torch.Generator().manual_seed(1))
    out = model(ids)
    x = model.encoder.embedding(ids)
    for rnn in model.encoder.rnns:
        x, _ = rnn.module(x)  # the last layer's outputs [B, T, E]
    expected = 2.0 * x.pow(2).mean() + 1.0 * (x[:, 1:] - x[:, :-1]).pow(2).mean()
    torch.testing.assert_close(out.regularizer, expected)
    assert no_dropout_model(alpha=0.0, beta=0.0).train()(ids).regularizer is None
    assert model(ids[:, :1]).regularizer is not None  # one step: AR only, TAR has no pair


def test_the_task_adds_the_regularizer_times_the_target_count_in_training_only():
    model = no_dropout_model()
    ids = torch.randint(1, 17, (2, 6), generator=torch.Generator().manual_seed(2))
    targets = torch.randint(1, 17, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    batch = LMBatch(ids=ids, targets=targets, mask=mask, num_targets=10)
    task = LanguageModelingTask(None, Tokenizer("whitespace"), Vocab([PAD, UNK]))  # loss needs neither
    model.train()
    out = model(ids)
    nll = (F.cross_entropy(out.logits.reshape(-1, 17), targets.reshape(-1), reduction="none") * mask.reshape(-1)).sum()
    torch.testing.assert_close(task.loss(model, batch), nll + out.regularizer * 10)
    model.eval()
    eval_nll = (F.cross_entropy(model(ids).logits.reshape(-1, 17), targets.reshape(-1), reduction="none")
                * mask.reshape(-1)).sum()
    torch.testing.assert_close(task.loss(model, batch), eval_nll)


@pytest.mark.parametrize("with_state", [False, True])
def test_memory_cells_match_the_fused_lstm(with_state):
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 6, batch_first=True)
    x = torch.randn(9, 4)
    state = (torch.randn(1, 1, 6), torch.randn(1, 1, 6)) if with_state else None
    h, c = lstm_memory_cells(lstm, x, state)
    for t in range(9):  # c after t + 1 steps is what the fused module ends with on that prefix
        out, (_, c_fused) = lstm(x[None, :t + 1], state)
        torch.testing.assert_close(c[t], c_fused[0, 0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h[t], out[0, t], rtol=1e-5, atol=1e-6)
    model = language_model("awd_lstm", PRESETS["tiny"].options(), 17).eval()
    cells = model.encoder.memory_cells(torch.tensor([[3, 4, 5, 6]]))
    assert [c.shape for c in cells] == [(4, 16), (4, 16), (4, 8)]
    final = model(torch.tensor([[3, 4, 5, 6]])).state
    for layer, c in enumerate(cells):
        torch.testing.assert_close(c[-1], final[layer][1][0, 0], rtol=1e-5, atol=1e-6)
