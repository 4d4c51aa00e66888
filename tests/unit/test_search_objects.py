"""Searches are objects that declare what they can do; commands and tasks ask those, never a search's name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from textnn.errors import TextnnError
from textnn.generation import SEARCHES, DecodingConfig, PromptDecoder, Search, decode


def test_each_search_declares_what_it_can_do():
    assert {name: (s.seeded, s.streams, s.ranked) for name, s in SEARCHES.items()} == {
        "greedy": (False, True, False), "sample": (True, True, False), "beam": (False, False, True)}
    beam = DecodingConfig(method="beam", beam_size=5)
    assert beam.search.rows_per_input(beam) == 5 and DecodingConfig().search.rows_per_input(DecodingConfig()) == 1


def test_a_report_names_the_search_that_ran_with_its_settings():
    sample = DecodingConfig(method="sample", temperature=0.7, top_p=0.9, seed=3)
    assert sample.search.describe(sample) == "sample, temperature 0.7, top-p 0.9, seed 3"
    beam = DecodingConfig(method="beam", beam_size=4, length_penalty=0.6)
    assert beam.search.describe(beam) == "beam 4, length penalty 0.6"
    assert DecodingConfig().search.describe(DecodingConfig()) == "greedy"
    # a new search is described by what it declares, not taken for beam search
    newcomer = Search("typical", SEARCHES["sample"].find, seeded=True, streams=True, ranked=False)
    assert newcomer.describe(dataclasses.replace(sample, seed=None)).startswith("typical, temperature 0.7")


def test_the_seed_is_drawn_once_for_a_seeded_search_only():
    drawn = DecodingConfig(method="sample").with_seed()
    assert isinstance(drawn.seed, int) and 0 <= drawn.seed < 2 ** 31
    assert drawn.with_seed() == drawn  # fixed: never drawn again
    assert DecodingConfig(method="sample", seed=7).with_seed().seed == 7
    assert DecodingConfig(method="greedy").with_seed().seed is None  # nothing to repeat


class Counter(PromptDecoder):
    """A decoder whose next token is always the previous one plus one (a deterministic toy)."""

    def step(self, tokens, state):
        logits = torch.full((tokens.size(0), 10), -10.0)
        logits[torch.arange(tokens.size(0)), (tokens[:, -1] + 1) % 10] = 10.0  # [B, V]
        return logits, state

    def reorder(self, state, indices):
        return state


def test_only_a_streaming_search_shows_tokens_as_they_come():
    prefix = torch.tensor([[1]])
    seen = []
    found = decode(Counter(), None, prefix, DecodingConfig(max_tokens=3),
                   on_step=lambda tokens, kept: seen.append(int(tokens[0])))
    assert seen == found[0][0].tokens == [2, 3, 4]
    with pytest.raises(TextnnError, match="cannot show tokens as they come"):
        decode(Counter(), None, prefix, DecodingConfig(method="beam", max_tokens=3), on_step=lambda t, k: None)
