"""The OpenAI completions API over a language-model run: `POST /v1/completions` and `GET /v1/models`, in the
shapes the OpenAI client libraries read, so that they work against `textnn serve` with only `base_url` set.

A completion is what `textnn generate` gives for the same settings, less the prompt: `prompt + text` is
the command's output. `model` is the run's name; max_tokens (default 16, as OpenAI's), temperature (0:
the most likely token, greedy), top_p, n (samples of each prompt), seed (none: one drawn, sent back as
`system_fingerprint` "seed-N" so that the text can be repeated) and stream. A list of prompts is answered
as `textnn generate RUN FILE` answers its lines: prompt i drawn with seed + i. The OpenAI fields textnn
has no use for are taken at their neutral value (echo false, logprobs null, penalties 0, ...) and refused
otherwise, naming the field.
"""

from __future__ import annotations

import time
import uuid

from textnn.server.bodies import Field, RequestError

COMPLETION_FIELDS = {
    "model": Field("string", required=True), "prompt": Field("prompt", ""), "max_tokens": Field("integer", 16),
    "temperature": Field("number", 1.0), "top_p": Field("number", 1.0), "n": Field("integer", 1),
    "stream": Field("boolean", False), "seed": Field("integer"),
    # OpenAI's fields that change nothing here at these values
    "echo": Field("any"), "logprobs": Field("any"), "suffix": Field("any"), "stop": Field("any"),
    "frequency_penalty": Field("any"), "presence_penalty": Field("any"), "logit_bias": Field("any"),
    "best_of": Field("any"), "user": Field("any"), "stream_options": Field("any"),
}
NEUTRAL = {"echo": (False,), "logprobs": (0,), "suffix": ("",), "stop": ("", []), "frequency_penalty": (0,),
           "presence_penalty": (0,), "logit_bias": ({},), "best_of": (1,)}


def check_neutral(fields: dict) -> None:
    """Refuse an OpenAI field set to something textnn does not do (null is always taken: left out)."""
    for name, allowed in NEUTRAL.items():
        value = fields[name]
        if value is not None and value not in allowed and not (name == "best_of" and value == fields["n"]):
            raise RequestError(422, f"{name}: textnn serve does not do {name} (got {value!r}); leave it out", name)


def decoding_settings(fields: dict) -> dict:
    """The DecodingConfig fields of a completion request: temperature 0 is greedy search, as OpenAI reads it."""
    if fields["temperature"] == 0:
        return {"method": "greedy", "max_tokens": fields["max_tokens"]}
    return {"method": "sample", "max_tokens": fields["max_tokens"], "temperature": fields["temperature"],
            "top_p": fields["top_p"], "seed": fields["seed"]}


def new_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def finish_reason(new_tokens: int, max_tokens: int) -> str:
    """"length" when the output was cut at max_tokens, "stop" when a stop token ended it first."""
    return "length" if new_tokens >= max_tokens else "stop"


def fingerprint(seed: int | None) -> str | None:
    return None if seed is None else f"seed-{seed}"


def completion(ident: str, model: str, generations: list, max_tokens: int) -> dict:
    """The answer to a completion request: a choice per sample of each prompt (index = prompt * n + sample)."""
    choices = []
    for found in generations:
        for sample, new_tokens in zip(found.samples, found.new_tokens):
            choices.append({"text": sample[len(found.prompt):], "index": len(choices), "logprobs": None,
                            "finish_reason": finish_reason(new_tokens, max_tokens)})
    prompt_tokens = sum(found.prompt_tokens for found in generations)
    completion_tokens = sum(sum(found.new_tokens) for found in generations)
    return {"id": ident, "object": "text_completion", "created": int(time.time()), "model": model,
            "system_fingerprint": fingerprint(generations[0].seed), "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chunk(ident: str, model: str, text: str, index: int = 0, finish: str | None = None,
          seed: int | None = None) -> dict:
    """One event of a streamed completion: a piece of choice `index`'s text, or its end (`finish`)."""
    return {"id": ident, "object": "text_completion", "created": int(time.time()), "model": model,
            "system_fingerprint": fingerprint(seed),
            "choices": [{"text": text, "index": index, "logprobs": None, "finish_reason": finish}]}


def models(names: list[str], created: dict[str, int]) -> dict:
    """`GET /v1/models`: the language-model runs, by name."""
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created[name], "owned_by": "textnn"}
                                       for name in names]}
