"""Every language model decoded as itself (a `PromptDecoder`: its `step` and `reorder`) on its tiny preset.

Cached decoding (greedy, seeded sampling, beam search, which reorders the cache) == decoding by full
recomputation of every prefix; beam size 1 == greedy; a batch of prompts == each prompt alone.
"""

from __future__ import annotations

import pytest
import torch

from textnn.generation import DecodingConfig, decode
from tests.models.lm_checks import FullRecomputation, build_lm

VOCAB, PAD, STOP = 23, 0, 3
FAMILIES = ["nplm", "rnn_lm", "awd_lstm", "gpt", "transformer_xl"]
METHODS = [pytest.param({"method": "greedy"}, id="greedy"), pytest.param({"method": "sample", "seed": 2}, id="sample"),
           pytest.param({"method": "beam", "beam_size": 4, "n_best": 3}, id="beam")]


def build(name: str):
    """The family's tiny model with every parameter redrawn from N(0, 0.4^2): peaked next-token
    distributions, so that a wrong cache or a wrong row visibly changes what is decoded."""
    model = build_lm(name, None, VOCAB, pad_id=PAD)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.4)
    return model.eval()


def prompts(batch: int = 3, length: int = 4) -> torch.Tensor:
    return torch.randint(4, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))  # no PAD, no STOP


def outputs(found) -> list[list[tuple[list[int], bool]]]:
    return [[(h.tokens, h.finished) for h in row] for row in found]


# 4 prompt tokens + 10 new ones stay within the tiny GPT's context and Transformer-XL's evaluation memory (16),
# where recomputing the whole prefix is the exact reference.
@pytest.mark.parametrize("decoding", METHODS)
@pytest.mark.parametrize("name", FAMILIES)
def test_cached_decoding_equals_full_recomputation(name, decoding):
    model = build(name)
    cfg = DecodingConfig(max_tokens=10, length_penalty=0.6, **decoding)
    options = {"stop_ids": [STOP], "banned_ids": [PAD]}
    cached = decode(model, None, prompts(), cfg, **options)
    reference = decode(FullRecomputation(model), None, prompts(), cfg, **options)
    assert outputs(cached) == outputs(reference)
    assert [h.score for row in cached for h in row] == pytest.approx([h.score for row in reference for h in row],
                                                                     abs=1e-4)


@pytest.mark.parametrize("name", ["gpt", "rnn_lm"])
def test_beam_size_1_equals_greedy(name):
    model = build(name)
    options = {"stop_ids": [STOP], "banned_ids": [PAD]}
    greedy = decode(model, None, prompts(6), DecodingConfig(max_tokens=10, length_penalty=0.0), **options)
    beam = decode(model, None, prompts(6), DecodingConfig(method="beam", beam_size=1, max_tokens=10,
                                                                     length_penalty=0.0), **options)
    assert outputs(beam) == outputs(greedy)
    assert [row[0].log_prob for row in beam] == pytest.approx([row[0].log_prob for row in greedy], abs=1e-5)


@pytest.mark.parametrize("decoding", [METHODS[0], METHODS[2]])
@pytest.mark.parametrize("name", ["gpt", "rnn_lm"])
def test_a_batch_equals_each_prompt_alone(name, decoding):
    model = build(name)
    cfg = DecodingConfig(max_tokens=10, **decoding)
    options = {"stop_ids": [STOP], "banned_ids": [PAD]}
    together = decode(model, None, prompts(), cfg, **options)
    alone = [decode(model, None, prompt[None], cfg, **options)[0] for prompt in prompts()]
    assert outputs(together) == outputs(alone)
    scores = [h.score for row in together for h in row]
    assert scores == pytest.approx([h.score for row in alone for h in row], abs=1e-5)
    assert len({round(row[0].score, 3) for row in together}) > 1  # the prompts matter: rows can be told apart
