"""Text classification, single sentence or sentence pair: data -> batches, loss, metrics, predictions.

The head (`modules.heads`) goes on any encoder that gives a sentence vector, or per-token states
that `head.pooling` turns into one (a language model's, say). A sentence pair is read by the same
encoder one sentence at a time and classified from [u; v; |u - v|; u * v] (Conneau et al. 2017
§3.1, `PairClassifierHead`); a single-sentence run has no pair layer at all.

Encoders that read "segments" (BERT) read every input as ONE sequence instead: [CLS] a [SEP], or
a pair packed as [CLS] a [SEP] b [SEP] with segment ids (data/packing.py; Devlin et al. 2019 §4.1),
truncated longest-first to data.max_length, and classified from the encoder's sentence vector
(its pooler) with a plain `ClassifierHead`.

Feature-based (`data.features_from: RUN_DIR`, an ELMo run; tasks/features.py): the frozen encoder's
layers over each word, combined as `data.features_layers` says (a learned scalar mix: Peters et al.
2018 §3.2-3.3), join the word embeddings of an encoder that takes them (`Encoder.takes_context`: the
BiLSTM and CNN classifiers). ELMo reads whole words, so the run's own tokens are its input.

ULMFiT (Howard & Ruder 2018 §3.3) on a language model's encoder: `head.pooling: concat` reads
[h_T; max; mean] of its states; `head.batch_norm`, `head.hidden: 50`, `head.activation: relu` and
`head.hidden_dropout` make the two batch-normed linear blocks; `head.bptt` reads a long input in
windows with the state carried (BPT3C, `Classifier.windowed_states`). Gradual unfreezing,
discriminative and slanted triangular rates are train options (training/optim.py).

Regression (`data.regression: true`, STS-B's similarity scores): the label column holds real
numbers; a `RegressionHead` gives one value per input, trained with the squared error and scored
by Pearson's and Spearman's correlation (GLUE's STS-B metrics) and the mean squared error.
"""

# B batch, T tokens, D sentence vector size, C classes

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config, WordVectorData, check_key, is_int, opt
from textnn.data.batching import Batch, bucket_batches, pad
from textnn.data.cache import cached
from textnn.data.packing import pack
from textnn.data.readers import Record, Records, line_list, read_classification, stratified_kfold_splits
from textnn.data.subset import subset_indices
from textnn.data.tokenizers import CLS, SEP, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError, where
from textnn.metrics import CLASSIFICATION_METRICS, REGRESSION_METRICS, bootstrap_ci, confusion_matrix
from textnn.models.base import Encoder, EncoderWithHead, InputSpec, ModelOutput, TokenFeatures, detach_state
from textnn.modules.heads import ClassifierHead, PairClassifierHead, RegressionHead
from textnn.modules.pooling import concat_pool, last_valid, masked_max, masked_mean
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, blank, empty_answer, line_chunks
from textnn.tasks.features import (FeatureSource, FrozenLayers, check_feature_options, frozen_layers,
                                   pad_word_inputs, read_source, save_source, source_from_run)

POOLINGS = ("max", "mean", "last", "concat")
ACTIVATIONS = ("tanh", "relu")


@dataclass
class ClassificationData(WordVectorData):
    format: str = opt("tsv", "input format: tsv, csv, jsonl, fasttext, label_text or class_files")
    text_column: str = opt("sentence", "column (name, or 0-based index) holding the text")
    text_pair_column: str = opt("", "column holding the second sentence of a pair; empty for single sentences")
    label_column: str = opt("label", "column (name or 0-based index) holding the label")
    header: bool = opt(True, "tsv/csv: the first line names the columns")
    quoting: bool = opt(False, "tsv/csv: honour \" quoting (GLUE files need it off)")
    delimiter: str = opt("", "tsv/csv field separator; empty means tab for tsv, comma for csv")
    max_length: int = opt(0, "truncate inputs to this many tokens; 0 = no limit (or the encoder's own limit)")
    kfold: int = opt(0, "k-fold cross-validation when there is no dev file: split train into k folds")
    fold: int = opt(0, "which fold (0-based) is held out as dev when kfold > 0")
    train_subset: int = opt(0, "train on this many training examples drawn at random with train.seed (after a k-fold split: from the training folds), for learning curves over the number of labels; 0 = all")
    wordpiece_vocab_size: int = opt(8000, "tokenizer wordpiece: size of the vocabulary trained on data.train")
    extend_vocab: int = opt(0, "with model.init_from (word tokenizers): add the words of data.train seen at least this often that the starting vocabulary lacks, their rows starting at the mean of the starting rows (ULMFiT's fastai code); 0 = keep the starting vocabulary")
    regression: bool = opt(False, "labels are real numbers (STS-B): one output trained with the squared error, scored by Pearson/Spearman")
    features_from: str = opt("", "an ELMo run whose frozen layers join the word embeddings of a classifier that takes them (rnn, cnn)")
    features_layers: str = opt("last", "data.features_from: last, sum4 (sum of the last four layers), cat4 (their concatenation) or mix (a learned scalar mix of all, Peters et al. 2018)")
    features_dropout: float = opt(0.0, "data.features_from: dropout on the combined features (Peters et al. 2018 §3.3), in [0, 1)")
    features_layer_norm: bool = opt(False, "data.features_layers=mix: layer-normalise each layer before the mix (Peters et al. 2018 §3.2)")

    TOKENIZATION = (*WordVectorData.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(is_int(self.wordpiece_vocab_size) and self.wordpiece_vocab_size >= 8, "data.wordpiece_vocab_size",
                  self.wordpiece_vocab_size, "an integer >= 8")
        check_key(self.tokenizer != "bpe", "data.tokenizer", self.tokenizer, "word, whitespace, char or "
                  "wordpiece (bpe is for language modelling)")
        check_key(self.max_length >= 0, "data.max_length", self.max_length, "an integer >= 0")
        check_key(self.extend_vocab >= 0, "data.extend_vocab", self.extend_vocab, "an integer >= 0 (0 = off)")
        check_key(self.kfold == 0 or self.kfold >= 2, "data.kfold", self.kfold, "0 (off) or >= 2")
        check_key(self.kfold == 0 or 0 <= self.fold < self.kfold, "data.fold", self.fold, f"0 .. {self.kfold - 1}")
        check_feature_options(self)


@dataclass
class ClassificationHeadConfig:
    dropout: float = opt(0.0, "dropout on the sentence vector (and on the hidden layer, unless head.hidden_dropout says otherwise), in [0, 1)")
    hidden: int = opt(0, "size of a hidden layer before the output layer (InferSent's MLP: tanh; ULMFiT: 50, relu); 0 = linear output")
    hidden_dropout: float = opt(-1.0, "head.hidden > 0: dropout on the hidden layer before the output layer, in [0, 1); -1 = head.dropout")
    activation: str = opt("tanh", "head.hidden > 0: the hidden layer's activation, tanh or relu")
    batch_norm: bool = opt(False, "batch-normalise the sentence vector (and the hidden layer) before each dropout: with head.hidden and relu, ULMFiT's two linear blocks (Howard & Ruder 2018 section 3.3)")
    max_norm: float = opt(0.0, "after each step, rescale every output weight row whose L2 norm exceeds this "
                               "back to it (Kim 2014 §2.1: 3); 0 = off")
    pooling: str = opt("max", "encoders that give per-token states only (language models): how they become the "
                              "sentence vector: max, mean, last (the state after the last token) or concat "
                              "([last; max; mean], ULMFiT's concat pooling, Howard & Ruder 2018 section 3.3)")
    sentence: str = opt("encoder", "encoders that give a sentence vector as well as token states (bert: its pooler over [CLS]): encoder = classify that vector; pooled = pool the token states by head.pooling instead (mean is how sentence-transformers checkpoints such as all-MiniLM-L6-v2 were trained)")
    bptt: int = opt(0, "encoders that carry a state (recurrent language models): read each input in windows of this many tokens, the state carried (detached) from one window to the next, and pool over all of them (ULMFiT's BPT3C, section 3.3); 0 = the whole input at once")

    def __post_init__(self) -> None:
        for key in ("dropout", "hidden_dropout"):
            value = getattr(self, key)
            allowed = isinstance(value, (int, float)) and (0.0 <= value < 1.0 or (key == "hidden_dropout" and value == -1))
            check_key(allowed, f"head.{key}", value,
                      "a probability in [0, 1)" + (" or -1 (= head.dropout)" if key == "hidden_dropout" else ""))
        check_key(is_int(self.hidden) and self.hidden >= 0, "head.hidden", self.hidden, "an integer >= 0")
        check_key(self.activation in ACTIVATIONS, "head.activation", self.activation, " or ".join(ACTIVATIONS))
        check_key(self.max_norm >= 0, "head.max_norm", self.max_norm, "a number >= 0 (0 = off)")
        check_key(self.pooling in POOLINGS, "head.pooling", self.pooling, ", ".join(POOLINGS))
        check_key(self.sentence in ("encoder", "pooled"), "head.sentence", self.sentence, "encoder or pooled")
        check_key(is_int(self.bptt) and self.bptt >= 0, "head.bptt", self.bptt, "an integer >= 0 (0 = off)")

    @property
    def hidden_dropout_or_none(self) -> float | None:
        """The hidden layer's dropout as the heads take it: None = the same as head.dropout."""
        return None if self.hidden_dropout == -1 else self.hidden_dropout


def classifier_head(encoder, num_classes: int, cfg: ClassificationHeadConfig, pair: bool = False,
                    regression: bool = False):
    """The head a classification run puts on `encoder`: over its sentence vector, or over its per-token
    states pooled as head.pooling says (concat pooling gives three times the state size)."""
    own = encoder.sentence_size and cfg.sentence == "encoder"
    size = encoder.sentence_size if own else encoder.token_size * (3 if cfg.pooling == "concat" else 1)
    options = dict(hidden=cfg.hidden, dropout=cfg.dropout, hidden_dropout=cfg.hidden_dropout_or_none,
                   activation=cfg.activation, batch_norm=cfg.batch_norm)
    if regression:
        return RegressionHead(size, **options)
    return (PairClassifierHead if pair else ClassifierHead)(size, num_classes, max_norm=cfg.max_norm, **options)


class Classifier(EncoderWithHead):
    """An encoder with a classification head: ids (and a pair's second ids) -> class scores [B, C]."""

    def __init__(self, encoder, head, pooling: str, frozen: FrozenLayers | None = None, bptt: int = 0,
                 own_sentence: bool = True) -> None:
        super().__init__(encoder, head)
        self.pooling = pooling
        self.own_sentence = own_sentence  # head.sentence=encoder: the encoder's sentence vector, when it gives one
        self.frozen = frozen  # data.features_from: a frozen encoder whose layers join the input
        self.bptt = bptt  # head.bptt: read inputs in windows of this many tokens (BPT3C); 0 = at once

    def sentence(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor | None = None,
                 word_inputs: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's sentence vector (unless head.sentence=pooled), or its per-token states pooled by
        `head.pooling`: [B, D] (3D
        for concat). With a frozen feature encoder, its features of `word_inputs` [B, T, C] join the
        encoder's input."""
        if self.bptt:
            return POOLS[self.pooling](self.windowed_states(ids, mask), mask)  # [B, T, D] -> [B, D]
        features = TokenFeatures(segments=segments) if segments is not None else None
        if self.frozen is not None:
            features = TokenFeatures(context=self.frozen(word_inputs, mask))  # [B, T, E]
        out = self.encoder(ids, mask, features=features)
        if out.sentence is not None and self.own_sentence:
            return out.sentence
        return POOLS[self.pooling](out.tokens, mask)  # [B, T, D] -> [B, D]

    def windowed_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-token states [B, T, D] of inputs read in windows of `bptt` tokens, each window starting
        from the (detached) state the one before left: ULMFiT's BPT3C (Howard & Ruder 2018 §3.3), so
        a long document costs the memory of its states, not of one graph through all of it. Every
        window's states are pooled, so each gets the gradient of the prediction; none flows back
        through the carried state. In evaluation the states equal those of one pass over the input."""
        states, state = [], None
        for start in range(0, ids.size(1), self.bptt):
            window = slice(start, start + self.bptt)
            out = self.encoder(ids[:, window], mask[:, window], state)  # tokens [B, bptt, D]
            states.append(out.tokens)
            state = detach_state(out.state)
        return torch.cat(states, dim=1)  # bptt-long pieces -> [B, T, D]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None, segments: torch.Tensor | None = None,
                word_inputs: torch.Tensor | None = None, pair_word_inputs: torch.Tensor | None = None) -> ModelOutput:
        """Scores [B, C] of single inputs, of pairs read one sentence at a time (pair_ids), or of inputs
        packed into one sequence (segments [B, T]: 0 first sentence, 1 second); word_inputs [B, T, C]
        (and the pair's) feed a frozen feature encoder."""
        u = self.sentence(ids, mask, segments, word_inputs)
        if pair_ids is None:
            return ModelOutput(logits=self.head(u))
        return ModelOutput(logits=self.head(u, self.sentence(pair_ids, pair_mask, word_inputs=pair_word_inputs)))


@dataclass
class ClassificationBatch(Batch):
    ids: torch.Tensor  # [B, T] token ids
    mask: torch.Tensor  # [B, T] bool, True = real token
    labels: torch.Tensor  # [B] class ids (real values [B] for regression)
    index: list[int]  # positions of these examples in their split
    pair_ids: torch.Tensor | None = None  # [B, T2] second sentence of a pair
    pair_mask: torch.Tensor | None = None
    segments: torch.Tensor | None = None  # [B, T] segment ids of packed inputs (encoders that read them)
    word_inputs: torch.Tensor | None = None  # [B, T, C] a word-level feature encoder's input (data.features_from)
    pair_word_inputs: torch.Tensor | None = None  # [B, T2, C] the same for the pair's second sentence

    @property
    def num_tokens(self) -> int:
        n = int(self.mask.sum())
        return n + (int(self.pair_mask.sum()) if self.pair_mask is not None else 0)


@dataclass
class EncodedSplit:
    records: list[Record]
    ids: list[list[int]]
    pair_ids: list[list[int]] | None
    labels: list  # class ids, -1 where unlabelled (prediction input); regression: floats, NaN where unlabelled
    segments: list[list[int]] | None = None  # packed inputs: segment id per token of `ids`
    word_inputs: list[np.ndarray] | None = None  # data.features_from: the feature encoder's input, [T, C] each
    pair_word_inputs: list[np.ndarray] | None = None


def _real_label(record: Record) -> float:
    """A regression label as a float, or an error naming the line."""
    try:
        return float(record.label)
    except (TypeError, ValueError):
        raise TextnnError(f"{where(record.path, record.line)}: label {record.label!r} is not a number; "
                          f"data.regression reads real-valued labels (check data.label_column)") from None


def _label_order(labels: set[str]) -> list[str]:
    """Numeric labels in numeric order ("0" < "1" < "10"), others alphabetically."""
    if all(label.lstrip("-").isdigit() for label in labels):
        return sorted(labels, key=int)
    return sorted(labels)


class ClassificationTask(BatchTask):
    data_config = ClassificationData
    head_config = ClassificationHeadConfig
    metric_directions = {"loss": False, **{name: True for name in CLASSIFICATION_METRICS},
                         **{name: True for name in REGRESSION_METRICS}, "mse": False}
    formats = ("tsv", "csv", "jsonl", "fasttext", "label_text", "class_files")

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
        self.label_ids = {label: i for i, label in enumerate(labels)}
        self.splits: dict[str, EncodedSplit] = {}
        self.pretrained: torch.Tensor | None = None
        self.vector_coverage: dict = {}
        self.features: FeatureSource | None = None  # data.features_from

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
        dev_records, dev_tokens = [], []
        if data.kfold:
            folds = stratified_kfold_splits([r.label for r in train_records], data.kfold, seed=config.train.seed)
            train_idx, dev_idx = folds[data.fold]
            dev_records, dev_tokens = [train_records[i] for i in dev_idx], [train_tokens[i] for i in dev_idx]
            train_records, train_tokens = [train_records[i] for i in train_idx], [train_tokens[i] for i in train_idx]
        elif data.dev:
            dev_records, dev_tokens = read_and_tokenize(config, tokenizer, data.dev)
        if data.train_subset:
            kept = subset_indices(len(train_records), data.train_subset, config.train.seed, data.train)
            train_records, train_tokens = [train_records[i] for i in kept], [train_tokens[i] for i in kept]
            print(f"data.train_subset: training on {len(kept):,} examples of {data.train} (seed {config.train.seed})",
                  file=sys.stderr)
        # A packing encoder frames its inputs with [CLS] and [SEP] (and pre-trains with [MASK]).
        packs = "segments" in registry.encoder_class(config.model_name).reads
        vocab = pipeline.vocabulary(config, tokenizer, start_vocab,
                                    lambda: (toks for pair in train_tokens for toks in pair if toks is not None),
                                    packs=packs, extend=data.extend_vocab)
        labels = [] if data.regression else _label_order({r.label for r in train_records})
        if len(labels) > 50 and len(labels) > len(train_records) / 2:  # a class per example or so: text, not labels
            print(f"warning: {data.train}: {len(labels):,} distinct labels in {len(train_records):,} training rows of "
                  f"label column {data.label_column!r}: they look like text; check data.text_column and "
                  f"data.label_column", file=sys.stderr)
        task = cls(config, tokenizer, vocab, labels)
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
        if config.data.features_from:
            task.features = source_from_run(run_path)
        return task

    def save(self, run_path: Path) -> None:
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict()), encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")
        (run_path / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False), encoding="utf-8")
        if self.features is not None:
            save_source(self.features, run_path)

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
               require_known_labels: bool = True) -> EncodedSplit:
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
                labels.append(_real_label(record) if record.label is not None else float("nan"))
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
        encoded = EncodedSplit(records, ids, pair_ids, labels, segments)
        if self.features is not None:  # the words as the run's tokenizer cut them (and cut to max_len)
            encoded.word_inputs = [self.features.encode_words(a[:max_len]) for a, _ in tokens]
            if self.is_pair:
                encoded.pair_word_inputs = [self.features.encode_words(b[:max_len]) for _, b in tokens]
        return encoded

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
            segments = pad([split.segments[i] for i in index], 0)[0] if split.segments is not None else None
            labels = torch.tensor([split.labels[i] for i in index],
                                  dtype=torch.float32 if self.config.data.regression else torch.long)
            batch = ClassificationBatch(ids, mask, labels, index, pair_ids, pair_mask, segments)
            if split.word_inputs is not None:
                batch.word_inputs = pad_word_inputs([split.word_inputs[i] for i in index], ids.size(1))  # [B, T, C]
            if split.pair_word_inputs is not None:
                batch.pair_word_inputs = pad_word_inputs([split.pair_word_inputs[i] for i in index], pair_ids.size(1))
            batches.append(batch)
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
        order = bucket_batches(self._lengths(split), batch_size or pipeline.eval_batch_size(self.config), shuffle=False)
        return self._batches(split, order)

    # --- loss, evaluation, prediction -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: ClassificationBatch) -> torch.Tensor:
        out = _scores(model, batch)
        if self.config.data.regression:
            return F.mse_loss(out.logits.float(), batch.labels, reduction="sum")
        return F.cross_entropy(out.logits.float(), batch.labels, reduction="sum")

    @torch.no_grad()
    def regression_values(self, model: torch.nn.Module, split: EncodedSplit) -> np.ndarray:
        """Predicted values [N] in the split's original order (regression)."""
        model.eval()
        device = next(model.parameters()).device
        values = np.zeros(len(split.ids), dtype=np.float64)
        for batch in self.eval_batches(split):
            batch = batch.to(device)
            out = _scores(model, batch).logits.float()
            values[batch.index] = out.cpu().numpy()
        return values

    def evaluate_regression(self, model: torch.nn.Module, data: EncodedSplit, bootstrap_samples: int) -> dict:
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
    def probabilities(self, model: torch.nn.Module, split: EncodedSplit) -> np.ndarray:
        """Class probabilities [N, C] in the split's original order."""
        model.eval()
        device = next(model.parameters()).device
        probs = np.zeros((len(split.ids), len(self.labels)), dtype=np.float32)
        for batch in self.eval_batches(split):
            batch = batch.to(device)
            logits = _scores(model, batch).logits.float()
            probs[batch.index] = torch.softmax(logits, dim=-1).cpu().numpy()
        return probs

    def evaluate(self, model: torch.nn.Module, split: str | EncodedSplit, bootstrap_samples: int = 0) -> dict:
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
    def predict(self, model: torch.nn.Module, lines: Iterable[str], source: str, options: dict) -> Iterator[str]:
        """One JSON line per input line (`text`, or `text<TAB>pair` for a pair model): label and probabilities."""
        if options.get("input_format") or options.get("output_format"):
            raise TextnnError("--input-format and --output-format apply to tagging runs only; a classifier "
                              "reads one text per line and writes JSONL, so drop them")
        empty = {"text": None, **({"value": None} if self.config.data.regression else
                                   {"label": None, "probabilities": None})}
        answered = False
        for first, chunk in line_chunks(self._texts_of_table(lines, source)):
            answered = True
            records = []
            for number, line in enumerate(chunk, start=first):
                line = line.rstrip("\n")
                if blank(line):
                    continue
                text, _, pair = line.partition("\t") if self.is_pair else (line, "", "")
                if self.is_pair and not pair:
                    raise TextnnError(f"{source}:{number}: this model classifies sentence pairs; give "
                                      f"`first sentence<TAB>second sentence` on each line")
                records.append(Record(text=text, label=None, text_pair=pair or None, path=source, line=number))
            answers = iter(self._answers(model, records) if records else [])
            for line in chunk:
                yield empty_answer(empty) if blank(line) else next(answers)
        if not answered:
            raise TextnnError(f"{source}: no input lines to predict")

    def _texts_of_table(self, lines: Iterable[str], source: str) -> Iterator[str]:
        """The input lines as `predict` reads them. A file in the run's own training table format (its first
        line is the header the run was trained with, naming data.text_column) gives the text column(s) of
        each row after the header, as `text` or `text<TAB>pair`, and says so on stderr: the header is not
        classified and the gold label does not end up inside the text. Anything else passes unchanged."""
        lines = iter(lines)
        first = next(lines, None)
        if first is None:
            return
        split = self._header_split(first)
        if split is None:
            yield first
            yield from lines
            return
        parse, text_at, pair_at = split
        data = self.config.data
        named = " and ".join(repr(c) for c in (data.text_column, data.text_pair_column) if c)
        print(f"{source}: its first line is the header of the run's training table; predicting on its {named} "
              f"column{'s' if pair_at is not None else ''}, one output line per row after the header", file=sys.stderr)
        for number, line in enumerate(lines, start=2):
            if blank(line):
                yield line
                continue
            fields = parse(line.rstrip("\n"))
            if max(text_at, pair_at or 0) >= len(fields):
                raise TextnnError(f"{source}:{number}: the row has {len(fields)} field(s), fewer than the header's; "
                                  f"fix the row")
            yield fields[text_at] + ("\t" + fields[pair_at] if pair_at is not None else "")

    def _header_split(self, line: str):
        """(split a row into fields, text column index, pair column index or None) when `line` is the header
        of the run's training table format (tsv/csv with a header whose names include the text column(s)),
        else None."""
        data = self.config.data
        if data.format not in ("tsv", "csv") or not data.header or data.text_column.isdigit():
            return None
        delimiter = data.delimiter or ("\t" if data.format == "tsv" else ",")
        quoting = csv.QUOTE_MINIMAL if data.quoting else csv.QUOTE_NONE

        def parse(row: str) -> list[str]:
            return next(csv.reader([row], delimiter=delimiter, quoting=quoting), [])

        names = [name.strip().lstrip("\ufeff") for name in parse(line.rstrip("\n"))]
        wanted = [data.text_column] + ([data.text_pair_column] if self.is_pair else [])
        if not all(name in names for name in wanted):
            return None
        return parse, names.index(data.text_column), names.index(data.text_pair_column) if self.is_pair else None

    def _answers(self, model: torch.nn.Module, records: list[Record]) -> list[str]:
        """The JSON output line of each record to predict: its text, and its label and probabilities (or value)."""
        tokens = [(self.tokenizer(r.text), self.tokenizer(r.text_pair) if r.text_pair is not None else None)
                  for r in records]
        encoded = self.encode(records, tokens, require_known_labels=False)
        texts = [{"text": r.text, **({"text_pair": r.text_pair} if r.text_pair else {})} for r in records]
        if self.config.data.regression:
            return [json.dumps({**text, "value": round(float(value), 6)}, ensure_ascii=False)
                    for text, value in zip(texts, self.regression_values(model, encoded))]
        return [json.dumps({**text, "label": self.labels[int(row.argmax())],
                            "probabilities": {label: round(float(p), 6) for label, p in zip(self.labels, row)}},
                           ensure_ascii=False)
                for text, row in zip(texts, self.probabilities(model, encoded))]

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
            lines += ["  " + " ".join(f"{n:6d}" for n in row) for row in metrics["confusion_matrix"]]
        return lines


# --- reading and tokenizing (shared by training, evaluate and predict) ------------------------------

POOLS = {"max": masked_max, "mean": masked_mean, "last": last_valid, "concat": concat_pool}


def _scores(model: torch.nn.Module, batch: ClassificationBatch) -> ModelOutput:
    """The model's output on a batch: class scores (or regression values) as `logits`."""
    return model(batch.ids, batch.mask, batch.pair_ids, batch.pair_mask, batch.segments, batch.word_inputs,
                 batch.pair_word_inputs)


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

