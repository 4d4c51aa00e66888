"""QA data: the `data:` options, reading SQuAD JSON into questions, the windows a long context is cut
into, an encoded split and its batch."""

# B batch (windows), T window length, C context tokens

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from textnn.config import DataConfig, check_key, is_int, opt
from textnn.data.batching import Batch, pad
from textnn.data.readers import parse_json, read_text
from textnn.errors import TextnnError, short
from textnn.tasks.windows import check_wordpiece_windows


@dataclass
class QAData(DataConfig):
    format: str = opt("squad", "squad: SQuAD v1.1 JSON")
    tokenizer: str = opt("wordpiece", "wordpiece (that of model.init_from, or trained on data.train)")
    lowercase: bool = opt(True, "uncased WordPiece when one is trained here")
    wordpiece_vocab_size: int = opt(8000, "size of a WordPiece trained on data.train (without model.init_from)")
    max_length: int = opt(0, "tokens per window: [CLS] question [SEP] context [SEP]; 0 = 384 (BERT), or the encoder's limit when lower")
    doc_stride: int = opt(128, "a long context is read in windows starting every this many tokens (BERT: 128)")
    max_query_length: int = opt(64, "question tokens kept (BERT: 64), at most half the window")
    max_answer_length: int = opt(30, "longest answer predicted, in tokens (BERT: 30)")
    holdout_articles: int = opt(0, "with no data.dev: the last N articles of data.train are the dev set")

    TOKENIZATION = (*DataConfig.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_wordpiece_windows(self)
        for key in ("doc_stride", "max_query_length", "max_answer_length", "wordpiece_vocab_size"):
            check_key(is_int(getattr(self, key)) and getattr(self, key) >= 1, f"data.{key}", getattr(self, key),
                      "an integer >= 1")
        check_key(is_int(self.holdout_articles) and self.holdout_articles >= 0, "data.holdout_articles",
                  self.holdout_articles, "an integer >= 0")


@dataclass
class Question:
    id: str
    question: str
    context: str
    answers: list[str]  # reference texts (all of them, for scoring)
    answer_start: int  # character start of the first answer found in the context, -1 if none
    answer_text: str
    article: int  # index of its article in the file
    outside: int = 0  # reference answers whose answer_start does not point at their text in the context


SQUAD_SHAPE = ('{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": '
               '[{"text", "answer_start"}]}]}]}]}')


class NotSquad(Exception):
    """Where a SQuAD file's structure differs from SQUAD_SHAPE (read_squad names the file)."""


def squad_field(obj: object, key: str, kind: type | tuple, place: str, default: object = None) -> object:
    """obj[key], checked to be a `kind` (`default` when the key is absent and a default is given)."""
    if not isinstance(obj, dict):
        raise NotSquad(f"{place} is {short(obj, 30)}, not an object")
    if key not in obj and default is not None:
        return default
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        shown = "missing" if key not in obj else "null" if value is None else short(value, 30)
        raise NotSquad(f'{place}["{key}"] is {shown}')
    return value


def read_squad(path: str, encoding: str = "utf-8") -> tuple[list[Question], int]:
    """Questions of a SQuAD JSON file, and the number of answers whose answer_start does not point at their text."""
    try:  # a missing, undecodable or damaged gzip file: one line there; JSON past Python's reader: one line here
        raw = parse_json(read_text(path, encoding), path, f"expected {SQUAD_SHAPE}")
    except json.JSONDecodeError as err:
        raise TextnnError(f"{path}: not a SQuAD JSON file ({type(err).__name__}: {err}); "
                          f"expected {SQUAD_SHAPE}") from None
    try:
        questions, outside = _squad_questions(raw)
    except NotSquad as err:
        raise TextnnError(f"{path}: not a SQuAD JSON file: {err}; expected {SQUAD_SHAPE}") from None
    if not questions:
        raise TextnnError(f"{path}: no questions; give a SQuAD v1.1 JSON file")
    return questions, outside


def _squad_questions(raw: object) -> tuple[list[Question], int]:
    questions, outside = [], 0
    for a, article in enumerate(squad_field(raw, "data", list, "the file")):
        for p, paragraph in enumerate(squad_field(article, "paragraphs", list, f"data[{a}]", [])):
            place = f"data[{a}].paragraphs[{p}]"
            context = squad_field(paragraph, "context", str, place)
            for q, qa in enumerate(squad_field(paragraph, "qas", list, place, [])):
                answers = []
                for n, answer in enumerate(squad_field(qa, "answers", list, f"{place}.qas[{q}]", [])):
                    where = f"{place}.qas[{q}].answers[{n}]"
                    start = squad_field(answer, "answer_start", (int, float, str), where, -1)
                    try:
                        start = int(start)
                    except (ValueError, OverflowError):
                        raise NotSquad(f'{where}["answer_start"] is {short(start, 30)}, '
                                        f'not a character offset') from None
                    answers.append((squad_field(answer, "text", str, where), start))
                found = [(text, start) for text, start in answers
                         if 0 <= start and context[start:start + len(text)] == text and text.strip()]
                outside += len(answers) - len(found)
                start, text = (found[0][1], found[0][0]) if found else (-1, "")
                question = squad_field(qa, "question", str, f"{place}.qas[{q}]")
                questions.append(Question(str(qa.get("id", len(questions))), question, context,
                                          [t for t, _ in answers], start, text, a, len(answers) - len(found)))
    return questions, outside


def window_starts(n_context: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(first context token, length) of each window over n_context tokens, windows of at most `room`
    tokens starting every `stride` tokens, the last one reaching the end (run_squad.py's doc spans)."""
    spans, start = [], 0
    while True:
        length = min(n_context - start, room)
        spans.append((start, length))
        if start + length >= n_context:
            return spans
        start += min(length, stride)


@dataclass
class Window:
    question: int  # index into the split's questions
    ids: list[int]
    segments: list[int]
    context_at: int  # position in ids of the window's first context token
    first_piece: int  # index (in the context's pieces) of that token
    length: int  # context tokens in the window
    start: int  # gold start / end positions in ids (0 = [CLS]: the answer is not in this window)
    end: int


@dataclass
class QABatch(Batch):
    ids: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] bool
    segments: torch.Tensor  # [B, T]
    starts: torch.Tensor  # [B] gold start positions
    ends: torch.Tensor  # [B]
    index: list[int]  # windows of the split


@dataclass
class QASplit:
    """Questions cut into context windows: an encoded split (tasks/base.py) whose examples are the windows."""

    questions: list[Question]
    windows: list[Window]
    offsets: dict[str, list[tuple[int, int]]]  # context -> character span of each of its pieces
    answers_outside_context: int
    path: str
    pad_id: int = 0

    def lengths(self) -> list[int]:
        return [len(w.ids) for w in self.windows]

    def collate(self, index: list[int]) -> QABatch:
        windows = [self.windows[i] for i in index]
        ids, mask = pad([w.ids for w in windows], self.pad_id)
        segments = pad([w.segments for w in windows], 0)[0]
        starts = torch.tensor([w.start for w in windows], dtype=torch.long)
        ends = torch.tensor([w.end for w in windows], dtype=torch.long)
        return QABatch(ids, mask, segments, starts, ends, index)

    def answerable(self) -> list[int]:
        """The windows of questions with a gold answer (those training learns from)."""
        return [i for i, w in enumerate(self.windows) if self.questions[w.question].answer_start >= 0]


def answer_pieces(spans: list[tuple[int, int]], start: int, text: str) -> tuple[int, int] | None:
    """First and last context pieces that overlap the answer's characters [start, start + len(text))."""
    end = start + len(text)
    inside = [i for i, (a, b) in enumerate(spans) if a < end and b > start]
    return (inside[0], inside[-1]) if inside else None
