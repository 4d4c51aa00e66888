"""Text classification, single sentence or sentence pair: data -> batches, loss, metrics, predictions."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config
from textnn.data.batching import bucket_batches, pad
from textnn.data.cache import cached
from textnn.data.readers import Record, Records, line_list, read_classification, stratified_kfold_splits
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError, where
from textnn.metrics import CLASSIFICATION_METRICS, bootstrap_ci, confusion_matrix


@dataclass
class ClassificationBatch:
    ids: torch.Tensor  # [B, T] token ids
    mask: torch.Tensor  # [B, T] bool, True = real token
    labels: torch.Tensor  # [B] class ids
    index: list[int]  # positions of these examples in their split
    pair_ids: torch.Tensor | None = None  # [B, T2] second sentence of a pair
    pair_mask: torch.Tensor | None = None
    lr_scale: float = 1.0  # the trainer scales this step's learning rate by it; classification never does

    @property
    def count(self) -> int:
        return len(self.index)

    @property
    def num_tokens(self) -> int:
        n = int(self.mask.sum())
        return n + (int(self.pair_mask.sum()) if self.pair_mask is not None else 0)

    def to(self, device: torch.device) -> "ClassificationBatch":
        move = lambda t: t.to(device, non_blocking=True) if t is not None else None  # noqa: E731
        return replace(self, ids=move(self.ids), mask=move(self.mask), labels=move(self.labels),
                       pair_ids=move(self.pair_ids), pair_mask=move(self.pair_mask))


@dataclass
class EncodedSplit:
    records: list[Record]
    ids: list[list[int]]
    pair_ids: list[list[int]] | None
    labels: list[int]  # -1 where unlabelled (prediction input)


def _label_order(labels: set[str]) -> list[str]:
    """Numeric labels in numeric order ("0" < "1" < "10"), others alphabetically."""
    if all(label.lstrip("-").isdigit() for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


class ClassificationTask:
    default_metric = "accuracy"

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab, labels: list[str]):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.labels = labels
        self.label_ids = {label: i for i, label in enumerate(labels)}
        self.splits: dict[str, EncodedSplit] = {}
        self.pretrained: torch.Tensor | None = None
        self.vector_coverage: dict = {}

    @property
    def is_pair(self) -> bool:
        return bool(self.config.data.text_pair_column)

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "ClassificationTask":
        """Read train/dev/test, build tokenizer, vocab and label set, encode every split."""
        data = config.data
        if not data.train:
            raise TextnnError("config key data.train is empty; set it to the training file")
        if data.kfold and data.dev:
            raise TextnnError("data.kfold and data.dev are both set; k-fold makes its own dev split, "
                              "so leave data.dev empty")
        tokenizer = Tokenizer(data.tokenizer, data.lowercase)
        train_records, train_tokens = read_and_tokenize(config, tokenizer, data.train)
        dev_records, dev_tokens = [], []
        if data.kfold:
            folds = stratified_kfold_splits([r.label for r in train_records], data.kfold, seed=config.train.seed)
            train_idx, dev_idx = folds[data.fold]
            dev_records, dev_tokens = [train_records[i] for i in dev_idx], [train_tokens[i] for i in dev_idx]
            train_records, train_tokens = [train_records[i] for i in train_idx], [train_tokens[i] for i in train_idx]
        elif data.dev:
            dev_records, dev_tokens = read_and_tokenize(config, tokenizer, data.dev)
        vocab = Vocab.build((toks for pair in train_tokens for toks in pair if toks is not None),
                            min_freq=data.min_freq, max_size=data.max_vocab)
        if data.vectors and data.vectors_vocab:
            from textnn.interop.vectors import read_vectors

            # Kim (2014) built the vocabulary over all the data and initialised it from word2vec, so
            # words absent from training still had a meaningful vector; adding the vector file's words
            # does the same without looking at dev or test text.
            vocab = vocab.extend(read_vectors(data.vectors)[0])
        labels = _label_order({r.label for r in train_records})
        task = cls(config, tokenizer, vocab, labels)
        task.splits["train"] = task.encode(train_records, train_tokens)
        if dev_records:
            task.splits["dev"] = task.encode(dev_records, dev_tokens)
        if data.test:
            task.splits["test"] = task.encode(*read_and_tokenize(config, tokenizer, data.test))
        if data.vectors:
            from textnn.interop.vectors import build_embedding_matrix

            matrix, coverage = build_embedding_matrix(vocab.itos, data.vectors, seed=config.train.seed)
            if data.vectors_std:
                # Optimizers take steps of about the same size whatever a weight's scale, so vectors
                # five times larger than a random init (50-d GloVe) barely move when fine-tuned;
                # rescaling (pad row 0 stays zero) lets them adapt as readily as random ones.
                matrix *= data.vectors_std / matrix[1:].std()
            task.pretrained = torch.from_numpy(matrix)
            task.vector_coverage = coverage
            print(f"vectors {data.vectors}: {coverage['found']:,} of {coverage['total']:,} vocabulary "
                  f"tokens found ({100 * coverage['coverage']:.1f}%), dim {coverage['dim']}", file=sys.stderr)
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "ClassificationTask":
        tokenizer = Tokenizer.from_dict(json.loads((run_path / "tokenizer.json").read_text(encoding="utf-8")))
        vocab = Vocab.load(run_path / "vocab.json")
        labels = json.loads((run_path / "labels.json").read_text(encoding="utf-8"))
        return cls(config, tokenizer, vocab, labels)

    def save(self, run_path: Path) -> None:
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict()), encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")
        (run_path / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False), encoding="utf-8")

    def build_model(self) -> torch.nn.Module:
        _, model_cls, _ = registry.model_entry(self.config.model_name)
        return model_cls(self.config.model, vocab_size=len(self.vocab), num_classes=len(self.labels),
                         pad_id=self.vocab.pad_id, pretrained=self.pretrained)

    # --- encoding ---------------------------------------------------------------------------------
    def encode(self, records: list[Record], tokens: list[tuple[list[str], list[str] | None]],
               require_known_labels: bool = True) -> EncodedSplit:
        max_len = self.config.data.max_length or None
        ids = [self.vocab.encode(a[:max_len]) for a, _ in tokens]
        pair_ids = [self.vocab.encode(b[:max_len]) for _, b in tokens] if self.is_pair else None
        labels = []
        for record in records:
            if record.label is None:
                labels.append(-1)
            elif record.label in self.label_ids:
                labels.append(self.label_ids[record.label])
            elif require_known_labels:
                raise TextnnError(f"{where(record.path, record.line)}: label {record.label!r} never occurs in the "
                                  f"training data (labels: {', '.join(self.labels)}); fix the label or add "
                                  f"training examples for it")
            else:
                labels.append(-1)
        for record, (text_tokens, pair_tokens) in zip(records, tokens):  # data files are cleared of these
            if not text_tokens or (self.is_pair and not pair_tokens):  # by read_and_tokenize: predict input
                raise TextnnError(f"{where(record.path, record.line)}: the text has no tokens after "
                                  f"tokenizing; remove the line or fix the text column")
        return EncodedSplit(records, ids, pair_ids, labels)

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedSplit:
        records, tokens = read_and_tokenize(self.config, self.tokenizer, path, require_labels=require_labels)
        return self.encode(records, tokens, require_known_labels=require_labels)

    # --- batches ----------------------------------------------------------------------------------
    def has_split(self, split: str) -> bool:
        return split in self.splits

    def _batches(self, split: EncodedSplit, order: list[list[int]]) -> list[ClassificationBatch]:
        batches = []
        for index in order:
            ids, mask = pad([split.ids[i] for i in index], self.vocab.pad_id)
            pair_ids = pair_mask = None
            if split.pair_ids is not None:
                pair_ids, pair_mask = pad([split.pair_ids[i] for i in index], self.vocab.pad_id)
            labels = torch.tensor([split.labels[i] for i in index], dtype=torch.long)
            batches.append(ClassificationBatch(ids, mask, labels, index, pair_ids, pair_mask))
        return batches

    def _lengths(self, split: EncodedSplit) -> list[int]:
        if split.pair_ids is None:
            return [len(s) for s in split.ids]
        return [len(a) + len(b) for a, b in zip(split.ids, split.pair_ids)]

    def _train_order(self, epoch: int) -> list[list[int]]:
        seed = self.config.train.seed * 100_003 + epoch  # a new, reproducible order every epoch
        return bucket_batches(self._lengths(self.splits["train"]), self.config.train.batch_size, shuffle=True,
                              seed=seed)

    def train_batches(self, epoch: int) -> list[ClassificationBatch]:
        return self._batches(self.splits["train"], self._train_order(epoch))

    def num_train_batches(self, epoch: int) -> int:
        """len(train_batches(epoch)) without padding a single batch (the trainer plans every epoch)."""
        return len(self._train_order(epoch))

    def eval_batches(self, split: EncodedSplit, batch_size: int = 0) -> list[ClassificationBatch]:
        order = bucket_batches(self._lengths(split), batch_size or max(64, self.config.train.batch_size), shuffle=False)
        return self._batches(split, order)

    # --- loss, evaluation, prediction -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: ClassificationBatch) -> torch.Tensor:
        out = model(batch.ids, batch.mask, batch.pair_ids, batch.pair_mask)
        return F.cross_entropy(out.logits.float(), batch.labels, reduction="sum")

    @torch.no_grad()
    def probabilities(self, model: torch.nn.Module, split: EncodedSplit) -> np.ndarray:
        """Class probabilities [N, C] in the split's original order."""
        model.eval()
        device = next(model.parameters()).device
        probs = np.zeros((len(split.ids), len(self.labels)), dtype=np.float32)
        for batch in self.eval_batches(split):
            batch = batch.to(device)
            logits = model(batch.ids, batch.mask, batch.pair_ids, batch.pair_mask).logits.float()
            probs[batch.index] = torch.softmax(logits, dim=-1).cpu().numpy()
        return probs

    def evaluate(self, model: torch.nn.Module, split: str | EncodedSplit, bootstrap_samples: int = 0) -> dict:
        """Loss, every classification metric, a confusion matrix and (optionally) a 95% CI."""
        data = self.splits[split] if isinstance(split, str) else split
        probs = self.probabilities(model, data)
        gold = np.asarray(data.labels)
        if (gold < 0).any():
            raise TextnnError("cannot evaluate on examples without labels; use `textnn predict` instead")
        pred = probs.argmax(axis=1)
        results: dict = {"loss": float(-np.log(np.clip(probs[np.arange(len(gold)), gold], 1e-12, None)).mean()),
                         "examples": len(gold)}
        binary = len(self.labels) == 2
        for name, fn in CLASSIFICATION_METRICS.items():
            if name == "f1" and not binary:
                continue
            results[name] = float(fn(gold, pred))
        metric = self.config.train.metric or self.default_metric
        if bootstrap_samples and metric in CLASSIFICATION_METRICS:
            low, high = bootstrap_ci(CLASSIFICATION_METRICS[metric], gold, pred, n_samples=bootstrap_samples,
                                     seed=self.config.train.seed)
            results[f"{metric}_ci_low"], results[f"{metric}_ci_high"] = float(low), float(high)
        results["confusion_matrix"] = confusion_matrix(gold, pred, len(self.labels)).tolist()
        return results


# --- reading and tokenizing (shared by training, evaluate and predict) ------------------------------

def read_and_tokenize(config: Config, tokenizer: Tokenizer, path: str, require_labels: bool = True
                      ) -> tuple[list[Record], list[tuple[list[str], list[str] | None]]]:
    """A data file's records and their tokens, less the examples that hold nothing to classify.

    Lines with a label but no text (the reader leaves them out) and texts with no tokens are skipped
    and reported in ONE warning per file, naming the first few lines; a file left with no example is
    an error. Input to `predict` does not come through here: a line it cannot read is an error there,
    since every input line is owed an output line.
    """
    records = read_split(config, path, require_labels=require_labels)
    tokens = tokenize_records(config, tokenizer, path, records)
    empty = [i for i, (text, pair) in enumerate(tokens) if not text or pair == []]  # pair: None if single
    if not records.no_text and not empty:
        return list(records), tokens
    reasons = []
    if records.no_text:
        reasons.append(f"{len(records.no_text)} with a label but no text ({line_list(records.no_text)})")
    if empty:
        lines = [records[i].line for i in empty]
        reasons.append(f"{len(lines)} whose text has no tokens ({line_list(lines)})")
    if len(empty) == len(records):
        raise TextnnError(f"{path}: no example has any text to classify: {', '.join(reasons)}; check "
                          f"data.format and data.text_column")
    print(f"warning: {path}: skipped {len(records.no_text) + len(empty)} of "
          f"{len(records) + len(records.no_text):,} examples: {', '.join(reasons)}; fix or remove those lines "
          f"to use them", file=sys.stderr)
    dropped = set(empty)
    kept = [i for i in range(len(records)) if i not in dropped]
    return [records[i] for i in kept], [tokens[i] for i in kept]


def read_split(config: Config, path: str, require_labels: bool = True, fmt: str = "") -> Records:
    data = config.data
    return read_classification(path, fmt or data.format, text_column=data.text_column,
                               text_pair_column=data.text_pair_column, label_column=data.label_column,
                               header=data.header, quoting=data.quoting, delimiter=data.delimiter,
                               encoding=data.encoding, require_labels=require_labels)


def tokenize_records(config: Config, tokenizer: Tokenizer, path: str,
                     records: list[Record]) -> list[tuple[list[str], list[str] | None]]:
    """Tokens of each record's text (and pair text), cached by file content + settings."""
    def compute() -> list:
        return [[tokenizer(r.text), tokenizer(r.text_pair) if r.text_pair is not None else None] for r in records]

    data = config.data
    settings = {"kind": "classification", "tokenizer": tokenizer.to_dict(), "format": data.format,
                "columns": [data.text_column, data.text_pair_column, data.label_column], "header": data.header,
                "quoting": data.quoting, "delimiter": data.delimiter, "n": len(records)}
    return [tuple(item) for item in cached(path, settings, compute, enabled=data.cache)]

