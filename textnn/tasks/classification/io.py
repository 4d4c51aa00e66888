"""What a classifier predicts from and gives (typed, as `predict` takes and returns them), and how the
front layer's input becomes its examples: a line (`text`, or `text<TAB>pair` for a pair model), a JSON
object (the run's column names, or `text` / `text_pair`) or a row of the run's training table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from textnn.data.readers import quoted_rows
from textnn.data.vocab import read_run_json
from textnn.errors import TextnnError
from textnn.tasks.base import Table
from textnn.tasks.inputs import field as json_field

TABLE_HEADER = "table_header.json"  # a run's file holding its training table's header line (JSON string)


@dataclass(frozen=True)
class ClassificationExample:
    text: str
    text_pair: str | None = None  # the second text, for a pair model
    place: str = field(default="", compare=False)  # where it was read (file:line), named by errors about it


@dataclass(frozen=True, kw_only=True)
class ClassificationPrediction:
    text: str
    text_pair: str | None = None  # None for a single-text model
    label: str
    probabilities: dict[str, float]  # label -> probability, in the run's label order


@dataclass(frozen=True, kw_only=True)
class RegressionPrediction:
    """What a regression run (data.regression) predicts: a value."""
    text: str
    text_pair: str | None = None
    value: float


class ClassificationIO:
    """The front layer's hooks of `ClassificationTask` (tasks/base.py: `example_from_text` and the rest)."""

    def example(self, text: str, pair: str | None, place: str) -> ClassificationExample | None:
        if not (text + (pair or "")).strip():
            return None
        if self.is_pair and not pair:
            raise TextnnError(f"{place}: this model classifies sentence pairs; give `first sentence<TAB>second "
                              f"sentence` on each line")
        return ClassificationExample(text, pair or None, place)

    def example_from_text(self, line: str, place: str) -> ClassificationExample | None:
        text, _, pair = line.partition("\t") if self.is_pair else (line, "", "")
        return self.example(text, pair, place)

    def json_fields(self) -> tuple[str, ...]:
        return self._json_fields(self.config.data.text_column, "text")

    def example_from_json(self, record: dict, place: str) -> ClassificationExample | None:
        text = json_field(record, self.json_fields(), place).replace("\t", " ")
        pair_fields = self._json_fields(self.config.data.text_pair_column, "text_pair")
        pair = json_field(record, pair_fields, place).replace("\t", " ") if self.is_pair else None
        return self.example(text, pair, place)

    @staticmethod
    def _json_fields(column: str, default: str) -> tuple[str, ...]:
        """A column option's JSON fields: its name (not an index), then `default`."""
        return tuple(dict.fromkeys(([column] if column and not column.isdigit() else []) + [default]))

    def table(self, header: str) -> Table | None:
        """The training table (tsv/csv with data.header) when `header` is its whole header line as training
        read it (`table_header`), or a TSV table without header (`_headless_table`); its rows are then read
        as training reads them: split at data.delimiter, or with data.quoting by standard CSV quoting."""
        data = self.config.data
        delimiter = data.delimiter or ("\t" if data.format == "tsv" else ",")
        if self.table_header is None or header != self.table_header:
            return self._headless_table(header, delimiter)
        names = [name.strip() for name in (next(quoted_rows([header], delimiter)) if data.quoting
                                           else header.split(delimiter))]
        specs = [data.text_column] + ([data.text_pair_column] if self.is_pair else [])
        named = " and ".join(repr(spec) for spec in specs)
        return Table([names.index(spec) if spec in names else int(spec) for spec in specs], delimiter, data.quoting,
                     f"predicting on its {named} column{'s' if self.is_pair else ''}")

    def _headless_table(self, first: str, delimiter: str) -> Table | None:
        """A table like the run's TSV training table without header line (its columns given as numbers), when
        the input's `first` line is a row of one: it has every column training read, label included (plain
        text, or `text<TAB>pair` for a pair model, has fewer). The first line is then a row, not a header."""
        data = self.config.data
        specs = [data.text_column] + ([data.text_pair_column] if self.is_pair else [])
        if data.format != "tsv" or data.header or not all(spec.isdigit() for spec in specs + [data.label_column]):
            return None
        fields = next(quoted_rows([first], delimiter)) if data.quoting else first.split(delimiter)
        if len(fields) <= max(int(spec) for spec in specs + [data.label_column]):
            return None
        named = " and ".join(specs)
        return Table([int(spec) for spec in specs], delimiter, data.quoting, header=False,
                     reading=f"a row of the run's training table (no header line, as in training): predicting on "
                             f"its column{'s' if self.is_pair else ''} {named} (counted from 0)")

    def save_table_header(self, run_path: Path) -> None:
        """Write the training table's header line (`table_header`), when training read one, for `load_table_header`."""
        if self.table_header is not None:
            (run_path / TABLE_HEADER).write_text(json.dumps(self.table_header, ensure_ascii=False), encoding="utf-8")

    def load_table_header(self, run_path: Path) -> None:
        """Read back what `save_table_header` wrote (a run trained before it, or on no table, has none)."""
        if (run_path / TABLE_HEADER).is_file():
            self.table_header = read_run_json(run_path / TABLE_HEADER)
            if not isinstance(self.table_header, str):
                raise TextnnError(f"{run_path / TABLE_HEADER}: expected a JSON string, the training table's header "
                                  f"line; the file is damaged: delete it (predict then reads no header) or re-train")

    def example_from_row(self, fields: list[str], place: str) -> ClassificationExample | None:
        text, *pair = (value.strip().replace("\t", " ") for value in fields)
        return self.example(text, pair[0] if pair else None, place)
