"""Typed configuration: dataclasses with a one-line doc per field, YAML files, dotted overrides.

(Filled in below: `opt` is what every Config dataclass in textnn uses to declare a field.)
"""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(default: Any, doc: str) -> Any:
    """Declare a config field with its default and the one-line doc `textnn explain` prints."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})
