"""JSON lines as `predict` and `translate` input: one JSON object per input line, the text in a named field.

An input whose first non-blank line is a JSON object is JSON lines: every non-blank line must then be an
object holding one of the fields the task reads its text from (classification: the run's text column,
or `text`; tagging: `tokens`, a list of words, or `text`; translation: the source side's name, `source`,
or `text`), else it is an error naming the line. The input commits at that first line: raw JSON is never
read as text. Output line N still answers input line N, and a blank line still gets its empty answer.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator, Sequence

from textnn.data.readers import parse_json
from textnn.errors import TextnnError


def json_object(line: str, place: str) -> dict | None:
    """The JSON object `line` holds, or None when it holds anything else (plain text, a list, bad JSON);
    JSON past Python's reader (nested too deeply, a huge integer) is an error naming `place`."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        value = parse_json(text, place, "fix the line")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def reads_json_lines(head: Iterable[str], source: str) -> bool:
    """Whether an input that begins with the lines `head` is JSON lines: its first non-blank line is an object."""
    for number, line in enumerate(head, start=1):
        if line.strip():
            return json_object(line, f"{source}:{number}") is not None
    return False


def json_records(lines: Iterable[str], source: str, first: int = 1) -> Iterator[tuple[int, dict | None]]:
    """(line number, object) for each line of JSON-lines input; None for a blank line."""
    for number, line in enumerate(lines, start=first):
        if not line.strip():
            yield number, None
            continue
        record = json_object(line, f"{source}:{number}")
        if record is None:
            raise TextnnError(f"{source}:{number}: not a JSON object; the input began with one, so it is read as "
                              f"JSON lines (one object per line): fix the line or give plain text throughout")
        yield number, record


def field(record: dict, fields: Sequence[str], source: str, number: int, kind: type = str):
    """The value of the first of `fields` that `record` has, checked to be a `kind`; an error naming the
    fields when it has none of them."""
    for name in fields:
        if name in record:
            value = record[name]
            if not isinstance(value, kind):
                raise TextnnError(f"{source}:{number}: field {name!r} holds {type(value).__name__}, not "
                                  f"{'a string' if kind is str else 'a list'}")
            return value
    raise TextnnError(f"{source}:{number}: the object has none of the fields {', '.join(map(repr, fields))}; "
                      f"put the text in one of them")


def announce(source: str, fields: Sequence[str]) -> str:
    """The one line said on stderr when an input is read as JSON lines."""
    return f"{source}: read as JSON lines (one object per line), the text from the field {' or '.join(map(repr, fields))}"
