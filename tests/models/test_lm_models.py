"""Shared harness for the language models on their tiny presets: nplm, rnn_lm (and a tied-projection
variant), awd_lstm.

Shapes, finite loss, a gradient for every parameter, a safetensors round trip, eval determinism,
dropout in training, two windows with the carried state == one pass over both, `step` decoding ==
the full forward's logits, preset resolution and config errors naming the field.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from textnn.config import config_from_dict
from textnn.errors import TextnnError
from textnn.registry import TASK_MODELS, model_entry
from textnn.training.checkpoint import load_weights, save_weights

VOCAB, PAD = 29, 0
MODELS = [pytest.param("nplm", {}, id="nplm"), pytest.param("rnn_lm", {}, id="rnn_lm"),
          pytest.param("rnn_lm", {"tie_weights": True, "cell": "gru"}, id="rnn_lm-gru-tied-projected"),
          pytest.param("awd_lstm", {}, id="awd_lstm"),
          pytest.param("awd_lstm", {"tie_weights": False, "num_layers": 1}, id="awd_lstm-1layer-untied")]


def build(name: str, overrides: dict, seed: int = 0):
    config_cls, model_cls, presets = model_entry(name)
    torch.manual_seed(seed)
    return model_cls(config_cls(**{**presets["tiny"], **overrides}), vocab_size=VOCAB, pad_id=PAD)


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name,overrides", MODELS)
def test_shapes_finite_loss_and_every_parameter_gets_a_gradient(name, overrides):
    model = build(name, overrides).train()
    out = model(ids(3, 7))
    assert out.logits.shape == (3, 7, VOCAB)
    loss = F.cross_entropy(out.logits.reshape(-1, VOCAB), ids(3, 7, seed=1).reshape(-1))  # [B*T, V]
    if out.regularizer is not None:
        assert out.regularizer.dim() == 0 and out.regularizer > 0
        loss = loss + out.regularizer
    assert torch.isfinite(loss)
    loss.backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name,overrides", MODELS)
def test_save_load_round_trip(tmp_path, name, overrides):
    model, other = build(name, overrides, seed=0).eval(), build(name, overrides, seed=1).eval()
    x = ids(2, 9)
    assert not torch.allclose(model(x).logits, other(x).logits)
    save_weights(model, tmp_path / "model.safetensors")
    load_weights(other, tmp_path / "model.safetensors")
    torch.testing.assert_close(model(x).logits, other(x).logits, rtol=0, atol=0)


@pytest.mark.parametrize("name,overrides", MODELS)
def test_eval_is_deterministic_and_training_uses_dropout(name, overrides):
    model = build(name, overrides)
    x = ids(2, 9)
    model.eval()
    first = model(x)
    torch.testing.assert_close(first.logits, model(x).logits, rtol=0, atol=0)
    assert first.regularizer is None  # regularizers are a training-time term only
    model.train()
    assert not torch.allclose(model(x).logits, model(x).logits)


@pytest.mark.parametrize("name,overrides", MODELS)
def test_two_windows_with_the_carried_state_equal_one_pass(name, overrides):
    model = build(name, overrides).eval()
    x = ids(2, 13)
    whole = model(x).logits
    for cut in (1, 3, 6):  # shorter and longer than the NPLM's context
        first = model(x[:, :cut])
        second = model(x[:, cut:], first.state)
        torch.testing.assert_close(torch.cat([first.logits, second.logits], dim=1), whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,overrides", MODELS)
def test_step_decoding_equals_the_full_forward(name, overrides):
    model = build(name, overrides).eval()
    x = ids(2, 10)
    full = model(x).logits  # [B, T, V]
    logits, state = model.step(x[:, :4], None)
    torch.testing.assert_close(logits, full[:, 3], rtol=1e-5, atol=1e-6)
    for t in range(4, 10):
        logits, state = model.step(x[:, t:t + 1], state)
        torch.testing.assert_close(logits, full[:, t], rtol=1e-5, atol=1e-6)


def test_nplm_reads_exactly_the_last_n_minus_1_tokens():
    """A prediction changes with the last C = context_size inputs and with nothing before them."""
    model = build("nplm", {}).eval()  # tiny: C = 3
    x = ids(1, 8)
    changed = x.clone()
    changed[0, 3] = (x[0, 3] % (VOCAB - 1)) + 1  # a different token at position 3
    a, b = model(x).logits[0], model(changed).logits[0]
    assert torch.equal(a[:3], b[:3])  # before position 3: unaffected
    for t in (3, 4, 5):  # position 3 is in the context of predictions 3, 4 and 5
        assert not torch.allclose(a[t], b[t])
    assert torch.equal(a[6:], b[6:])  # out of reach of a 3-token context
    no_direct = build("nplm", {"direct": False})
    assert no_direct.direct is None and build("nplm", {}).direct.weight.shape == (VOCAB, 3 * 8)


def test_nplm_start_of_stream_context_is_the_zero_padding_embedding():
    model = build("nplm", {}).eval()
    x = ids(2, 4)
    padded = torch.cat([torch.full((2, 3), PAD), x], dim=1)
    # Reading three pads first is the same as starting the stream: their embedding is the zero vector.
    torch.testing.assert_close(model(padded).logits[:, 3:], model(x).logits)
    assert model.embedding.weight[PAD].abs().sum() == 0


@pytest.mark.parametrize("name", ["nplm", "rnn_lm", "awd_lstm"])
def test_presets_resolve_through_the_registry_and_config(name):
    assert name in TASK_MODELS["language_modeling"]
    config_cls, _, presets = model_entry(name)
    assert {"tiny", "paper"} <= set(presets)
    for preset in presets.values():
        config_cls(**preset)
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                               "model": {"name": name, "preset": "paper"}}, "test")
    assert isinstance(config.model, config_cls)


def test_paper_presets_have_the_published_sizes():
    awd = model_entry("awd_lstm")[0](**model_entry("awd_lstm")[2]["paper"])
    assert (awd.embedding_dim, awd.hidden_size, awd.num_layers, awd.tie_weights) == (400, 1150, 3, True)
    _, model_cls, presets = model_entry("awd_lstm")
    model = model_cls(awd, vocab_size=33_279)  # WikiText-2 with <pad>: the paper's 33M parameters
    assert 33.0e6 < sum(p.numel() for p in model.parameters()) < 34.0e6  # 33.56M: "33M" in Table 2
    gluon = model_entry("rnn_lm")[2]["gluon_2x200"]
    assert gluon == {"cell": "lstm", "embedding_dim": 200, "hidden_size": 200, "num_layers": 2, "dropout": 0.2,
                     "tie_weights": True}
    assert model_entry("char_lstm_lm") == model_entry("rnn_lm")  # the older name loads the same family


@pytest.mark.parametrize("name,field,value", [
    ("nplm", "context_size", 0), ("nplm", "hidden_size", -1), ("nplm", "dropout", 1.0), ("nplm", "direct", "no"),
    ("awd_lstm", "weight_drop", 1.0), ("awd_lstm", "dropout_embedding", -0.1), ("awd_lstm", "alpha", -1.0),
    ("awd_lstm", "num_layers", 0), ("awd_lstm", "tie_weights", "yes")])
def test_bad_config_values_name_the_field(name, field, value):
    config_cls, _, presets = model_entry(name)
    with pytest.raises(TextnnError, match=f"model.{field}"):
        config_cls(**{**presets["tiny"], field: value})
    with pytest.raises(TextnnError, match="model.hidden_size"):
        model_entry("nplm")[0](hidden_size=0, direct=False)
