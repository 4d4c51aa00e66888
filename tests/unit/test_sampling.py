"""Greedy decoding and sampling on the decoder protocol: seeding, top-k, top-p, stop tokens, the cache."""

from __future__ import annotations

import pytest
import torch

from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, filter_logits, greedy, sample

V = 6


class Bigram:
    """A fake decoder: the next-token logits depend only on the last token; records its calls."""

    def __init__(self, seed: int = 0):
        self.table = torch.randn(V, V, generator=torch.Generator().manual_seed(seed))  # [V, V]
        self.calls: list[tuple[tuple[int, ...], object]] = []

    def start(self, batch):
        return None

    def step(self, ids: torch.Tensor, state):
        self.calls.append((tuple(ids.shape), state))
        return self.table[ids[:, -1]], (0 if state is None else state) + 1  # [B, V], step counter

    def reorder(self, state, indices):
        return state


def tokens(found) -> list[list[int]]:
    """The new tokens of each row's single hypothesis."""
    return [row[0].tokens for row in found]


def draws(decoder, prompt: list[list[int]], n: int, **options) -> list[list[int]]:
    cfg = DecodingConfig(method="sample", max_tokens=n, **options)
    return tokens(sample(decoder, None, torch.tensor(prompt), cfg))


def greedy_chain(table: torch.Tensor, start: int, n: int) -> list[int]:
    out = [start]
    for _ in range(n):
        out.append(int(table[out[-1]].argmax()))
    return out[1:]


def test_same_seed_same_text_and_global_rng_untouched():
    model = Bigram()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = draws(model, [[1, 2]], 40, temperature=1.5, seed=7)
    b = draws(model, [[1, 2]], 40, temperature=1.5, seed=7)
    c = draws(model, [[1, 2]], 40, temperature=1.5, seed=8)
    assert torch.equal(torch.get_rng_state(), before)
    assert a == b and a != c and len(a[0]) == 40


def test_greedy_is_argmax_and_ignores_the_seed():
    model = Bigram()
    expected = greedy_chain(model.table, 3, 12)
    for seed in (None, 0, 1):
        cfg = DecodingConfig(method="greedy", max_tokens=12, seed=seed)
        assert tokens(greedy(model, None, torch.tensor([[3]]), cfg)) == [expected]


def test_top_k_1_equals_greedy():
    model = Bigram()
    assert draws(model, [[3]], 12, top_k=1, seed=5) == [greedy_chain(model.table, 3, 12)]


def test_top_p_restricts_draws_to_the_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0, 0.0]) + 1e-9
    logits = probs.log()[None]  # [1, V]
    # 0.5 + 0.3 = 0.8 >= 0.75: the nucleus is {0, 1}; the best token always stays.
    kept = torch.isfinite(filter_logits(logits, top_p=0.75))[0]
    assert kept.tolist() == [True, True, False, False, False, False]
    assert torch.isfinite(filter_logits(logits, top_p=0.1))[0].tolist() == [True] + [False] * 5
    assert torch.isfinite(filter_logits(logits, top_k=3))[0].tolist() == [True, True, True, False, False, False]

    class Fixed(Bigram):
        def step(self, ids, state):
            return logits.expand(ids.size(0), V), state

    nucleus = draws(Fixed(), [[0]] * 500, 1, top_p=0.75, seed=0)
    assert {row[0] for row in nucleus} == {0, 1}
    unrestricted = draws(Fixed(), [[0]] * 500, 1, seed=0)
    assert {2, 3} & {row[0] for row in unrestricted}


def test_prompt_is_read_once_then_one_token_per_step_with_the_cache():
    model = Bigram()
    out = draws(model, [[1, 2, 3], [4, 5, 0]], 4, seed=0)
    assert [len(row) for row in out] == [4, 4]
    assert [shape for shape, _ in model.calls] == [(2, 3), (2, 1), (2, 1), (2, 1)]
    assert [state for _, state in model.calls] == [None, 1, 2, 3]


def test_stop_ids_end_each_row_and_the_search_once_every_row_has_stopped():
    table = torch.full((V, V), -10.0)
    table[1, 2] = table[2, 5] = table[3, 4] = table[4, 3] = 10.0  # 1 -> 2 -> 5 (stop); 3 <-> 4 forever
    table[5, 0] = 10.0
    model = Bigram()
    model.table = table

    cfg = DecodingConfig(method="greedy", max_tokens=10)
    [[one]] = greedy(model, None, torch.tensor([[1]]), cfg, stop_ids=[5])
    assert one.tokens == [2] and one.finished
    assert len(model.calls) == 2  # nothing is read after the stop
    both = greedy(model, None, torch.tensor([[1], [3]]), DecodingConfig(method="greedy", max_tokens=5), stop_ids=[5])
    assert tokens(both) == [[2], [4, 3, 4, 3, 4]]
    assert [row[0].finished for row in both] == [True, False]
    # The log-probability counts the stop token; without stop_at_eos the stop id is an ordinary token.
    expected = sum(torch.log_softmax(table[a], -1)[b].item() for a, b in ((1, 2), (2, 5)))
    assert one.log_prob == pytest.approx(expected, abs=1e-6)
    free = greedy(model, None, torch.tensor([[1]]), DecodingConfig(method="greedy", max_tokens=4, stop_at_eos=False),
                  stop_ids=[5])
    assert tokens(free) == [[2, 5, 0, 0]] and not free[0][0].finished


@pytest.mark.parametrize("options", [{"temperature": 0.0}, {"temperature": -1.0}, {"top_k": -1}, {"top_p": 0.0},
                                     {"top_p": 1.5}, {"max_tokens": -1}, {"seed": 1.5}])
def test_bad_arguments_raise(options):
    with pytest.raises(TextnnError, match="decoding: "):
        DecodingConfig(method="sample", **options)


def test_a_prompt_without_tokens_raises():
    with pytest.raises(TextnnError, match=r"\[B, T0\] with T0 >= 1"):
        sample(Bigram(), None, torch.zeros(1, 0, dtype=torch.long), DecodingConfig(method="sample", max_tokens=3))
