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

from dataclasses import dataclass, field
from typing import Callable

import torch

from textnn import limits
from textnn.data.streams import EOS
from textnn.data.vocab import PAD
from textnn.errors import TextnnError, short
from textnn.generation.decoding import DecodingConfig, PromptDecoder, decode


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


def generate_text(model: PromptDecoder, task, prompt: str, decoding: DecodingConfig,
                  num_samples: int = 1, on_text: Callable[[str], None] | None = None) -> Generation:
    """Continue `prompt` as `decoding` says: `num_samples` samples (sampling, greedy) or n_best hypotheses (beam).

    `task` is the run's language-modelling task (tokenizer, vocabulary, `encode_text`, `decode`);
    `model` any language model: a `PromptDecoder` module (step and reorder on the decoding interface).
    decoding.stop_at_eos: end each output at the end of its first line (the line-end token is not returned).
    `on_text` (one sample, greedy or sampling): called with the output's text in pieces as its tokens come,
    the prompt first; the pieces join to `samples[0]`.
    """
    if not isinstance(model, PromptDecoder):
        raise TextnnError(f"model {type(model).__name__} is not a language model (a PromptDecoder, which reads a "
                          f"prompt token by token); it cannot generate")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise TextnnError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    limits.check_count(num_samples, "samples", "num_samples (--num-samples)")
    search = decoding.search
    if on_text is not None and (num_samples != 1 or not search.streams):
        raise TextnnError("text is given as it comes for one sample drawn or taken greedily; several samples "
                          "and beam search give their outputs at the end")
    if search.ranked and num_samples != 1:
        raise TextnnError(f"num_samples (--num-samples) = {num_samples}: beam search finds one best output per "
                          f"prompt; ask for its n_best hypotheses (--n-best) instead")
    vocab = task.vocab
    line_end = line_end_token(vocab)
    ids = list(task.encode_text(prompt))
    unknown = sum(1 for i in ids if vocab.unk_id is not None and i == vocab.unk_id)
    if ids and unknown == len(ids):
        raise TextnnError(f"none of the {len(ids)} token(s) of the prompt {short(prompt)} is in the model's vocabulary "
                          f"(every one would be read as <unk>); write the prompt with words or characters "
                          f"from the training text")
    prompt_tokens = len(ids)
    if not ids:  # an empty prompt starts a new line
        if line_end is None:
            raise TextnnError("the prompt is empty and the vocabulary has no line-end token to start from; "
                              "give a prompt")
        ids = [vocab.stoi[line_end]]
    if decoding.stop_at_eos and line_end is None:
        raise TextnnError("stop_at_eos: the vocabulary has no line-end token (<eos> or a newline)")
    decoding = decoding.with_seed()
    stop_ids = [vocab.stoi[line_end]] if line_end is not None else []
    banned_ids = [vocab.stoi[PAD]] if PAD in vocab.stoi else []  # padding is not text: never draw it

    model.eval()
    device = next(model.parameters()).device
    rows = num_samples if search.seeded else 1  # greedy: every sample is the same
    prefix = torch.tensor([ids] * rows, dtype=torch.long, device=device)  # [N, T]
    on_step = None
    if on_text is not None:
        stream = TextStream(task, stop_ids[0] if stop_ids else None, prompt, on_text)

        def on_step(tokens: torch.Tensor, kept: torch.Tensor) -> None:  # tokens, kept: [1]
            if bool(kept[0]):
                stream.push(int(tokens[0]))
    found = decode(model, None, prefix, decoding, stop_ids=stop_ids, banned_ids=banned_ids, on_step=on_step)
    if on_text is not None:
        stream.finish()
    hypotheses = [hypothesis for row in found for hypothesis in row]
    if not search.seeded and not search.ranked:  # greedy: its one output is every sample
        hypotheses = hypotheses * num_samples
    continuations = [task.decode(h.tokens) for h in hypotheses]
    samples = [prompt + _joiner(task, prompt, text) + text for text in continuations]
    return Generation(prompt=prompt, samples=samples, continuations=continuations,
                      seed=decoding.seed if search.seeded else None, prompt_tokens=prompt_tokens,
                      unknown_tokens=unknown, new_tokens=[len(h.tokens) for h in hypotheses],
                      scores=[h.score for h in hypotheses])

