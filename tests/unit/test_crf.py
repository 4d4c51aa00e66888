"""The linear-chain CRF (modules/crf.py) against brute force, and the tag-scheme constraints.

On inputs small enough to list every one of the K^T tag sequences, log Z must equal the logsumexp of
all sequence scores, the gold score must equal the sum written out by hand, Viterbi must return the
best listed sequence, and the marginals (the gradient of log Z) must be the listed sequences'
probabilities. Rows of one batch have different lengths, so padding is checked at the same time.
Constraints: decoded paths are valid under the scheme (checked by a rule set written separately
below), log Z sums over the valid paths only, and gradients stay finite.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from textnn.errors import TextnnError
from textnn.modules.crf import FORBIDDEN, LinearChainCRF, transition_constraints


def random_crf(num_tags: int, seed: int, allowed=None) -> LinearChainCRF:
    crf = LinearChainCRF(num_tags, allowed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        crf.start_scores.copy_(torch.randn(num_tags, generator=gen))
        crf.transitions.copy_(torch.randn(num_tags, num_tags, generator=gen))
        crf.end_scores.copy_(torch.randn(num_tags, generator=gen))
    return crf


def batch(lengths: list[int], num_tags: int, seed: int, total: int | None = None):
    gen = torch.Generator().manual_seed(seed)
    total = total or max(lengths)
    emissions = torch.randn(len(lengths), total, num_tags, generator=gen) * 2.0
    mask = torch.arange(total).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return emissions, mask


def path_score(crf: LinearChainCRF, emissions: torch.Tensor, path: tuple[int, ...]) -> torch.Tensor:
    """start + emissions + transitions + end of one tag sequence, from the raw parameters."""
    total = crf.start_scores[path[0]] + crf.end_scores[path[-1]]
    for t, tag in enumerate(path):
        total = total + emissions[t, tag]
        if t > 0:
            total = total + crf.transitions[path[t - 1], tag]
    return total


def all_paths(num_tags: int, length: int):
    return list(itertools.product(range(num_tags), repeat=length))


# ----------------------------------------------------------------------------------- brute force


@pytest.mark.parametrize("num_tags,lengths", [(3, [4, 2, 1, 3]), (4, [3, 1, 2]), (4, [4, 4])])
def test_log_partition_score_and_viterbi_match_enumeration(num_tags, lengths):
    crf = random_crf(num_tags, seed=num_tags)
    emissions, mask = batch(lengths, num_tags, seed=7, total=max(lengths) + 1)  # one extra pad column
    log_z = crf.log_partition(emissions, mask)
    best = crf.viterbi(emissions, mask)
    gen = torch.Generator().manual_seed(11)
    gold = torch.randint(0, num_tags, mask.shape, generator=gen)
    score = crf.score(emissions, gold, mask)
    with torch.no_grad():
        for b, n in enumerate(lengths):
            paths = all_paths(num_tags, n)
            scores = torch.stack([path_score(crf, emissions[b], p) for p in paths])
            torch.testing.assert_close(log_z[b], torch.logsumexp(scores, 0), rtol=1e-5, atol=1e-5)
            argmax = paths[int(scores.argmax())]
            assert best[b, :n].tolist() == list(argmax)
            assert best[b, n:].eq(0).all()
            torch.testing.assert_close(score[b], path_score(crf, emissions[b], tuple(gold[b, :n].tolist())))
    nll = crf.nll(emissions, gold, mask)
    torch.testing.assert_close(nll, log_z - score)
    assert (nll > 0).all()


def test_marginals_from_autograd_match_enumeration_and_sum_to_one():
    num_tags, lengths = 3, [4, 2, 3]
    crf = random_crf(num_tags, seed=2)
    emissions, mask = batch(lengths, num_tags, seed=3)
    emissions.requires_grad_(True)
    crf.log_partition(emissions, mask).sum().backward()
    marginals = emissions.grad  # d log Z / d emission[t, k] = p(y_t = k)
    torch.testing.assert_close(marginals.sum(-1), mask.float())  # 1 at real positions, 0 at padding
    with torch.no_grad():
        for b, n in enumerate(lengths):
            paths = all_paths(num_tags, n)
            probs = torch.softmax(torch.stack([path_score(crf, emissions[b], p) for p in paths]), 0)
            expected = torch.zeros(n, num_tags)
            for p, prob in zip(paths, probs):
                for t, tag in enumerate(p):
                    expected[t, tag] += prob
            torch.testing.assert_close(marginals[b, :n], expected, rtol=1e-5, atol=1e-6)


def test_padded_batch_equals_each_sentence_alone():
    crf = random_crf(5, seed=4)
    lengths = [6, 1, 3]
    emissions, mask = batch(lengths, 5, seed=5, total=9)
    gold = torch.randint(0, 5, mask.shape, generator=torch.Generator().manual_seed(1))
    log_z, decoded, nll = crf.log_partition(emissions, mask), crf.viterbi(emissions, mask), crf.nll(emissions, gold, mask)
    for b, n in enumerate(lengths):
        alone = emissions[b:b + 1, :n], mask[b:b + 1, :n]
        torch.testing.assert_close(log_z[b:b + 1], crf.log_partition(*alone))
        assert torch.equal(decoded[b:b + 1, :n], crf.viterbi(*alone))
        torch.testing.assert_close(nll[b:b + 1], crf.nll(alone[0], gold[b:b + 1, :n], alone[1]))


def test_low_precision_emissions_are_computed_in_float32():
    crf = random_crf(4, seed=6)
    emissions, mask = batch([3, 2], 4, seed=6)
    half = emissions.to(torch.bfloat16)
    out = crf.log_partition(half, mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, crf.log_partition(half.float(), mask))


# ------------------------------------------------------------------------------------ constraints


def valid(tags: list[str], scheme: str) -> bool:
    """An independent statement of each scheme's rules, token by token."""
    prev_prefix, prev_type = "O", None
    for tag in tags + ["O"]:  # the trailing O checks how the sentence ends
        prefix, _, kind = tag.partition("-")
        kind = kind or None
        open_chunk = prev_prefix in ("B", "I") and prev_type == kind
        if scheme == "bio" and prefix == "I" and not open_chunk:
            return False
        if scheme == "iob1" and prefix == "B" and not open_chunk:
            return False
        if scheme == "bioes":
            if prefix in ("I", "E") and not open_chunk:
                return False
            if prefix in ("B", "S", "O") and prev_prefix in ("B", "I"):
                return False
        prev_prefix, prev_type = prefix, kind
    return True


TAGS = {
    "bio": ["O", "B-A", "I-A", "B-B", "I-B"],
    "iob1": ["O", "I-A", "B-A", "I-B", "B-B"],
    "bioes": ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "E-B", "S-B"],
}


def test_constraint_tables_on_hand_picked_cases():
    start, trans, end = transition_constraints(TAGS["bio"], "bio")
    ids = {t: i for i, t in enumerate(TAGS["bio"])}
    assert start.tolist() == [True, True, False, True, False] and end.all()
    assert trans[ids["B-A"], ids["I-A"]] and trans[ids["I-A"], ids["I-A"]]
    assert not trans[ids["O"], ids["I-A"]] and not trans[ids["B-B"], ids["I-A"]]
    assert trans[ids["I-A"], ids["B-A"]] and trans[ids["I-B"], ids["O"]]

    start, trans, end = transition_constraints(TAGS["iob1"], "iob1")
    ids = {t: i for i, t in enumerate(TAGS["iob1"])}
    assert start.tolist() == [True, True, False, True, False] and end.all()
    assert trans[ids["O"], ids["I-A"]] and trans[ids["I-B"], ids["I-A"]]  # I may start a chunk
    assert trans[ids["I-A"], ids["B-A"]] and trans[ids["B-A"], ids["B-A"]]  # B only after the same type
    assert not trans[ids["O"], ids["B-A"]] and not trans[ids["I-B"], ids["B-A"]]

    start, trans, end = transition_constraints(TAGS["bioes"], "bioes")
    ids = {t: i for i, t in enumerate(TAGS["bioes"])}
    assert [TAGS["bioes"][i] for i in start.nonzero().flatten()] == ["O", "B-A", "S-A", "B-B", "S-B"]
    assert [TAGS["bioes"][i] for i in end.nonzero().flatten()] == ["O", "E-A", "S-A", "E-B", "S-B"]
    assert trans[ids["B-A"], ids["I-A"]] and trans[ids["B-A"], ids["E-A"]] and trans[ids["E-A"], ids["B-A"]]
    assert not trans[ids["B-A"], ids["O"]] and not trans[ids["B-A"], ids["E-B"]] and not trans[ids["S-A"], ids["I-A"]]
    assert trans[ids["S-A"], ids["S-B"]] and trans[ids["O"], ids["S-A"]] and not trans[ids["I-A"], ids["S-B"]]


@pytest.mark.parametrize("scheme", ["bio", "iob1", "bioes"])
def test_constraints_allow_exactly_what_some_valid_sentence_contains(scheme):
    """A start, bigram or end is allowed iff it occurs in some valid sentence; one filler tag on each
    side (an opening B before an I or E, a closing E after a B or I) is enough to complete one."""
    tags = TAGS[scheme]
    fillers = [[]] + [[t] for t in tags]
    start, trans, end = transition_constraints(tags, scheme)
    for i, a in enumerate(tags):
        assert bool(start[i]) == any(valid([a] + post, scheme) for post in fillers), a
        assert bool(end[i]) == any(valid(pre + [a], scheme) for pre in fillers), a
        for j, b in enumerate(tags):
            assert bool(trans[i, j]) == any(valid(pre + [a, b] + post, scheme)
                                            for pre in fillers for post in fillers), (a, b)


@pytest.mark.parametrize("scheme", ["bio", "iob1", "bioes"])
def test_constrained_crf_decodes_only_valid_paths_and_sums_only_over_them(scheme):
    tags = TAGS[scheme]
    num_tags = len(tags)
    crf = random_crf(num_tags, seed=1, allowed=transition_constraints(tags, scheme))
    for seed in range(20):
        emissions, mask = batch([4, 3, 1, 2], num_tags, seed=seed)
        emissions = emissions * 3.0  # strong emissions would pick invalid paths without the constraints
        decoded = crf.viterbi(emissions, mask)
        for b, n in enumerate([4, 3, 1, 2]):
            assert valid([tags[i] for i in decoded[b, :n]], scheme), decoded[b, :n]
    # log Z sums over exactly the valid paths (each invalid one is exp(FORBIDDEN) smaller: nothing)
    emissions, mask = batch([3, 2], num_tags, seed=99)
    log_z = crf.log_partition(emissions, mask)
    with torch.no_grad():
        for b, n in enumerate([3, 2]):
            paths = [p for p in all_paths(num_tags, n) if valid([tags[i] for i in p], scheme)]
            expected = torch.logsumexp(torch.stack([path_score(crf, emissions[b], p) for p in paths]), 0)
            torch.testing.assert_close(log_z[b], expected, rtol=1e-5, atol=1e-5)
            best = max(paths, key=lambda p: float(path_score(crf, emissions[b], p)))
            assert crf.viterbi(emissions, mask)[b, :n].tolist() == list(best)


def test_unconstrained_crf_can_decode_invalid_paths():
    """The check above can fail: without constraints the same emissions give invalid BIO paths."""
    tags = TAGS["bio"]
    crf = random_crf(len(tags), seed=1)
    found = False
    for seed in range(20):
        emissions, mask = batch([4, 3, 1, 2], len(tags), seed=seed)
        decoded = crf.viterbi(emissions * 3.0, mask)
        found |= any(not valid([tags[i] for i in decoded[b, :n]], "bio") for b, n in enumerate([4, 3, 1, 2]))
    assert found


def test_gradients_stay_finite_with_constraints_even_for_an_invalid_gold_path():
    tags = TAGS["bioes"]
    crf = random_crf(len(tags), seed=3, allowed=transition_constraints(tags, "bioes"))
    emissions, mask = batch([4, 2], len(tags), seed=4)
    emissions = (emissions * 50.0).requires_grad_(True)
    ids = {t: i for i, t in enumerate(tags)}
    gold_valid = torch.tensor([[ids["B-A"], ids["I-A"], ids["E-A"], ids["O"]], [ids["S-B"], ids["O"], 0, 0]])
    gold_invalid = torch.tensor([[ids["I-A"], ids["O"], ids["E-B"], ids["B-A"]], [ids["E-A"], ids["B-B"], 0, 0]])
    for gold in (gold_valid, gold_invalid):
        crf.zero_grad()
        emissions.grad = None
        nll = crf.nll(emissions, gold, mask)
        assert torch.isfinite(nll).all()
        nll.sum().backward()
        for grad in (emissions.grad, crf.start_scores.grad, crf.transitions.grad, crf.end_scores.grad):
            assert torch.isfinite(grad).all()
    assert (crf.nll(emissions, gold_invalid, mask) > -FORBIDDEN / 2).all()  # invalid gold: hugely unlikely
    # A forbidden entry's score is fixed: it gets no gradient; an allowed one does.
    assert crf.transitions.grad[ids["O"], ids["I-A"]] == 0
    assert crf.transitions.grad.abs().sum() > 0


def test_bad_tags_and_schemes_raise_textnn_errors():
    with pytest.raises(TextnnError, match="E-PER"):
        transition_constraints(["O", "B-PER", "E-PER"], "bio")
    with pytest.raises(TextnnError, match="PER"):
        transition_constraints(["O", "PER"], "bioes")
    with pytest.raises(TextnnError, match="iobes"):
        transition_constraints(["O"], "iobes")
    # iob2 is the same scheme as bio
    assert all(torch.equal(a, b) for a, b in zip(transition_constraints(TAGS["bio"], "iob2"),
                                                  transition_constraints(TAGS["bio"], "bio")))
