"""Shared harness for the language models on their tiny presets: nplm, rnn_lm (and a tied-projection
variant), awd_lstm, each built through the registry as an encoder with an LMHead.

Shapes, finite loss, a gradient for every parameter, a safetensors round trip, eval determinism,
dropout in training, two windows with the carried state == one pass over both, `step` decoding ==
the full forward's logits, preset resolution and config errors naming the field. For all five
families (gpt and transformer_xl too): the model is the registered encoder with an LMHead over its
states, a tied head shares the embedding parameter, `reorder` continues like decoding the
reordered prompts from scratch, and the layer groups hold every parameter once, input first.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.errors import TextnnError
from textnn.models.base import Encoder
from textnn.modules.heads import LMHead
from textnn.registry import model_entry
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import LanguageModelingTask, language_model
from tests.models.lm_checks import (assert_reordered_state_continues_like_reordered_prompts,
                                    assert_save_load_round_trip, build_lm)

VOCAB, PAD = 29, 0
MODELS = [pytest.param("nplm", {}, id="nplm"), pytest.param("rnn_lm", {}, id="rnn_lm"),
          pytest.param("rnn_lm", {"tie_weights": True, "cell": "gru"}, id="rnn_lm-gru-tied-projected"),
          pytest.param("awd_lstm", {}, id="awd_lstm"),
          pytest.param("awd_lstm", {"tie_weights": False, "num_layers": 1}, id="awd_lstm-1layer-untied")]
# Every language-model family, tied and untied where it can be either.
FAMILIES = MODELS + [
    pytest.param("nplm", {"hidden_size": 0}, id="nplm-direct-only"),
    pytest.param("nplm", {"direct": False}, id="nplm-hidden-only"),
    pytest.param("rnn_lm", {"cell": "rnn", "tie_weights": True, "embedding_dim": 16}, id="rnn_lm-elman-tied"),
    pytest.param("gpt", {}, id="gpt"), pytest.param("gpt", {"tie": False}, id="gpt-untied"),
    pytest.param("transformer_xl", {}, id="transformer_xl"),
    pytest.param("transformer_xl", {"tie_weights": False}, id="transformer_xl-untied")]


def build(name: str, overrides: dict, seed: int = 0):
    return build_lm(name, overrides, VOCAB, seed=seed, pad_id=PAD)


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# --- every family: an encoder with an LMHead ---------------------------------------------------------

@pytest.mark.parametrize("name,overrides", FAMILIES)
def test_the_model_is_the_registered_encoder_with_an_lm_head_over_its_states(name, overrides):
    model = build(name, overrides).eval()
    encoder, head = model.encoder, model.head
    assert type(encoder) is registry.encoder_class(name) and isinstance(encoder, Encoder)
    assert encoder.gives_tokens and encoder.causal and LanguageModelingTask.unusable_reason(type(encoder)) is None
    assert isinstance(head, LMHead)
    assert head.decoder.in_features == encoder.token_size and head.decoder.out_features == VOCAB
    assert (head.decoder.bias is not None) == encoder.lm_bias == (name != "gpt")  # GPT-2 has no output bias
    x = ids(2, 7)
    states = encoder(x, torch.ones_like(x, dtype=torch.bool)).tokens
    assert states.shape == (2, 7, encoder.token_size)
    torch.testing.assert_close(model(x).logits, head(states), rtol=0, atol=0)


@pytest.mark.parametrize("name,overrides", FAMILIES)
def test_a_tied_head_shares_the_embedding_parameter_counted_once(name, overrides):
    model = build(name, overrides)
    tied = model.encoder.output_embedding()
    weight = model.head.decoder.weight
    encoder_params = list(model.encoder.parameters())
    if tied is None:
        assert all(weight is not p for p in encoder_params)
        return
    assert weight is tied and any(tied is p for p in encoder_params)
    assert sum(1 for p in model.parameters() if p is tied) == 1
    head_own = sum(p.numel() for p in model.head.parameters() if all(p is not q for q in encoder_params))
    assert model.num_parameters() == sum(p.numel() for p in encoder_params) + head_own
    # A step on the head's weight is a step on the embedding: one tensor, not two copies.
    with torch.no_grad():
        weight[3].add_(1.0)
    assert torch.equal(tied[3], weight[3])


@pytest.mark.parametrize("name,overrides", FAMILIES)
@pytest.mark.parametrize("indices", [[2, 0, 1], [1, 1, 2], [2, 0]], ids=["permuted", "repeated", "fewer"])
def test_reorder_continues_like_decoding_the_reordered_prompts(name, overrides, indices):
    """14 more tokens after a 5-token prompt: past GPT's 16 learned positions (its cache is rebuilt
    from the reordered tokens) and past the NPLM's context."""
    model = build(name, overrides)
    assert_reordered_state_continues_like_reordered_prompts(
        model, ids(3, 5, seed=1), ids(len(indices), 14, seed=2), torch.tensor(indices))
    assert model.reorder(None, torch.tensor(indices)) is None


@pytest.mark.parametrize("name,overrides", FAMILIES)
def test_layer_groups_hold_every_parameter_once_from_the_input_up(name, overrides):
    model = build(name, overrides)
    groups = model.layer_groups()
    assert groups[0][0] == "embedding" and groups[-1] == ("head", [model.head])
    seen = [id(p) for _, modules in groups[:-1] for m in modules for p in m.parameters()]
    assert len(seen) == len(set(seen))
    assert set(seen) == {id(p) for p in model.encoder.parameters()}


class _Bidirectional(Encoder):
    gives_tokens = True


class _CharReader(Encoder):
    gives_tokens = causal = True
    reads = ("chars",)


def test_the_task_refuses_encoders_that_are_not_causal_or_read_more_than_ids():
    assert "causal" in LanguageModelingTask.unusable_reason(_Bidirectional)
    assert "chars" in LanguageModelingTask.unusable_reason(_CharReader)


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
    assert_save_load_round_trip(model, other, ids(2, 9), tmp_path)
    if model.encoder.output_embedding() is not None:
        assert other.head.decoder.weight is other.encoder.output_embedding()  # still one tensor after loading


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
    # One output layer over [tanh(d + H x); x]: U's H = 16 columns and W's C * E = 3 * 8 (eq. 1).
    assert build("nplm", {}).head.decoder.weight.shape == (VOCAB, 16 + 3 * 8)
    assert build("nplm", {"direct": False}).head.decoder.weight.shape == (VOCAB, 16)
    assert build("nplm", {"hidden_size": 0}).head.decoder.weight.shape == (VOCAB, 3 * 8)


def test_nplm_start_of_stream_context_is_the_zero_padding_embedding():
    model = build("nplm", {}).eval()
    x = ids(2, 4)
    padded = torch.cat([torch.full((2, 3), PAD), x], dim=1)
    # Reading three pads first is the same as starting the stream: their embedding is the zero vector.
    torch.testing.assert_close(model(padded).logits[:, 3:], model(x).logits)
    assert model.encoder.embedding.weight[PAD].abs().sum() == 0


@pytest.mark.parametrize("name", ["nplm", "rnn_lm", "awd_lstm"])
def test_presets_resolve_through_the_registry_and_config(name):
    config_cls, _, presets = model_entry(name)
    assert {"tiny", "paper"} <= set(presets)
    for preset in presets.values():
        assert isinstance(preset.model, config_cls)
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text"},
                               "model": {"name": name, "preset": "paper"}}, "test")
    assert isinstance(config.model, config_cls)


def test_paper_presets_have_the_published_sizes():
    awd = model_entry("awd_lstm")[2]["paper"].options()
    assert (awd.embedding_dim, awd.hidden_size, awd.num_layers, awd.tie_weights) == (400, 1150, 3, True)
    model = language_model("awd_lstm", awd, 33_279)  # WikiText-2 with <pad>: the paper's 33M parameters
    assert 33.0e6 < model.num_parameters() < 34.0e6  # 33.56M: "33M" in Table 2
    gluon = model_entry("rnn_lm")[2]["gluon_2x200"].model
    assert (gluon.cell, gluon.embedding_dim, gluon.hidden_size, gluon.num_layers, gluon.dropout, gluon.tie_weights) \
        == ("lstm", 200, 200, 2, 0.2, True)
    assert model_entry("char_lstm_lm") == model_entry("rnn_lm")  # the older name loads the same family


@pytest.mark.parametrize("name,field,value", [
    ("nplm", "context_size", 0), ("nplm", "hidden_size", -1), ("nplm", "dropout", 1.0), ("nplm", "direct", "no"),
    ("awd_lstm", "weight_drop", 1.0), ("awd_lstm", "dropout_embedding", -0.1), ("awd_lstm", "alpha", -1.0),
    ("awd_lstm", "num_layers", 0), ("awd_lstm", "tie_weights", "yes")])
def test_bad_config_values_name_the_field(name, field, value):
    config_cls, _, presets = model_entry(name)
    with pytest.raises(TextnnError, match=f"model.{field}"):
        presets["tiny"].options(**{field: value})
    with pytest.raises(TextnnError, match="model.hidden_size"):
        model_entry("nplm")[0](hidden_size=0, direct=False)
