"""Several prompts decoded side by side (`generate_texts`, `decoding.decode_side_by_side`) give each prompt
exactly what `generate_text` gives it alone, for every language-model family: its own seed, its own number
of samples, rows that end early, prompts of other lengths, and a request that leaves mid-way."""

from __future__ import annotations

import pytest
import torch

from textnn.generation import DecodingConfig, generate_text
from textnn.generation.lm import Request, generate_texts, prompt_length
from textnn.models.awd_lstm import PRESETS as AWD_PRESETS
from textnn.models.gpt import PRESETS as GPT_PRESETS
from textnn.models.nplm import PRESETS as NPLM_PRESETS
from textnn.models.rnn_lm import PRESETS as RNN_PRESETS
from textnn.models.transformer_xl import PRESETS as XL_PRESETS
from textnn.tasks.language_modeling import language_model
from tests.unit.test_generation import char_task

FAMILIES = {"gpt": GPT_PRESETS, "rnn_lm": RNN_PRESETS, "awd_lstm": AWD_PRESETS, "nplm": NPLM_PRESETS,
            "transformer_xl": XL_PRESETS}


def model_of(family: str, vocab_size: int):
    torch.manual_seed(0)
    model = language_model(family, FAMILIES[family]["tiny"].options(), vocab_size)
    with torch.no_grad():  # a peaked distribution, so that seeds and prompts visibly matter
        for param in model.parameters():
            param.normal_(0.0, 0.4)
    return model.eval()


def alone(model, task, request: Request):
    return generate_text(model, task, request.prompt, request.decoding, request.num_samples)


def same(found, expected) -> bool:
    """Equal generations: the texts exactly, the scores up to the last bits of float sums (a batch of other
    rows may change those)."""
    return len(found) == len(expected) and all(
        (ours.samples, ours.seed, ours.new_tokens, ours.prompt_tokens) ==
        (theirs.samples, theirs.seed, theirs.new_tokens, theirs.prompt_tokens)
        and ours.scores == pytest.approx(theirs.scores, rel=1e-5) for ours, theirs in zip(found, expected))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_prompts_side_by_side_get_what_each_gets_alone(family):
    task = char_task()
    model = model_of(family, len(task.vocab))
    sampled = DecodingConfig(method="sample", max_tokens=30, temperature=0.9, stop_at_eos=True)
    greedy = DecodingConfig(method="greedy", max_tokens=30)
    requests = [Request("abc", DecodingConfig(**{**sampled.__dict__, "seed": 1}), 2),
                Request("hag", DecodingConfig(**{**sampled.__dict__, "seed": 2})),
                Request("ab", DecodingConfig(**{**sampled.__dict__, "seed": 3})),  # another length: its own batch
                Request("bcd", DecodingConfig(**{**sampled.__dict__, "seed": 1}), 3),
                Request("", greedy, 2), Request("c", greedy), Request("fed", greedy)]
    found = generate_texts(model, task, requests)
    expected = [alone(model, task, request) for request in requests]
    assert same(found, expected)
    assert len({text for generation in found for text in generation.samples}) > 5  # the seeds and prompts matter
    assert any(count < 30 for generation in found for count in generation.new_tokens)  # some rows ended early


def test_a_request_that_leaves_is_dropped_and_the_others_are_unchanged():
    task = char_task()
    model = model_of("gpt", len(task.vocab))
    requests = [Request("abc", DecodingConfig(method="sample", max_tokens=40, stop_at_eos=False, seed=seed))
                for seed in (4, 5, 6)]
    asked: list[int] = []

    def leave(number: int) -> bool:
        asked.append(number)
        return number == 1 and asked.count(1) > 3  # request 1 leaves after its third step

    found = generate_texts(model, task, requests, leave)
    assert found[1] is None
    assert same([found[0], found[2]], [alone(model, task, requests[0]), alone(model, task, requests[2])])
    assert asked.count(1) == 4 and asked.count(0) > 30  # asked no more once it left


def test_prompt_length_is_what_the_model_reads():
    task = char_task()
    assert prompt_length(task, "abc") == 3 and prompt_length(task, "") == 1  # an empty prompt: one line end
