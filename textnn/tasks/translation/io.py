"""What a translator predicts from and gives (typed, as `predict` takes and returns them), its options, and
how the front layer's input becomes its examples: a line, a JSON object (the source side's name, `source`
or `text`) or the source column of a row of the run's training table (data.format tsv)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textnn.generation.decoding import DecodingConfig
from textnn.tasks.base import Table
from textnn.tasks.inputs import field as json_field


@dataclass(frozen=True)
class TranslationExample:
    source: str
    place: str = field(default="", compare=False)  # where it was read (file:line)


@dataclass(frozen=True, kw_only=True)
class TranslationPrediction:
    source: str
    hypotheses: list[str]  # best first: the best alone, or the n-best list (n_best > 1)
    scores: list[float]  # each hypothesis's score

    @property
    def translation(self) -> str:
        """The best hypothesis."""
        return self.hypotheses[0]


@dataclass(frozen=True)
class TranslationOptions:
    """`translate`'s (and `evaluate`'s) decoding: None is greedy; the run's length rule applies either way."""
    decoding: DecodingConfig | None = None

    @property
    def n_best(self) -> int:
        return self.decoding.n_best if self.decoding is not None else 1


class TranslationIO:
    """The front layer's hooks of `TranslationTask` (tasks/base.py: `example_from_text` and the rest)."""

    def example_from_text(self, line: str, place: str) -> TranslationExample:
        return TranslationExample(line, place)

    def json_fields(self) -> tuple[str, ...]:
        source = self.config.data.source
        return tuple(dict.fromkeys(([source] if not source.isdigit() else []) + ["source", "text"]))

    def example_from_json(self, record: dict, place: str) -> TranslationExample | None:
        source = json_field(record, self.json_fields(), place)
        return TranslationExample(source, place) if source.strip() else None

    def table(self, header: str) -> Table | None:
        """The training table (data.format tsv with a header) when `header` names its source column."""
        data, names = self.config.data, header.split("\t")
        if data.format != "tsv" or not data.header or data.source.isdigit() or data.source not in names:
            return None
        return Table([names.index(data.source)], reading=f"translating its {data.source!r} column")

    def example_from_row(self, fields: list[str], place: str) -> TranslationExample | None:
        return TranslationExample(fields[0], place) if fields[0].strip() else None
