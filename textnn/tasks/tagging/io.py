"""What a tagger predicts from and gives (typed, as `predict` takes and returns them), and how the front
layer's input becomes its sentences: a line of raw text (split into words by the run's word rules), a JSON
object (`tokens`, a list of words kept as given, with `tags` beside it as the gold, or `text`), or CoNLL
columns (read with the run's data.token_column / data.tag_column; a tag column is the gold)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from textnn.data.conll import parse_conll
from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError, where
from textnn.tasks.inputs import field as json_field

JSON_FIELDS = ("tokens", "text")  # where a JSON-lines input to a tagger holds its sentence


@dataclass(frozen=True)
class TaggingExample:
    tokens: tuple[str, ...]
    gold: tuple[str, ...] | None = None  # the input's own tags (data.tag_scheme), written beside the prediction
    document_start: bool = False  # CoNLL input: a -DOCSTART- line came before it (CoNLL output puts it back)
    place: str = field(default="", compare=False)  # where it was read (file:line), named by errors about it


@dataclass(frozen=True, kw_only=True)
class TaggingPrediction:
    tokens: tuple[str, ...]
    tags: list[str]  # one per token, in the run's data.tag_scheme
    spans: list[dict]  # the chunks: {type, start, end (exclusive), text}
    gold: tuple[str, ...] | None = None  # the example's own tags, when it has them


class TaggingIO:
    """The front layer's hooks of `TaggingTask` (tasks/base.py: `example_from_text` and the rest)."""

    @cached_property
    def word_splitter(self) -> Tokenizer:
        """What splits raw text into words: the run's tokenizer, or for a WordPiece run (whose pieces are made
        from the words later) the word rules."""
        return Tokenizer("word") if self.tokenizer.kind == "wordpiece" else self.tokenizer

    def example_from_text(self, line: str, place: str) -> TaggingExample | None:
        tokens = self.word_splitter(line)
        return TaggingExample(tuple(tokens), place=place) if tokens else None

    def json_fields(self) -> tuple[str, ...]:
        return JSON_FIELDS

    def example_from_json(self, record: dict, place: str) -> TaggingExample | None:
        """`tokens` as given (with `tags`, when present, as the gold), or `text` split into words as raw text is;
        None when that leaves no token."""
        if "tokens" not in record:
            return self.example_from_text(json_field(record, JSON_FIELDS, place), place)
        tokens = json_field(record, ["tokens"], place, list)
        if not all(isinstance(token, str) and token and not token.isspace() for token in tokens):
            raise TextnnError(f"{place}: 'tokens' must be a list of non-empty strings")
        tags = record.get("tags")
        if tags is not None and (not isinstance(tags, list) or len(tags) != len(tokens)
                                 or not all(isinstance(tag, str) for tag in tags)):
            raise TextnnError(f"{place}: 'tags' must be a list of strings, one per token ({len(tokens)}), or left out")
        return TaggingExample(tuple(tokens), tuple(tags) if tags is not None else None, place=place) if tokens else None

    def conll_examples(self, lines: list[str], source: str, first: int) -> list[TaggingExample]:
        data = self.config.data
        return [TaggingExample(s.tokens, s.tags, s.doc_start, where(source, s.line))
                for s in parse_conll(lines, source, token_column=data.token_column, tag_column=data.tag_column,
                                     scheme=data.tag_scheme, require_tags=False, first=first)]
