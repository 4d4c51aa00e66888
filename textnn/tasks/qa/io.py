"""What span QA predicts from and gives (typed, as `predict` takes and returns them), and how a line of the
front layer's input becomes a question: a JSON object {"question", "context"} or `question<TAB>context`,
decided line by line (QA reads no JSON lines as a whole: each line may be either)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from textnn.data.readers import parse_json
from textnn.errors import TextnnError
from textnn.tasks.qa.data import NotSquad, squad_field


@dataclass(frozen=True)
class QAExample:
    question: str
    context: str
    place: str = field(default="", compare=False)  # where it was read (file:line)


@dataclass(frozen=True, kw_only=True)
class QAPrediction:
    question: str
    answer: str  # the span of the context; "" when the context has none to give
    start: int  # the answer's first character in the context; -1 when there is none
    score: float  # start + end logits of the span (-inf when there is none)


class QAIO:
    """The front layer's hook of `QATask` (tasks/base.py: `example_from_text`)."""

    def example_from_text(self, line: str, place: str) -> QAExample:
        if not line.lstrip().startswith("{"):
            question, _, context = line.partition("\t")
            if not context:
                raise TextnnError(f"{place}: give `question<TAB>context` or a JSON object with \"question\" and "
                                  f"\"context\"")
            return QAExample(question, context, place)
        try:
            item = parse_json(line, place, "fix the line")
        except json.JSONDecodeError:
            item = None
        if not isinstance(item, dict):
            raise TextnnError(f"{place}: expected a JSON object with \"question\" and \"context\"")
        try:
            question, context = (squad_field(item, key, str, "the line") for key in ("question", "context"))
        except NotSquad as err:  # a null context would otherwise be answered from the text "None"
            raise TextnnError(f"{place}: {err}; give \"question\" and \"context\" as strings") from None
        return QAExample(question, context, place)
