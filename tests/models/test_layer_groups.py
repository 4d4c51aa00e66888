"""Every encoder family declares its layer groups (input first) so that discriminative learning rates
and gradual unfreezing reach every parameter: each trainable parameter sits in exactly one group."""

from __future__ import annotations

import pytest
from torch import nn

from textnn import registry
from textnn.models.base import EncoderDecoder, EncoderWithHead, InputSpec
from textnn.models.elmo import NUM_CHARS as ELMO_CHARS
from textnn.modules.heads import ClassifierHead


def members(group: list) -> list[nn.Parameter]:
    return [p for m in group for p in ([m] if isinstance(m, nn.Parameter) else m.parameters())]


@pytest.mark.parametrize("name", [n for n in registry.ENCODERS if n != "char_lstm_lm"])
def test_layer_groups_cover_every_parameter_once_input_first(name):
    cls = registry.encoder_class(name)
    options = cls.presets["tiny"].options()
    spec = InputSpec(vocab_size=30, pad_id=1, num_chars=12, num_casings=5)
    # An encoder-decoder is built from a source and a target spec (here one joint vocabulary).
    if issubclass(cls, EncoderDecoder):
        encoder = cls(options, spec, spec)
        size = encoder.token_size
    else:
        encoder = cls(options, spec)
        size = encoder.sentence_size or encoder.token_size or 1
    model = EncoderWithHead(encoder, ClassifierHead(size, 3))
    groups = model.layer_groups()
    assert groups[-1][0] == "head" and len({n for n, _ in groups}) == len(groups)
    seen = [id(p) for _, group in groups for p in members(group)]
    params = {id(p) for p in model.parameters()}
    assert len(seen) == len(set(seen)), "a parameter is in two groups"
    assert set(seen) == params, "a parameter is in no group"
    if len(groups) > 2:  # an encoder with several groups starts from its inputs
        first = members(groups[0][1])
        # the word embedding, the character embedding, or ELMo's fixed byte embedding
        assert any(p.dim() == 2 and p.size(0) in (30, 12, ELMO_CHARS) for p in first), groups[0][0]
