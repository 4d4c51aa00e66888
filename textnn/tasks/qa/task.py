"""The QA task: building its pipeline, windows and model, the span loss, the best span of each question
over its windows, SQuAD EM/F1, and predictions (what they take and give, and how their input reads, are in
io.py)."""

# B batch (windows), T window length, Q questions

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F

from textnn.config import Config
from textnn.data.batching import bucket_batches
from textnn.data.packing import pack
from textnn.data.tokenizers import CLS, SEP, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.metrics.squad import squad_scores
from textnn.modules.heads import SpanHead
from textnn.tasks.base import EPOCH_SEED_STRIDE, NoOptions, build_encoder
from textnn.tasks.checks import require_train
from textnn.tasks.qa.data import QABatch, QAData, QASplit, Question, Window, answer_pieces, read_squad, window_starts
from textnn.tasks.qa.io import QAExample, QAIO, QAPrediction
from textnn.tasks.qa.model import SpanModel
from textnn.tasks.windows import WordPieceWindowTask, check_window_length, window_length


def best_span(start: np.ndarray, end: np.ndarray, lo: int, hi: int, max_answer: int) -> tuple[int, int, float]:
    """The (s, e) with lo <= s <= e < hi and e - s < max_answer maximising start[s] + end[e], and its score."""
    scores = start[lo:hi, None] + end[None, lo:hi]  # [C, C]: row s, column e
    n = hi - lo
    offset = np.arange(n)[None, :] - np.arange(n)[:, None]  # e - s
    scores = np.where((offset >= 0) & (offset < max_answer), scores, -np.inf)
    flat = int(np.argmax(scores))
    s, e = divmod(flat, n)
    return lo + s, lo + e, float(scores[s, e])


class QATask(QAIO, WordPieceWindowTask):
    Example = QAExample
    Prediction = QAPrediction
    data_config = QAData
    formats = ("squad",)
    intervals = False  # EM/F1 have no bootstrap interval: a second pass over dev (minutes for SQuAD) adds nothing
    metric_directions = {"loss": False, "exact_match": True, "f1": True}
    printed_digits = 4  # a span's score (a sum of two logits) is printed to 4 decimals
    default_metric = "f1"

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if "segments" not in encoder_cls.reads or not encoder_cls.gives_tokens:
            return "span QA reads [CLS] question [SEP] context [SEP] into per-token states: it needs a BERT-style encoder"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        require_train(config, "a SQuAD JSON file")
        if config.data.holdout_articles and config.data.dev:
            raise TextnnError("data.holdout_articles and data.dev are both set; holding out articles makes the dev "
                              "set, so leave data.dev empty")
        check_window_length(config)

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        if CLS not in vocab.stoi or SEP not in vocab.stoi:
            raise TextnnError(f"the vocabulary has no {CLS} or {SEP}; span QA packs [CLS] question [SEP] context "
                              f"[SEP]: start from a BERT-family run or checkpoint")
        self.splits: dict[str, QASplit] = {}
        self.max_length = window_length(config, 384)
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
        # without model.init_from: a WordPiece trained on the training contexts (each once) and questions
        task = cls(config, *cls.wordpiece_pipeline(
            config, lambda: sorted({q.context for q in questions}) + [q.question for q in questions],
            {"questions": len(questions)}, "wordpiece_model_squad"))
        task.splits["train"] = task.encode(questions, outside, data.train)
        unanswerable = sum(q.answer_start < 0 for q in questions)
        if outside:
            print(f"warning: {data.train}: {outside} answers do not occur at their answer_start in the context; "
                  f"{unanswerable} training questions are left without an answer and are not trained on", file=sys.stderr)
        if dev is not None:
            task.splits["dev"] = task.encode(dev, sum(q.outside for q in dev), f"{data.train} (last {data.holdout_articles} articles)")
        task.encode_files(("test",) if dev is not None else ("dev", "test"))
        return task

    def build_model(self) -> SpanModel:
        encoder = build_encoder(self.config, self.vocab)
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
            gold = answer_pieces(spans, q.answer_start, q.answer_text) if q.answer_start >= 0 else None
            room = self.max_length - len(query) - 3
            for first, length in window_starts(len(ids), room, data.doc_stride):
                packed = pack(query, ids[first:first + length], cls_id, sep_id)
                at = packed.second[0]
                start = end = 0
                if gold is not None and first <= gold[0] and gold[1] < first + length:
                    start, end = at + gold[0] - first, at + gold[1] - first
                windows.append(Window(qi, packed.ids, packed.segments, at, first, length, start, end))
        return QASplit(questions, windows, offsets, outside, str(path), self.vocab.pad_id)

    # --- batches ----------------------------------------------------------------------------------
    def train_order(self, epoch: int) -> list[list[int]]:
        """Length-bucketed, shuffled batches of the windows training learns from (`QASplit.answerable`)."""
        split = self.splits["train"]
        keep, lengths = split.answerable(), split.lengths()
        order = bucket_batches([lengths[i] for i in keep], self.config.train.batch_size, shuffle=True,
                               seed=self.config.train.seed * EPOCH_SEED_STRIDE + epoch)
        return [[keep[i] for i in batch] for batch in order]

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
        best: list[tuple[str, int, float]] = [("", -1, -np.inf)] * len(split.questions)
        loss_sum = 0.0
        max_answer = self.config.data.max_answer_length
        size = self.inference_batch_size or max(32, self.config.train.batch_size)  # windows per batch
        for batch in self.batches_on_device(model, split, size):
            out = model(batch.ids, batch.mask, batch.segments)
            loss_sum += float((F.cross_entropy(out.start.float(), batch.starts, reduction="sum")
                               + F.cross_entropy(out.end.float(), batch.ends, reduction="sum")) / 2)
            starts, ends = out.start.float().cpu().numpy(), out.end.float().cpu().numpy()
            for row, w_index in enumerate(batch.index):
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

    def predict(self, model: torch.nn.Module, examples: list[QAExample], options: NoOptions) -> list[QAPrediction]:
        """The best span of each question's context: its text, its first character and its score."""
        questions = [Question(str(i), e.question, e.context, [], -1, "", 0) for i, e in enumerate(examples)]
        best = self.answers(model, self.encode(questions, 0, "predict input"))[0]
        return [QAPrediction(question=e.question, answer=text, start=start, score=float(score))
                for e, (text, start, score) in zip(examples, best)]
