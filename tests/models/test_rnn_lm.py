"""Model harness for the recurrent language models (models/rnn_lm.py) on the "tiny" preset, built as
the language-modelling task builds them: the RNNLM encoder with an LMHead.

Shapes, finite loss, a gradient for every parameter, a safetensors round trip, eval determinism,
state carrying (two halves == one pass), cached step decoding == full forward, the step-by-step
`cell_trace` == the fused recurrence, the LSTM forget-gate bias, and config checks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from textnn.errors import TextnnError
from textnn.models.rnn_lm import PRESETS, RNNLM, RNNLMConfig
from textnn.registry import model_entry
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import LanguageModel
from tests.models.lm_checks import (assert_eval_deterministic_and_train_uses_dropout,
                                    assert_save_load_round_trip, build_lm)

VOCAB, PAD = 23, 0
CELLS = ["lstm", "gru", "rnn"]
VARIANTS = [pytest.param({"cell": c}, id=c) for c in CELLS] + [
    pytest.param({"embedding_dim": 16, "hidden_size": 16, "tie_weights": True}, id="lstm-tied"),
    pytest.param({"num_layers": 1, "dropout": 0.0}, id="lstm-1layer"),
]


def build(overrides: dict | None = None, seed: int = 0) -> LanguageModel:
    return build_lm("rnn_lm", overrides, VOCAB, seed=seed, pad_id=PAD)


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def final_states(model: LanguageModel, state) -> torch.Tensor:
    """The memory cells (LSTM) or hidden states (GRU, RNN) of a state: [L, B, H]."""
    return state[1] if model.encoder.cfg.cell == "lstm" else state


@pytest.mark.parametrize("overrides", VARIANTS)
def test_shapes_finite_loss_and_every_parameter_gets_a_gradient(overrides):
    model = build(overrides)
    x = ids(3, 7)
    out = model(x)
    assert out.logits.shape == (3, 7, VOCAB)
    layers, hidden = model.encoder.cfg.num_layers, model.encoder.cfg.hidden_size
    assert final_states(model, out.state).shape == (layers, 3, hidden)
    loss = F.cross_entropy(out.logits.reshape(-1, VOCAB), ids(3, 7, seed=1).reshape(-1))  # [B*T, V]
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_tied_weights_share_one_matrix():
    model = build({"embedding_dim": 16, "hidden_size": 16, "tie_weights": True})
    assert model.head.decoder.weight is model.encoder.embedding.weight
    untied = build({"embedding_dim": 16})
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in untied.parameters())


def test_tied_weights_with_different_sizes_project_the_output_to_the_embedding_size():
    """Tiny: E = 8, H = 16; tying adds a bias-free H -> E projection before the shared [V, E] matrix."""
    model = build({"tie_weights": True})
    assert model.head.decoder.weight is model.encoder.embedding.weight
    assert model.encoder.project.weight.shape == (8, 16) and model.encoder.project.bias is None
    untied = build({})
    assert untied.encoder.project is None
    tied_count = sum(p.numel() for p in model.parameters())
    untied_count = sum(p.numel() for p in untied.parameters())
    assert tied_count == untied_count - VOCAB * 16 + 16 * 8  # the decoder's own [V, H] is gone, [E, H] added


@pytest.mark.parametrize("overrides", VARIANTS)
def test_save_load_round_trip(tmp_path, overrides):
    model, other = build(overrides, seed=0).eval(), build(overrides, seed=1).eval()
    x = ids(2, 9)
    assert_save_load_round_trip(model, other, x, tmp_path)
    if model.encoder.cfg.tie_weights:
        assert other.head.decoder.weight is other.encoder.embedding.weight


def test_eval_is_deterministic_and_train_mode_uses_dropout():
    model = build({"dropout": 0.5})
    x = ids(2, 9)
    assert_eval_deterministic_and_train_uses_dropout(model, x)


@pytest.mark.parametrize("cell", CELLS)
def test_state_carrying_two_halves_equal_one_pass(cell):
    model = build({"cell": cell}).eval()
    x = ids(2, 12)
    whole = model(x)
    first = model(x[:, :5])
    second = model(x[:, 5:], first.state)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], dim=1), whole.logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final_states(model, second.state), final_states(model, whole.state),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_step_decoding_equals_full_forward(cell):
    """Feeding one token at a time through `step` with its cache gives the full forward's logits."""
    model = build({"cell": cell}).eval()
    x = ids(2, 10)
    full = model(x).logits  # [B, T, V]
    logits, state = model.step(x[:, :4], None)
    torch.testing.assert_close(logits, full[:, 3], rtol=1e-5, atol=1e-6)
    for t in range(4, 10):
        logits, state = model.step(x[:, t:t + 1], state)
        torch.testing.assert_close(logits, full[:, t], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_cell_trace_equals_the_fused_recurrence(cell):
    """At every position, the traced cells equal the fused module's final state after that prefix."""
    model = build({"cell": cell, "dropout": 0.3}).eval()
    x = ids(1, 15)
    trace = model.encoder.cell_trace(x)  # [T, L, H]
    assert trace.shape == (15, model.encoder.cfg.num_layers, model.encoder.cfg.hidden_size)
    for t in range(15):
        fused = final_states(model, model(x[:, :t + 1]).state)[:, 0]  # [L, 1, H] -> [L, H]
        torch.testing.assert_close(trace[t], fused, rtol=1e-5, atol=1e-6)
    # ... and it continues from a carried state like the fused module does.
    head = model(x[:, :6]).state
    torch.testing.assert_close(model.encoder.cell_trace(x[:, 6:], head), trace[6:], rtol=1e-5, atol=1e-6)
    with pytest.raises(TextnnError, match=r"\[1, T\]"):
        model.encoder.cell_trace(ids(2, 5))


def test_lstm_forget_gate_bias_sums_to_one():
    model = build({"cell": "lstm"})
    hidden = model.encoder.cfg.hidden_size
    for layer in range(model.encoder.cfg.num_layers):
        b_ih = getattr(model.encoder.rnn, f"bias_ih_l{layer}")[hidden:2 * hidden]
        b_hh = getattr(model.encoder.rnn, f"bias_hh_l{layer}")[hidden:2 * hidden]
        torch.testing.assert_close(b_ih + b_hh, torch.ones(hidden))


@pytest.mark.parametrize("field,value", [("cell", "transformer"), ("hidden_size", 0), ("embedding_dim", -1),
                                         ("num_layers", 0), ("dropout", 1.0), ("dropout", -0.1),
                                         ("tie_weights", "yes")])
def test_bad_config_values_name_the_field(field, value):
    with pytest.raises(TextnnError, match=f"model.{field}"):
        PRESETS["tiny"].options(**{field: value})


def test_presets_resolve_through_the_registry():
    config_cls, model_cls, presets = model_entry("char_lstm_lm")
    assert (config_cls, model_cls) == (RNNLMConfig, RNNLM)
    assert {"tiny", "demo", "paper"} <= set(presets)
    for name in presets:
        presets[name].options()
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                               "model": {"name": "char_lstm_lm", "preset": "paper", "dropout": 0.2}}, "test")
    assert (config.model.num_layers, config.model.hidden_size, config.model.dropout) == (3, 512, 0.2)
