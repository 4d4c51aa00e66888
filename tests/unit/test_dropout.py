"""textnn's dropout (modules/dropout.py): nn.Dropout's function with a faster CPU mask."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from textnn.modules.dropout import Dropout, dropout


def test_training_keeps_each_element_with_probability_one_minus_p_and_scales_the_kept():
    torch.manual_seed(0)
    x = torch.rand(200, 500) + 0.5  # no zeros: a zero out means dropped
    for p in (0.1, 0.5, 0.9):
        y = dropout(x, p, training=True)
        kept = y != 0
        assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.01)  # 100,000 draws: sd <= 0.0016
        assert torch.allclose(y[kept], x[kept] / (1 - p))


def test_eval_mode_and_p_zero_pass_the_input_and_p_one_drops_everything():
    x = torch.randn(4, 6)
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_the_gradient_is_the_mask_that_was_applied():
    torch.manual_seed(1)
    x = (torch.rand(50, 40) + 0.5).requires_grad_(True)
    y = dropout(x, 0.3, training=True)
    y.sum().backward()
    assert torch.allclose(x.grad, (y != 0).float() / 0.7)


def test_a_seed_repeats_the_mask_and_the_dtype_is_kept():
    x = torch.ones(30, 30, dtype=torch.bfloat16)
    torch.manual_seed(5)
    first = dropout(x, 0.5, training=True)
    torch.manual_seed(5)
    assert torch.equal(first, dropout(x, 0.5, training=True)) and first.dtype == torch.bfloat16
    assert set(first.unique().tolist()) == {0.0, 2.0}


def test_the_module_is_an_nn_dropout_that_follows_train_and_eval():
    module = Dropout(0.25)
    assert isinstance(module, nn.Dropout) and repr(module) == repr(nn.Dropout(0.25))
    assert not list(module.parameters()) and not module.state_dict()
    x = torch.rand(100, 100) + 0.5
    assert (module(x) == 0).any()
    module.eval()
    assert torch.equal(module(x), x)
