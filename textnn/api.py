"""The Python API: a trained run as an object whose methods return Python values.

    import textnn

    run = textnn.load("runs/sst2_cnn_rand")
    run.predict(["a gorgeous , witty , seductive movie ."])
    # [ClassificationPrediction(text='a gorgeous , witty , seductive movie .', text_pair=None, label='1',
    #                           probabilities={'0': 0.03, '1': 0.97})]
    run.evaluate("../shared/data/sst2/dev.tsv")["accuracy"]
    textnn.load("runs/tinyshakespeare_gpt").generate("ROMEO:", max_tokens=50, seed=1)
    textnn.load("runs/multi30k_transformer").translate(["Ein Hund rennt ."], beam_size=5)[0].translation

The run is loaded once (weights, tokenizer, vocabulary) and each call computes in the run's own
precision, as the commands do, with the commands' defaults (textnn/defaults.py): `predict` and
`translate` give the task's typed predictions (textnn/front.py: what `textnn predict` and `textnn
translate` print, unrounded), one per input, None for a blank text; `evaluate` the metrics `textnn
evaluate --json` prints, `generate` the text `textnn generate` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from textnn import defaults, front
from textnn.errors import TextnnError, short
from textnn.experiment import evaluate_loaded, generate_each, generate_in_batches, load_run
from textnn.generation.decoding import DecodingConfig, PromptDecoder


class Run:
    """A trained run, loaded for use from Python (`textnn.load(path)`)."""

    def __init__(self, path: str | Path, device: str = defaults.DEVICE, batch_size: int | None = None,
                 precision: str | None = None):
        self.path = Path(path)
        self.config, self.task, self.model = load_run(self.path, device, batch_size, precision)

    def __repr__(self) -> str:
        return f"textnn.Run({str(self.path)!r}: task {self.config.task}, model {self.config.model_name})"

    @property
    def Example(self) -> type | None:
        """The run's task's typed input (`predict` takes these as well as texts): ClassificationExample(text,
        text_pair), TaggingExample(tokens), TranslationExample(source), QAExample(question, context)."""
        return self.task.Example

    def _predictions(self, inputs, options) -> list:
        """The prediction of each input, a text or an Example (None for a blank text). A text is read as one
        line of `textnn predict` plain-text input is (`text<TAB>pair` for a pair classifier, a JSON object
        or `question<TAB>context` for QA), never as a table's header, JSON lines or CoNLL."""
        if isinstance(inputs, str) or (self.task.Example is not None and isinstance(inputs, self.task.Example)):
            inputs = [inputs]  # one input, not its characters or fields
        examples = []
        for number, item in enumerate(inputs):
            if isinstance(item, str):
                examples.append(front.text_example(self.task, item, f"{self.path}:{number + 1}"))
            elif self.task.Example is not None and isinstance(item, self.task.Example):
                examples.append(item)
            else:
                raise TextnnError(f"{self.path}: input {number} is {type(item).__name__} {short(item, 40)}, not a "
                                  f"string; give each text as a str")
        return [prediction for _, prediction in front.predicted(self.task, self.model, examples, options)]

    def predict(self, inputs: Iterable[str] | str) -> list:
        """One prediction per text (or `Example`): a ClassificationPrediction (label and probabilities; a
        RegressionPrediction's value), a TaggingPrediction (tokens, tags, spans), a QAPrediction (answer, start,
        score) or a TranslationPrediction, its numbers at full precision; None for a blank text."""
        return self._predictions(inputs, front.options_for(self.task))

    def evaluate(self, path: str | Path, bootstrap_samples: int = defaults.BOOTSTRAP_SAMPLES, streams: int = 0,
                 top_n: int = 0) -> dict:
        """The metrics of the run on a labelled file in its training format (gzip is fine), with the 95%
        bootstrap interval of `bootstrap_samples` resamples (0 = none); `streams` and `top_n` as the
        command's --streams and --top-n."""
        options = front.options_for(self.task, streams=streams, top_n=top_n)
        return evaluate_loaded(self.config, self.task, self.model, str(path), bootstrap_samples, options,
                               name=self.path.name)

    def generate(self, prompts: str | Iterable[str], num_samples: int = 1, **decoding) -> str | list:
        """The prompt and its continuation by a language-model run, as `textnn generate` gives it: sampled
        (a seed drawn when none is given), 200 new tokens, on past line ends unless told otherwise
        (`defaults.GENERATE`). `decoding` takes the options of `DecodingConfig` (method greedy / sample /
        beam, max_tokens, stop_at_eos, temperature, top_k, top_p, seed, beam_size, n_best, length_penalty).
        Several samples or hypotheses: a list, best first for beam search. A list of prompts: a list of
        those, one per prompt, as `textnn generate RUN FILE` gives them (prompt i sampled with seed + i - 1)."""
        if not isinstance(self.model, PromptDecoder):
            raise TextnnError(f"{self.path}: generate needs a language model run; this is a {self.config.task} run")
        decoding = DecodingConfig(**{**defaults.GENERATE, **decoding})
        batch_size = self.task.inference_batch_size
        if isinstance(prompts, str):
            return _texts(generate_in_batches(self.config, self.model, self.task, prompts, decoding, num_samples,
                                              batch_size))
        return [_texts(found) for found in generate_each(self.config, self.task, self.model, prompts, decoding,
                                                         num_samples, batch_size)]

    def translate(self, sentences: Iterable[str] | str, beam_size: int = 1, length_penalty: float | None = None) -> list:
        """One TranslationPrediction per sentence (its `translation`, the best of its `hypotheses`, by greedy search,
        or beam search with `beam_size` > 1), by a translation run; None for a blank sentence."""
        if self.config.task != "translation":
            raise TextnnError(f"{self.path}: translate needs a translation run; this is a {self.config.task} run "
                              f"(use predict or generate)")
        # beam_size 1 is greedy search; any other value is checked as --beam is (0 or -5 is refused)
        decoding = DecodingConfig.from_flags(beam=None if beam_size == 1 else beam_size, length_penalty=length_penalty)
        return self._predictions(sentences, front.options_for(self.task, decoding=decoding))


def _texts(found) -> str | list[str]:
    """What one prompt's `Generation` gives: its text, or the list of its samples or hypotheses."""
    return found.samples[0] if len(found.samples) == 1 else found.samples


def load(path: str | Path, device: str = defaults.DEVICE, batch_size: int | None = None,
         precision: str | None = None) -> Run:
    """A trained run directory, ready for predict / evaluate / generate / translate. `batch_size`: inputs
    per forward pass in predict, evaluate and translate (the commands' --batch-size); None = the run's
    own rule. `precision` (the commands' --precision: auto, fp32, bf16): None = the one the run trained in."""
    return Run(path, device, batch_size, precision)


def serve(runs, host: str = "127.0.0.1", port: int = 8000, **options) -> None:
    """Serve trained runs over HTTP at http://host:port until SIGTERM or Ctrl-C, as `textnn serve` does (needs
    the extra textnn[serve]); `options`: grace, max_batch, max_wait_ms, queue_size, device, threads, precision.
    The application alone, for an ASGI server of one's own: `textnn.server.create_app(runs, ...)`."""
    from textnn.server import serve as serve_runs

    serve_runs(runs, host, port, **options)
