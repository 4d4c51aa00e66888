"""Request bodies read and checked: a body that is not a JSON object, a field of the wrong type, a field the
endpoint does not know or a required one left out is one error naming the field (HTTP 422), before any
work is queued. A field given as null counts as left out."""

from __future__ import annotations

import json
from dataclasses import dataclass


class RequestError(Exception):
    """What a request is answered when it cannot be: its HTTP status, a message, the field at fault (if any)
    and extra headers (Retry-After)."""

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers or {}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


KINDS = {  # kind -> (check, what it is called in messages)
    "string": (lambda value: isinstance(value, str), "a string"),
    "integer": (_is_int, "an integer"),
    "number": (lambda value: _is_int(value) or isinstance(value, float), "a number"),
    "boolean": (lambda value: isinstance(value, bool), "true or false"),
    "list": (lambda value: isinstance(value, list), "a list"),
    "prompt": (lambda value: isinstance(value, str) or (isinstance(value, list) and bool(value)
                                                         and all(isinstance(item, str) for item in value)),
               "a string or a non-empty list of strings"),
    "any": (lambda value: True, "anything"),
}


@dataclass(frozen=True)
class Field:
    kind: str  # a key of KINDS
    default: object = None  # the value when the field is left out (or null)
    required: bool = False


def parse_json(raw: bytes) -> object:
    """The body as JSON, or a 422 saying where it stops being JSON."""
    try:
        return json.loads(raw)
    except UnicodeDecodeError as err:
        raise RequestError(422, f"body: not UTF-8 text ({err.reason} at byte {err.start}); send JSON in UTF-8",
                           "body") from None
    except json.JSONDecodeError as err:
        raise RequestError(422, f"body: not JSON ({err.msg} at line {err.lineno} column {err.colno}); send a JSON "
                                f"object", "body") from None


def read_fields(body: object, spec: dict[str, Field], what: str) -> dict:
    """Each field of `spec` from the JSON body (its default when left out), checked; `what` names the request
    in messages ("a predict request")."""
    if not isinstance(body, dict):
        raise RequestError(422, f"body: {what} is a JSON object with the fields {', '.join(spec)}; got "
                                f"{type(body).__name__}", "body")
    for name in body:
        if name not in spec:
            raise RequestError(422, f"{name}: not a field of {what}; its fields: {', '.join(spec)}", name)
    found = {}
    for name, field in spec.items():
        value = body.get(name)
        if value is None:
            if field.required:
                raise RequestError(422, f"{name}: missing; {what} needs it", name)
            found[name] = field.default
            continue
        check, called = KINDS[field.kind]
        if not check(value):
            raise RequestError(422, f"{name}: got {json.dumps(value)[:60]}, expected {called}", name)
        found[name] = value
    return found
