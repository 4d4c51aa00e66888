"""One JSON object of `predict` input, as the tasks' example hooks read it (the front layer, textnn/front.py,
decides whether an input is JSON lines): the object a line holds, and the value of a named field."""

from __future__ import annotations

import json
from typing import Sequence

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


def field(record: dict, fields: Sequence[str], place: str, kind: type = str):
    """The value of the first of `fields` that `record` has, checked to be a `kind`; an error naming the
    fields when it has none of them."""
    for name in fields:
        if name in record:
            value = record[name]
            if not isinstance(value, kind):
                raise TextnnError(f"{place}: field {name!r} holds {type(value).__name__}, not "
                                  f"{'a string' if kind is str else 'a list'}")
            return value
    raise TextnnError(f"{place}: the object has none of the fields {', '.join(map(repr, fields))}; "
                      f"put the text in one of them")
