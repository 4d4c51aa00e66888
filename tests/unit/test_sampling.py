"""Sampling on the step interface: seeding, greedy, top-k, top-p, stop tokens, the cache protocol."""

from __future__ import annotations

import pytest
import torch

from textnn.errors import TextnnError
from textnn.generation import filter_logits, sample

V = 6


class Bigram:
    """A fake decoder: the next-token logits depend only on the last token; records its calls."""

    def __init__(self, seed: int = 0):
        self.table = torch.randn(V, V, generator=torch.Generator().manual_seed(seed))  # [V, V]
        self.calls: list[tuple[tuple[int, ...], object]] = []

    def __call__(self, ids: torch.Tensor, state):
        self.calls.append((tuple(ids.shape), state))
        return self.table[ids[:, -1]], (0 if state is None else state) + 1  # [B, V], step counter


def greedy_chain(table: torch.Tensor, start: int, n: int) -> list[int]:
    out = [start]
    for _ in range(n):
        out.append(int(table[out[-1]].argmax()))
    return out


def test_same_seed_same_text_and_global_rng_untouched():
    model = Bigram()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = sample(model, [1, 2], 40, temperature=1.5, seed=7)
    b = sample(model, [1, 2], 40, temperature=1.5, seed=7)
    c = sample(model, [1, 2], 40, temperature=1.5, seed=8)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (42,) and a[:2].tolist() == [1, 2]


def test_greedy_is_argmax_and_temperature_zero_ignores_the_seed():
    model = Bigram()
    expected = greedy_chain(model.table, 3, 12)
    for seed in (None, 0, 1):
        assert sample(model, [3], 12, temperature=0, seed=seed).tolist() == expected


def test_top_k_1_equals_greedy():
    model = Bigram()
    assert sample(model, [3], 12, temperature=1.0, top_k=1, seed=5).tolist() == greedy_chain(model.table, 3, 12)


def test_top_p_restricts_draws_to_the_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0, 0.0]) + 1e-9
    logits = probs.log()[None]  # [1, V]
    # 0.5 + 0.3 = 0.8 >= 0.75: the nucleus is {0, 1}; the best token always stays.
    kept = torch.isfinite(filter_logits(logits, top_p=0.75))[0]
    assert kept.tolist() == [True, True, False, False, False, False]
    assert torch.isfinite(filter_logits(logits, top_p=0.1))[0].tolist() == [True] + [False] * 5
    assert torch.isfinite(filter_logits(logits, top_k=3))[0].tolist() == [True, True, True, False, False, False]

    def step(ids, state):
        return logits.expand(ids.size(0), V), state

    draws = sample(step, torch.zeros(500, 1, dtype=torch.long), 1, temperature=1.0, top_p=0.75, seed=0)[:, 1]
    assert set(draws.tolist()) == {0, 1}
    unrestricted = sample(step, torch.zeros(500, 1, dtype=torch.long), 1, temperature=1.0, seed=0)[:, 1]
    assert {2, 3} & set(unrestricted.tolist())


def test_prompt_is_read_once_then_one_token_per_step_with_the_cache():
    model = Bigram()
    out = sample(model, torch.tensor([[1, 2, 3], [4, 5, 0]]), 4, seed=0)
    assert out.shape == (2, 7)
    assert [shape for shape, _ in model.calls] == [(2, 3), (2, 1), (2, 1), (2, 1)]
    assert [state for _, state in model.calls] == [None, 1, 2, 3]


def test_stop_ids_end_generation_and_finished_rows_repeat_their_stop_token():
    table = torch.full((V, V), -10.0)
    table[1, 2] = table[2, 5] = table[3, 4] = table[4, 3] = 10.0  # 1 -> 2 -> 5 (stop); 3 <-> 4 forever
    table[5, 0] = 10.0

    def step(ids, state):
        return table[ids[:, -1]], state

    one = sample(step, [1], 10, temperature=0, stop_ids=[5])
    assert one.tolist() == [1, 2, 5]
    both = sample(step, torch.tensor([[1], [3]]), 5, temperature=0, stop_ids=[5])
    assert both.tolist() == [[1, 2, 5, 5, 5, 5], [3, 4, 3, 4, 3, 4]]


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5},
                                    {"max_new_tokens": -1}])
def test_bad_arguments_raise(kwargs):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(TextnnError):
        sample(Bigram(), [1], **args)


def test_empty_prompt_raises():
    with pytest.raises(TextnnError, match="at least one token"):
        sample(Bigram(), [], 3)
