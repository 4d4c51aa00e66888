"""The Python API: a trained run as an object whose methods return Python values.

    import textnn

    run = textnn.load("runs/sst2_cnn_rand")
    run.predict(["a gorgeous , witty , seductive movie ."])
    # [{"text": "a gorgeous , witty , seductive movie .", "label": "1", "probabilities": {"0": 0.03, "1": 0.97}}]
    run.evaluate("../shared/data/sst2/dev.tsv")["accuracy"]
    textnn.load("runs/tinyshakespeare_gpt").generate("ROMEO:", max_tokens=50, method="sample", seed=1)
    textnn.load("runs/multi30k_transformer").translate(["Ein Hund rennt ."], beam_size=5)

The run is loaded once (weights, tokenizer, vocabulary) and each call computes in the run's own
precision, as the commands do: `predict` gives what `textnn predict` prints, one value per input
(a dict per line for classification, tagging and QA, parsed from its JSON), `evaluate` the metrics
`textnn evaluate --json` prints, `generate` the text `textnn generate` prints, `translate` the
translations `textnn translate` prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import torch

from textnn.errors import TextnnError, short
from textnn.experiment import each_in_run_precision, in_run_precision, load_run
from textnn.generation.decoding import DecodingConfig, PromptDecoder


class Run:
    """A trained run, loaded for use from Python (`textnn.load(path)`)."""

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int | None = None,
                 precision: str | None = None):
        self.path = Path(path)
        self.config, self.task, self.model = load_run(self.path, device, batch_size, precision)

    def __repr__(self) -> str:
        return f"textnn.Run({str(self.path)!r}: task {self.config.task}, model {self.config.model_name})"

    def _lines(self, inputs: Iterable[str], options: dict) -> list[str]:
        if isinstance(inputs, str):  # one string would be read character by character
            inputs = [inputs]
        inputs = list(inputs)
        for number, item in enumerate(inputs):
            if not isinstance(item, str):
                raise TextnnError(f"{self.path}: input {number} is {type(item).__name__} {short(item, 40)}, not a "
                                  f"string; give each text as a str")
        # the texts are texts: no first one is taken for a table's header (`table_header: False`)
        outputs = self.task.predict(self.model, [line.rstrip("\n") for line in inputs], str(self.path),
                                    {**options, "table_header": False})
        return list(each_in_run_precision(self.config, self.model, outputs))

    def predict(self, texts: Iterable[str] | str) -> list:
        """One answer per text: the dict `textnn predict` prints as a JSON line (label and probabilities,
        tags and spans, an answer), or the line itself where the task writes plain text."""
        return [_value(line) for line in self._lines(texts, {})]

    def evaluate(self, path: str | Path, bootstrap_samples: int = 0) -> dict:
        """The metrics of the run on a labelled file in its training format (gzip is fine)."""
        with torch.no_grad(), in_run_precision(self.config, self.model):
            return self.task.evaluate_file(self.model, str(path), bootstrap_samples=bootstrap_samples, options={})

    def generate(self, prompt: str, num_samples: int = 1, **decoding) -> str | list[str]:
        """The prompt and its continuation by a language-model run; `decoding` takes the options of
        `DecodingConfig` (method greedy / sample / beam, max_tokens, temperature, top_k, top_p, seed,
        beam_size, n_best). Several samples or hypotheses: a list, best first for beam search."""
        from textnn.generation.lm import generate_text

        if not isinstance(self.model, PromptDecoder):
            raise TextnnError(f"{self.path}: generate needs a language model run; this is a {self.config.task} run")
        with in_run_precision(self.config, self.model):
            found = generate_text(self.model, self.task, prompt, DecodingConfig(**decoding), num_samples=num_samples)
        return found.samples[0] if len(found.samples) == 1 else found.samples

    def translate(self, sentences: Iterable[str] | str, beam_size: int = 1, length_penalty: float | None = None) -> list[str]:
        """One translation per sentence (greedy, or beam search with `beam_size` > 1), by a translation run."""
        if self.config.task != "translation":
            raise TextnnError(f"{self.path}: translate needs a translation run; this is a {self.config.task} run "
                              f"(use predict or generate)")
        # beam_size 1 is greedy search; any other value is checked as --beam is (0 or -5 is refused)
        decoding = DecodingConfig.from_flags(beam=None if beam_size == 1 else beam_size, length_penalty=length_penalty)
        return self._lines(sentences, {"decoding": decoding})


def _value(line: str):
    """A predict output line as a Python value: the parsed JSON object, or the plain text."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return line
    return value if isinstance(value, (dict, list)) else line


def load(path: str | Path, device: str = "cpu", batch_size: int | None = None, precision: str | None = None) -> Run:
    """A trained run directory, ready for predict / evaluate / generate / translate. `batch_size`: inputs
    per forward pass in predict, evaluate and translate (the commands' --batch-size); None = the run's
    own rule. `precision` (the commands' --precision: auto, fp32, bf16): None = the one the run trained in."""
    return Run(path, device, batch_size, precision)
