"""The searches of generation/decoding.py on fake decoders whose logits depend on the whole prefix.

Beam search == exhaustive search over every output when the beam holds every prefix, with and
without a length penalty; the stopping rule (a finished top hypothesis does not end the search while
a live one can still beat it); beam size 1 == greedy; a batch == its sentences one by one; n-best
lists; absolute and source-relative maximum lengths; the length penalties; the config's checks.
"""

from __future__ import annotations

import math

import pytest
import torch

from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, beam_search, decode, greedy, length_penalty, sample

EOS = 0


class PrefixDecoder:
    """A fake decoder: next-token logits are a function of (source id, every token so far).

    `start(batch)` takes the source ids [B]; the state is (source ids, tokens so far [B, T]), and
    `reorder` indexes both, as a real decoder reorders its cache.
    """

    vocab: int

    def logits(self, source: int, sequence: list[int]) -> torch.Tensor:  # [V]
        raise NotImplementedError

    def start(self, batch: torch.Tensor):
        return batch, None

    def step(self, tokens: torch.Tensor, state):
        source, seen = state
        seen = tokens if seen is None else torch.cat([seen, tokens], dim=1)  # [B, T]
        rows = [self.logits(s, row) for s, row in zip(source.tolist(), seen.tolist())]
        return torch.stack(rows), (source, seen)  # [B, V]

    def reorder(self, state, indices: torch.Tensor):
        source, seen = state
        return source[indices], seen[indices]


class HashDecoder(PrefixDecoder):
    """Logits: a row of a fixed random table picked by a hash of the source and the whole prefix."""

    def __init__(self, vocab: int = 4, seed: int = 0, scale: float = 1.5):
        self.vocab = vocab
        self.table = torch.randn(997, vocab, generator=torch.Generator().manual_seed(seed)) * scale  # [997, V]

    def logits(self, source: int, sequence: list[int]) -> torch.Tensor:
        h = 17 + source
        for token in sequence:
            h = (h * 31 + token + 1) % 1_000_003
        return self.table[h % len(self.table)]


class TableDecoder(PrefixDecoder):
    """Given next-token probabilities after given outputs (the prefix's one token excluded); uniform elsewhere."""

    def __init__(self, probs: dict[tuple[int, ...], list[float]], vocab: int = 3):
        self.probs, self.vocab = probs, vocab

    def logits(self, source: int, sequence: list[int]) -> torch.Tensor:
        return torch.tensor(self.probs.get(tuple(sequence[1:]), [1.0] * self.vocab)).log()


def exhaustive(decoder: PrefixDecoder, source: int, prefix: list[int], cfg: DecodingConfig, limit: int,
               stop_ids=(EOS,), banned_ids=()) -> dict[tuple[tuple[int, ...], bool], float]:
    """The score of every possible output (tokens, ended by a stop id) of at most `limit` new tokens."""
    scores = {}

    def grow(tokens: list[int], log_prob: float) -> None:
        if len(tokens) == limit:
            scores[tuple(tokens), False] = log_prob / length_penalty(limit, cfg.length_penalty, cfg.length_penalty_kind)
            return
        logits = decoder.logits(source, prefix + tokens).float().clone()
        logits[list(banned_ids)] = -math.inf
        if len(tokens) < cfg.min_tokens:
            logits[list(stop_ids)] = -math.inf
        for token, value in enumerate(torch.log_softmax(logits, dim=-1).tolist()):
            if value == -math.inf:
                continue
            if token in stop_ids:
                penalty = length_penalty(len(tokens) + 1, cfg.length_penalty, cfg.length_penalty_kind)
                scores[tuple(tokens), True] = (log_prob + value) / penalty
            else:
                grow(tokens + [token], log_prob + value)

    grow([], 0.0)
    return scores


def assert_n_best_of(found, reference: dict, n: int) -> None:
    """`found` holds n hypotheses, sorted, distinct, each scored as the reference scores it, and their
    scores are the n best of the reference (ties may come in either order)."""
    assert len(found) == n
    keys = [(tuple(h.tokens), h.finished) for h in found]
    assert len(set(keys)) == n
    for key, h in zip(keys, found):
        assert h.score == pytest.approx(reference[key], abs=1e-5)
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
    best = sorted(reference.values(), reverse=True)[:n]
    assert [h.score for h in found] == pytest.approx(best, abs=1e-5)


# ------------------------------------------------------------------------------------- exactness

SOURCES = [0, 5, 9]
PREFIXES = [[1, 2], [2, 2], [3, 1]]  # a different prefix per row, the same length


@pytest.mark.parametrize("limit", [2, 3, 4])
@pytest.mark.parametrize("alpha,kind", [(0.0, "gnmt"), (0.6, "gnmt"), (2.0, "gnmt"), (1.0, "plain")])
@pytest.mark.parametrize("n_best", [1, 3])
def test_a_beam_holding_every_prefix_finds_the_exhaustive_n_best(limit, alpha, kind, n_best):
    decoder = HashDecoder(vocab=4, seed=limit)
    cfg = DecodingConfig(method="beam", beam_size=4 ** limit, n_best=n_best, max_tokens=limit, length_penalty=alpha,
                         length_penalty_kind=kind)
    found = beam_search(decoder, torch.tensor(SOURCES), torch.tensor(PREFIXES), cfg, stop_ids=[EOS])
    for row, (source, prefix) in enumerate(zip(SOURCES, PREFIXES)):
        assert_n_best_of(found[row], exhaustive(decoder, source, prefix, cfg, limit), n_best)


def test_banned_ids_and_min_tokens_are_respected_exactly():
    decoder = HashDecoder(vocab=5, seed=3)
    cfg = DecodingConfig(method="beam", beam_size=5 ** 3, n_best=4, max_tokens=3, min_tokens=2, length_penalty=0.6)
    found = beam_search(decoder, torch.tensor(SOURCES), torch.tensor(PREFIXES), cfg, stop_ids=[EOS], banned_ids=[4])
    for row, (source, prefix) in enumerate(zip(SOURCES, PREFIXES)):
        reference = exhaustive(decoder, source, prefix, cfg, 3, banned_ids=[4])
        assert all(4 not in tokens and len(tokens) >= 2 for tokens, _ in reference)
        assert_n_best_of(found[row], reference, 4)


# ------------------------------------------------------------------------------------- stopping rule

def test_a_finished_top_beam_does_not_end_the_search_while_a_live_one_can_beat_it():
    """alpha = 0. Step 1: A (0.6) leads B (0.39). Step 2: the top beam A ends (A EOS, p 0.3) and is among
    the 2 best candidates, but B A (p 0.38) is live and ends better at step 3 (B A EOS, p 0.34)."""
    decoder = TableDecoder({(): [0.01, 0.6, 0.39], (1,): [0.5, 0.25, 0.25], (2,): [0.01, 0.98, 0.01],
                            (2, 1): [0.9, 0.05, 0.05]})
    cfg = DecodingConfig(method="beam", beam_size=2, max_tokens=5, length_penalty=0.0)
    [[best]] = beam_search(decoder, torch.tensor([0]), torch.tensor([[1]]), cfg, stop_ids=[EOS])
    reference = exhaustive(decoder, 0, [1], cfg, 5)
    assert max(reference, key=reference.get) == ((2, 1), True)  # the construction: B A EOS is the best output
    assert (best.tokens, best.finished) == ([2, 1], True)
    assert best.score == pytest.approx(math.log(0.39 * 0.98 * 0.9), abs=1e-6)


def test_with_a_length_penalty_a_longer_hypothesis_beats_the_first_finished_one():
    """Step 1's best candidate is EOS (p 0.5, score log 0.5 at |Y| = 1). A (0.45) then ends with
    p 0.97: log(0.45 * 0.97) = -0.83 is lower, but divided by lp(2) = (7/6)^2 it is -0.61 > -0.69.
    Searching on needs the bound with the penalty: A's raw log-probability -0.80 is already below -0.69."""
    decoder = TableDecoder({(): [0.5, 0.45, 0.05], (1,): [0.97, 0.02, 0.01]})
    cfg = DecodingConfig(method="beam", beam_size=2, max_tokens=5, length_penalty=2.0)
    [[best]] = beam_search(decoder, torch.tensor([0]), torch.tensor([[1]]), cfg, stop_ids=[EOS])
    reference = exhaustive(decoder, 0, [1], cfg, 5)
    assert max(reference, key=reference.get) == ((1,), True)
    assert (best.tokens, best.finished) == ([1], True)
    assert best.score == pytest.approx(math.log(0.45 * 0.97) / (7 / 6) ** 2, abs=1e-6)
    # Without the penalty the one-token output is the best and the search ends with it.
    [[plain]] = beam_search(decoder, torch.tensor([0]), torch.tensor([[1]]), DecodingConfig(
        method="beam", beam_size=2, max_tokens=5, length_penalty=0.0), stop_ids=[EOS])
    assert (plain.tokens, plain.finished) == ([], True)


# ------------------------------------------------------------------------------------- greedy, batches

@pytest.mark.parametrize("options", [{"length_penalty": 0.0}, {"length_penalty": 0.0, "min_tokens": 3},
                                     {"length_penalty": 1.0, "stop_at_eos": False}])
def test_beam_size_1_equals_greedy(options):
    decoder = HashDecoder(vocab=6, seed=1)
    sources, prefixes = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]), torch.tensor([[1, 2]] * 8)
    greedy_cfg = DecodingConfig(method="greedy", max_tokens=12, **options)
    beam_cfg = DecodingConfig(method="beam", beam_size=1, max_tokens=12, **options)
    expected = greedy(decoder, sources, prefixes, greedy_cfg, stop_ids=[EOS], banned_ids=[5])
    found = beam_search(decoder, sources, prefixes, beam_cfg, stop_ids=[EOS], banned_ids=[5])
    assert found == expected  # tokens, log-probabilities, scores, finished: all equal
    assert {len(row[0].tokens) for row in expected} != {12} or not options.get("stop_at_eos", True)


def test_with_a_length_penalty_beam_size_1_finds_greedys_output_or_a_better_longer_one():
    decoder = HashDecoder(vocab=6, seed=1)
    sources, prefixes = torch.arange(12), torch.tensor([[1, 2]] * 12)
    expected = greedy(decoder, sources, prefixes, DecodingConfig(method="greedy", max_tokens=12, length_penalty=1.0),
                      stop_ids=[EOS])
    found = beam_search(decoder, sources, prefixes, DecodingConfig(method="beam", beam_size=1, max_tokens=12,
                                                                   length_penalty=1.0), stop_ids=[EOS])
    for [g], [b] in zip(expected, found):
        assert b == g or (b.score > g.score and len(b.tokens) > len(g.tokens) and b.tokens[:len(g.tokens)] == g.tokens)


@pytest.mark.parametrize("cfg", [DecodingConfig(method="greedy", max_tokens=9),
                                 DecodingConfig(method="beam", beam_size=3, n_best=2, max_tokens=9),
                                 DecodingConfig(method="beam", beam_size=4, max_tokens=20, max_len_a=1.5,
                                                max_len_b=1, length_penalty=1.0, length_penalty_kind="plain")],
                         ids=["greedy", "beam", "beam-relative-length"])
def test_a_batch_equals_its_sentences_one_by_one(cfg):
    decoder = HashDecoder(vocab=5, seed=2)
    sources, prefixes, lengths = torch.tensor([3, 1, 4, 1]), torch.tensor([[1, 2], [2, 2], [3, 4], [1, 2]]), [2, 7, 4, 5]
    together = decode(decoder, sources, prefixes, cfg, stop_ids=[EOS], source_lengths=torch.tensor(lengths))
    alone = [decode(decoder, sources[i:i + 1], prefixes[i:i + 1], cfg, stop_ids=[EOS], source_lengths=[lengths[i]])[0]
             for i in range(4)]
    assert together == alone
    assert len({tuple(row[0].tokens) for row in together}) > 1  # the rows differ: the test can tell them apart


# ------------------------------------------------------------------------------------- n-best, lengths

def test_n_best_is_sorted_distinct_and_scored_as_the_decoder_scores_it():
    decoder = HashDecoder(vocab=6, seed=4)
    cfg = DecodingConfig(method="beam", beam_size=8, n_best=8, max_tokens=7, length_penalty=0.6)
    [found] = beam_search(decoder, torch.tensor([2]), torch.tensor([[1, 3]]), cfg, stop_ids=[EOS])
    assert len(found) == 8 and len({(tuple(h.tokens), h.finished) for h in found}) == 8
    assert all(a.score >= b.score for a, b in zip(found, found[1:]))
    for h in found:
        log_prob, sequence = 0.0, [1, 3]
        for token in h.tokens + [EOS] * h.finished:
            log_prob += torch.log_softmax(decoder.logits(2, sequence), -1)[token].item()
            sequence = sequence + [token]
        assert h.log_prob == pytest.approx(log_prob, abs=1e-5)
        length = len(h.tokens) + h.finished
        assert h.score == pytest.approx(log_prob / ((5 + length) / 6) ** 0.6, abs=1e-5)


@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_maximum_lengths_absolute_and_relative_to_the_source(method):
    decoder = HashDecoder(vocab=5, seed=5)
    sources, prefixes = torch.tensor([0, 1, 2]), torch.tensor([[1], [2], [3]])
    extra = {"beam_size": 3, "n_best": 3} if method == "beam" else {"seed": 0} if method == "sample" else {}
    absolute = DecodingConfig(method=method, max_tokens=6, stop_at_eos=False, **extra)
    for row in decode(decoder, sources, prefixes, absolute, stop_ids=[EOS]):
        assert all(len(h.tokens) == 6 and not h.finished for h in row)
    relative = DecodingConfig(method=method, max_tokens=6, max_len_a=1.0, max_len_b=1, stop_at_eos=False, **extra)
    rows = decode(decoder, sources, prefixes, relative, stop_ids=[EOS], source_lengths=torch.tensor([1, 3, 10]))
    assert [{len(h.tokens) for h in row} for row in rows] == [{2}, {4}, {6}]  # a * S + b, at most max_tokens
    stopping = DecodingConfig(method=method, max_tokens=6, max_len_a=1.0, max_len_b=1, **extra)
    rows = decode(decoder, sources, prefixes, stopping, stop_ids=[EOS], source_lengths=torch.tensor([1, 3, 10]))
    for row, limit in zip(rows, [2, 4, 6]):
        assert all(len(h.tokens) + h.finished <= limit for h in row)
    empty = decode(decoder, sources, prefixes, DecodingConfig(method=method, max_tokens=0, **extra))
    assert all(row[0].tokens == [] and row[0].score == 0.0 for row in empty)


def test_length_penalties_match_their_formulas():
    assert length_penalty(3, 0.6) == pytest.approx(((5 + 3) / 6) ** 0.6)  # Wu et al. 2016, eq. 14
    assert length_penalty(1, 0.6) == pytest.approx(1.0)  # (5 + 1) / 6 = 1: a single token is not penalised
    assert length_penalty(7, 1.0, "plain") == pytest.approx(7.0)
    assert length_penalty(4, 0.5, "plain") == pytest.approx(2.0)
    assert length_penalty(9, 0.0) == length_penalty(9, 0.0, "plain") == 1.0


def test_sampling_a_batch_is_seeded_and_reports_the_models_log_probabilities():
    decoder = HashDecoder(vocab=5, seed=6)
    cfg = DecodingConfig(method="sample", max_tokens=8, temperature=0.7, top_k=3, seed=4)
    first = sample(decoder, torch.tensor([0, 1]), torch.tensor([[1], [2]]), cfg, stop_ids=[EOS])
    assert first == sample(decoder, torch.tensor([0, 1]), torch.tensor([[1], [2]]), cfg, stop_ids=[EOS])
    for source, prefix, [h] in zip([0, 1], [1, 2], first):
        sequence, log_prob = [prefix], 0.0
        for token in h.tokens + [EOS] * h.finished:
            log_prob += torch.log_softmax(decoder.logits(source, sequence), -1)[token].item()  # untempered, unfiltered
            sequence.append(token)
        assert h.log_prob == pytest.approx(log_prob, abs=1e-5)


# ------------------------------------------------------------------------------------- config checks

@pytest.mark.parametrize("options,message", [
    ({"method": "nucleus"}, "method must be one of greedy, sample, beam"),
    ({"method": "beam", "beam_size": 0}, r"beam_size \(--beam\) must be an integer >= 1"),
    ({"method": "beam", "beam_size": 2, "n_best": 3}, r"n_best \(--n-best\) must be an integer in \[1, beam_size = 2\]"),
    ({"method": "greedy", "n_best": 2, "beam_size": 4}, "needs method beam"),
    ({"method": "beam", "temperature": 0.5}, "temperature shape the distribution sampling draws from"),
    ({"method": "greedy", "top_k": 5, "top_p": 0.9}, "top_k, top_p shape"),
    ({"method": "beam", "length_penalty": -0.5}, "length_penalty"),
    ({"method": "beam", "length_penalty_kind": "wu"}, "length_penalty_kind must be one of gnmt, plain"),
    ({"max_tokens": 3, "min_tokens": 4}, r"min_tokens must be an integer in \[0, max_tokens = 3\]"),
    ({"max_len_b": 5}, "set max_len_a too"),
    ({"max_len_a": -1.0}, "max_len_a must be a number >= 0"),
    ({"method": "sample", "temperature": math.inf}, "temperature"),
    ({"stop_at_eos": "yes"}, "stop_at_eos must be true or false"),
])
def test_config_refuses_bad_values_and_combinations_in_one_line(options, message):
    with pytest.raises(TextnnError, match=message) as error:
        DecodingConfig(**options)
    assert "\n" not in str(error.value) and str(error.value).startswith("decoding: ")


def test_source_lengths_must_match_the_batch():
    cfg = DecodingConfig(method="greedy", max_tokens=3, max_len_a=1.0)
    with pytest.raises(TextnnError, match="2 entries for a batch of 3"):
        greedy(HashDecoder(), torch.tensor([0, 1, 2]), torch.tensor([[1], [1], [1]]), cfg, source_lengths=[1, 2])
