"""The classification task: building its text pipeline, splits and model, the loss, the metrics and
predictions (reading is in data.py, the rows a run reads in building.py, encoding in encoding.py, predict's
inputs and outputs in io.py, the model in model.py, its part of the report in report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config
from textnn.data.readers import Record
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.metrics import CLASSIFICATION_METRICS, REGRESSION_METRICS, bootstrap_ci, confusion_matrix
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, NoOptions, build_encoder, unbuilt_inputs
from textnn.tasks.checks import require_train
from textnn.tasks.classification.building import label_set, note_untrained_pooler, read_rows
from textnn.tasks.classification.data import ClassificationBatch, ClassificationData, EncodedTexts, read_split
from textnn.tasks.classification.encoding import ClassificationEncoding
from textnn.tasks.classification.io import (ClassificationExample, ClassificationIO, ClassificationPrediction,
                                            RegressionPrediction)
from textnn.tasks.classification.model import ClassificationHeadConfig, Classifier, check_head, classifier_head, scores
from textnn.tasks.classification.report import ClassificationReport
from textnn.tasks.features import FeatureSource, frozen_layers, read_source, save_source, source_from_run


VALIDATION_LINES = "validation_lines.json"  # data.validation_split: the data.train lines held out (JSON list)


class ClassificationTask(ClassificationIO, ClassificationEncoding, ClassificationReport, BatchTask):
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
        return unbuilt_inputs(encoder_cls, ("segments",), "classification")

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        pipeline.check_vectors(config)
        pipeline.check_extend_vocab(config)
        encoder_cls = registry.encoder_class(config.model_name)
        if config.data.features_from and not encoder_cls.takes_context:
            raise TextnnError(f"config key data.features_from: model {config.model_name} takes no extra features; "
                              f"use a classifier that does (rnn, cnn) or remove data.features_from")
        check_head(config)
        if config.data.regression and config.data.text_pair_column and "segments" not in encoder_cls.reads:
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

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "ClassificationTask":
        """Read train/dev/test, build tokenizer, vocab and label set, encode every split."""
        data = config.data
        require_train(config, "the training file")
        if data.kfold and data.dev:
            raise TextnnError("data.kfold and data.dev are both set; k-fold makes its own dev split, "
                              "so leave data.dev empty")
        tokenizer, start_vocab = pipeline.tokenizer(
            config, lambda: (text for r in read_split(config, data.train) for text in (r.text, r.text_pair) if text),
            {"format": data.format, "columns": [data.text_column, data.text_pair_column]})
        rows = read_rows(config, tokenizer)
        note_untrained_pooler(config)
        # A packing encoder frames its inputs with [CLS] and [SEP] (and pre-trains with [MASK]).
        packs = "segments" in registry.encoder_class(config.model_name).reads
        vocab = pipeline.vocabulary(config, tokenizer, start_vocab,
                                    lambda: (toks for pair in rows.train[1] for toks in pair if toks is not None),
                                    packs=packs, extend=data.extend_vocab)
        task = cls(config, tokenizer, vocab, label_set(config, rows))
        task.table_header = rows.table_header
        task.validation_rows, task.validation_lines = rows.held_rows, rows.held_lines
        if data.extend_vocab:
            task.start_vocab_size = len(start_vocab)
        if data.features_from:
            task.features = read_source(data.features_from)
            if not task.features.word_level:
                raise TextnnError(f"data.features_from={data.features_from}: classification takes features from a "
                                  f"word-level encoder (an elmo run); {task.features.model_name} reads sub-word "
                                  f"pieces: fine-tune it instead (model.init_from)")
        task.splits["train"] = task.encode(*rows.train)
        if rows.dev[0]:
            task.splits["dev"] = task.encode(*rows.dev)
        if rows.validation:
            task.splits["validation"] = task.encode(*rows.validation)
        task.encode_files(("test",))
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
        task.load_table_header(run_path)
        if config.data.features_from:
            task.features = source_from_run(run_path)
        return task

    def save(self, run_path: Path) -> None:
        pipeline.save(run_path, self.tokenizer, self.vocab)
        (run_path / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False), encoding="utf-8")
        self.save_table_header(run_path)
        if self.features is not None:
            save_source(self.features, run_path)
        if self.validation_rows is not None:
            (run_path / VALIDATION_LINES).write_text(json.dumps(self.validation_lines), encoding="utf-8")

    def build_model(self) -> Classifier:
        frozen = frozen_layers(self.features, self.config.data)
        encoder = build_encoder(self.config, self.vocab, pretrained=self.pretrained,
                                context_dim=frozen.size if frozen else 0)
        head_cfg = self.config.head
        head = classifier_head(encoder, len(self.labels), head_cfg, pair=self.is_pair and not self.packs,
                               regression=self.config.data.regression)
        return Classifier(encoder, head, head_cfg.pooling, frozen, head_cfg.bptt,
                          own_sentence=head_cfg.sentence == "encoder")

    # --- loss, evaluation, prediction -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: ClassificationBatch) -> torch.Tensor:
        out = scores(model, batch)
        if self.config.data.regression:
            return F.mse_loss(out.logits.float(), batch.labels, reduction="sum")
        return F.cross_entropy(out.logits.float(), batch.labels, reduction="sum")

    @torch.no_grad()
    def _in_order(self, model: torch.nn.Module, split: EncodedTexts, out: np.ndarray, convert) -> np.ndarray:
        """`out` filled with `convert` of the model's scores of each example, in the split's original order."""
        for batch in self.batches_on_device(model, split):
            out[batch.index] = convert(scores(model, batch).logits.float()).cpu().numpy()
        return out

    def regression_values(self, model: torch.nn.Module, split: EncodedTexts) -> np.ndarray:
        """Predicted values [N] in the split's original order (regression)."""
        return self._in_order(model, split, np.zeros(len(split.ids), dtype=np.float64), lambda values: values)

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
        self._interval(results, REGRESSION_METRICS, gold, predicted, bootstrap_samples)
        return results

    def probabilities(self, model: torch.nn.Module, split: EncodedTexts) -> np.ndarray:
        """Class probabilities [N, C] in the split's original order."""
        return self._in_order(model, split, np.zeros((len(split.ids), len(self.labels)), dtype=np.float32),
                              lambda logits: torch.softmax(logits, dim=-1))

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
        self._interval(results, CLASSIFICATION_METRICS, gold, pred, bootstrap_samples)
        results["confusion_matrix"] = confusion_matrix(gold, pred, len(self.labels)).tolist()
        return results

    def _interval(self, results: dict, metrics: dict, gold: np.ndarray, predicted: np.ndarray,
                  bootstrap_samples: int) -> None:
        """Add a 95% bootstrap interval of the selected metric to `results`, when asked and it is one of `metrics`."""
        metric = self.selected_metric
        if bootstrap_samples and metric in metrics:
            low, high = bootstrap_ci(metrics[metric], gold, predicted, n_samples=bootstrap_samples,
                                     seed=self.config.train.seed)
            results[f"{metric}_ci_low"], results[f"{metric}_ci_high"] = float(low), float(high)

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
