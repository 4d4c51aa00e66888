"""The bert family on its tiny preset: shapes, gradients, padding and segments, layer groups, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from textnn.config import build_dataclass
from textnn.errors import TextnnError
from textnn.models.base import InputSpec, TokenFeatures
from textnn.models.bert import Bert, BertConfig, PRESETS
from textnn.registry import model_entry

VOCAB, PAD = 30, 0


def tiny(**overrides) -> Bert:
    torch.manual_seed(0)
    return Bert(PRESETS["tiny"].options(**overrides), InputSpec(VOCAB, PAD))


def test_shapes_and_every_parameter_gets_a_gradient():
    model = tiny()
    ids = torch.randint(1, VOCAB, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    out = model(ids, mask, features=TokenFeatures(segments=(torch.arange(7) > 3).long().expand(3, 7)))
    assert out.tokens.shape == (3, 7, 16) and out.sentence.shape == (3, 16)
    (out.tokens[mask].sum() + out.sentence.sum()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_padding_does_not_change_the_real_positions():
    model = tiny().eval()
    ids = torch.randint(1, VOCAB, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 5:] = False
    batch = model(ids, mask)
    alone = model(ids[:1, :5], mask[:1, :5])
    torch.testing.assert_close(batch.tokens[0, :5], alone.tokens[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(batch.sentence[0], alone.sentence[0], atol=1e-6, rtol=0)


def test_segments_are_read_and_default_to_zero():
    model = tiny().eval()
    ids = torch.randint(1, VOCAB, (1, 6))
    mask = torch.ones(1, 6, dtype=torch.bool)
    zeros = model(ids, mask, features=TokenFeatures(segments=torch.zeros(1, 6, dtype=torch.long)))
    torch.testing.assert_close(model(ids, mask).tokens, zeros.tokens)
    ones = model(ids, mask, features=TokenFeatures(segments=torch.ones(1, 6, dtype=torch.long)))
    assert not torch.allclose(ones.tokens, zeros.tokens)


def test_without_pooler_the_sentence_is_the_cls_state():
    model = tiny(pooler=False, segments=0).eval()
    out = model(torch.randint(1, VOCAB, (2, 5)), torch.ones(2, 5, dtype=torch.bool))
    torch.testing.assert_close(out.sentence, out.tokens[:, 0])
    assert model.segment_embedding is None


def test_train_mode_uses_dropout_and_eval_is_deterministic():
    model = tiny()
    ids, mask = torch.randint(1, VOCAB, (2, 6)), torch.ones(2, 6, dtype=torch.bool)
    assert not torch.equal(model(ids, mask).tokens, model(ids, mask).tokens)
    model.eval()
    assert torch.equal(model(ids, mask).tokens, model(ids, mask).tokens)


def test_attention_path_with_weights_equals_the_fused_one():
    model = tiny().eval()
    ids, mask = torch.randint(1, VOCAB, (2, 6)), torch.ones(2, 6, dtype=torch.bool)
    mask[1, 3:] = False
    states, maps = model.forward_with_attention(ids, mask)
    torch.testing.assert_close(states[mask], model(ids, mask).tokens[mask], atol=1e-5, rtol=0)
    assert maps.shape == (2, 2, 2, 6, 6)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 2, 6))


def test_layer_groups_go_from_the_embeddings_to_the_pooler():
    model = tiny()
    names = [name for name, _ in model.layer_groups()]
    assert names == ["embedding", "block1", "block2", "pooler"]
    grouped = {id(p) for _, modules in model.layer_groups() for m in modules for p in m.parameters()}
    assert grouped == {id(p) for p in model.parameters()}


def test_too_long_input_is_a_clear_error():
    model = tiny(max_positions=8)
    with pytest.raises(TextnnError, match="max_positions = 8"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 9, dtype=torch.bool))


@pytest.mark.parametrize("key,value", [("n_heads", 3), ("dropout", 1.0), ("gelu", "relu"), ("segments", -1)])
def test_invalid_config_values_are_refused(key, value):
    with pytest.raises(TextnnError, match=f"model.{key}"):
        build_dataclass(BertConfig, {**dataclasses.asdict(PRESETS["tiny"].model), key: value}, "model", "test")


def test_presets_resolve_through_the_registry():
    config_cls, encoder_cls, presets = model_entry("bert")
    assert encoder_cls is Bert and {"tiny", "mini", "small", "base", "paper"} <= set(presets)
    assert (presets["mini"].model.n_layers, presets["mini"].model.d_model) == (4, 256)
