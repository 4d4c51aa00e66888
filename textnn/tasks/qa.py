"""Extractive question answering (SQuAD v1.1): the answer is a span of the context.

Devlin et al. 2019 §4.2: the question and the context are packed as [CLS] question [SEP] context
[SEP] (segments 0 / 1); `SpanHead` gives each token a start and an end score, and the answer is the
span (s, e) of context tokens with s <= e, at most `data.max_answer_length` tokens long, that
maximises start[s] + end[e]. Training maximises the log-likelihood of the gold start and end.

Long contexts (BERT's run_squad.py): a context longer than the room left beside the question
(data.max_length - question - 3) is read in windows that start every `data.doc_stride` tokens, the
last one reaching the end, so every context token is in some window. A window that does not hold the
whole gold answer is trained to point at [CLS] (position 0), as the released code does; at
prediction time the best span over all of a question's windows is taken.

Answers map back to text by character offsets: each word piece keeps the characters it came from
(`Tokenizer.encode_with_offsets`), and the answer is the context's characters from the start of the
first piece to the end of the last, so its spelling, case and spacing are the original's.

Data (`data.format: squad`): the SQuAD JSON (`{"data": [{"title", "paragraphs": [{"context", "qas":
[{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}`). An answer whose `answer_start`
does not point at its text in the context is counted and reported (`answers_outside_context`); a
training question left with no usable answer is not trained on. Scores (metrics/squad.py): the
official exact match and F1, each the best over a question's reference answers.

Only the SQuAD v1.1 dev set may be at hand: `data.holdout_articles: N` with no data.dev keeps the
last N articles of data.train as the dev set (the recipe: 38 of the 48 dev articles to fine-tune, the
other 10 to evaluate).
"""

# B batch (windows), T window length, D model dim, Q questions, C context tokens

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config, DataConfig, check_key, is_int, opt
from textnn.data.batching import Batch, bucket_batches, pad
from textnn.data.packing import pack
from textnn.data.readers import read_text
from textnn.data.tokenizers import CLS, SEP, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError, short
from textnn.metrics.squad import squad_scores
from textnn.models.base import EncoderWithHead, InputSpec, TokenFeatures
from textnn.modules.heads import SpanHead
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, blank, empty_answer


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
        check_key(self.tokenizer == "wordpiece", "data.tokenizer", self.tokenizer, "wordpiece")
        for key in ("doc_stride", "max_query_length", "max_answer_length", "wordpiece_vocab_size"):
            check_key(is_int(getattr(self, key)) and getattr(self, key) >= 1, f"data.{key}", getattr(self, key),
                      "an integer >= 1")
        check_key(is_int(self.max_length) and (self.max_length == 0 or self.max_length >= 8), "data.max_length",
                  self.max_length, "0 (the default) or an integer >= 8")
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


class _NotSquad(Exception):
    """Where a SQuAD file's structure differs from SQUAD_SHAPE (read_squad names the file)."""


def _field(obj: object, key: str, kind: type | tuple, place: str, default: object = None) -> object:
    """obj[key], checked to be a `kind` (`default` when the key is absent and a default is given)."""
    if not isinstance(obj, dict):
        raise _NotSquad(f"{place} is {short(obj, 30)}, not an object")
    if key not in obj and default is not None:
        return default
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        shown = "missing" if key not in obj else "null" if value is None else short(value, 30)
        raise _NotSquad(f'{place}["{key}"] is {shown}')
    return value


def read_squad(path: str, encoding: str = "utf-8") -> tuple[list[Question], int]:
    """Questions of a SQuAD JSON file, and the number of answers whose answer_start does not point at their text."""
    try:
        raw = json.loads(read_text(path, encoding))  # a missing, undecodable or damaged gzip file: one line there
    except json.JSONDecodeError as err:
        raise TextnnError(f"{path}: not a SQuAD JSON file ({type(err).__name__}: {err}); "
                          f"expected {SQUAD_SHAPE}") from None
    except RecursionError:
        raise TextnnError(f"{path}: JSON nested far deeper than a SQuAD file; expected {SQUAD_SHAPE}") from None
    try:
        questions, outside = _squad_questions(raw)
    except _NotSquad as err:
        raise TextnnError(f"{path}: not a SQuAD JSON file: {err}; expected {SQUAD_SHAPE}") from None
    if not questions:
        raise TextnnError(f"{path}: no questions; give a SQuAD v1.1 JSON file")
    return questions, outside


def _squad_questions(raw: object) -> tuple[list[Question], int]:
    questions, outside = [], 0
    for a, article in enumerate(_field(raw, "data", list, "the file")):
        for p, paragraph in enumerate(_field(article, "paragraphs", list, f"data[{a}]", [])):
            place = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, place)
            for q, qa in enumerate(_field(paragraph, "qas", list, place, [])):
                answers = []
                for n, answer in enumerate(_field(qa, "answers", list, f"{place}.qas[{q}]", [])):
                    where = f"{place}.qas[{q}].answers[{n}]"
                    start = _field(answer, "answer_start", (int, float, str), where, -1)
                    try:
                        start = int(start)
                    except (ValueError, OverflowError):
                        raise _NotSquad(f'{where}["answer_start"] is {short(start, 30)}, '
                                        f'not a character offset') from None
                    answers.append((_field(answer, "text", str, where), start))
                found = [(text, start) for text, start in answers
                         if 0 <= start and context[start:start + len(text)] == text and text.strip()]
                outside += len(answers) - len(found)
                start, text = (found[0][1], found[0][0]) if found else (-1, "")
                question = _field(qa, "question", str, f"{place}.qas[{q}]")
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


def best_span(start: np.ndarray, end: np.ndarray, lo: int, hi: int, max_answer: int) -> tuple[int, int, float]:
    """The (s, e) with lo <= s <= e < hi and e - s < max_answer maximising start[s] + end[e], and its score."""
    scores = start[lo:hi, None] + end[None, lo:hi]  # [C, C]: row s, column e
    n = hi - lo
    offset = np.arange(n)[None, :] - np.arange(n)[:, None]  # e - s
    scores = np.where((offset >= 0) & (offset < max_answer), scores, -np.inf)
    flat = int(np.argmax(scores))
    s, e = divmod(flat, n)
    return lo + s, lo + e, float(scores[s, e])


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
class QASplit:
    questions: list[Question]
    windows: list[Window]
    offsets: dict[str, list[tuple[int, int]]]  # context -> character span of each of its pieces
    answers_outside_context: int
    path: str


@dataclass
class SpanOutput:
    start: torch.Tensor  # [B, T] start scores, -inf at padding
    end: torch.Tensor  # [B, T]


class SpanModel(EncoderWithHead):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> SpanOutput:
        tokens = self.encoder(ids, mask, features=TokenFeatures(segments=segments)).tokens  # [B, T, D]
        start, end = self.head(tokens, mask)
        return SpanOutput(start.float(), end.float())


@dataclass
class QABatch(Batch):
    ids: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] bool
    segments: torch.Tensor  # [B, T]
    starts: torch.Tensor  # [B] gold start positions
    ends: torch.Tensor  # [B]
    index: list[int]  # windows of the split


class QATask(BatchTask):
    data_config = QAData
    formats = ("squad",)
    intervals = False  # EM/F1 have no bootstrap interval: a second pass over dev (minutes for SQuAD) adds nothing
    metric_directions = {"loss": False, "exact_match": True, "f1": True}
    default_metric = "f1"

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if "segments" not in encoder_cls.reads or not encoder_cls.gives_tokens:
            return "span QA reads [CLS] question [SEP] context [SEP] into per-token states: it needs a BERT-style encoder"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        if not config.data.train:
            raise TextnnError("config key data.train is empty; set it to a SQuAD JSON file")
        if config.data.holdout_articles and config.data.dev:
            raise TextnnError("data.holdout_articles and data.dev are both set; holding out articles makes the dev "
                              "set, so leave data.dev empty")
        limit = registry.encoder_class(config.model_name).max_length(config.model)
        if limit and config.data.max_length > limit:
            raise TextnnError(f"config key data.max_length: got {config.data.max_length}, but the encoder reads at "
                              f"most {limit} positions; lower data.max_length")

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        if CLS not in vocab.stoi or SEP not in vocab.stoi:
            raise TextnnError(f"the vocabulary has no {CLS} or {SEP}; span QA packs [CLS] question [SEP] context "
                              f"[SEP]: start from a BERT-family run or checkpoint")
        self.splits: dict[str, QASplit] = {}
        limit = registry.encoder_class(config.model_name).max_length(config.model)
        self.max_length = config.data.max_length or min(384, limit or 384)
        self.max_query = min(config.data.max_query_length, self.max_length // 2)  # the context keeps half or more

    # --- building ---------------------------------------------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "QATask":
        data = config.data
        questions, outside = read_squad(data.train, data.encoding)
        dev = None
        if data.holdout_articles:
            articles = sorted({q.article for q in questions})
            if data.holdout_articles >= len(articles):
                raise TextnnError(f"{data.train}: data.holdout_articles={data.holdout_articles} leaves no article to "
                                  f"train on ({len(articles)} in the file); lower it")
            held = set(articles[-data.holdout_articles:])
            dev = [q for q in questions if q.article in held]
            questions = [q for q in questions if q.article not in held]
            outside = sum(q.outside for q in questions)
        if config.init_from:
            tokenizer, vocab = pipeline.load(Path(config.init_from))
        else:  # a WordPiece trained on the training contexts (each once) and questions
            tokenizer = pipeline.train_wordpiece(
                config, lambda: sorted({q.context for q in questions}) + [q.question for q in questions],
                {"questions": len(questions)}, kind="wordpiece_model_squad")
            vocab = pipeline.piece_vocabulary(tokenizer)
        task = cls(config, tokenizer, vocab)
        task.splits["train"] = task.encode(questions, outside, data.train)
        unanswerable = sum(q.answer_start < 0 for q in questions)
        if outside:
            print(f"warning: {data.train}: {outside} answers do not occur at their answer_start in the context; "
                  f"{unanswerable} training questions are left without an answer and are not trained on", file=sys.stderr)
        if dev is not None:
            task.splits["dev"] = task.encode(dev, sum(q.outside for q in dev), f"{data.train} (last {data.holdout_articles} articles)")
        elif data.dev:
            task.splits["dev"] = task.encode_file(data.dev)
        if data.test:
            task.splits["test"] = task.encode_file(data.test)
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "QATask":
        return cls(config, *cls.load_text_pipeline(run_path))

    def save(self, run_path: Path) -> None:
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict()), encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")

    def build_model(self) -> SpanModel:
        encoder = registry.encoder_class(self.config.model_name)(
            self.config.model, InputSpec(vocab_size=len(self.vocab), pad_id=self.vocab.pad_id))
        return SpanModel(encoder, SpanHead(encoder.token_size))

    # --- encoding ---------------------------------------------------------------------------------
    def encode_file(self, path: str, require_labels: bool = True) -> QASplit:
        questions, outside = read_squad(path, self.config.data.encoding)
        return self.encode(questions, outside, path)

    def encode(self, questions: list[Question], outside: int, path: str) -> QASplit:
        """Windows of every question over its context (see the module docstring)."""
        data = self.config.data
        cls_id, sep_id = self.vocab.stoi[CLS], self.vocab.stoi[SEP]
        contexts = sorted({q.context for q in questions})
        pieces = {c: self.tokenizer.encode_with_offsets(c) for c in contexts}
        context_ids = {c: self.vocab.encode(p.tokens) for c, p in pieces.items()}
        offsets = {c: p.offsets for c, p in pieces.items()}
        query_ids = [self.vocab.encode(t)[:self.max_query]
                     for t in self.tokenizer.tokenize_lines([q.question for q in questions])]
        windows = []
        for qi, (q, query) in enumerate(zip(questions, query_ids)):
            ids, spans = context_ids[q.context], offsets[q.context]
            if not ids:
                continue  # an empty context has no span to answer with; scored as an empty answer
            gold = _answer_pieces(spans, q.answer_start, q.answer_text) if q.answer_start >= 0 else None
            room = self.max_length - len(query) - 3
            for first, length in window_starts(len(ids), room, data.doc_stride):
                packed = pack(query, ids[first:first + length], cls_id, sep_id)
                at = packed.second[0]
                start = end = 0
                if gold is not None and first <= gold[0] and gold[1] < first + length:
                    start, end = at + gold[0] - first, at + gold[1] - first
                windows.append(Window(qi, packed.ids, packed.segments, at, first, length, start, end))
        return QASplit(questions, windows, offsets, outside, str(path))

    # --- batches ----------------------------------------------------------------------------------
    def has_split(self, split: str) -> bool:
        return split in self.splits

    def _batch(self, split: QASplit, index: list[int]) -> QABatch:
        windows = [split.windows[i] for i in index]
        ids, mask = pad([w.ids for w in windows], self.vocab.pad_id)
        segments = pad([w.segments for w in windows], 0)[0]
        starts = torch.tensor([w.start for w in windows], dtype=torch.long)
        ends = torch.tensor([w.end for w in windows], dtype=torch.long)
        return QABatch(ids, mask, segments, starts, ends, index)

    def _trainable(self) -> list[int]:
        split = self.splits["train"]
        return [i for i, w in enumerate(split.windows) if split.questions[w.question].answer_start >= 0]

    def _order(self, epoch: int) -> list[list[int]]:
        split, keep = self.splits["train"], self._trainable()
        order = bucket_batches([len(split.windows[i].ids) for i in keep], self.config.train.batch_size, shuffle=True,
                               seed=self.config.train.seed * 100_003 + epoch)
        return [[keep[i] for i in batch] for batch in order]

    def train_batches(self, epoch: int) -> list[QABatch]:
        return [self._batch(self.splits["train"], index) for index in self._order(epoch)]

    def num_train_batches(self, epoch: int) -> int:
        return len(self._order(epoch))

    # --- loss, evaluation, prediction -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: QABatch) -> torch.Tensor:
        """(start NLL + end NLL) / 2 per window, summed (run_squad.py's total_loss)."""
        out = model(batch.ids, batch.mask, batch.segments)
        return (F.cross_entropy(out.start.float(), batch.starts, reduction="sum")
                + F.cross_entropy(out.end.float(), batch.ends, reduction="sum")) / 2

    @torch.no_grad()
    def answers(self, model: torch.nn.Module, split: QASplit) -> tuple[list[tuple[str, int, float]], float]:
        """The best answer of every question (text, character start, score; "" when it has no window)
        and the mean window loss."""
        model.eval()
        device = next(model.parameters()).device
        best: list[tuple[str, int, float]] = [("", -1, -np.inf)] * len(split.questions)
        loss_sum = 0.0
        max_answer = self.config.data.max_answer_length
        for index in bucket_batches([len(w.ids) for w in split.windows], max(32, self.config.train.batch_size),
                                    shuffle=False):
            batch = self._batch(split, index).to(device)
            out = model(batch.ids, batch.mask, batch.segments)
            loss_sum += float((F.cross_entropy(out.start.float(), batch.starts, reduction="sum")
                               + F.cross_entropy(out.end.float(), batch.ends, reduction="sum")) / 2)
            starts, ends = out.start.float().cpu().numpy(), out.end.float().cpu().numpy()
            for row, w_index in enumerate(index):
                w = split.windows[w_index]
                s, e, score = best_span(starts[row], ends[row], w.context_at, w.context_at + w.length, max_answer)
                if score > best[w.question][2]:
                    q = split.questions[w.question]
                    spans = split.offsets[q.context]
                    first, last = spans[w.first_piece + s - w.context_at], spans[w.first_piece + e - w.context_at]
                    best[w.question] = (q.context[first[0]:last[1]], first[0], score)
        return best, loss_sum / max(1, len(split.windows))

    def evaluate(self, model: torch.nn.Module, split: str | QASplit, bootstrap_samples: int = 0) -> dict:
        """Official exact match and F1 (fractions), the window loss, and the counts behind them."""
        data = self.splits[split] if isinstance(split, str) else split
        best, loss = self.answers(model, data)
        scored = [i for i, q in enumerate(data.questions) if q.answers]
        if not scored:
            raise TextnnError(f"{data.path}: no question has a reference answer to score against; use `textnn predict`")
        scores = squad_scores([best[i][0] for i in scored], [data.questions[i].answers for i in scored])
        return {"loss": loss, **scores, "questions": len(scored), "windows": len(data.windows),
                "answers_outside_context": data.answers_outside_context}

    def predict(self, model: torch.nn.Module, lines: Iterable[str], source: str, options: dict) -> Iterator[str]:
        """One JSON line per input line: `{"question": ..., "context": ...}` or `question<TAB>context`;
        out come the question, the answer text, its character start in the context and its score."""
        if options.get("input_format") or options.get("output_format"):
            raise TextnnError("--input-format and --output-format apply to tagging runs only; a qa run reads "
                              "JSON lines {\"question\", \"context\"} (or question<TAB>context) and writes JSONL")
        asked: list[Question | None] = []  # None for a blank line, which is answered as empty
        for number, line in enumerate(lines, start=1):
            if blank(line):
                asked.append(None)
                continue
            if line.lstrip().startswith("{"):
                try:
                    item = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    item = None
                if not isinstance(item, dict):
                    raise TextnnError(f"{source}:{number}: expected a JSON object with \"question\" and \"context\"")
                try:
                    question, context = (_field(item, key, str, "the line") for key in ("question", "context"))
                except _NotSquad as err:  # a null context would otherwise be answered from the text "None"
                    raise TextnnError(f"{source}:{number}: {err}; give \"question\" and \"context\" "
                                      f"as strings") from None
            else:
                question, _, context = line.rstrip("\n").partition("\t")
                if not context:
                    raise TextnnError(f"{source}:{number}: give `question<TAB>context` or a JSON object with "
                                      f"\"question\" and \"context\"")
            asked.append(Question(str(number), question, context, [], -1, "", 0))
        if not asked:
            raise TextnnError(f"{source}: no input lines to answer")
        questions = [q for q in asked if q is not None]
        best = iter(self.answers(model, self.encode(questions, 0, source))[0] if questions else [])
        for q in asked:
            if q is None:
                yield empty_answer({"question": None, "answer": None, "start": None, "score": None})
                continue
            text, start, score = next(best)
            yield json.dumps({"question": q.question, "answer": text, "start": start, "score": round(score, 4)},
                             ensure_ascii=False)


def _answer_pieces(spans: list[tuple[int, int]], start: int, text: str) -> tuple[int, int] | None:
    """First and last context pieces that overlap the answer's characters [start, start + len(text))."""
    end = start + len(text)
    inside = [i for i, (a, b) in enumerate(spans) if a < end and b > start]
    return (inside[0], inside[-1]) if inside else None
