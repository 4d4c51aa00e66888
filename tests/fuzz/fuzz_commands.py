"""Fuzz targets for the inputs of the commands that read text a user types or pipes (predict, translate,
generate) and for the QA reader, on the quick path: the options as the command line parses and checks
them (argparse, `DecodingConfig.from_flags`) and the input lines as the commands read them
(`iter_input_lines`, the front layer's reading into the tasks' examples), without running a model. fuzz_inputs.py runs them
beside the readers and counts the outcomes the same way (error / accepted / other).

    qa          a SQuAD JSON file, spoiled in its structure (null, numbers, lists where text goes, deep
                nesting, missing keys) or in its bytes; read by `read_squad`
    qa.predict  lines for `predict` on a QA run: JSON objects with null or non-text fields, TSV, blank lines
    predict     `predict RUN` options and input bytes (blank lines, bad bytes, NUL, huge lines)
    translate   `translate RUN` decoding options (huge beams and n-best lists) and input bytes
    generate    `generate RUN` decoding options (huge beams, token counts, samples; nan temperatures)
                and prompt lines
    predict.csv    `predict` input to a classifier trained on a quoted CSV table: its header, then rows with
                   quotes, delimiters and line breaks inside fields, bare CRs, huge lines; read as the
                   classifier reads it (`front.read_examples`)
    predict.jsonl  JSON-lines `predict` input: objects without the text field, null or list texts, deep
                   nesting, integers of thousands of digits, plain text after JSON; read the same way
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from textnn import limits
from textnn.errors import TextnnError

SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
    {"context": "The treaty was signed in Oslo in 1905.",
     "qas": [{"id": "1", "question": "Where was it signed?", "answers": [{"text": "Oslo", "answer_start": 25}]},
             {"id": "2", "question": "When?", "answers": [{"text": "1905", "answer_start": 33}]}]}]}]}
ODD = [None, True, 0, -1, 2 ** 70, 1.5, float("nan"), "", "x", "é" * 3, [], [None], {}, {"text": None}, "None",
       "\x00", "a\tb", "\n"]
QUESTION_LINES = ['{"question": "Where?", "context": "In Oslo."}', "Where?\tIn Oslo.", "", "   ", "\t",
                  '{"question": null, "context": "x"}', '{"question": "q", "context": null}', '{"question": 5}',
                  '{"context": "only"}', "[1, 2]", "{", '{"question": "q", "context": ["a"]}', "no tab here",
                  '{"question": "q", "context": "c", "extra": {"deep": [[[]]]}}', "null", '"text"']
LINES = [b"a good film", b"", b" ", b"\t", b"a\tpair", b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\r", b"null",
         b'{"text": null}', b"\xe2\x80\xa8", b"x" * 1000, "é".encode(), b"-DOCSTART- -X- O O", b"EU NNP I-NP I-ORG"]
COUNTS = ["1", "2", "0", "-1", "-3", "1000", "1001", "100000", "100001", "1000000", "1000000000", "10" * 20, "x",
          "", "1.5", "nan", "1e9", "٣", " 5", "0x10"]
REALS = ["0", "-1", "0.5", "1", "2", "nan", "inf", "-inf", "1e309", "1e-320", "x", "", "1,5"]
OPTIONS = {  # command -> option -> values (None: a flag without a value)
    "predict": {"--input-format": ["auto", "text", "conll", "json", ""],
                "--output-format": ["jsonl", "conll", "csv"], "--threads": COUNTS, "-o": None},
    "translate": {"--beam": COUNTS, "--n-best": COUNTS, "--nbest": COUNTS, "--length-penalty": REALS,
                  "--threads": COUNTS},
    "generate": {"--beam": COUNTS, "--n-best": COUNTS, "--max-tokens": COUNTS, "--num-samples": COUNTS,
                 "--length-penalty": REALS, "--temperature": REALS, "--top-k": COUNTS, "--top-p": REALS,
                 "--seed": COUNTS + ["4294967295", "4294967296"], "--greedy": None, "--stop-at-eos": None,
                 "--prompt": ["", "the cat", "\x00", "é" * 50]},
}


def squad_input(rng: random.Random, mutate: Callable) -> bytes:
    """A SQuAD file: the seed with 1 to 3 values replaced, keys dropped or nesting deepened (a structure
    that is JSON but not SQuAD's), or the seed's bytes spoiled."""
    if rng.random() < 0.3:
        return mutate(json.dumps(SQUAD).encode("utf-8"), rng, [json.dumps(SQUAD).encode("utf-8")])
    raw = json.loads(json.dumps(SQUAD))
    for _ in range(rng.randint(1, 3)):
        path, node = [], raw
        while isinstance(node, (dict, list)) and node and rng.random() < 0.8:  # walk down to a random place
            key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
            path.append((node, key))
            node = node[key]
        if not path:
            raw = rng.choice(ODD)
            break
        parent, key = path[-1]
        kind = rng.randrange(4)
        if kind == 0 and isinstance(parent, dict):
            del parent[key]
        elif kind == 1:
            depth = rng.choice((3, 3000))
            parent[key] = json.loads("[" * depth + "]" * depth) if depth < 900 else "[" * depth + "]" * depth
        else:
            parent[key] = rng.choice(ODD)
    try:
        text = json.dumps(raw, allow_nan=True)
    except (ValueError, RecursionError):
        text = "{}"
    if isinstance(raw, dict) and rng.random() < 0.05:  # nesting deeper than Python's JSON parser recurses
        text = text[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return text.encode("utf-8")


def question_lines(rng: random.Random) -> bytes:
    lines = [rng.choice(QUESTION_LINES) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.3:
        item = {"question": rng.choice(ODD), "context": rng.choice(ODD)}
        lines.append(json.dumps(item) if rng.random() < 0.9 else json.dumps({"question": "q"}))
    text = "\n".join(lines) + rng.choice(("", "\n", "\r\n"))
    data = text.encode("utf-8")
    if rng.random() < 0.1:
        data += rng.choice(LINES)
    return data


def command_input(command: str, rng: random.Random) -> bytes:
    """argv (after `COMMAND RUN`) and input bytes, packed as JSON: {"argv": [...], "input": latin-1 text}."""
    argv = []
    for _ in range(rng.randint(0, 4)):
        option = rng.choice(list(OPTIONS[command]))
        values = OPTIONS[command][option]
        argv += [option] if values is None else [option, rng.choice(values)]
    if command == "predict" and "-o" in argv:
        argv.insert(argv.index("-o") + 1, "out.jsonl")
    lines = [rng.choice(LINES) for _ in range(rng.randint(0, 6))]
    data = b"\n".join(lines) + rng.choice((b"", b"\n", b"\r\n"))
    if rng.random() < 0.02:
        data += b"y" * rng.choice((10_000, 1_000_000))
    return json.dumps({"argv": argv, "input": data.decode("latin-1")}).encode("utf-8")


TABLE = 'sentence,label\n"a good, great film",1\n"two\nlines",0\n\nfine\r"acting ""so"" good",1\r'
JSON_LINES = ['{"sentence": "a good film", "label": 1}', '{"text": "fine"}', "", "   ", '{"id": 3}', '{"sentence": null}',
              '{"sentence": ["a"]}', '{"sentence": "x", "n": 1e999}', '{"sentence": "x", "n": NaN}', "[1, 2]",
              "plain words", "{", '{"sentence": "a\tb"}', '{"sentence": "x", "deep": ' + "[" * 3000 + "]" * 3000 + "}"]


def table_input(rng: random.Random, mutate: Callable) -> bytes:
    """A quoted CSV table in the run's training format (sometimes without its header), spoiled."""
    data = TABLE.encode("utf-8") if rng.random() < 0.9 else TABLE.split("\n", 1)[1].encode("utf-8")
    return mutate(data, rng, [data]) if rng.random() < 0.8 else data


def json_lines_input(rng: random.Random, mutate: Callable) -> bytes:
    """JSON lines from JSON_LINES, with now and then an integer of thousands of digits or nesting past
    Python's recursion limit, and sometimes spoiled bytes."""
    lines = [rng.choice(JSON_LINES) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines) + 1), '{"sentence": "x", "n": ' + "7" * rng.choice((4300, 4301, 20_000))
                     + "}")
    if rng.random() < 0.1:
        lines.insert(rng.randrange(len(lines) + 1), '{"sentence": ' + "[" * 100_000 + "]" * 100_000 + "}")
    data = ("\n".join(lines) + rng.choice(("", "\n", "\r\n"))).encode("utf-8")
    return mutate(data, rng, [data]) if rng.random() < 0.3 else data


def _unbuilt(task_class, **attributes):
    """A task of `task_class` with only the `attributes` its reading looks at (no vocabulary, no model): the
    fuzz reaches the reading of the input into examples, not a model."""
    task = task_class.__new__(task_class)
    task.__dict__.update(attributes)
    return task


def command_targets(path: Path) -> dict[str, Callable[[bytes], object]]:
    """The targets above; `path` is where file inputs are written."""
    from textnn import cli
    from textnn.data.readers import iter_input_lines
    from textnn.front import read_examples
    from textnn.tasks.classification import ClassificationData, ClassificationTask
    from textnn.tasks.qa import QATask, read_squad

    parser = cli._parser()  # built once: building it for every input would cost more than the checks

    def parse(argv: list[str]):
        """argparse's refusal is one line on stderr and exit 2: here it becomes that line's TextnnError."""
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                return parser.parse_args(argv)
        except SystemExit as done:  # notes may come first (a deprecated spelling), then the one error line
            said = stderr.getvalue().strip().splitlines()
            errors = [line for line in said if line.startswith("error: ")]
            if done.code == 2 and errors == said[-1:]:
                raise TextnnError(errors[0].removeprefix("error: ")) from None
            raise AssertionError(f"argparse exited with {done.code}: {stderr.getvalue()!r}") from None

    def qa(data: bytes) -> object:
        path.write_bytes(data)
        return read_squad(str(path))

    def qa_predict(data: bytes) -> object:
        lines = iter_input_lines(io.BytesIO(data), "<stdin>")
        return list(read_examples(_unbuilt(QATask), lines, "<stdin>"))

    classifier = _unbuilt(ClassificationTask, config=SimpleNamespace(data=ClassificationData(format="csv", quoting=True)),
                          table_header="sentence,label")

    def classifier_input(bytes_in: bytes) -> object:
        lines = iter_input_lines(io.BytesIO(bytes_in), "<stdin>")
        with contextlib.redirect_stderr(io.StringIO()):  # the line saying how the input is read
            return list(read_examples(classifier, lines, "<stdin>"))

    def command(name: str) -> Callable[[bytes], object]:
        def run(data: bytes) -> object:
            packed = json.loads(data)
            args = parse([name, "RUN", *packed["argv"]])
            if name != "predict":  # options accepted must lie within the input-size policy
                decoding = cli._decoding(args, "sample" if name == "generate" else "greedy")
                assert decoding.beam_size <= limits.MAX_BEAM and decoding.max_tokens <= limits.MAX_NEW_TOKENS, \
                    f"accepted beam {decoding.beam_size:,}, max_tokens {decoding.max_tokens:,}"
                assert name != "generate" or args.num_samples <= limits.MAX_SAMPLES, \
                    f"accepted {args.num_samples:,} samples"
            return list(iter_input_lines(io.BytesIO(packed["input"].encode("latin-1")), "<stdin>"))
        return run

    return {"qa": qa, "qa.predict": qa_predict, "predict.csv": classifier_input, "predict.jsonl": classifier_input,
            **{name: command(name) for name in OPTIONS}}


def command_target_input(name: str, rng: random.Random, mutate: Callable) -> bytes:
    if name == "qa":
        return squad_input(rng, mutate)
    if name == "qa.predict":
        return question_lines(rng)
    if name == "predict.csv":
        return table_input(rng, mutate)
    if name == "predict.jsonl":
        return json_lines_input(rng, mutate)
    return command_input(name, rng)


def command_seed(name: str) -> bytes:
    """The well-formed input of a target above."""
    if name == "qa":
        return json.dumps(SQUAD).encode("utf-8")
    if name == "qa.predict":
        return QUESTION_LINES[0].encode("utf-8") + b"\n"
    if name == "predict.csv":
        return TABLE.encode("utf-8")
    if name == "predict.jsonl":
        return JSON_LINES[0].encode("utf-8") + b"\n"
    return json.dumps({"argv": [], "input": "a good film\n"}).encode("utf-8")
