"""Tokenizers: text -> list of token strings. Saved as a small JSON dict in the run directory."""

from __future__ import annotations

import re

from textnn.errors import TextnnError

# A word is a run of letters/digits; an English clitic keeps its apostrophe ("it 's" -> ["it", "'s"],
# "don't" -> ["don", "'t"]); every other non-space character stands alone, so a quoting apostrophe
# is not glued to the word it opens ("the 'best' film" -> ["the", "'", "best", "'", "film"]).
_WORD_RE = re.compile(r"'(?:[stdm]|re|ve|ll)\b|\w+|[^\w\s]", re.IGNORECASE)
# Bumped whenever the rules above change, so tokens cached under the old rules are not reused.
_WORD_RULES_VERSION = 2


class Tokenizer:
    """Splits text into tokens. `kind` is word (regex), whitespace or char."""

    KINDS = ("word", "whitespace", "char")

    def __init__(self, kind: str = "word", lowercase: bool = False):
        if kind not in self.KINDS:
            raise TextnnError(f"unknown tokenizer '{kind}'; valid: {', '.join(self.KINDS)}")
        self.kind = kind
        self.lowercase = lowercase

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        if self.kind == "word":
            return _WORD_RE.findall(text)
        if self.kind == "whitespace":
            return text.split()
        return list(text)

    def to_dict(self) -> dict:
        data = {"kind": self.kind, "lowercase": self.lowercase}
        if self.kind == "word":  # part of the tokenized-data cache key
            data["rules"] = _WORD_RULES_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Tokenizer":
        return cls(kind=data["kind"], lowercase=bool(data["lowercase"]))

    def join(self, tokens: list[str]) -> str:
        """Inverse for display: characters concatenate, words join with spaces."""
        return "".join(tokens) if self.kind == "char" else " ".join(tokens)
