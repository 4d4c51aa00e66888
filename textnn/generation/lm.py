"""Text in, text out: continue a prompt with any trained language model through the decoding interface.

`generate_text` turns a prompt into token ids with the run's own tokenizer and vocabulary, decodes it
with the model itself (a language model is a `decoding.PromptDecoder`) by the search its
`DecodingConfig` names (greedy, sampling, beam search), and turns the ids back into
text: `num_samples` draws in one batch when sampling, the `n_best` hypotheses with beam search.

Decisions:
- An empty prompt is allowed for every model: generation then starts as if a line had just ended
  (`<eos>` for word models, a newline for character models), which is how every line of the
  training stream begins. The start token is not part of the returned text.
- A prompt none of whose tokens is in the vocabulary is refused (the model would only see `<unk>`);
  a prompt with some unknown tokens is continued, and the number of unknown tokens is reported.
- The line-end token is the stop id: with `stop_at_eos` an output ends at its first line end.
- Padding is never drawn: it is not text, only filler for evaluation batches.
- Sampling without a seed draws one from the operating system and returns it, so any sample can be repeated.
"""

# N rows (samples), T prompt tokens, V vocabulary size

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch

from textnn import limits
from textnn.data.streams import EOS
from textnn.data.vocab import PAD
from textnn.errors import TextnnError, short
from textnn.generation.decoding import DecodingConfig, Hypothesis, PromptDecoder, decode, decode_side_by_side


@dataclass
class Generation:
    """The result of `generate_text`: one entry per sample (sampling, greedy) or per hypothesis (beam)."""

    prompt: str
    samples: list[str]  # prompt + continuation; beam search: its n_best hypotheses, best first
    continuations: list[str]  # the generated text alone
    seed: int | None  # sampling: the seed used (given or drawn), to repeat the samples; else None
    prompt_tokens: int  # tokens the prompt was read as (0 for an empty prompt)
    unknown_tokens: int  # prompt tokens outside the vocabulary (read as <unk>)
    new_tokens: list[int] = field(default_factory=list)  # tokens generated per sample, stop token excluded
    scores: list[float] = field(default_factory=list)  # per sample: log-probability / length penalty


def line_end_token(vocab) -> str | None:
    """The token that ends a line in the model's stream: `<eos>` (word models) or a newline (characters)."""
    for token in (EOS, "\n"):
        if token in vocab.stoi:
            return token
    return None


class TextStream:
    """The text of one output as its tokens come, in pieces whose concatenation is the output's text.

    A piece is what the current line's tokens decode to beyond what was already given. The line (the
    tokens since the last line end) is decoded again after each token while it is short, then once its
    new tokens reach 1/64 of its length, so a long line costs a bounded number of decodes per token.
    Decoding whole lines keeps the text equal to decoding all tokens at once (the task decodes line by
    line); the tail of an unfinished line is held back where a later token may still change it: a
    character cut in the middle of its bytes (U+FFFD) and trailing spaces.
    """

    def __init__(self, task, line_end_id: int | None, prompt: str, on_text: Callable[[str], None]) -> None:
        self.task, self.line_end_id, self.prompt, self.on_text = task, line_end_id, prompt, on_text
        self.line: list[int] = []  # ids of the current line
        self.given = ""  # the part of the current line's text already given
        self.pending = 0  # tokens of the line not decoded yet
        self.started = False  # whether any continuation text was given (the joiner goes before the first)
        if prompt:
            on_text(prompt)

    def push(self, token: int) -> None:
        self.line.append(token)
        self.pending += 1
        if token == self.line_end_id:
            self._give(complete=True)
        elif self.pending >= max(1, len(self.line) // 64):
            self._give(complete=False)

    def finish(self) -> None:
        self._give(complete=True)

    def _give(self, complete: bool) -> None:
        text = self.task.decode(self.line)
        visible = text if complete else text.rstrip().rstrip("\ufffd")
        if visible.startswith(self.given) and len(visible) > len(self.given):
            piece = visible[len(self.given):]
            if not self.started:
                piece = _joiner(self.task, self.prompt, piece) + piece
                self.started = True
            self.on_text(piece)
            self.given = visible
        self.pending = 0
        if complete:
            self.line, self.given = [], ""


def _joiner(task, prompt: str, continuation: str) -> str:
    """What goes between a prompt and its continuation: a space between words, nothing else."""
    words = task.tokenizer.kind in ("word", "whitespace") and prompt.strip()
    return " " if words and continuation and not continuation.startswith("\n") and not prompt[-1:].isspace() else ""


@dataclass(frozen=True)
class Request:
    """One prompt to continue, as `generate_text` takes it (`generate_texts` takes several)."""

    prompt: str
    decoding: DecodingConfig
    num_samples: int = 1


@dataclass
class _Read:
    """A request checked and read: the ids the model is given, and what its `Generation` reports."""

    request: Request
    ids: list[int]  # the prompt's ids; an empty prompt: the line-end token
    prompt_tokens: int
    unknown: int
    decoding: DecodingConfig  # its seed fixed (a seeded search given none draws one)
    rows: int  # decoder rows: num_samples when sampling, else 1


def side_by_side_key(length: int, decoding: DecodingConfig) -> tuple | None:
    """Generations of equal keys are decoded side by side (`generate_texts`): greedy or sampled, prompts read
    as `length` ids, decodings equal but for their seeds. None: decoded alone (beam search)."""
    return (length, replace(decoding, seed=None)) if decoding.search.streams else None


def prompt_length(task, prompt: str) -> int:
    """The number of ids the model reads for `prompt` (an empty prompt is read as one line-end token): prompts
    of equal length are what `generate_texts` decodes side by side. A prompt it refuses raises here too."""
    return len(_read_prompt(task, prompt)[0])


def _read_prompt(task, prompt: str) -> tuple[list[int], int, int]:
    vocab = task.vocab
    ids = list(task.encode_text(prompt))
    unknown = sum(1 for i in ids if vocab.unk_id is not None and i == vocab.unk_id)
    if ids and unknown == len(ids):
        raise TextnnError(f"none of the {len(ids)} token(s) of the prompt {short(prompt)} is in the model's vocabulary "
                          f"(every one would be read as <unk>); write the prompt with words or characters "
                          f"from the training text")
    prompt_tokens = len(ids)
    if not ids:  # an empty prompt starts a new line
        line_end = line_end_token(vocab)
        if line_end is None:
            raise TextnnError("the prompt is empty and the vocabulary has no line-end token to start from; "
                              "give a prompt")
        ids = [vocab.stoi[line_end]]
    return ids, prompt_tokens, unknown


def _read(model, task, request: Request, streamed: bool = False) -> _Read:
    if not isinstance(model, PromptDecoder):
        raise TextnnError(f"model {type(model).__name__} is not a language model (a PromptDecoder, which reads a "
                          f"prompt token by token); it cannot generate")
    num_samples, search = request.num_samples, request.decoding.search
    if not isinstance(num_samples, int) or num_samples < 1:
        raise TextnnError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    limits.check_count(num_samples, "samples", "num_samples (--num-samples)")
    if streamed and (num_samples != 1 or not search.streams):
        raise TextnnError("text is given as it comes for one sample drawn or taken greedily; several samples "
                          "and beam search give their outputs at the end")
    if search.ranked and num_samples != 1:
        raise TextnnError(f"num_samples (--num-samples) = {num_samples}: beam search finds one best output per "
                          f"prompt; ask for its n_best hypotheses (--n-best) instead")
    ids, prompt_tokens, unknown = _read_prompt(task, request.prompt)
    if request.decoding.stop_at_eos and line_end_token(task.vocab) is None:
        raise TextnnError("stop_at_eos: the vocabulary has no line-end token (<eos> or a newline)")
    rows = num_samples if search.seeded else 1  # greedy: every sample is the same
    return _Read(request, ids, prompt_tokens, unknown, request.decoding.with_seed(), rows)


def _special_ids(task) -> tuple[list[int], list[int]]:
    """The stop ids (the line-end token) and the banned ids (padding is not text: never drawn)."""
    vocab = task.vocab
    line_end = line_end_token(vocab)
    return ([vocab.stoi[line_end]] if line_end is not None else []), ([vocab.stoi[PAD]] if PAD in vocab.stoi else [])


def _generation(task, read: _Read, hypotheses: list[Hypothesis]) -> Generation:
    prompt, search = read.request.prompt, read.decoding.search
    if not search.seeded and not search.ranked:  # greedy: its one output is every sample
        hypotheses = hypotheses * read.request.num_samples
    continuations = [task.decode(h.tokens) for h in hypotheses]
    samples = [prompt + _joiner(task, prompt, text) + text for text in continuations]
    return Generation(prompt=prompt, samples=samples, continuations=continuations,
                      seed=read.decoding.seed if search.seeded else None, prompt_tokens=read.prompt_tokens,
                      unknown_tokens=read.unknown, new_tokens=[len(h.tokens) for h in hypotheses],
                      scores=[h.score for h in hypotheses])


def generate_text(model: PromptDecoder, task, prompt: str, decoding: DecodingConfig,
                  num_samples: int = 1, on_text: Callable[[str], None] | None = None) -> Generation:
    """Continue `prompt` as `decoding` says: `num_samples` samples (sampling, greedy) or n_best hypotheses (beam).

    `task` is the run's language-modelling task (tokenizer, vocabulary, `encode_text`, `decode`);
    `model` any language model: a `PromptDecoder` module (step and reorder on the decoding interface).
    decoding.stop_at_eos: end each output at the end of its first line (the line-end token is not returned).
    `on_text` (one sample, greedy or sampling): called with the output's text in pieces as its tokens come,
    the prompt first; the pieces join to `samples[0]`.
    """
    read = _read(model, task, Request(prompt, decoding, num_samples), streamed=on_text is not None)
    stop_ids, banned_ids = _special_ids(task)
    model.eval()
    device = next(model.parameters()).device
    prefix = torch.tensor([read.ids] * read.rows, dtype=torch.long, device=device)  # [N, T]
    stream = None if on_text is None else TextStream(task, stop_ids[0] if stop_ids else None, prompt, on_text)
    found = decode(model, None, prefix, read.decoding, stop_ids=stop_ids, banned_ids=banned_ids,
                   on_step=None if stream is None else _pusher(stream))
    if stream is not None:
        stream.finish()
    return _generation(task, read, [hypothesis for row in found for hypothesis in row])


def _pusher(stream: TextStream) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """The `on_step` of one streamed row: each token it keeps goes to `stream`."""
    def on_step(tokens: torch.Tensor, kept: torch.Tensor) -> None:  # tokens, kept: [1]
        if bool(kept[0]):
            stream.push(int(tokens[0]))
    return on_step


def generate_texts(model: PromptDecoder, task, requests: Sequence[Request],
                   leave: Callable[[int], bool] | None = None) -> list[Generation | None]:
    """The `Generation` of each request, each exactly what `generate_text` gives it alone (its own seed).

    Greedy and sampled requests whose prompts are read as equally many ids and whose decodings differ at
    most in their seed are decoded side by side (`decoding.decode_side_by_side`): one step of the model
    for all their rows at a time, on the family's cache, each request drawing from its own generator, and
    a request leaving the batch once its rows have ended. Equal lengths keep every row at the same
    position, which is exact for every family (recurrent state, key/value cache, Transformer-XL memory);
    prompts of other lengths, and beam search, are decoded in batches of their own. `leave(i)`, asked after
    each step, drops request i at once when it returns True (its entry is then None).
    """
    reads = [_read(model, task, request) for request in requests]
    stop_ids, banned_ids = _special_ids(task)
    model.eval()
    device = next(model.parameters()).device
    groups: dict[tuple, list[int]] = {}
    for number, read in enumerate(reads):
        groups.setdefault(side_by_side_key(len(read.ids), read.decoding) or (number,), []).append(number)
    found: list[Generation | None] = [None] * len(reads)
    left: set[int] = set()

    def leaving(number: int) -> bool:
        if leave is not None and leave(number):
            left.add(number)
        return number in left
    for numbers in groups.values():
        group = [reads[number] for number in numbers]
        prefix = torch.tensor([read.ids for read in group for _ in range(read.rows)], dtype=torch.long,
                              device=device)  # [N, T]
        cfg = group[0].decoding
        if cfg.search.ranked:
            rows = decode(model, None, prefix, cfg, stop_ids=stop_ids, banned_ids=banned_ids)
        else:
            rows = decode_side_by_side(model, prefix, cfg, [read.rows for read in group],
                                       [read.decoding.seed for read in group], stop_ids, banned_ids,
                                       None if leave is None else lambda part: leaving(numbers[part]))
        at = 0
        for number, read in zip(numbers, group):
            if number not in left:
                found[number] = _generation(task, read, [h for row in rows[at:at + read.rows] for h in row])
            at += read.rows
    return found
