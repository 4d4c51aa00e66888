"""The one error type a user can cause.

Anything a user can get wrong (a bad file, a config typo, a label never seen in training) raises
`TextnnError` with a message that names the file, line, key or value and says what to do. The CLI
prints it as one line and exits with code 2; it never shows a traceback from deep inside torch.
"""

from __future__ import annotations


class TextnnError(Exception):
    """A problem with the user's input, config or files; `str(err)` is the whole message."""


def where(path: str | None, line: int | None = None) -> str:
    """Format a location as `path:line` (or just `path`) for error messages."""
    if path is None:
        return "<input>"
    return f"{path}:{line}" if line is not None else str(path)


def short(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, so a huge bad value cannot flood an error message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def clip(text: object, limit: int = 40) -> str:
    """`str(text)` cut to `limit` characters (for names and keys shown without quotes)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
