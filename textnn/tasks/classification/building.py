"""What a classification run reads before its task exists (`ClassificationTask.from_data`): the training,
dev and validation rows (a k-fold split, data.validation_split, data.train_subset), the label set, and a
note on a start whose sentence vector was never trained."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field

from textnn import registry
from textnn.config import Config
from textnn.data.readers import Record, stratified_kfold_splits
from textnn.data.subset import subset_indices, validation_indices
from textnn.data.tokenizers import Tokenizer
from textnn.tasks.classification.data import label_order, read_and_tokenize

Tokens = list[tuple[list[str], list[str] | None]]  # each example's text tokens and pair tokens (None: single)


@dataclass
class Rows:
    """The rows of a run's splits, each as `read_and_tokenize` gives them: (records, tokens)."""

    train: tuple[list[Record], Tokens]
    dev: tuple[list[Record], Tokens]  # empty lists without data.dev or data.kfold
    validation: tuple[list[Record], Tokens] | None  # data.validation, or the rows data.validation_split holds out
    labelled: list[Record]  # the rows whose labels are the task's: data.validation_split's are too
    table_header: str | None  # the training table's header line (tsv/csv with data.header)
    held_rows: dict | None = None  # data.validation_split: what run.json records of the draw (`validation_rows`)
    held_lines: list = field(default_factory=list)  # and the lines of data.train held out


def validation_rows(share: float, seed: int, held: list[Record], train_rows: int) -> tuple[dict, list]:
    """data.validation_split's draw: what run.json records of it (the share, the seed, how many rows each side
    got, and a hash of the held-out rows' lines that a resumed run must draw again), and those lines in
    data.train (`path:line` where the training data is several files, as class_files reads)."""
    several = len({r.path for r in held}) > 1
    lines = [f"{r.path}:{r.line}" if several else r.line for r in held]
    digest = hashlib.sha256(json.dumps(lines).encode()).hexdigest()[:16]
    return {"share": share, "seed": seed, "rows": len(held), "train_rows": train_rows, "lines_sha256": digest}, lines


def _kept(rows: tuple[list, list], indices: list[int]) -> tuple[list, list]:
    """The (records, tokens) at `indices`."""
    return [rows[0][i] for i in indices], [rows[1][i] for i in indices]


def read_rows(config: Config, tokenizer: Tokenizer) -> Rows:
    """The training rows and the dev and validation rows as the data options say: dev from data.dev or the
    held-out fold of data.kfold; validation from data.validation or held out of data.train
    (data.validation_split); then data.train_subset of what is left to train on."""
    data, seed = config.data, config.train.seed
    train = read_and_tokenize(config, tokenizer, data.train)
    table_header = train[0].header
    dev: tuple[list, list] = ([], [])
    if data.kfold:
        folds = stratified_kfold_splits([r.label for r in train[0]], data.kfold, seed=seed)
        train_idx, dev_idx = folds[data.fold]
        dev, train = _kept(train, dev_idx), _kept(train, train_idx)
    elif data.dev:
        dev = read_and_tokenize(config, tokenizer, data.dev)
    rows = Rows(train, dev, None, train[0], table_header)
    if data.validation:
        rows.validation = read_and_tokenize(config, tokenizer, data.validation)
    elif data.validation_split:
        # held out before the vocabulary is built, so that nothing of the validation rows but their
        # labels shapes the model (a trained WordPiece still learns its pieces from all of data.train)
        held = validation_indices(len(train[0]), data.validation_split, seed, data.train)
        kept = sorted(set(range(len(train[0]))) - set(held))
        rows.validation = _kept(train, held)
        rows.held_rows, rows.held_lines = validation_rows(data.validation_split, seed, rows.validation[0], len(kept))
        rows.train = _kept(train, kept)
        print(f"data.validation_split: selecting on {len(held):,} rows of {data.train} held out with seed "
              f"{seed}, training on the other {len(kept):,}", file=sys.stderr)
    if data.train_subset:
        kept = subset_indices(len(rows.train[0]), data.train_subset, seed, data.train)
        rows.train = _kept(rows.train, kept)
        print(f"data.train_subset: training on {len(kept):,} examples of {data.train} (seed {seed})", file=sys.stderr)
    return rows


def label_set(config: Config, rows: Rows) -> list[str]:
    """The labels of the labelled rows in their order (none for regression), with a warning when there are so
    many that the label column looks like text."""
    data = config.data
    if data.regression:
        return []
    labels = label_order({r.label for r in rows.labelled})
    train_rows = len(rows.train[0])
    if len(labels) > 50 and len(labels) > train_rows / 2:  # a class per example or so: text, not labels
        print(f"warning: {data.train}: {len(labels):,} distinct labels in {train_rows:,} training rows of "
              f"label column {data.label_column!r}: they look like text; check data.text_column and "
              f"data.label_column", file=sys.stderr)
    return labels


def note_untrained_pooler(config: Config) -> None:
    """A note when this classifier reads the encoder's sentence vector (BERT's pooler over [CLS]) from a textnn
    pre-training run that had no next-sentence prediction: masked-LM alone gives [CLS] and the pooler no
    training signal (RoBERTa-style pre-training, Liu et al. 2019)."""
    if config.start is None or not config.start.is_run or config.head.sentence != "encoder" \
            or not registry.encoder_class(config.model_name).gives_sentence:
        return
    start = config.start.config
    if start.get("task") == "pretraining" and (start.get("data") or {}).get("nsp") is False:
        print(f"note: model.init_from={config.init_from} was pre-trained without next-sentence prediction "
              f"(data.nsp false), which never trains [CLS] nor the pooler over it that head.sentence=encoder "
              f"classifies from; head.sentence=pooled head.pooling=mean reads the token states it did train",
              file=sys.stderr)
