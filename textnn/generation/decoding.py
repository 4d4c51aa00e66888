"""One decoding interface for every autoregressive model, and the searches on it: greedy, sampling, beam.

A decoder (the `Decoder` base class) is what a search drives; a model declares that it is one by
subclassing it (a language model through `PromptDecoder`, a translator directly), and implements:
    start(batch) -> state                  encoder outputs travel in the state; a language model
                                           ignores the batch and starts from an empty state (None)
    step(tokens [B, T'], state) -> (logits [B, V] of the last position, state)
                                           the first call reads the whole prefix, later calls one token
    reorder(state, indices [B']) -> state  the state of the rows `indices`, in that order (rows may repeat)
Batch on dim 0 of every token tensor and of the logits. The state is the decoder's cache (recurrent
state, key/value cache, Transformer-XL memory), so n new tokens cost n steps, not n full forwards.

Every search takes a prefix [B, T0] (a language model's prompt, or BOS for a seq2seq decoder), the
vocabulary's stop ids (EOS), optional source lengths [B] (for a maximum length a * S + b), optional
banned ids (never emitted, e.g. padding) and a `DecodingConfig`, and returns per sentence a list of
`Hypothesis`, best first: one for greedy and sampling, `n_best` for beam search.

Scores: each token's log-probability comes from the step's distribution renormalised over the tokens
allowed at that step (banned ids, and stop ids before `min_tokens`, removed), so it is <= 0. A
hypothesis' `log_prob` sums them, a stop token included; its `score` is log_prob / lp(|Y|) with |Y|
counting the stop token, as fairseq and OpenNMT count it.

Beam search keeps `beam_size` live hypotheses per sentence. A stop id among the beam_size best
candidates of a step finishes that hypothesis: it goes to the sentence's finished list, scored with
its length penalty at once, and the beam_size best candidates that do not stop stay live, so the
beam never shrinks. A sentence is done when no live hypothesis can enter its `n_best` finished ones
(`_settled`) or at its maximum length, where the live hypotheses become candidates too. Never
because the top beam finished: with a length penalty a longer hypothesis can still score better.
With a length penalty beam size 1 may therefore search past greedy's stop; with alpha = 0 (or
without stop ids) it returns exactly greedy's output.
"""

# B batch (sentences), A sentences still searched, K beam size, T0 prefix length, t new tokens, V vocabulary

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from textnn import limits
from textnn.errors import TextnnError
from textnn.generation.sampling import draw

METHODS = ("greedy", "sample", "beam")  # the searches (SEARCHES below) a DecodingConfig may name
# Called by greedy and sample after each step: (ids [B] chosen, kept [B]: True where the id extends its
# row's output, False where the row had already ended or the id is the stop token that ends it now).
OnStep = Callable[[torch.Tensor, torch.Tensor], None]
PENALTIES = ("gnmt", "plain")


class Decoder(ABC):
    """What every search drives (see the module docstring). A model with its output layer subclasses it,
    so that "can this model be decoded?" is a declared fact (`isinstance(model, Decoder)`), not a probe."""

    @abstractmethod
    def start(self, batch: object) -> object:
        """The state before the first step: the batch's sources encoded (None for a language model)."""

    @abstractmethod
    def step(self, tokens: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        """Read tokens [B, T'] after `state`: (logits [B, V] of the last position, the new state)."""

    @abstractmethod
    def reorder(self, state: object, indices: torch.Tensor) -> object:
        """The state of the rows `indices` [B'] in that order (rows may repeat): how beam search follows
        its hypotheses."""


class PromptDecoder(Decoder):
    """A decoder that continues a prompt and reads no source (a language model): its state starts empty.
    `textnn generate` takes the models that are one."""

    def start(self, batch: object) -> None:
        return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class DecodingConfig:
    """Every decoding option, from the command line to the search. Checked on creation."""

    method: str = "greedy"  # greedy (most likely token), sample (draw), or beam (beam search)
    max_tokens: int = 200  # most new tokens per output, a stop token included
    max_len_a: float | None = None  # with source lengths S: at most int(a * S + b) new tokens too; None = off
    max_len_b: int = 0  # the b of a * S + b
    min_tokens: int = 0  # new tokens before a stop id may be chosen
    stop_at_eos: bool = True  # an output ends at its first stop id (EOS); False: stop ids are ordinary tokens
    temperature: float = 1.0  # sample: logits / temperature; < 1 sharper, > 1 flatter than the model
    top_k: int = 0  # sample: draw from the k most likely tokens only (0 = off)
    top_p: float = 1.0  # sample: draw from the smallest set of tokens with probability >= p (1 = off)
    seed: int | None = None  # sample: seed of a local generator (same seed, same text); None = torch's global RNG
    beam_size: int = 4  # beam: live hypotheses per sentence (4: Vaswani et al. 2017, §6.1)
    n_best: int = 1  # beam: hypotheses returned per sentence, best first (<= beam_size)
    # beam: alpha of the length penalty, 0 = rank by log-probability. Default 0.6 with gnmt, the
    # Transformer's setting (Vaswani et al. 2017, §6.1): a log-probability only falls with each token,
    # so without a penalty beam search prefers outputs that stop early.
    length_penalty: float = 0.6
    # gnmt: lp = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, §7, eq. 14); plain: lp = |Y| ** alpha
    length_penalty_kind: str = "gnmt"

    def __post_init__(self) -> None:
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise TextnnError(f"decoding: {message}")

        check(self.method in METHODS, f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        check(_is_int(self.max_tokens) and self.max_tokens >= 0,
              f"max_tokens (--max-tokens) must be an integer >= 0, got {self.max_tokens!r}")
        check(_is_int(self.min_tokens) and 0 <= self.min_tokens <= self.max_tokens,
              f"min_tokens must be an integer in [0, max_tokens = {self.max_tokens}], got {self.min_tokens!r}")
        check(self.max_len_a is None or (_is_number(self.max_len_a) and self.max_len_a >= 0),
              f"max_len_a must be a number >= 0 or None (off), got {self.max_len_a!r}")
        check(_is_int(self.max_len_b) and self.max_len_b >= 0,
              f"max_len_b must be an integer >= 0, got {self.max_len_b!r}")
        check(self.max_len_a is not None or self.max_len_b == 0, "max_len_b is the b of a * S + b: set max_len_a too")
        check(isinstance(self.stop_at_eos, bool), f"stop_at_eos must be true or false, got {self.stop_at_eos!r}")
        check(_is_number(self.temperature) and self.temperature > 0,
              f"temperature (--temperature) must be a number > 0, got {self.temperature!r} (for the most likely "
              f"token use method greedy, --greedy)")
        check(_is_int(self.top_k) and self.top_k >= 0,
              f"top_k (--top-k) must be an integer >= 0 (0 = off), got {self.top_k!r}")
        check(_is_number(self.top_p) and 0 < self.top_p <= 1,
              f"top_p (--top-p) must be in (0, 1] (1 = off), got {self.top_p!r}")
        check(self.seed is None or _is_int(self.seed), f"seed (--seed) must be an integer, got {self.seed!r}")
        check(_is_int(self.beam_size) and self.beam_size >= 1,
              f"beam_size (--beam) must be an integer >= 1, got {self.beam_size!r}")
        check(_is_int(self.n_best) and 1 <= self.n_best <= self.beam_size,
              f"n_best (--n-best) must be an integer in [1, beam_size = {self.beam_size}], got {self.n_best!r}")
        # The input-size policy: a beam of a million, or a billion new tokens, is refused before any search
        # allocates for it (limits.py); n_best is bounded by beam_size above.
        limits.check_count(self.beam_size, "beam", "beam_size (--beam)")
        limits.check_count(self.max_tokens, "new_tokens", "max_tokens (--max-tokens)")
        check(_is_number(self.length_penalty) and self.length_penalty >= 0,
              f"length_penalty (--length-penalty) must be a number >= 0, got {self.length_penalty!r}")
        check(self.length_penalty_kind in PENALTIES,
              f"length_penalty_kind must be one of {', '.join(PENALTIES)}, got {self.length_penalty_kind!r}")
        if not self.search.seeded:
            shaped = [name for name, value, off in (("temperature", self.temperature, 1.0), ("top_k", self.top_k, 0),
                                                    ("top_p", self.top_p, 1.0)) if value != off]
            check(not shaped, f"{', '.join(shaped)} shape the distribution sampling draws from; method "
                              f"{self.method} does not draw: leave them out, or use method sample")
        check(self.search.ranked or self.n_best == 1,
              f"n_best (--n-best) > 1 needs method beam (--beam K); method {self.method} finds one output")

    @property
    def search(self) -> "Search":
        """The search `method` names, with what it can do (`Search`)."""
        return SEARCHES[self.method]

    def with_seed(self) -> "DecodingConfig":
        """This decoding with its seed fixed: a seeded search given none draws one here, from the operating
        system (31 bits, valid everywhere and printable), so that its samples can be repeated with it."""
        if not self.search.seeded or self.seed is not None:
            return self
        return replace(self, seed=int.from_bytes(os.urandom(4), "little") >> 1)

    @classmethod
    def from_flags(cls, default_method: str = "greedy", greedy: bool = False, beam: int | None = None,
                   length_penalty: float | None = None, n_best: int | None = None, temperature: float | None = None,
                   top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                   max_tokens: int | None = None, stop_at_eos: bool | None = None) -> "DecodingConfig":
        """The decoding a command's flags ask for (None = flag not given: the field's default).

        Every command that decodes (`generate`, `translate`, `evaluate`) and the Python API build their
        options here, once: the flags' combinations are checked in this place and their values in
        `__post_init__`, so a task only adds its own length rule (`dataclasses.replace`).
        `default_method`: the method without --beam or --greedy (generate samples, translation is greedy).
        """
        if beam is not None and greedy:
            raise TextnnError("--beam and --greedy are two decoding methods: give one of them")
        if beam is None and (length_penalty is not None or n_best is not None):
            raise TextnnError("--length-penalty and --n-best apply to beam search: add --beam K")
        method = "beam" if beam is not None else "greedy" if greedy else default_method
        given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed, "beam_size": beam,
                 "length_penalty": length_penalty, "n_best": n_best, "max_tokens": max_tokens,
                 "stop_at_eos": stop_at_eos}
        return cls(method=method, **{name: value for name, value in given.items() if value is not None})


@dataclass
class Hypothesis:
    """One output of a search."""

    tokens: list[int]  # the new tokens: the prefix and the stop token excluded
    log_prob: float  # sum of the tokens' log-probabilities, the stop token included
    score: float  # log_prob / lp(|Y|), |Y| = len(tokens) + finished; what beam search ranks by
    finished: bool  # True: ended by a stop id; False: cut at the maximum length


def length_penalty(length: int, alpha: float, kind: str = "gnmt") -> float:
    """lp(|Y|) for an output of `length` >= 1 tokens: ((5 + |Y|) / 6) ** alpha (gnmt: Wu et al. 2016,
    §7, eq. 14, where 5 and 6 damp the penalty of very short outputs) or |Y| ** alpha (plain); 1 for alpha 0."""
    return ((5 + length) / 6) ** alpha if kind == "gnmt" else float(length) ** alpha


def _hypothesis(tokens: list[int], log_prob: float, finished: bool, cfg: DecodingConfig) -> Hypothesis:
    length = len(tokens) + int(finished)  # an empty output (max_tokens 0) has no penalty: its score is 0
    score = log_prob / length_penalty(length, cfg.length_penalty, cfg.length_penalty_kind) if length else log_prob
    return Hypothesis(tokens=tokens, log_prob=log_prob, score=score, finished=finished)


# ------------------------------------------------------------------------------------------------ inputs

def _check_prefix(prefix: torch.Tensor) -> torch.Tensor:
    if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2 or prefix.size(1) == 0:
        shape = tuple(prefix.shape) if isinstance(prefix, torch.Tensor) else type(prefix).__name__
        raise TextnnError(f"the prefix must be a tensor of token ids [B, T0] with T0 >= 1 (a prompt, or a start "
                          f"token), got {shape}")
    return prefix.long()


def _limits(cfg: DecodingConfig, rows: int, source_lengths: torch.Tensor | Sequence[int] | None) -> list[int]:
    """Most new tokens per sentence: max_tokens, and int(a * S + b) when both a and source lengths are given."""
    if cfg.max_len_a is None or source_lengths is None:
        return [cfg.max_tokens] * rows
    lengths = torch.as_tensor(source_lengths).tolist()
    if len(lengths) != rows:
        raise TextnnError(f"source_lengths has {len(lengths)} entries for a batch of {rows} sentences")
    return [min(cfg.max_tokens, int(cfg.max_len_a * length + cfg.max_len_b)) for length in lengths]


def _ids(ids: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(ids), dtype=torch.long, device=device)


def _allowed(logits: torch.Tensor, banned: torch.Tensor, stops: torch.Tensor, t: int,
             cfg: DecodingConfig) -> torch.Tensor:
    """The step's logits [N, V] in float32, -inf for the ids not allowed at new token t (0-based)."""
    logits = logits.float()
    if len(banned):
        logits = logits.index_fill(1, banned, float("-inf"))
    if len(stops) and t < cfg.min_tokens:
        logits = logits.index_fill(1, stops, float("-inf"))
    return logits


# -------------------------------------------------------------------------------------- greedy, sample

@torch.no_grad()
def _one_per_row(decoder: Decoder, batch: object, prefix: torch.Tensor, cfg: DecodingConfig,
                 choosers: Sequence[Callable[[torch.Tensor], torch.Tensor]], parts: Sequence[int],
                 stop_ids: Sequence[int], source_lengths, banned_ids: Sequence[int], on_step: OnStep | None = None,
                 leave: Callable[[int], bool] | None = None) -> list[list[Hypothesis]]:
    """Extend every row by one chosen token per step. The rows come in `parts` (consecutive rows, sizes
    summing to B), each part's tokens chosen by its own chooser (allowed logits [n, V] -> ids [n]), so that
    a part is decoded as it would be alone. A part stays in the batch until all of its rows have ended
    (ended rows keep being fed, their tokens unused, so that its draws do not depend on when a row stops),
    or until `leave(part)` says it is no longer wanted; then its rows are dropped from the decoder's state.
    `on_step` sees each step's tokens of all B rows as they are chosen (`OnStep`)."""
    prefix = _check_prefix(prefix)
    rows, device = prefix.size(0), prefix.device
    if sum(parts) != rows or len(parts) != len(choosers):
        raise ValueError(f"parts {list(parts)} and {len(choosers)} choosers for a prefix of {rows} rows")
    limits = torch.tensor(_limits(cfg, rows, source_lengths), dtype=torch.long, device=device)  # [B]
    banned, stops = _ids(banned_ids, device), _ids(stop_ids if cfg.stop_at_eos else (), device)
    lengths = torch.zeros(rows, dtype=torch.long, device=device)  # [B] new tokens kept, a stop token included
    finished = torch.zeros(rows, dtype=torch.bool, device=device)  # [B] ended by a stop id
    log_prob = torch.zeros(rows, device=device)  # [B]
    part_of_row = torch.repeat_interleave(torch.arange(len(parts), device=device),
                                          torch.tensor(parts, device=device))  # [B] each row's part
    rows_live = torch.arange(rows, device=device)  # [B'] the rows in the decoder's state, in its order
    new: list[torch.Tensor] = []
    tokens, state = prefix, decoder.start(batch)
    growing = ~finished & (lengths < limits)  # [B]
    # the parts in the batch, in row order
    live = [part for part, size in enumerate(parts) if size] if bool(growing.any()) else []
    while live:
        logits, state = decoder.step(tokens, state)  # [B', V]
        logits = _allowed(logits, banned, stops, len(new), cfg)
        chosen, at = [], 0
        for part in live:
            chosen.append(choosers[part](logits[at:at + parts[part]]))  # [n]
            at += parts[part]
        live_ids = chosen[0] if len(chosen) == 1 else torch.cat(chosen)  # [B']
        token_log_prob = torch.log_softmax(logits, dim=-1).gather(1, live_ids[:, None]).squeeze(1)  # [B']
        next_ids = torch.zeros(rows, dtype=torch.long, device=device).index_copy(0, rows_live, live_ids)  # [B]
        log_prob += torch.where(growing, torch.zeros(rows, device=device).index_copy(0, rows_live, token_log_prob),
                                0.0)
        lengths += growing.long()
        stopped = growing & torch.isin(next_ids, stops)  # [B]
        if on_step is not None:
            on_step(next_ids, growing & ~stopped)
        finished |= stopped
        new.append(next_ids)
        growing = ~finished & (lengths < limits)
        # rows still growing in each part: [B] -> [P], read back in one transfer a step
        growing_in_part = torch.zeros(len(parts), dtype=torch.long, device=device).index_add_(
            0, part_of_row, growing.long()).tolist()
        going = [part for part in live if growing_in_part[part] and not (leave is not None and leave(part))]
        if going and going != live:  # a part that has ended or is not wanted leaves: its state rows go
            stays = torch.isin(part_of_row[rows_live], torch.tensor(going, device=device))  # [B']
            kept = stays.nonzero().squeeze(1)  # [B''] the positions in the state of the rows that stay
            state, rows_live, live_ids = decoder.reorder(state, kept), rows_live[kept], live_ids[kept]
        live = going
        tokens = live_ids[:, None]  # [B'] -> [B', 1]
    out = torch.stack(new, dim=1).tolist() if new else [[] for _ in range(rows)]  # [B, N]
    return [[_hypothesis(row[:n - int(f)], lp, f, cfg)]
            for row, n, f, lp in zip(out, lengths.tolist(), finished.tolist(), log_prob.tolist())]


def greedy(decoder: Decoder, batch: object, prefix: torch.Tensor, cfg: DecodingConfig, stop_ids: Sequence[int] = (),
           source_lengths: torch.Tensor | None = None, banned_ids: Sequence[int] = (),
           on_step: OnStep | None = None) -> list[list[Hypothesis]]:
    """The most likely token at every step, for each row of `prefix` [B, T0]: B lists of one hypothesis."""
    prefix = _check_prefix(prefix)
    return _one_per_row(decoder, batch, prefix, cfg, [_most_likely], [prefix.size(0)], stop_ids, source_lengths,
                        banned_ids, on_step)


def sample(decoder: Decoder, batch: object, prefix: torch.Tensor, cfg: DecodingConfig, stop_ids: Sequence[int] = (),
           source_lengths: torch.Tensor | None = None, banned_ids: Sequence[int] = (),
           on_step: OnStep | None = None) -> list[list[Hypothesis]]:
    """A token drawn at every step (temperature, top-k, top-p: sampling.draw): B lists of one hypothesis.

    With `cfg.seed` the draws come from a local torch.Generator: the same seed gives the same text
    and torch's global RNG is untouched. Rows stopped early keep being fed (their tokens unused), so
    the draws of the other rows do not depend on when a row stops.
    """
    prefix = _check_prefix(prefix)
    return _one_per_row(decoder, batch, prefix, cfg, [_drawing(cfg, cfg.seed, prefix.device)], [prefix.size(0)],
                        stop_ids, source_lengths, banned_ids, on_step)


def _most_likely(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)  # [n, V] -> [n]


def _drawing(cfg: DecodingConfig, seed: int | None, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """A chooser drawing from its own generator (seeded with `seed`; None: torch's global RNG)."""
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    return lambda logits: draw(logits, cfg.temperature, cfg.top_k, cfg.top_p, generator)


def decode_side_by_side(decoder: Decoder, prefix: torch.Tensor, cfg: DecodingConfig, parts: Sequence[int],
                        seeds: Sequence[int | None], stop_ids: Sequence[int] = (), banned_ids: Sequence[int] = (),
                        leave: Callable[[int], bool] | None = None) -> list[list[Hypothesis]]:
    """Several inputs' greedy or sampled outputs decoded in one batch, one step for all rows at a time.

    The rows of `prefix` [B, T0] come in `parts` (consecutive rows of one input, e.g. a prompt's samples);
    part i draws from a generator seeded with `seeds[i]`, so it gets exactly what `decode` gives its rows
    alone with `replace(cfg, seed=seeds[i])`, other parts beside it or not (up to the last bits of float
    sums, which a different batch size may change). A part leaves the batch once its rows have all ended,
    or once `leave(i)` returns True (its output is then cut there). The inputs share one prefix length:
    every row is at the same position at every step, which is what makes this exact for every family."""
    if not cfg.search.streams:
        raise TextnnError(f"{cfg.search.name} search ranks several hypotheses per input: it is decoded with `decode`")
    if len(seeds) != len(parts):
        raise ValueError(f"{len(seeds)} seeds for {len(parts)} parts")
    prefix = _check_prefix(prefix)
    choosers = [_drawing(cfg, seed, prefix.device) if cfg.search.seeded else _most_likely for seed in seeds]
    return _one_per_row(decoder, None, prefix, cfg, choosers, parts, stop_ids, None, banned_ids, leave=leave)


# ------------------------------------------------------------------------------------------------ beam

def _keep_best(found: list[Hypothesis], hypothesis: Hypothesis, n_best: int) -> None:
    """Add `hypothesis` to a sentence's finished list, kept sorted best first and at most n_best long."""
    found.append(hypothesis)
    found.sort(key=lambda h: -h.score)  # stable: of equal scores the one found first stays first
    del found[n_best:]


def _settled(found: list[Hypothesis], best_live: float, limit: int, cfg: DecodingConfig) -> bool:
    """True when no live hypothesis of the sentence can enter its n_best finished ones.

    The bound: a live hypothesis has log-probability s <= 0 and every further token adds a
    log-probability <= 0, so whatever it becomes, of final length L <= limit, scores at most
    s / lp(L) <= s / lp(limit), since lp grows with L for alpha >= 0 and dividing a non-positive s
    by the largest penalty gives the highest value. All live hypotheses have the same length, so the
    best one's bound covers them all. With alpha = 0 the bound is s itself. (tensor2tensor's beam
    search stops on the same bound.)
    """
    if len(found) < cfg.n_best:
        return False
    bound = best_live / length_penalty(limit, cfg.length_penalty, cfg.length_penalty_kind)
    return found[-1].score >= bound


@torch.no_grad()
def beam_search(decoder: Decoder, batch: object, prefix: torch.Tensor, cfg: DecodingConfig,
                stop_ids: Sequence[int] = (), source_lengths: torch.Tensor | None = None,
                banned_ids: Sequence[int] = ()) -> list[list[Hypothesis]]:
    """Beam search (module docstring) for each row of `prefix` [B, T0]: B lists of at most n_best hypotheses."""
    prefix = _check_prefix(prefix)
    rows, device, beam = prefix.size(0), prefix.device, cfg.beam_size
    limits = _limits(cfg, rows, source_lengths)
    banned, stops = _ids(banned_ids, device), _ids(stop_ids if cfg.stop_at_eos else (), device)
    found: list[list[Hypothesis]] = [[] for _ in range(rows)]
    for sentence in range(rows):
        if limits[sentence] == 0:
            found[sentence].append(_hypothesis([], 0.0, False, cfg))
    active = [sentence for sentence in range(rows) if limits[sentence] > 0]  # sentences still searched
    if not active:
        return found

    logits, state = decoder.step(prefix, decoder.start(batch))  # [B, V]: the prefix is read once
    copies = torch.tensor(active, device=device).repeat_interleave(beam)  # [A*K]: K copies of each sentence
    logits, state = logits[copies], decoder.reorder(state, copies)  # [A*K, V]
    # Only the first copy is live at the start: the others would grow the same hypotheses again.
    scores = torch.full((len(active), beam), float("-inf"), device=device)  # [A, K] log-probs of the live beams
    scores[:, 0] = 0.0
    history = prefix.new_empty(len(active), beam, 0)  # [A, K, t] their new tokens
    for t in range(max(limits)):
        n_active = len(active)
        log_probs = torch.log_softmax(_allowed(logits, banned, stops, t, cfg), dim=-1)  # [A*K, V]
        vocab = log_probs.size(1)
        # [A, K, V] -> [A, K*V]: candidate k * V + v extends live beam k by token v
        candidates = (scores[:, :, None] + log_probs.view(n_active, beam, vocab)).view(n_active, beam * vocab)
        if len(stops):
            # A stop among the K best candidates finishes its hypothesis, scored with its length now.
            best, where = candidates.topk(beam, dim=1)  # [A, K]
            ends = torch.isin(where % vocab, stops) & torch.isfinite(best)
            for a, j in ends.nonzero().tolist():
                parent = int(where[a, j]) // vocab
                _keep_best(found[active[a]], _hypothesis(history[a, parent].tolist(), float(best[a, j]), True, cfg),
                           cfg.n_best)
            candidates = candidates.view(n_active, beam, vocab).index_fill(2, stops, float("-inf")).view(n_active, -1)
        scores, where = candidates.topk(beam, dim=1)  # [A, K]: the K best that go on
        parents, tokens = where // vocab, where % vocab  # [A, K] each
        history = torch.cat([history.gather(1, parents[:, :, None].expand(-1, -1, t)), tokens[:, :, None]], dim=2)

        keep = []  # positions in `active` of the sentences searched further
        for a, (sentence, live) in enumerate(zip(active, scores.tolist())):
            if t + 1 >= limits[sentence]:  # the maximum length: the live hypotheses are candidates too
                for tokens_k, score in zip(history[a].tolist(), live):
                    if score > float("-inf"):
                        _keep_best(found[sentence], _hypothesis(tokens_k, score, False, cfg), cfg.n_best)
            elif max(live) > float("-inf") and not _settled(found[sentence], max(live), limits[sentence], cfg):
                keep.append(a)
        if not keep:
            break
        kept = torch.tensor(keep, device=device)  # [A']
        rows_next = (kept[:, None] * beam + parents[kept]).view(-1)  # [A'*K] the state row of each beam's parent
        scores, history, tokens = scores[kept], history[kept], tokens[kept]
        active = [active[a] for a in keep]
        state = decoder.reorder(state, rows_next)
        logits, state = decoder.step(tokens.view(-1, 1), state)  # [A'*K, 1] -> [A'*K, V]
    return found


@dataclass(frozen=True)
class Search:
    """A search strategy and what it can do, declared: commands and tasks ask these, never its name."""

    name: str  # what DecodingConfig.method holds
    find: Callable[..., list[list[Hypothesis]]]  # (decoder, batch, prefix, cfg, ...) -> hypotheses per row
    seeded: bool  # draws at random: its seed makes it repeatable, and several samples of one input differ
    streams: bool  # knows each output token by token (on_step), so a command can show it as it comes
    ranked: bool  # keeps several hypotheses per input (cfg.beam_size rows), best first: n-best lists

    def rows_per_input(self, cfg: DecodingConfig) -> int:
        """Decoder rows one input takes while it is searched (what bounds the inputs decoded side by side)."""
        return cfg.beam_size if self.ranked else 1

    def describe(self, cfg: DecodingConfig) -> str:
        """The search with the settings that shape its output, as a report names it."""
        if self.ranked:
            return f"{self.name} {cfg.beam_size}, length penalty {cfg.length_penalty:g}"
        if self.seeded:
            shaping = [f"{label} {value:g}" for label, value, off in (("temperature", cfg.temperature, 1.0),
                                                                     ("top-k", cfg.top_k, 0), ("top-p", cfg.top_p, 1.0))
                       if value != off]
            return ", ".join([self.name, *shaping, *([f"seed {cfg.seed}"] if cfg.seed is not None else [])])
        return self.name


SEARCHES = {search.name: search for search in (
    Search("greedy", greedy, seeded=False, streams=True, ranked=False),
    Search("sample", sample, seeded=True, streams=True, ranked=False),
    Search("beam", beam_search, seeded=False, streams=False, ranked=True),
)}


def decode(decoder: Decoder, batch: object, prefix: torch.Tensor, cfg: DecodingConfig, stop_ids: Sequence[int] = (),
           source_lengths: torch.Tensor | None = None, banned_ids: Sequence[int] = (),
           on_step: OnStep | None = None) -> list[list[Hypothesis]]:
    """The search `cfg.method` names (`cfg.search`: greedy, sample or beam_search) on `decoder`.

    `on_step` (greedy and sample): called after every step with the tokens just chosen, so that a caller
    can show an output as it grows. Beam search knows its best hypothesis only at its end: it has none."""
    search = cfg.search
    if on_step is None:
        return search.find(decoder, batch, prefix, cfg, stop_ids=stop_ids, source_lengths=source_lengths,
                           banned_ids=banned_ids)
    if not search.streams:
        raise TextnnError(f"{search.name} search finds its best output only at its end: it cannot show tokens as "
                          f"they come")
    return search.find(decoder, batch, prefix, cfg, stop_ids=stop_ids, source_lengths=source_lengths,
                       banned_ids=banned_ids, on_step=on_step)
