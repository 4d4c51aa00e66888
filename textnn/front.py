"""The front layer: a trained run's inputs and outputs, as the commands and the Python API use them.

`cli.py` (predict, translate, evaluate) and `api.py` stand on this module and on nothing else of the
tasks for prediction. A task computes (`Task.predict`: a list of its typed `Example`s in, one typed
`Prediction` each out); this module does the rest, in four steps:

- `options_for`: a command's flags, once, as the task's typed `Options` (translation: the decoding; a
  language model's `evaluate`: --streams; word embeddings': --top-n). A flag that does not apply to the
  run's task is one error naming the flag and the task.
- `read_examples`: input lines as examples, one per line (None for a blank line, so that output line N
  still answers input line N). Auto-detected, in this order: JSON lines, when the first non-blank line is a
  JSON object (every non-blank line must then be one; the fields the task names hold the text); the run's
  own training table, when the first line is its header line (classification, and translation from a
  TSV: each row after it gives its text column(s)), or, for a classifier trained on a TSV table without
  header, a row with all the columns training read; CoNLL columns (taggers, `conll.looks_like_conll`,
  one example per sentence); else plain text, one example per line. Each task's hooks (tasks/base.py)
  say which fields and columns it reads and how a text becomes its example.
- `predicted`: the examples a part at a time (constant memory, the first answers out while the rest is
  still coming in), each part computed in the run's precision (`experiment.in_run_precision`).
- `output_lines`: JSON lines (floats rounded to the task's `printed_digits`, NaN and infinities as null; a
  blank line's answer is `empty_answer`), CoNLL for taggers (--output-format conll), or a translation's
  plain text (its best hypothesis, unless an n-best list is asked for).
"""

from __future__ import annotations

import csv
import itertools
import re
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Iterable, Iterator

from textnn import experiment
from textnn.data.conll import DOCSTART, Sentence, format_conll, looks_like_conll
from textnn.data.readers import quoted_rows
from textnn.errors import TextnnError
from textnn.files import json_text
from textnn.generation.decoding import PromptDecoder
from textnn.tasks import base as task_base
from textnn.tasks.base import Table, line_chunks
from textnn.tasks.inputs import json_object
from textnn.tasks.translation.io import TranslationOptions

INPUT_FORMATS = ("auto", "text", "conll", "jsonl")
OUTPUT_FORMATS = ("jsonl", "conll")
FORMAT_FLAGS = ("input_format", "output_format")  # this module's own flags, for the tasks that read CoNLL
AUTO_DETECT_LINES = 200  # lines --input-format auto looks at to tell CoNLL columns from raw text
FLAGS = {"decoding": "--beam/--length-penalty"}  # a flag named otherwise than --option-name


# --- options ------------------------------------------------------------------------------------------------
def options_for(task, **flags):
    """The task's `Options` from a command's flags (a flag left out: None, or 0 for a count). A flag that
    does not apply to the task is one error naming it; --input-format and --output-format apply to the
    tasks that read CoNLL (`Task.reads_conll`), and are read by `read_examples` and `output_lines`."""
    given = {name: value for name, value in flags.items() if value is not None and value != 0}
    own = {option.name for option in fields(task.Options)}
    for name in given:
        if name not in own and not (name in FORMAT_FLAGS and task.reads_conll):
            flag = FLAGS.get(name, "--" + name.replace("_", "-"))
            raise TextnnError(f"{flag}: does not apply to task {task.config.task}; leave it out")
    return task.Options(**{name: value for name, value in given.items() if name in own})


# --- reading ------------------------------------------------------------------------------------------------
def read_examples(task, lines: Iterable[str], source: str, input_format: str = "auto",
                  table_header: bool = True) -> Iterator:
    """The task's Example for each input line (each sentence of CoNLL input), None for a blank line; read
    lazily, the format told by `input_format` or detected (see the module docstring). `table_header` False:
    no first line is taken for the training table's header (the Python API's texts are texts)."""
    if input_format not in INPUT_FORMATS:
        raise TextnnError(f"--input-format {input_format!r}: choose {', '.join(INPUT_FORMATS)}")
    lines = iter(lines)
    head: list[str] = []  # the lines the format is told from: up to the first non-blank one, or more for CoNLL
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if task.reads_conll and input_format == "auto":
        head += itertools.islice(lines, max(0, AUTO_DETECT_LINES - len(head)))
    lines = itertools.chain(head, lines)
    number, first = next(((n, line) for n, line in enumerate(head, start=1) if line.strip()), (0, None))
    auto = input_format == "auto"
    if input_format == "jsonl" or (auto and task.json_fields() and first is not None
                                   and json_object(first, f"{source}:{number}") is not None):
        print(f"{source}: read as JSON lines (one object per line), the text from the field "
              f"{' or '.join(map(repr, task.json_fields()))}", file=sys.stderr)
        yield from _json_examples(task, lines, source)
    elif auto and table_header and head and (table := task.table(_first_row(head[0]))) is not None:
        print(f"{source}: its first line is the header of the run's training table; {table.reading}, one output "
              f"line per row after the header" if table.header else f"{source}: its first line is {table.reading}; "
              f"one output line per row", file=sys.stderr)
        yield from _table_examples(task, table, lines, source)
    elif input_format == "conll" or (auto and task.reads_conll and looks_like_conll(head)):
        yield from _conll_examples(task, lines, source)
    else:
        for number, line in enumerate(lines, start=1):
            yield text_example(task, line, f"{source}:{number}")


def text_example(task, line: str, place: str):
    """The task's Example of one line of plain text (its line ending dropped), or None when it holds nothing."""
    line = line.rstrip("\n")
    return task.example_from_text(line, place) if line.strip() else None


def _json_examples(task, lines: Iterable[str], source: str) -> Iterator:
    for number, line in enumerate(lines, start=1):
        place = f"{source}:{number}"
        if not line.strip():
            yield None
            continue
        record = json_object(line, place)
        if record is None:
            raise TextnnError(f"{place}: not a JSON object; the input began with one, so it is read as JSON lines "
                              f"(one object per line): fix the line or give plain text throughout")
        yield task.example_from_json(record, place)


def _cr_lines(lines: Iterable[str]) -> Iterator[str]:
    """`lines` cut after each carriage return that no line feed follows: a table's line ends there too, as
    `open(newline="")` reads it (old Mac files end every line so)."""
    return (piece for line in lines for piece in re.split(r"(?<=\r)(?!\n)", line) if piece)


def _first_row(line: str) -> str:
    """The first line of a table as its header is compared, its line ending dropped."""
    return next(_cr_lines([line]), "").rstrip("\r\n")


def _table_examples(task, table: Table, lines: Iterable[str], source: str) -> Iterator:
    """The example of each row after the header, as training reads the table: split at its delimiter, or by
    standard CSV quoting, where a quoted field may hold the delimiter, a line break or a carriage return."""
    rows = _cr_lines(lines)
    if table.header:
        next(rows)  # the header
    for number, row in _table_rows(rows, table, source, first=2 if table.header else 1):
        if row is None:
            yield None
        elif max(table.columns) >= len(row):
            raise TextnnError(f"{source}:{number}: the row has {len(row)} field(s), fewer than the "
                              f"{'header' if table.header else 'first row'}'s; fix the row")
        else:
            yield task.example_from_row([row[i] for i in table.columns], f"{source}:{number}")


def _table_rows(lines: Iterable[str], table: Table, source: str, first: int) -> Iterator[tuple[int, list | None]]:
    """(number of its first line, fields) of each row; None for a blank row, which still gets its answer."""
    if not table.quoting:
        for number, line in enumerate(lines, start=first):
            line = line.rstrip("\r\n")
            yield number, line.split(table.delimiter) if line.strip() else None
        return
    reader = quoted_rows(lines, table.delimiter)
    while True:
        number = first + reader.line_num
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TextnnError(f"{source}:{number}: cannot read this row with CSV quoting ({err}); fix its "
                              f"quotes") from None
        yield number, row if any(value.strip() for value in row) else None


def _conll_examples(task, lines: Iterable[str], source: str) -> Iterator:
    """The sentences of CoNLL input, read in parts that never cut a sentence (nor its -DOCSTART-) in two."""
    def ends_sentence(previous: str, line: str) -> bool:
        return not line.split() and bool(previous.split()) and previous.split()[0] != DOCSTART

    for first, chunk in line_chunks(lines, task_base.PREDICT_CHUNK_LINES, ends_chunk=ends_sentence):
        if any(line.split() and line.split()[0] != DOCSTART for line in chunk):  # else blank or -DOCSTART- only
            yield from task.conll_examples(chunk, source, first)


# --- predicting ---------------------------------------------------------------------------------------------
def predicted(task, model, examples: Iterable, options) -> Iterator[tuple[object, object]]:
    """(example, its Prediction) for each example, (None, None) for each None: `Task.predict` on a part of
    `predict_chunk_size()` examples at a time, in the run's precision. A task that does not predict is
    refused at once, before any input is read."""
    if task.Example is None:
        task.predict(model, [], options)  # the task's own refusal
    return _predicted(task, model, examples, options)


def _predicted(task, model, examples: Iterable, options) -> Iterator[tuple[object, object]]:
    for _, chunk in line_chunks(examples, task.predict_chunk_size()):
        given = [example for example in chunk if example is not None]
        with experiment.in_run_precision(task.config, model):
            found = iter(task.predict(model, given, options) if given else [])
        for example in chunk:
            yield example, None if example is None else next(found)


# --- writing ------------------------------------------------------------------------------------------------
def output_lines(task, answers: Iterable[tuple[object, object]], options, output_format: str = "jsonl"
                 ) -> Iterator[str]:
    """The lines a command prints for `predicted`'s answers, one per answer (CoNLL: a block per sentence,
    a blank line between two; a blank input line has no block)."""
    if output_format not in OUTPUT_FORMATS:
        raise TextnnError(f"--output-format {output_format!r}: choose {' or '.join(OUTPUT_FORMATS)}")
    if output_format == "conll":
        blocks = (conll_block(example, prediction) for example, prediction in answers if prediction is not None)
        for number, block in enumerate(blocks):
            yield from ([""] if number else []) + [block]
    elif isinstance(options, TranslationOptions) and options.n_best == 1:
        yield from ("" if prediction is None else prediction.translation for _, prediction in answers)
    else:
        empty = empty_answer(task.Prediction)
        for _, prediction in answers:
            yield json_line(empty if prediction is None else answer(prediction), task.printed_digits)


def answer(prediction) -> dict:
    """A prediction as the JSON object printed for it: its fields in order, less an optional one that is None
    (a single-text classifier's text_pair, the gold tags of input without them)."""
    return {field.name: getattr(prediction, field.name) for field in fields(prediction)
            if not (field.default is None and getattr(prediction, field.name) is None)}


def empty_answer(prediction_type: type) -> dict:
    """The answer to a blank input line: every field a prediction always has, empty (None, or [] for a list
    or tuple), and `"empty": True`."""
    return {**{field.name: [] if str(field.type).startswith(("list", "tuple")) else None
               for field in fields(prediction_type) if field.default is MISSING}, "empty": True}


def json_line(value: dict, digits: int) -> str:
    """One JSON line with every float rounded to `digits` (a reader of the output needs no more; the Python
    API gives the predictions themselves, unrounded); NaN and infinities as null."""
    def rounded(item):
        if isinstance(item, float):
            return round(item, digits)
        if isinstance(item, dict):
            return {key: rounded(inner) for key, inner in item.items()}
        return [rounded(inner) for inner in item] if isinstance(item, (list, tuple)) else item

    return json_text(rounded(value), ensure_ascii=False)


def conll_block(example, prediction) -> str:
    """A tagged sentence as CoNLL lines `token [gold] predicted` (after a -DOCSTART- line where one came
    before it in the input), no blank line after it."""
    sentence = Sentence(prediction.tokens, prediction.gold, 0, example.document_start, example.place or "<input>",
                        None)
    return format_conll([sentence], [prediction.tags]).rstrip("\n")


# --- the commands -------------------------------------------------------------------------------------------
def predict_run(run_dir: str | Path, lines: Iterable[str], source: str = "<stdin>", device: str = "cpu",
                batch_size: int | None = None, precision_asked: str | None = None,
                input_format: str | None = None, output_format: str | None = None) -> Iterator[str]:
    """The lines `textnn predict` prints for the input lines (see the module docstring). `batch_size`:
    inputs (lines, sentences) per forward pass; None = the run's own rule."""
    _, task, model = experiment.load_run(run_dir, device, batch_size, precision_asked)
    options = options_for(task, input_format=input_format, output_format=output_format)
    examples = read_examples(task, lines, source, input_format or "auto")
    return _answered(output_lines(task, predicted(task, model, examples, options), options,
                                  output_format or "jsonl"), source)


def translate_run(run_dir: str | Path, lines: Iterable[str], source: str = "<stdin>", decoding=None,
                  device: str = "cpu", batch_size: int | None = None, precision_asked: str | None = None
                  ) -> Iterator[str]:
    """`predict_run` for `textnn translate`, decoded as `decoding` says (None: greedy): a run whose task does
    not translate is refused, with the command that reads text with it. `batch_size`: sentences decoded
    side by side (None: 128 greedy, 32 under beam search)."""
    config, task, model = experiment.load_run(run_dir, device, batch_size, precision_asked)
    if "translate_lines" not in task.capabilities:
        command = ("generate" if isinstance(model, PromptDecoder)
                   else "neighbors" if "word_vectors" in task.capabilities else "predict")
        raise TextnnError(f"{run_dir}: `translate` needs a translation run; this run is a {config.task} run "
                          f"(model {config.model_name}): use `textnn {command} {run_dir}`")
    options = options_for(task, decoding=decoding)
    examples = read_examples(task, lines, source)
    return _answered(output_lines(task, predicted(task, model, examples, options), options), source)


def _answered(lines: Iterator[str], source: str) -> Iterator[str]:
    """`lines`, and an error when there is none: an input with nothing in it to answer."""
    said = False
    for line in lines:
        said = True
        yield line
    if not said:
        raise TextnnError(f"{source}: no input lines to predict")


def evaluate_run(run_dir: str | Path, data_path: str, bootstrap_samples: int = 1000, device: str = "cpu",
                 batch_size: int | None = None, precision_asked: str | None = None, **flags) -> dict:
    """Metrics of a trained run on a labelled file read with the run's own data settings
    (`experiment.evaluate_loaded`), the task's options from `flags` (`options_for`: streams, top_n, decoding)."""
    config, task, model = experiment.load_run(run_dir, device, batch_size, precision_asked)
    return experiment.evaluate_loaded(config, task, model, data_path, bootstrap_samples, options_for(task, **flags),
                                      name=Path(run_dir).name)
