"""The classification task: building its text pipeline, splits and model, the loss, the metrics,
predictions and its part of the report (reading is in data.py, predict's inputs and outputs in io.py,
the model in model.py)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config
from textnn.data.packing import pack
from textnn.data.readers import Record, stratified_kfold_splits
from textnn.data.subset import subset_indices, validation_indices
from textnn.data.tokenizers import CLS, SEP, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError, where
from textnn.metrics import CLASSIFICATION_METRICS, REGRESSION_METRICS, bootstrap_ci, confusion_matrix
from textnn.models.base import Encoder, InputSpec
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, NoOptions
from textnn.tasks.classification.data import (ClassificationBatch, ClassificationData, EncodedTexts, label_order,
                                              read_and_tokenize, read_split, real_label)
from textnn.tasks.classification.io import (ClassificationExample, ClassificationIO, ClassificationPrediction,
                                            RegressionPrediction)
from textnn.tasks.classification.model import ClassificationHeadConfig, Classifier, classifier_head, scores
from textnn.tasks.features import FeatureSource, frozen_layers, read_source, save_source, source_from_run


TABLE_HEADER = "table_header.json"  # a run's file holding its training table's header line (JSON string)
VALIDATION_LINES = "validation_lines.json"  # data.validation_split: the data.train lines held out (JSON list)


def validation_rows(share: float, seed: int, held: list[Record], train_rows: int) -> tuple[dict, list]:
    """data.validation_split's draw: what run.json records of it (the share, the seed, how many rows each side
    got, and a hash of the held-out rows' lines that a resumed run must draw again), and those lines in
    data.train (`path:line` where the training data is several files, as class_files reads)."""
    several = len({r.path for r in held}) > 1
    lines = [f"{r.path}:{r.line}" if several else r.line for r in held]
    digest = hashlib.sha256(json.dumps(lines).encode()).hexdigest()[:16]
    return {"share": share, "seed": seed, "rows": len(held), "train_rows": train_rows, "lines_sha256": digest}, lines


def _reads_an_untrained_pooler(config: Config) -> bool:
    """Whether this classifier reads the encoder's sentence vector (BERT's pooler over [CLS]) from a textnn
    pre-training run that had no next-sentence prediction: masked-LM alone gives [CLS] and the pooler no
    training signal (RoBERTa-style pre-training, Liu et al. 2019)."""
    if config.start is None or not config.start.is_run or config.head.sentence != "encoder" \
            or not registry.encoder_class(config.model_name).gives_sentence:
        return False
    start = config.start.config
    return start.get("task") == "pretraining" and (start.get("data") or {}).get("nsp") is False


class ClassificationTask(ClassificationIO, BatchTask):
    Example = ClassificationExample
    Prediction = ClassificationPrediction  # a regression run's: RegressionPrediction (set in __init__)
    data_config = ClassificationData
    head_config = ClassificationHeadConfig
    metric_directions = {"loss": False, **{name: True for name in CLASSIFICATION_METRICS},
                         **{name: True for name in REGRESSION_METRICS}, "mse": False}
    formats = ("tsv", "csv", "jsonl", "fasttext", "label_text", "class_files")
    reads_validation = True

    @property
    def default_metric(self) -> str:
        return "pearson" if self.config.data.regression else "accuracy"

    @classmethod
    def metrics_for(cls, config: Config) -> list[str]:
        if config.data.regression:
            return ["loss", *REGRESSION_METRICS, "mse"]
        return ["loss", *CLASSIFICATION_METRICS]

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if not (encoder_cls.gives_sentence or encoder_cls.gives_tokens):
            return "it gives neither a sentence vector nor per-token states"
        missing = [name for name in encoder_cls.reads if name != "segments"]
        if missing:
            return f"it reads {' and '.join(missing)} features, which classification does not build"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        pipeline.check_vectors(config)
        pipeline.check_extend_vocab(config)
        encoder_cls = registry.encoder_class(config.model_name)
        if config.data.features_from and not encoder_cls.takes_context:
            raise TextnnError(f"config key data.features_from: model {config.model_name} takes no extra features; "
                              f"use a classifier that does (rnn, cnn) or remove data.features_from")
        if config.head.bptt and (not encoder_cls.carries_state() or config.data.features_from):
            carriers = [name for name in registry.ENCODERS if issubclass(registry.encoder_class(name), Encoder)
                        and registry.encoder_class(name).carries_state()]
            raise TextnnError(f"config key head.bptt: reading inputs in windows carries a recurrent state from one to "
                              f"the next, which model {config.model_name} does not"
                              f"{' with data.features_from' if encoder_cls.carries_state() else ''}; use one of "
                              f"{', '.join(carriers)} or set head.bptt=0")
        if config.head.sentence == "pooled" and not encoder_cls.gives_tokens:
            raise TextnnError(f"config key head.sentence: pooled pools per-token states, which model "
                              f"{config.model_name} does not give; set head.sentence=encoder")
        reads = encoder_cls.reads
        if config.data.regression and config.data.text_pair_column and "segments" not in reads:
            raise TextnnError(f"config key data.regression: sentence-pair regression packs the pair into one "
                              f"sequence, which model {config.model_name} does not read; use a bert encoder")

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab, labels: list[str]):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.labels = labels
        if config.data.regression:
            self.Prediction = RegressionPrediction
        self.label_ids = {label: i for i, label in enumerate(labels)}
        self.splits: dict[str, EncodedTexts] = {}
        self.pretrained: torch.Tensor | None = None
        self.vector_coverage: dict = {}
        self.features: FeatureSource | None = None  # data.features_from
        # the header line of the training table (tsv/csv with data.header): a predict input whose first line
        # is this whole line is that table (`table`); None for other formats and runs trained before it
        self.table_header: str | None = None
        self.validation_lines: list = []  # data.validation_split: the lines of data.train held out (VALIDATION_LINES)

    @property
    def is_pair(self) -> bool:
        return bool(self.config.data.text_pair_column)

    @property
    def packs(self) -> bool:
        """Inputs are packed into one [CLS] a [SEP] (b [SEP]) sequence with segment ids (BERT)."""
        return "segments" in registry.encoder_class(self.config.model_name).reads

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
        tokenizer, start_vocab = pipeline.tokenizer(
            config, lambda: (text for r in read_split(config, data.train) for text in (r.text, r.text_pair) if text),
            {"format": data.format, "columns": [data.text_column, data.text_pair_column]})
        train_records, train_tokens = read_and_tokenize(config, tokenizer, data.train)
        table_header = train_records.header
        dev_records, dev_tokens = [], []
        if data.kfold:
            folds = stratified_kfold_splits([r.label for r in train_records], data.kfold, seed=config.train.seed)
            train_idx, dev_idx = folds[data.fold]
            dev_records, dev_tokens = [train_records[i] for i in dev_idx], [train_tokens[i] for i in dev_idx]
            train_records, train_tokens = [train_records[i] for i in train_idx], [train_tokens[i] for i in train_idx]
        elif data.dev:
            dev_records, dev_tokens = read_and_tokenize(config, tokenizer, data.dev)
        labelled = train_records  # the rows whose labels are the task's: data.validation_split's are too
        validation, held_rows, held_lines = None, None, []
        if data.validation:
            validation = read_and_tokenize(config, tokenizer, data.validation)
        elif data.validation_split:
            # held out before the vocabulary is built, so that nothing of the validation rows but their
            # labels shapes the model (a trained WordPiece still learns its pieces from all of data.train)
            held = validation_indices(len(train_records), data.validation_split, config.train.seed, data.train)
            kept = sorted(set(range(len(train_records))) - set(held))
            validation = ([train_records[i] for i in held], [train_tokens[i] for i in held])
            held_rows, held_lines = validation_rows(data.validation_split, config.train.seed, validation[0], len(kept))
            train_records, train_tokens = [train_records[i] for i in kept], [train_tokens[i] for i in kept]
            print(f"data.validation_split: selecting on {len(held):,} rows of {data.train} held out with seed "
                  f"{config.train.seed}, training on the other {len(kept):,}", file=sys.stderr)
        if data.train_subset:
            kept = subset_indices(len(train_records), data.train_subset, config.train.seed, data.train)
            train_records, train_tokens = [train_records[i] for i in kept], [train_tokens[i] for i in kept]
            print(f"data.train_subset: training on {len(kept):,} examples of {data.train} (seed {config.train.seed})",
                  file=sys.stderr)
        if _reads_an_untrained_pooler(config):
            print(f"note: model.init_from={config.init_from} was pre-trained without next-sentence prediction "
                  f"(data.nsp false), which never trains [CLS] nor the pooler over it that head.sentence=encoder "
                  f"classifies from; head.sentence=pooled head.pooling=mean reads the token states it did train",
                  file=sys.stderr)
        # A packing encoder frames its inputs with [CLS] and [SEP] (and pre-trains with [MASK]).
        packs = "segments" in registry.encoder_class(config.model_name).reads
        vocab = pipeline.vocabulary(config, tokenizer, start_vocab,
                                    lambda: (toks for pair in train_tokens for toks in pair if toks is not None),
                                    packs=packs, extend=data.extend_vocab)
        labels = [] if data.regression else label_order({r.label for r in labelled})
        if len(labels) > 50 and len(labels) > len(train_records) / 2:  # a class per example or so: text, not labels
            print(f"warning: {data.train}: {len(labels):,} distinct labels in {len(train_records):,} training rows of "
                  f"label column {data.label_column!r}: they look like text; check data.text_column and "
                  f"data.label_column", file=sys.stderr)
        task = cls(config, tokenizer, vocab, labels)
        task.table_header = table_header
        task.validation_rows, task.validation_lines = held_rows, held_lines
        if data.extend_vocab:
            task.start_vocab_size = len(start_vocab)
        if data.features_from:
            task.features = read_source(data.features_from)
            if not task.features.word_level:
                raise TextnnError(f"data.features_from={data.features_from}: classification takes features from a "
                                  f"word-level encoder (an elmo run); {task.features.model_name} reads sub-word "
                                  f"pieces: fine-tune it instead (model.init_from)")
        task.splits["train"] = task.encode(train_records, train_tokens)
        if dev_records:
            task.splits["dev"] = task.encode(dev_records, dev_tokens)
        if validation:
            task.splits["validation"] = task.encode(*validation)
        if data.test:
            task.splits["test"] = task.encode(*read_and_tokenize(config, tokenizer, data.test))
        if data.vectors:
            task.pretrained, task.vector_coverage = pipeline.pretrained_vectors(config, vocab)
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "ClassificationTask":
        tokenizer, vocab = cls.load_text_pipeline(run_path, config.data)
        labels = cls.read_json(run_path / "labels.json")
        if not isinstance(labels, list) or not (labels or config.data.regression) or \
                not all(isinstance(label, str) for label in labels):
            raise TextnnError(f"{run_path / 'labels.json'}: expected a JSON list of label names; the file is damaged: "
                              f"re-train the run")
        task = cls(config, tokenizer, vocab, labels)
        if (run_path / TABLE_HEADER).is_file():
            task.table_header = cls.read_json(run_path / TABLE_HEADER)
            if not isinstance(task.table_header, str):
                raise TextnnError(f"{run_path / TABLE_HEADER}: expected a JSON string, the training table's header "
                                  f"line; the file is damaged: delete it (predict then reads no header) or re-train")
        if config.data.features_from:
            task.features = source_from_run(run_path)
        return task

    def save(self, run_path: Path) -> None:
        pipeline.save(run_path, self.tokenizer, self.vocab)
        (run_path / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False), encoding="utf-8")
        if self.table_header is not None:
            (run_path / TABLE_HEADER).write_text(json.dumps(self.table_header, ensure_ascii=False), encoding="utf-8")
        if self.features is not None:
            save_source(self.features, run_path)
        if self.validation_rows is not None:
            (run_path / VALIDATION_LINES).write_text(json.dumps(self.validation_lines), encoding="utf-8")

    def build_model(self) -> Classifier:
        frozen = frozen_layers(self.features, self.config.data)
        encoder = registry.encoder_class(self.config.model_name)(
            self.config.model, InputSpec(vocab_size=len(self.vocab), pad_id=self.vocab.pad_id,
                                         pretrained=self.pretrained, context_dim=frozen.size if frozen else 0))
        head_cfg = self.config.head
        head = classifier_head(encoder, len(self.labels), head_cfg, pair=self.is_pair and not self.packs,
                               regression=self.config.data.regression)
        return Classifier(encoder, head, head_cfg.pooling, frozen, head_cfg.bptt,
                          own_sentence=head_cfg.sentence == "encoder")

    def _max_length(self) -> int | None:
        """Tokens kept per input: data.max_length, and never more than the encoder reads (a GPT's context)."""
        limits = [n for n in (self.config.data.max_length,
                              registry.encoder_class(self.config.model_name).max_length(self.config.model)) if n]
        return min(limits) if limits else None

    # --- encoding ---------------------------------------------------------------------------------
    def encode(self, records: list[Record], tokens: list[tuple[list[str], list[str] | None]],
               require_known_labels: bool = True) -> EncodedTexts:
        max_len = self._max_length()
        segments = None
        if self.packs:  # one sequence per example, [CLS] a [SEP] (b [SEP]) cut longest-first to max_len in all
            cls_id, sep_id = self.vocab.stoi[CLS], self.vocab.stoi[SEP]
            packed = [pack(self.vocab.encode(a), self.vocab.encode(b) if self.is_pair else None, cls_id, sep_id,
                           max_len or 0) for a, b in tokens]
            ids, pair_ids, segments = [p.ids for p in packed], None, [p.segments for p in packed]
        else:
            ids = [self.vocab.encode(a[:max_len]) for a, _ in tokens]
            pair_ids = [self.vocab.encode(b[:max_len]) for _, b in tokens] if self.is_pair else None
        labels: list = []
        for record in records:
            if self.config.data.regression:
                labels.append(real_label(record) if record.label is not None else float("nan"))
            elif record.label is None:
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
        encoded = EncodedTexts(records, ids, pair_ids, labels, segments, pad_id=self.vocab.pad_id,
                               regression=self.config.data.regression)
        if self.features is not None:  # the words as the run's tokenizer cut them (and cut to max_len)
            encoded.word_inputs = [self.features.encode_words(a[:max_len]) for a, _ in tokens]
            if self.is_pair:
                encoded.pair_word_inputs = [self.features.encode_words(b[:max_len]) for _, b in tokens]
        return encoded

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedTexts:
        records, tokens = read_and_tokenize(self.config, self.tokenizer, path, require_labels=require_labels)
        return self.encode(records, tokens, require_known_labels=require_labels)

    # --- loss, evaluation, prediction -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: ClassificationBatch) -> torch.Tensor:
        out = scores(model, batch)
        if self.config.data.regression:
            return F.mse_loss(out.logits.float(), batch.labels, reduction="sum")
        return F.cross_entropy(out.logits.float(), batch.labels, reduction="sum")

    @torch.no_grad()
    def regression_values(self, model: torch.nn.Module, split: EncodedTexts) -> np.ndarray:
        """Predicted values [N] in the split's original order (regression)."""
        model.eval()
        device = next(model.parameters()).device
        values = np.zeros(len(split.ids), dtype=np.float64)
        for batch in self.eval_batches(split):
            batch = batch.to(device)
            out = scores(model, batch).logits.float()
            values[batch.index] = out.cpu().numpy()
        return values

    def evaluate_regression(self, model: torch.nn.Module, data: EncodedTexts, bootstrap_samples: int) -> dict:
        """Mean squared error (loss and mse), Pearson and Spearman, and (optionally) a 95% CI of the metric."""
        predicted = self.regression_values(model, data)
        gold = np.asarray(data.labels, dtype=np.float64)
        if np.isnan(gold).any():
            raise TextnnError("cannot evaluate on examples without labels; use `textnn predict` instead")
        mse = float(np.mean((predicted - gold) ** 2))
        results: dict = {"loss": mse, "mse": mse, "examples": len(gold)}
        for name, fn in REGRESSION_METRICS.items():
            results[name] = float(fn(predicted, gold))
        metric = self.config.train.metric or self.default_metric
        if bootstrap_samples and metric in REGRESSION_METRICS:
            low, high = bootstrap_ci(REGRESSION_METRICS[metric], gold, predicted, n_samples=bootstrap_samples,
                                     seed=self.config.train.seed)
            results[f"{metric}_ci_low"], results[f"{metric}_ci_high"] = float(low), float(high)
        return results

    @torch.no_grad()
    def probabilities(self, model: torch.nn.Module, split: EncodedTexts) -> np.ndarray:
        """Class probabilities [N, C] in the split's original order."""
        model.eval()
        device = next(model.parameters()).device
        probs = np.zeros((len(split.ids), len(self.labels)), dtype=np.float32)
        for batch in self.eval_batches(split):
            batch = batch.to(device)
            logits = scores(model, batch).logits.float()
            probs[batch.index] = torch.softmax(logits, dim=-1).cpu().numpy()
        return probs

    def evaluate(self, model: torch.nn.Module, split: str | EncodedTexts, bootstrap_samples: int = 0) -> dict:
        """Loss, every classification metric, a confusion matrix and (optionally) a 95% CI."""
        data = self.splits[split] if isinstance(split, str) else split
        if self.config.data.regression:
            return self.evaluate_regression(model, data, bootstrap_samples)
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

    # --- commands ---------------------------------------------------------------------------------
    def predict(self, model: torch.nn.Module, examples: list[ClassificationExample], options: NoOptions) -> list:
        """A label and its probabilities (a regression run: a value) for each example."""
        records = [Record(e.text, None, e.text_pair, e.place or "<input>", None) for e in examples]
        tokens = [(self.tokenizer(r.text), self.tokenizer(r.text_pair) if r.text_pair is not None else None)
                  for r in records]
        encoded = self.encode(records, tokens, require_known_labels=False)
        if self.config.data.regression:
            return [RegressionPrediction(text=e.text, text_pair=e.text_pair, value=float(value))
                    for e, value in zip(examples, self.regression_values(model, encoded))]
        return [ClassificationPrediction(text=e.text, text_pair=e.text_pair, label=self.labels[int(row.argmax())],
                                         probabilities={label: float(p) for label, p in zip(self.labels, row)})
                for e, row in zip(examples, self.probabilities(model, encoded))]

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        """The confusion matrix of the split, as a plot."""
        from textnn.viz.plots import plot_confusion_matrix

        if "confusion_matrix" not in metrics:
            return []
        plot_confusion_matrix(np.asarray(metrics["confusion_matrix"]), self.labels,
                              run_path / f"confusion_{split}.png", title=f"{run_path.name} ({split})")
        return [f"![confusion matrix](confusion_{split}.png)", ""]

    def format_metrics(self, metrics: dict) -> list[str]:
        lines = super().format_metrics({k: v for k, v in metrics.items() if k != "confusion_matrix"})
        if "confusion_matrix" in metrics:
            lines.append("confusion matrix (rows = gold, columns = predicted):")
            lines += _confusion_lines(metrics["confusion_matrix"], self.labels)
        return lines


def _confusion_lines(matrix: list[list[int]], labels: list[str]) -> list[str]:
    """A confusion matrix as text, each row and column headed by its class label (cut to 12 characters,
    so that a long label does not push the counts apart)."""
    names = [str(label)[:12] for label in labels]
    width = max(6, *(len(name) for name in names), *(len(str(n)) for row in matrix for n in row))
    side = max(len(name) for name in names)
    header = "  " + " " * side + " " + " ".join(name.rjust(width) for name in names)
    return [header] + ["  " + name.ljust(side) + " " + " ".join(f"{n:{width}d}" for n in row)
                       for name, row in zip(names, matrix)]
