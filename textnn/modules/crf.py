"""A linear-chain conditional random field over per-token emission scores, and tag-scheme constraints.

Lafferty, McCallum & Pereira (2001), "Conditional Random Fields: Probabilistic Models for Segmenting
and Labeling Sequence Data" (§3: the linear-chain case), used as the output layer of a neural tagger
as in Lample et al. (2016), "Neural Architectures for Named Entity Recognition", §2.2:

    s(X, y) = sum_i A[y_i, y_{i+1}] + sum_i P[i, y_i]          (eq. 1)

where P [T, K] are the network's emission scores and A the learned transition scores, including a
transition out of a start state and into an end state (here the vectors `start_scores` and
`end_scores`). p(y | X) = exp s(X, y) / sum_y' exp s(X, y') (eq. 2); training minimises
-log p(y | X) = log Z - s(X, y) (eq. 3) with log Z from the forward algorithm; decoding takes the
highest-scoring sequence (eq. 4) by Viterbi. Both are vectorised over the batch and the tags; the
only Python loop runs over time steps. A padded step carries the state of the previous step
unchanged, so each sentence gets exactly what it would get alone (padding only at the end).

Transition constraints (`transition_constraints`) forbid the tag bigrams that a tag scheme never
produces (an I-PER after an O in BIO, say). Forbidden start / transition / end scores are replaced
by `FORBIDDEN` (-1e4), not -inf: every path then keeps a finite score, so log Z and all gradients
stay finite even for a sequence that breaks the rules, while such a path is exp(-1e4) times less
likely than any valid one, i.e. never decoded and absent from Z in float32.
"""

# B batch, T time steps, K tags

from __future__ import annotations

import torch
from torch import nn

from textnn.errors import TextnnError

FORBIDDEN = -1.0e4
SCHEMES = ("iob1", "bio", "iob2", "bioes")  # "iob2" is another name for "bio"
PREFIXES = {"iob1": "BI", "bio": "BI", "iob2": "BI", "bioes": "BIES"}


def _split_tag(tag: str, scheme: str) -> tuple[str, str]:
    """"B-PER" -> ("B", "PER"), "O" -> ("O", ""); a TextnnError for a tag the scheme does not have."""
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    if not sep or not kind or len(prefix) != 1 or prefix not in PREFIXES[scheme]:
        raise TextnnError(f"tag {tag!r} is not a {scheme} tag (expected O or "
                          f"{'/'.join(PREFIXES[scheme])}-TYPE); check data.tag_scheme / data.train_tag_scheme")
    return prefix, kind


def _may_follow(prev: tuple[str, str], cur: tuple[str, str], scheme: str) -> bool:
    """Whether tag `cur` may directly follow tag `prev`; ("O", "") stands for the sentence boundary."""
    (p_prefix, p_kind), (c_prefix, c_kind) = prev, cur
    inside_same = p_prefix in ("B", "I") and p_kind == c_kind  # prev opened or continues a c_kind chunk
    if scheme in ("bio", "iob2"):
        # An I-X continues a chunk of type X: only after B-X or I-X (never first in a sentence).
        return c_prefix != "I" or inside_same
    if scheme == "iob1":
        # IOB1 (CoNLL-2003, Tjong Kim Sang & Veenstra 1999): a chunk normally starts with I-X; B-X
        # marks the first token of a chunk that directly follows another chunk of the same type X,
        # so it may only come after B-X or I-X (and never first in a sentence).
        return c_prefix != "B" or inside_same
    # BIOES: I-X / E-X continue a chunk of type X opened by B-X (and continued by I-X); B, S and O
    # come only where no chunk is open, i.e. after E-*, S-*, O or at the start.
    if c_prefix in ("I", "E"):
        return inside_same
    return p_prefix in ("E", "S", "O")


def transition_constraints(tags: list[str], scheme: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which starts, transitions and ends a tag scheme allows: (start_ok [K], trans_ok [K, K] from -> to,
    end_ok [K]), bool.

    bio (= iob2): I-X only after B-X or I-X, never first.
    bioes: B-X / I-X must be followed by I-X / E-X of the same type; E-, S- and O by B-, S- or O;
           a sentence starts with B, S or O and ends with E, S or O.
    iob1:  I-X may start a chunk anywhere; B-X only after a token of type X (B-X or I-X), never first.
    A sentence boundary behaves like an O on either side, so start_ok[j] = "tag j may follow O" and
    end_ok[i] = "O may follow tag i".
    """
    if scheme not in SCHEMES:
        raise TextnnError(f"unknown tag scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
    parts = [_split_tag(tag, scheme) for tag in tags]
    outside = ("O", "")
    start_ok = torch.tensor([_may_follow(outside, cur, scheme) for cur in parts], dtype=torch.bool)
    end_ok = torch.tensor([_may_follow(prev, outside, scheme) for prev in parts], dtype=torch.bool)
    trans_ok = torch.tensor([[_may_follow(prev, cur, scheme) for cur in parts] for prev in parts],
                            dtype=torch.bool)
    return start_ok, trans_ok, end_ok


class LinearChainCRF(nn.Module):
    """Start, transition (from -> to) and end scores over K tags; forward algorithm, gold score, Viterbi.

    `allowed` = (start_ok [K], trans_ok [K, K], end_ok [K]) bool, e.g. from `transition_constraints`,
    or None for no constraints. Every method takes emissions [B, T, K] and mask [B, T] (True = real
    token, at least one per row, padding only at the end) and computes in float32 whatever the
    emissions' dtype (log-space sums lose too much in bf16).
    """

    def __init__(self, num_tags: int, allowed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.num_tags = num_tags
        # Zeros: the emissions already differ per tag, so there is no symmetry to break.
        self.start_scores = nn.Parameter(torch.zeros(num_tags))  # [K]
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [K, K], [from, to]
        self.end_scores = nn.Parameter(torch.zeros(num_tags))  # [K]
        if allowed is None:
            allowed = (torch.ones(num_tags, dtype=torch.bool), torch.ones(num_tags, num_tags, dtype=torch.bool),
                       torch.ones(num_tags, dtype=torch.bool))
        start_ok, trans_ok, end_ok = allowed
        if start_ok.shape != (num_tags,) or trans_ok.shape != (num_tags, num_tags) or end_ok.shape != (num_tags,):
            raise ValueError(f"allowed must be shaped ([{num_tags}], [{num_tags}, {num_tags}], [{num_tags}]), got "
                             f"{[tuple(t.shape) for t in allowed]}")
        # Derived from the tag list and scheme, which the run keeps: not saved with the weights.
        self.register_buffer("start_ok", start_ok.bool().clone(), persistent=False)
        self.register_buffer("trans_ok", trans_ok.bool().clone(), persistent=False)
        self.register_buffer("end_ok", end_ok.bool().clone(), persistent=False)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The start [K], transition [K, K] and end [K] scores with forbidden entries set to FORBIDDEN."""
        return (self.start_scores.masked_fill(~self.start_ok, FORBIDDEN),
                self.transitions.masked_fill(~self.trans_ok, FORBIDDEN),
                self.end_scores.masked_fill(~self.end_ok, FORBIDDEN))

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z per sentence by the forward algorithm in log space: [B, T, K] -> [B]."""
        start, trans, end = self.scores()
        emissions = emissions.float()
        alpha = start + emissions[:, 0]  # [B, K]: log-sum of all prefixes ending in each tag
        for t in range(1, emissions.size(1)):
            # [B, K, 1] + [K, K] -> [B, K(from), K(to)], summed out over "from"
            step = torch.logsumexp(alpha.unsqueeze(2) + trans, dim=1) + emissions[:, t]  # [B, K]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
        return torch.logsumexp(alpha + end, dim=1)  # [B]

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """s(X, y) of eq. 1 for the given tags [B, T] (ignored where mask is False): -> [B]."""
        start, trans, end = self.scores()
        emissions = emissions.float()
        tags = tags.masked_fill(~mask, 0)  # any id is fine at padding; keep gathers in range
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [B, T, 1] -> [B, T]
        total = start[tags[:, 0]] + emitted.masked_fill(~mask, 0.0).sum(dim=1)  # [B]
        if tags.size(1) > 1:
            moved = trans[tags[:, :-1], tags[:, 1:]]  # [B, T-1]: score of step t-1 -> t
            total = total + moved.masked_fill(~mask[:, 1:], 0.0).sum(dim=1)
        last = (mask.sum(dim=1) - 1).clamp(min=0)  # [B]: position of the last real token
        return total + end[tags.gather(1, last.unsqueeze(1)).squeeze(1)]  # [B, 1] -> [B]

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """-log p(tags | X) = log Z - s(X, tags) per sentence (eq. 3, negated): -> [B]."""
        return self.log_partition(emissions, mask) - self.score(emissions, tags, mask)

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The highest-scoring tag sequence (eq. 4): [B, T, K] -> LongTensor [B, T], 0 where mask is False."""
        start, trans, end = self.scores()
        emissions = emissions.float()
        batch, steps, num_tags = emissions.shape
        best = start + emissions[:, 0]  # [B, K]: best score of a prefix ending in each tag
        # At a padded step each tag points back to itself, so the backtrace walks through padding
        # unchanged down to the last real token.
        stay = torch.arange(num_tags, device=emissions.device).expand(batch, num_tags)  # [B, K]
        backpointers = []
        for t in range(1, steps):
            # [B, K, 1] + [K, K] -> [B, K(from), K(to)], maximised over "from"
            step_best, step_from = (best.unsqueeze(2) + trans).max(dim=1)  # [B, K] each
            real = mask[:, t].unsqueeze(1)  # [B, 1]
            backpointers.append(torch.where(real, step_from, stay))
            best = torch.where(real, step_best + emissions[:, t], best)
        tag = (best + end).argmax(dim=1)  # [B]: the best last tag
        path = [tag]
        for pointers in reversed(backpointers):
            tag = pointers.gather(1, tag.unsqueeze(1)).squeeze(1)  # [B, 1] -> [B]
            path.append(tag)
        path.reverse()
        return torch.stack(path, dim=1).masked_fill(~mask, 0)  # [B, T]
