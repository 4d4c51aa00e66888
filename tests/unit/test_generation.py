"""Text generation through the step interface (generation/lm.py) and the top-k / top-p keep sets.

`generate_text` is run on real tiny models (GPT and the recurrent LM) with a real language-modelling
task (tokenizer + vocabulary): seeded reproducibility, greedy == the argmax chain of full forwards,
empty and unknown prompts, stop at the end of a line, padding never drawn, prompt joining. The keep
sets of `filter_logits` are checked against their definitions on random score vectors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.generation import DecodingConfig, PromptDecoder, filter_logits, generate_text
from textnn.models.gpt import PRESETS
from textnn.models.rnn_lm import PRESETS as RNN_PRESETS
from textnn.resolve import config_from_dict
from textnn.tasks.language_modeling import EOS, LanguageModel, LanguageModelingTask, language_model

CHARS = "abcdefgh ."
WORDS = "the cat sat on a mat".split()


def char_task() -> LanguageModelingTask:
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text", "tokenizer": "char",
                                                                       "bptt": 16},
                               "model": {"name": "gpt", "preset": "tiny"}}, "test")
    return LanguageModelingTask(config, Tokenizer("char"), Vocab([PAD, UNK, "\n", *CHARS]))


def word_task() -> LanguageModelingTask:
    config = config_from_dict({"task": "language_modeling", "data": {"format": "text", "tokenizer": "whitespace",
                                                                       "bptt": 16},
                               "model": {"name": "gpt", "preset": "tiny"}}, "test")
    return LanguageModelingTask(config, Tokenizer("whitespace"), Vocab([PAD, UNK, EOS, *WORDS]))


def gpt(vocab_size: int, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    model = language_model("gpt", PRESETS["tiny"].options(context=32), vocab_size)
    with torch.no_grad():  # a peaked distribution, so that seeds and prompts visibly matter
        for param in model.parameters():
            param.normal_(0.0, 0.4)
    return model.eval()


def lstm(vocab_size: int) -> LanguageModel:
    torch.manual_seed(0)
    return language_model("rnn_lm", RNN_PRESETS["tiny"].options(), vocab_size).eval()


def generate(model, task, prompt: str, num_samples: int = 1, **options):
    """generate_text with the command line's defaults: sampling, an output does not stop at a line end."""
    options = {"method": "sample", "stop_at_eos": False, **options}
    return generate_text(model, task, prompt, DecodingConfig(**options), num_samples=num_samples)


@pytest.mark.parametrize("make_model", [gpt, lstm], ids=["gpt", "lstm"])
def test_same_seed_same_samples_other_seed_other_samples_global_rng_untouched(make_model):
    task = char_task()
    model = make_model(len(task.vocab))
    torch.manual_seed(1)
    before = torch.get_rng_state()
    first = generate(model, task, "abc", max_tokens=40, seed=7, num_samples=3)
    again = generate(model, task, "abc", max_tokens=40, seed=7, num_samples=3)
    other = generate(model, task, "abc", max_tokens=40, seed=8, num_samples=3)
    assert torch.equal(torch.get_rng_state(), before)
    assert first.samples == again.samples and first.samples != other.samples
    assert len(first.samples) == 3 and len(set(first.samples)) > 1  # the samples of one call differ
    for text, continuation in zip(first.samples, first.continuations):
        assert text == "abc" + continuation
    assert first.new_tokens == [40, 40, 40]
    assert first.seed == 7 and first.prompt_tokens == 3 and first.unknown_tokens == 0


def test_without_a_seed_one_is_drawn_and_reported():
    task = char_task()
    model = gpt(len(task.vocab))
    result = generate(model, task, "ab", max_tokens=30)
    repeat = generate(model, task, "ab", max_tokens=30, seed=result.seed)
    assert result.seed >= 0 and repeat.samples == result.samples


def test_greedy_is_the_argmax_chain_of_full_forwards():
    task = char_task()
    model = gpt(len(task.vocab))
    ids = task.encode_text("bad cafe")
    expected = list(ids)
    with torch.no_grad():
        for _ in range(20):
            logits = model(torch.tensor([expected[-32:]])).logits[0, -1]  # [V]
            logits[task.vocab.pad_id] = float("-inf")
            expected.append(int(logits.argmax()))
    result = generate(model, task, "bad cafe", max_tokens=20, method="greedy", num_samples=2)
    assert result.samples == [task.decode(expected)] * 2


class Favouring(torch.nn.Module, PromptDecoder):
    """Wraps a model so that `token` gets `bonus` more logit at every step."""

    def __init__(self, inner: torch.nn.Module, token: int, bonus: float):
        super().__init__()
        self.inner, self.token, self.bonus = inner, token, bonus

    def step(self, ids: torch.Tensor, state):
        logits, state = self.inner.step(ids, state)
        logits = logits.clone()
        logits[:, self.token] += self.bonus
        return logits, state

    def reorder(self, state, indices: torch.Tensor):
        return self.inner.reorder(state, indices)


def test_padding_is_never_drawn():
    task = char_task()
    model = Favouring(gpt(len(task.vocab)), task.vocab.pad_id, 100.0)  # padding: by far the most likely
    with torch.no_grad():
        assert int(model.step(torch.tensor([task.encode_text("abc")]), None)[0].argmax()) == task.vocab.pad_id
    for options in ({"method": "greedy"}, {"temperature": 1.0, "seed": 0}, {"temperature": 5.0, "seed": 0},
                    {"method": "beam", "beam_size": 4, "n_best": 4}):
        result = generate(model, task, "abc", max_tokens=30, num_samples=1 if "n_best" in options else 4, **options)
        assert result.new_tokens == [30] * 4 and all(PAD not in text for text in result.continuations)


def test_empty_prompt_starts_a_new_line_and_is_not_returned():
    task = char_task()
    model = gpt(len(task.vocab))
    result = generate(model, task, "", max_tokens=25, seed=3)
    assert result.prompt_tokens == 0 and result.new_tokens == [25]
    # Same draws as continuing an explicit newline, minus that newline.
    explicit = generate(model, task, "\n", max_tokens=25, seed=3)
    assert explicit.samples[0] == "\n" + result.samples[0]


def test_a_prompt_of_unknown_tokens_only_is_refused_and_partly_unknown_is_counted():
    task = char_task()
    model = gpt(len(task.vocab))
    with pytest.raises(TextnnError, match="none of the 3 token"):
        generate(model, task, "XYZ", max_tokens=5, seed=0)
    result = generate(model, task, "aXb", max_tokens=5, seed=0)
    assert result.unknown_tokens == 1 and result.samples[0].startswith("aXb")


def test_stop_at_eos_ends_each_sample_at_its_first_line_end():
    task = char_task()
    model = gpt(len(task.vocab))
    newline = task.vocab.stoi["\n"]
    with torch.no_grad():  # make line ends likely, so that every sample meets one
        model.head.decoder.weight = torch.nn.Parameter(model.head.decoder.weight.detach().clone())
        model.head.decoder.weight[newline] *= 3
    free = generate(model, task, "ab", max_tokens=60, seed=1, num_samples=4)
    stopped = generate(model, task, "ab", max_tokens=60, seed=1, num_samples=4, stop_at_eos=True)
    assert any("\n" in text for text in free.continuations)
    for long, short, count in zip(free.continuations, stopped.continuations, stopped.new_tokens):
        assert "\n" not in short and count == len(short) - 4 * short.count(UNK)  # <unk>: 1 token, 5 characters
        assert long.startswith(short) and (long == short or long[len(short)] == "\n")


def test_word_models_join_prompt_and_continuation_with_a_space_and_lines_with_newlines():
    task = word_task()
    model = lstm(len(task.vocab))
    result = generate(model, task, "the cat", max_tokens=30, seed=2)
    continuation = result.continuations[0]
    tokens = continuation.replace("\n", " ").split()
    assert tokens and set(tokens) <= set(WORDS) | {UNK}
    assert result.samples[0] == "the cat" + ("" if continuation.startswith("\n") else " ") + continuation


@pytest.mark.parametrize("kwargs,message", [({"num_samples": 0}, "num_samples"), ({"temperature": -1.0}, "temperature"),
                                            ({"top_p": 0.0}, "top_p"), ({"max_tokens": -2}, "max_tokens")])
def test_bad_arguments_raise(kwargs, message):
    task = char_task()
    with pytest.raises(TextnnError, match=message):
        generate(gpt(len(task.vocab)), task, "ab", **kwargs)


def test_a_model_that_is_not_a_prompt_decoder_is_refused():
    """Whether a model can generate is declared (it subclasses PromptDecoder), not guessed from its methods:
    a module with a `step` of the right shape but no declaration is refused too."""
    task = char_task()

    class Undeclared(torch.nn.Module):
        def step(self, ids, state):
            return torch.zeros(ids.size(0), len(task.vocab)), state

    for model in (torch.nn.Linear(2, 2), Undeclared()):
        with pytest.raises(TextnnError, match="not a language model"):
            generate(model, task, "ab")


def test_a_decoder_must_implement_every_method_of_the_protocol():
    class NoReorder(torch.nn.Module, PromptDecoder):
        def step(self, ids, state):
            return ids, state

    with pytest.raises(TypeError, match="reorder"):
        NoReorder()


@pytest.mark.parametrize("make_model", [gpt, lstm], ids=["gpt", "lstm"])
def test_beam_search_returns_its_n_best_lines_sorted_and_the_best_scores_at_least_greedys(make_model):
    task = char_task()
    # Line ends made likely, so that hypotheses finish at different lengths.
    model = Favouring(make_model(len(task.vocab)), task.vocab.stoi["\n"], 0.5)
    beam = generate(model, task, "ab", max_tokens=20, method="beam", beam_size=5, n_best=3, stop_at_eos=True)
    best = generate(model, task, "ab", max_tokens=20, method="beam", beam_size=5, stop_at_eos=True)
    greedy = generate(model, task, "ab", max_tokens=20, method="greedy", length_penalty=0.6, stop_at_eos=True)
    assert len(beam.samples) == 3 and len(set(beam.samples)) == 3 and beam.seed is None
    assert beam.scores == sorted(beam.scores, reverse=True)
    assert best.samples == beam.samples[:1] and best.scores == beam.scores[:1]
    assert best.scores[0] >= greedy.scores[0]
    assert all("\n" not in text and text.startswith("ab") for text in beam.samples)


def test_beam_search_refuses_several_samples():
    task = char_task()
    with pytest.raises(TextnnError, match="--n-best"):
        generate(gpt(len(task.vocab)), task, "ab", method="beam", num_samples=2)


def test_the_generation_module_imports_no_task():
    """generation/lm.py reads the line-end token from the data layer; a task is only passed in."""
    code = "import sys, textnn.generation.lm; print(any(m.startswith('textnn.tasks') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


# --- keep sets of top-k and top-p ------------------------------------------------------------------

# Distinct scores a tenth apart at least: ties would make "the k highest" ambiguous.
scores = st.lists(st.integers(-80, 80), min_size=2, max_size=12, unique=True).map(lambda xs: [x / 10 for x in xs])


@settings(max_examples=150, deadline=None)
@given(values=scores, k=st.integers(1, 14))
def test_top_k_keeps_exactly_the_k_highest_scores(values, k):
    logits = torch.tensor([values], dtype=torch.float64)
    kept = torch.isfinite(filter_logits(logits, top_k=k))[0]
    ranked = sorted(range(len(values)), key=lambda i: -values[i])
    assert set(kept.nonzero().flatten().tolist()) == set(ranked[:k])


@settings(max_examples=150, deadline=None)
@given(values=scores, p=st.floats(0.01, 0.99))
def test_top_p_keeps_the_smallest_most_probable_set_reaching_p(values, p):
    logits = torch.tensor([values], dtype=torch.float64)
    probs = torch.softmax(logits, dim=-1)[0].tolist()
    kept = torch.isfinite(filter_logits(logits, top_p=p))[0].tolist()
    ranked = sorted(range(len(values)), key=lambda i: -probs[i])
    size = sum(kept)
    assert [kept[i] for i in ranked] == [True] * size + [False] * (len(values) - size)  # a prefix by rank
    mass = sum(probs[i] for i in ranked[:size])
    assert mass >= p - 1e-12 or size == len(values)  # it reaches p ...
    assert sum(probs[i] for i in ranked[:size - 1]) < p + 1e-12  # ... and one token fewer would not
