"""Text in, text out: continue a prompt with any trained language model through its `step` interface.

`generate_text` turns a prompt into token ids with the run's own tokenizer and vocabulary, draws
`num_samples` continuations in one batch with `sampling.sample` (greedy, temperature, top-k, top-p,
a seeded local generator, optional stop at the end of a line), and turns the ids back into text.

Decisions:
- An empty prompt is allowed for every model: generation then starts as if a line had just ended
  (`<eos>` for word models, a newline for character models), which is how every line of the
  training stream begins. The start token is not part of the returned text.
- A prompt none of whose tokens is in the vocabulary is refused (the model would only see `<unk>`);
  a prompt with some unknown tokens is continued, and the number of unknown tokens is reported.
- Padding is never drawn: it is not text, only filler for evaluation batches.
- Without a seed one is drawn from the operating system and returned, so any sample can be repeated.
"""

# N samples, T prompt tokens, M new tokens, V vocabulary size

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from textnn.data.vocab import PAD
from textnn.errors import TextnnError
from textnn.generation.sampling import sample


@dataclass
class Generation:
    """The result of `generate_text`."""

    prompt: str
    samples: list[str]  # prompt + continuation, one per sample
    continuations: list[str]  # the generated text alone
    seed: int  # the seed used (given or drawn), to repeat the samples
    prompt_tokens: int  # tokens the prompt was read as (0 for an empty prompt)
    unknown_tokens: int  # prompt tokens outside the vocabulary (read as <unk>)
    new_tokens: list[int] = field(default_factory=list)  # tokens generated per sample, stop token excluded


def line_end_token(vocab) -> str | None:
    """The token that ends a line in the model's stream: `<eos>` (word models) or a newline (characters)."""
    from textnn.tasks.language_modeling import EOS

    for token in (EOS, "\n"):
        if token in vocab.stoi:
            return token
    return None


def generate_text(model: torch.nn.Module, task, prompt: str, max_tokens: int = 200, temperature: float = 1.0,
                  top_k: int = 0, top_p: float = 1.0, seed: int | None = None, num_samples: int = 1,
                  stop_at_eos: bool = False) -> Generation:
    """Continue `prompt` `num_samples` times by up to `max_tokens` tokens each (temperature 0 = greedy).

    `task` is the run's language-modelling task (tokenizer, vocabulary, `encode_text`, `decode`);
    `model` any language model with `step(ids [B, T], state) -> (logits [B, V], state)`.
    stop_at_eos: end each sample at the end of its first line (the line-end token is not returned).
    """
    if not callable(getattr(model, "step", None)):
        raise TextnnError(f"model {type(model).__name__} has no `step` decoding interface; it cannot generate")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise TextnnError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise TextnnError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    vocab = task.vocab
    line_end = line_end_token(vocab)
    ids = list(task.encode_text(prompt))
    unknown = sum(1 for i in ids if vocab.unk_id is not None and i == vocab.unk_id)
    if ids and unknown == len(ids):
        raise TextnnError(f"none of the {len(ids)} token(s) of the prompt {prompt!r} is in the model's vocabulary "
                          f"(every one would be read as <unk>); write the prompt with words or characters "
                          f"from the training text")
    prompt_tokens = len(ids)
    if not ids:  # an empty prompt starts a new line
        if line_end is None:
            raise TextnnError("the prompt is empty and the vocabulary has no line-end token to start from; "
                              "give a prompt")
        ids = [vocab.stoi[line_end]]
    if stop_at_eos and line_end is None:
        raise TextnnError("stop_at_eos: the vocabulary has no line-end token (<eos> or a newline)")
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little") >> 1  # a non-negative 31-bit seed
    stop_ids = [vocab.stoi[line_end]] if stop_at_eos else []

    device = next(model.parameters()).device
    pad_id = vocab.stoi.get(PAD)

    def step(tokens: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        logits, state = model.step(tokens, state)  # [N, V]
        if pad_id is not None:
            logits = logits.clone()
            logits[:, pad_id] = float("-inf")  # padding is not text: never draw it
        return logits, state

    model.eval()
    batch = torch.tensor([ids] * num_samples, dtype=torch.long, device=device)  # [N, T]
    out = sample(step, batch, max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                 stop_ids=stop_ids)  # [N, T + M]
    continuations, counts = [], []
    for row in out[:, len(ids):].tolist():
        if stop_ids and stop_ids[0] in row:
            row = row[:row.index(stop_ids[0])]
        counts.append(len(row))
        continuations.append(task.decode(row))
    joiner = " " if task.tokenizer.kind in ("word", "whitespace") and prompt.strip() else ""
    samples = [prompt + (joiner if text and not text.startswith("\n") and not prompt[-1:].isspace() else "") + text
               for text in continuations]
    return Generation(prompt=prompt, samples=samples, continuations=continuations, seed=seed,
                      prompt_tokens=prompt_tokens, unknown_tokens=unknown, new_tokens=counts)
