"""A run as the server holds it: loaded once, and what each of its endpoints asks of it.

The run is read by the front layer as the commands read it (`experiment.load_run`: its weights, tokenizer,
vocabulary and precision); a request's inputs become the task's examples as the lines of `textnn predict`
do (a string: one line of plain text; an object: one line of JSON-lines input), and its predictions are
answered as `textnn predict` prints them (`front.answer`, floats rounded to the task's printed digits).
A generation is what `textnn generate` gives (the defaults of textnn/defaults.py): streamed alone
(`experiment.generate_in_batches`), or, whole, beside the generations of other requests whose decoding
differs at most in its seed (`generate_many`, generation/lm.py's `generate_texts`).

A run directory still being written by `textnn train` is refused when the server starts, and a damaged one
fails to load there, each with one line: the server never starts with a run it cannot answer for.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from textnn import defaults, experiment, front, limits
from textnn.errors import TextnnError
from textnn.files import json_text
from textnn.generation.decoding import DecodingConfig, PromptDecoder
from textnn.generation.lm import Request, generate_texts, prompt_length, side_by_side_key
from textnn.runs import RunDir
from textnn.server.bodies import Field, RequestError

# The fields of DecodingConfig a generate request may give, as the Python API's `generate` takes them.
DECODING_FIELDS = {"method": "string", "max_tokens": "integer", "stop_at_eos": "boolean", "temperature": "number",
                   "top_k": "integer", "top_p": "number", "seed": "integer", "beam_size": "integer",
                   "n_best": "integer", "length_penalty": "number"}
PREDICT_FIELDS = {"inputs": Field("list", required=True)}
TRANSLATE_FIELDS = {**PREDICT_FIELDS, "beam_size": Field("integer"), "n_best": Field("integer"),
                    "length_penalty": Field("number")}
GENERATE_FIELDS = {"prompt": Field("string", ""), "num_samples": Field("integer", 1), "stream": Field("boolean", False),
                   **{name: Field(kind) for name, kind in DECODING_FIELDS.items()}}


def refusal(err: TextnnError, param: str | None = None) -> RequestError:
    """A textnn error about a request's input as its answer: 413 for the input-size policy, else 422."""
    return RequestError(413 if isinstance(err, limits.InputTooLarge) else 422, str(err), param)


def run_name(path: str | Path) -> str:
    """A run's name in URLs: its directory's name (`runs/sst2_cnn/` and `.` inside it alike)."""
    return Path(os.path.abspath(path)).name


class ServedRun:
    def __init__(self, path: str | Path, device: str = defaults.DEVICE, precision: str | None = None):
        self.path, self.name = Path(path), run_name(path)
        run = RunDir(path)
        if run.path.is_dir() and run.effective_status() == "running":
            raise TextnnError(f"{path}: the run is still training (run.json: status running, a live `textnn train` "
                              f"writes it); serve it once it has finished")
        self.config, self.task, self.model = experiment.load_run(path, device, None, precision)
        self.endpoints = self._endpoints()
        if not self.endpoints:
            raise TextnnError(f"{path}: a {self.config.task} run has nothing to serve; `textnn serve` takes runs that "
                              f"predict (classification, tagging, qa), translate or generate (language models)")

    def _endpoints(self) -> tuple[str, ...]:
        if isinstance(self.model, PromptDecoder):
            return "generate", "completions"
        if "translate_lines" in self.task.capabilities:
            return ("translate",)
        return ("predict",) if self.task.Example is not None else ()

    def paths(self) -> list[str]:
        return [f"/v1/{endpoint}" if endpoint == "completions" else f"/v1/runs/{self.name}/{endpoint}"
                for endpoint in self.endpoints]

    def describe(self) -> dict:
        """What `GET /v1/runs` says of the run."""
        return {"name": self.name, "task": self.config.task, "family": self.config.model_name,
                "precision": self.config.train.precision, "device": str(next(self.model.parameters()).device),
                "endpoints": self.paths()}

    def require(self, endpoint: str) -> None:
        if endpoint not in self.endpoints:
            raise RequestError(400, f"run {self.name} is a {self.config.task} run (model {self.config.model_name}): "
                                    f"`{endpoint}` does not apply to it; use {' or '.join(self.paths())}")

    # --- predict and translate ------------------------------------------------------------------------
    def options(self, fields: dict):
        """The task's options from a request's fields (translate: its decoding, greedy unless beam_size is given)."""
        if "translate" not in self.endpoints:
            return front.options_for(self.task)
        beam, n_best, penalty = fields["beam_size"], fields["n_best"], fields["length_penalty"]
        if beam is None and (n_best is not None or penalty is not None):
            raise RequestError(422, f"{'n_best' if n_best is not None else 'length_penalty'}: applies to beam search; "
                                    f"give beam_size too", "n_best" if n_best is not None else "length_penalty")
        try:
            decoding = DecodingConfig.from_flags(beam=beam, length_penalty=penalty, n_best=n_best)
        except TextnnError as err:
            named = re.match(r"(?:decoding: )?(\w+)", str(err))
            raise refusal(err, named.group(1) if named and named.group(1) in TRANSLATE_FIELDS else None) from None
        return front.options_for(self.task, decoding=decoding)

    def examples(self, inputs: list) -> list:
        """The task's Example of each input, None for a blank one: a string is read as one line of `textnn
        predict`'s plain-text input, an object as one line of its JSON-lines input."""
        if not inputs:
            raise RequestError(422, "inputs: empty; give at least one input", "inputs")
        try:
            limits.check_count(len(inputs), "batch", "inputs")
        except limits.InputTooLarge as err:
            raise refusal(err, "inputs") from None
        return [self._example(item, f"inputs[{number}]") for number, item in enumerate(inputs)]

    def _example(self, item: object, place: str):
        try:
            if isinstance(item, str):
                if "\n" in item or "\r" in item:
                    raise RequestError(422, f"{place}: holds a line break; an input is one line (give each line as "
                                            f"an input of its own)", place)
                limits.check_line(len(item.encode("utf-8")), place)
                return front.text_example(self.task, item, place)
            if isinstance(item, dict):
                line = json_text(item, ensure_ascii=False)
                limits.check_line(len(line.encode("utf-8")), place)
                if self.task.json_fields():
                    return self.task.example_from_json(item, place)
                return front.text_example(self.task, line, place)  # a task whose line may itself be an object (QA)
        except TextnnError as err:
            raise refusal(err, place) from None
        raise RequestError(422, f"{place}: got {type(item).__name__}, expected a string or an object", place)

    def predict(self, options, works: list[list]) -> list[list]:
        """The predictions of several requests' examples (no None among them), computed together."""
        examples = [example for work in works for example in work]
        found = [prediction for _, prediction in front.predicted(self.task, self.model, examples, options)]
        answers, at = [], 0
        for work in works:
            answers.append(found[at:at + len(work)])
            at += len(work)
        return answers

    def printed(self, examples: list, predictions: list) -> list[str]:
        """The JSON text of each input's answer, as `textnn predict` prints its line (the empty answer for a
        blank input)."""
        found, empty = iter(predictions), front.empty_answer(self.task.Prediction)
        return [front.json_line(empty if example is None else front.answer(next(found)), self.task.printed_digits)
                for example in examples]

    # --- generate -------------------------------------------------------------------------------------
    def decoding(self, given: dict, defaults_: dict = defaults.GENERATE) -> DecodingConfig:
        """The DecodingConfig of a request's decoding fields over `textnn generate`'s defaults, its seed drawn
        when a seeded search is given none (the answer says it, so the text can be repeated)."""
        settings = {**defaults_, **{name: value for name, value in given.items() if value is not None}}
        try:
            return DecodingConfig(**settings).with_seed()
        except TextnnError as err:
            named = re.match(r"(?:decoding: )?(\w+)", str(err))
            raise refusal(err, named.group(1) if named and named.group(1) in settings else None) from None

    def check_prompt(self, prompt: str, place: str = "prompt") -> None:
        try:
            limits.check_line(len(prompt.encode("utf-8")), place)
        except TextnnError as err:
            raise refusal(err, place) from None

    def check_samples(self, decoding: DecodingConfig, num_samples: int, stream: bool, name: str = "num_samples"):
        try:
            limits.check_count(num_samples, "samples", name)
        except TextnnError as err:
            raise refusal(err, name) from None
        if num_samples < 1:
            raise RequestError(422, f"{name}: got {num_samples}, expected an integer >= 1", name)
        if decoding.search.ranked and num_samples != 1:
            raise RequestError(422, f"{name}: beam search finds one best output per prompt; ask for its n_best "
                                    f"hypotheses instead", name)
        if stream and (num_samples != 1 or not decoding.search.streams):
            raise RequestError(422, "stream: text is sent as it comes for one sample drawn or taken greedily; "
                                    "several samples and beam search give their outputs at the end", "stream")

    def generate(self, prompt: str, decoding: DecodingConfig, num_samples: int = 1, on_text=None):
        """A `Generation` of the prompt, as `textnn generate --prompt` gives it (`on_text`: its pieces as they come)."""
        return experiment.generate_in_batches(self.config, self.model, self.task, prompt, decoding, num_samples,
                                              None, on_text)

    def requests(self, prompts: list[str], decoding: DecodingConfig, num_samples: int = 1) -> list[Request]:
        """The generations a request asks for: one prompt, or several as `textnn generate RUN FILE` reads its
        lines (prompt i drawn with seed + i)."""
        return [Request(prompt, experiment.prompt_decoding(decoding, number), num_samples)
                for number, prompt in enumerate(prompts, start=1)]

    def generation_key(self, requests: list[Request]) -> tuple | None:
        """Requests of equal keys are decoded side by side (`generate_texts`): greedy or sampled, prompts read
        as equally many tokens, decodings equal but for their seeds. None: decoded alone (beam search,
        prompts of several lengths). A prompt the model cannot read is refused here (422, naming it)."""
        lengths = set()
        for number, request in enumerate(requests):
            try:
                lengths.add(prompt_length(self.task, request.prompt))
            except TextnnError as err:
                raise refusal(err, "prompt" if len(requests) == 1 else f"prompt[{number}]") from None
        key = side_by_side_key(lengths.pop(), requests[0].decoding) if len(lengths) == 1 else None
        return None if key is None else ("generate", *key)

    def generate_many(self, requests: list[Request], leave) -> list:
        """The `Generation` of each request, as `textnn generate` gives it alone, those of equal prompt lengths
        decoded side by side (`generate_texts`); `leave(i)`: request i is no longer wanted (then None)."""
        with experiment.in_run_precision(self.config, self.model):
            return generate_texts(self.model, self.task, requests, leave)


def generation_answer(found, decoding: DecodingConfig) -> dict:
    """A generation as the JSON line `textnn generate RUN FILE` prints for its prompt, and its seed: {prompt,
    text} (beam search adds score), {prompt, samples} for several samples, {prompt, hypotheses, scores} for
    an n-best list; unknown_tokens when some prompt tokens are not in the vocabulary; seed when drawn."""
    answer = experiment.generation_row(found, decoding)
    if found.seed is not None:
        answer["seed"] = found.seed
    return answer
