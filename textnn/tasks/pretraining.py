"""BERT pre-training: masked language modelling (MLM) and next-sentence prediction (NSP).

Devlin et al. 2019 §3.1: the encoder reads [CLS] A [SEP] B [SEP] in which 15% of the positions were
chosen for prediction (80% [MASK], 10% a random token, 10% unchanged) and predicts the original
tokens there (MLM, through `MLMHead`, whose output layer is the encoder's token embedding, tied as
in the released code); from the pooled [CLS] vector it predicts whether B followed A in the document
(NSP, a linear layer on the pooler, the released code's `cls/seq_relationship`). How documents,
pairs and masks are made is data/masking.py.

RoBERTa's variant (Liu et al. 2019 §4.1-4.2): `data.dynamic_masking: true` draws new masks every
epoch instead of once; `data.nsp: false` drops NSP and packs full sentences across documents.

Data (`data.format: text`): a plain text file, blank lines between documents, or WikiText with its
` = Title = ` article headings as document boundaries (`data.documents: wikitext`). The tokenizer is
a WordPiece trained on data.train (`data.wordpiece_vocab_size`), or that of model.init_from.

Metrics: `mlm_loss` (mean cross-entropy over the predicted positions, nats), `mlm_accuracy`,
`nsp_loss`, `nsp_accuracy`, and `loss` = mlm_loss + nsp_loss (the training objective). Dev pairs and
masks are drawn once (seed, epoch 0), so dev numbers compare across evaluations and runs.
The run directory holds the encoder (`encoder.*`) and the WordPiece vocabulary: a classification,
tagging or qa run starts from it with `model.init_from: RUN_DIR`.
"""

# B batch, T sequence length, D model dim, V vocabulary size, N predicted positions in the batch

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from textnn import registry
from textnn.config import Config, DataConfig, check_key, is_int, opt
from textnn.data.batching import Batch, bucket_batches, pad
from textnn.data.cache import cached
from textnn.data.masking import (IGNORE, Sentence, full_sentence_blocks, mask_instances, nsp_instances,
                                 read_documents)
from textnn.data.tokenizers import CLS, MASK, SEP, WORDPIECE_SPECIALS, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.models.base import EncoderWithHead, Head, InputSpec, TokenFeatures
from textnn.modules.heads import MLMHead
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask

DOCUMENTS = ("blank_lines", "wikitext")


@dataclass
class PretrainingData(DataConfig):
    format: str = opt("text", "text: plain text; documents separated as data.documents says")
    tokenizer: str = opt("wordpiece", "wordpiece (trained on data.train, or that of model.init_from)")
    lowercase: bool = opt(True, "uncased WordPiece: lower-case and strip accents (BERT-uncased)")
    documents: str = opt("blank_lines", "document boundaries: blank_lines, or wikitext (articles start at ' = Title = ' lines)")
    wordpiece_vocab_size: int = opt(8000, "size of the WordPiece vocabulary trained on data.train")
    max_length: int = opt(0, "tokens per sequence, [CLS] and [SEP] included; 0 = 128 (BERT's phase 1), or the encoder's limit when lower")
    mask_rate: float = opt(0.15, "fraction of the positions predicted (Devlin et al. 2019: 0.15)")
    whole_word_masking: bool = opt(False, "choose all the pieces of a word together")
    dynamic_masking: bool = opt(False, "draw new masks every epoch (RoBERTa) instead of once (BERT)")
    nsp: bool = opt(True, "next-sentence prediction on sentence pairs; false = full-sentence packing (RoBERTa)")
    short_seq_rate: float = opt(0.1, "share of sequences packed to a budget drawn uniformly from 2 .. max_length, so pre-training also shows short inputs (the released BERT code's short_seq_prob, 0.1); 0 = every sequence to max_length")
    single_segment_rate: float = opt(0.0, "with data.nsp: share of sequences framed as one segment, [CLS] a [SEP], without an NSP label (the frame single-sentence fine-tuning reads); 0 = pairs only, as BERT")

    TOKENIZATION = (*DataConfig.TOKENIZATION, "wordpiece_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(self.tokenizer == "wordpiece", "data.tokenizer", self.tokenizer, "wordpiece")
        check_key(self.documents in DOCUMENTS, "data.documents", self.documents, " or ".join(DOCUMENTS))
        check_key(is_int(self.wordpiece_vocab_size) and self.wordpiece_vocab_size >= 8, "data.wordpiece_vocab_size",
                  self.wordpiece_vocab_size, "an integer >= 8")
        check_key(is_int(self.max_length) and (self.max_length == 0 or self.max_length >= 8), "data.max_length",
                  self.max_length, "0 (the default) or an integer >= 8")
        check_key(0.0 < self.mask_rate < 1.0, "data.mask_rate", self.mask_rate, "a fraction in (0, 1)")
        check_key(0.0 <= self.short_seq_rate <= 1.0, "data.short_seq_rate", self.short_seq_rate, "a fraction in [0, 1]")
        check_key(0.0 <= self.single_segment_rate < 1.0, "data.single_segment_rate", self.single_segment_rate,
                  "a fraction in [0, 1)")
        check_key(self.nsp or not self.single_segment_rate, "data.single_segment_rate", self.single_segment_rate,
                  "0 with data.nsp=false (every sequence is then a single segment already)")


class PretrainingHead(Head):
    """MLM scores over the vocabulary at the chosen positions, and IsNext/NotNext scores of the pooled vector."""

    def __init__(self, token_size: int, sentence_size: int, vocab_size: int, tied: nn.Parameter | None,
                 eps: float, nsp: bool) -> None:
        super().__init__()
        self.mlm = MLMHead(token_size, vocab_size, tied, eps)
        self.nsp = nn.Linear(sentence_size, 2) if nsp else None


@dataclass
class PretrainingOutput:
    mlm_logits: torch.Tensor  # [N, V] at the predicted positions, in row-major order of the batch
    nsp_logits: torch.Tensor | None  # [B, 2]


class Pretrainer(EncoderWithHead):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor,
                predict: torch.Tensor) -> PretrainingOutput:
        """ids, mask, segments [B, T]; predict [B, T] bool: the positions whose tokens are predicted."""
        out = self.encoder(ids, mask, features=TokenFeatures(segments=segments))
        # Only the ~15% predicted positions go through the V-wide output layer.
        chosen = out.tokens[predict]  # [B, T, D] -> [N, D]
        nsp = self.head.nsp(out.sentence) if self.head.nsp is not None else None  # [B, D] -> [B, 2]
        return PretrainingOutput(self.head.mlm(chosen), nsp)


@dataclass
class PretrainingBatch(Batch):
    ids: torch.Tensor  # [B, T] masked inputs
    mask: torch.Tensor  # [B, T] bool
    segments: torch.Tensor  # [B, T]
    targets: torch.Tensor  # [B, T] original ids at predicted positions, IGNORE elsewhere
    is_next: torch.Tensor  # [B] 1 IsNext, 0 NotNext, -1 no NSP label (a single segment, or data.nsp false)

    @property
    def count(self) -> int:
        """Loss terms: one per sequence (each sequence's loss is its mean MLM loss + its NSP loss)."""
        return int(self.ids.size(0))


@dataclass
class PretrainingSplit:
    instances: list  # data/masking.Instance
    path: str
    masked: list | None = None  # (inputs, targets) per instance, when drawn once


def sequence_losses(out: PretrainingOutput, targets: torch.Tensor, is_next: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-sequence MLM loss (mean over its predicted positions) and NSP loss, [B] each, plus the
    predicted-position count per sequence. The MLM mean is per sequence, as the released code
    normalises by the predicted positions (its `label_weights`). A sequence without an NSP label
    (is_next -1: a single segment) has NSP loss 0."""
    predict = targets != IGNORE  # [B, T]
    nll = F.cross_entropy(out.mlm_logits.float(), targets[predict], reduction="none")  # [N]
    rows = predict.nonzero()[:, 0]  # [N] the sequence of each predicted position
    per_row = torch.zeros(targets.size(0), device=targets.device).index_add_(0, rows, nll)  # [B]
    counts = predict.sum(dim=1)  # [B]
    mlm = per_row / counts.clamp(min=1)
    nsp = (F.cross_entropy(out.nsp_logits.float(), is_next, reduction="none", ignore_index=-1)
           if out.nsp_logits is not None else torch.zeros_like(mlm))
    return mlm, nsp, counts


class PretrainingTask(BatchTask):
    data_config = PretrainingData
    formats = ("text",)
    intervals = False  # MLM/NSP metrics have no bootstrap interval
    metric_directions = {"loss": False, "mlm_loss": False, "mlm_accuracy": True, "nsp_loss": False,
                         "nsp_accuracy": True}
    default_metric = "mlm_loss"

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if "segments" not in encoder_cls.reads or not encoder_cls.gives_sentence:
            return "MLM/NSP pre-training needs a BERT-style encoder (reads segments, gives a pooled sentence)"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        if not config.data.train:
            raise TextnnError("config key data.train is empty; set it to the text file to pre-train on")
        limit = registry.encoder_class(config.model_name).max_length(config.model)
        if limit and config.data.max_length > limit:
            raise TextnnError(f"config key data.max_length: got {config.data.max_length}, but the encoder reads at "
                              f"most {limit} positions; lower data.max_length")

    @classmethod
    def metrics_for(cls, config: Config) -> list[str]:
        return list(cls.metric_directions) if config.data.nsp else ["loss", "mlm_loss", "mlm_accuracy"]

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        for token in (CLS, SEP, MASK):
            if token not in vocab.stoi:
                raise TextnnError(f"the vocabulary has no {token}; MLM pre-training needs a WordPiece vocabulary "
                                  f"with [CLS], [SEP] and [MASK]")
        self.cls_id, self.sep_id, self.mask_id = (vocab.stoi[t] for t in (CLS, SEP, MASK))
        specials = {vocab.stoi[t] for t in WORDPIECE_SPECIALS if t in vocab.stoi}
        # the 10% random replacements: any real piece (never [PAD], [CLS], [SEP], [MASK] or [UNK])
        self.random_ids = np.asarray([i for i, t in enumerate(vocab.itos) if i not in specials
                                      and not (t.startswith("[") and t.endswith("]"))], dtype=np.int64)
        self.splits: dict[str, PretrainingSplit] = {}
        limit = registry.encoder_class(config.model_name).max_length(config.model)
        self.max_length = config.data.max_length or min(128, limit or 128)

    # --- building ---------------------------------------------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "PretrainingTask":
        data = config.data
        if config.init_from:
            tokenizer, vocab = pipeline.load(Path(config.init_from))
        else:  # a WordPiece trained on the sentences of data.train
            tokenizer = pipeline.train_wordpiece(
                config, lambda: (s for d in read_documents(data.train, data.documents == "wikitext", data.encoding)
                                 for s in d), {"documents": data.documents})
            vocab = pipeline.piece_vocabulary(tokenizer)
        task = cls(config, tokenizer, vocab)
        for split in ("train", "dev", "test"):
            if getattr(data, split):
                task.splits[split] = task.encode_file(getattr(data, split))
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "PretrainingTask":
        return cls(config, *cls.load_text_pipeline(run_path))

    def save(self, run_path: Path) -> None:
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict()), encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")

    def build_model(self) -> Pretrainer:
        encoder = registry.encoder_class(self.config.model_name)(
            self.config.model, InputSpec(vocab_size=len(self.vocab), pad_id=self.vocab.pad_id))
        head = PretrainingHead(encoder.token_size, encoder.sentence_size, len(self.vocab), encoder.output_embedding(),
                               self.config.model.eps, self.config.data.nsp)
        return Pretrainer(encoder, head)

    # --- encoding ---------------------------------------------------------------------------------
    def encode_documents(self, path: str) -> list[list[Sentence]]:
        """Word-piece ids and word indices of every sentence of every document (cached)."""
        data = self.config.data

        def compute() -> list:
            documents = read_documents(path, data.documents == "wikitext", data.encoding)
            flat = [s for d in documents for s in d]
            encodings = self.tokenizer.model.encode_batch(flat, add_special_tokens=False)
            out, k = [], 0
            for d in documents:
                out.append([[e.ids, [-1 if w is None else w for w in e.word_ids]] for e in encodings[k:k + len(d)]])
                k += len(d)
            return out

        settings = {"kind": "pretraining_documents", "tokenizer": self.tokenizer.to_dict(),
                    "documents": data.documents, "encoding": data.encoding}
        documents = cached(path, settings, compute, enabled=data.cache)
        return [[Sentence(ids, words) for ids, words in d if ids] for d in documents if any(ids for ids, _ in d)]

    def encode_file(self, path: str, require_labels: bool = True) -> PretrainingSplit:
        data = self.config.data
        documents = self.encode_documents(path)
        seed = self.config.train.seed
        if data.nsp:
            instances = nsp_instances(documents, self.max_length, self.cls_id, self.sep_id, seed,
                                      data.short_seq_rate, data.single_segment_rate)
        else:
            instances = full_sentence_blocks(documents, self.max_length, self.cls_id, self.sep_id, seed,
                                             data.short_seq_rate)
        if not instances:
            raise TextnnError(f"{path}: no sequence to pre-train on; give more text")
        return PretrainingSplit(instances, str(path))

    def _masked(self, split: PretrainingSplit, epoch: int) -> list:
        data = self.config.data
        if data.dynamic_masking and epoch:
            return mask_instances(split.instances, self.config.train.seed, epoch, self.mask_id, self.random_ids,
                                  data.mask_rate, data.whole_word_masking)
        if split.masked is None:  # static: drawn once, with epoch 0
            split.masked = mask_instances(split.instances, self.config.train.seed, 0, self.mask_id, self.random_ids,
                                          data.mask_rate, data.whole_word_masking)
        return split.masked

    # --- batches ----------------------------------------------------------------------------------
    def has_split(self, split: str) -> bool:
        return split in self.splits

    def _batch(self, split: PretrainingSplit, masked: list, index: list[int]) -> PretrainingBatch:
        ids, mask = pad([masked[i][0] for i in index], self.vocab.pad_id)
        targets = pad([masked[i][1] for i in index], IGNORE)[0]
        segments = pad([split.instances[i].segments for i in index], 0)[0]
        is_next = torch.tensor([split.instances[i].is_next for i in index], dtype=torch.long)
        return PretrainingBatch(ids, mask, segments, targets, is_next)

    def _order(self, epoch: int) -> list[list[int]]:
        lengths = [len(x.ids) for x in self.splits["train"].instances]
        return bucket_batches(lengths, self.config.train.batch_size, shuffle=True,
                              seed=self.config.train.seed * 100_003 + epoch)

    def train_batches(self, epoch: int) -> list[PretrainingBatch]:
        split = self.splits["train"]
        masked = self._masked(split, epoch)
        return [self._batch(split, masked, index) for index in self._order(epoch)]

    def num_train_batches(self, epoch: int) -> int:
        return len(self._order(epoch))

    # --- loss, evaluation -------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: PretrainingBatch) -> torch.Tensor:
        out = model(batch.ids, batch.mask, batch.segments, batch.targets != IGNORE)
        mlm, nsp, _ = sequence_losses(out, batch.targets, batch.is_next)
        return (mlm + nsp).sum()

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str | PretrainingSplit, bootstrap_samples: int = 0) -> dict:
        """MLM loss/accuracy over all predicted positions, NSP loss/accuracy over sequences (masks of epoch 0)."""
        data = self.splits[split] if isinstance(split, str) else split
        masked = self._masked(data, 0)
        model.eval()
        device = next(model.parameters()).device
        sums = {"mlm_nll": 0.0, "mlm_correct": 0, "positions": 0, "nsp_nll": 0.0, "nsp_correct": 0, "nsp_sequences": 0}
        size = pipeline.eval_batch_size(self.config)
        for index in bucket_batches([len(x.ids) for x in data.instances], size, shuffle=False):
            batch = self._batch(data, masked, index).to(device)
            predict = batch.targets != IGNORE
            out = model(batch.ids, batch.mask, batch.segments, predict)
            gold = batch.targets[predict]
            sums["mlm_nll"] += float(F.cross_entropy(out.mlm_logits.float(), gold, reduction="sum"))
            sums["mlm_correct"] += int((out.mlm_logits.argmax(-1) == gold).sum())
            sums["positions"] += int(gold.numel())
            labelled = batch.is_next >= 0  # [B] single segments have no NSP label
            if out.nsp_logits is not None and bool(labelled.any()):
                sums["nsp_nll"] += float(F.cross_entropy(out.nsp_logits[labelled].float(), batch.is_next[labelled],
                                                         reduction="sum"))
                sums["nsp_correct"] += int((out.nsp_logits[labelled].argmax(-1) == batch.is_next[labelled]).sum())
                sums["nsp_sequences"] += int(labelled.sum())
        return pretraining_metrics(sums, len(data.instances), self.config.data.nsp)


def pretraining_metrics(sums: dict, sequences: int, nsp: bool) -> dict:
    """The reported metrics from summed counts: MLM over predicted positions, NSP over the sequences with
    an NSP label (all pairs)."""
    positions = max(1, sums["positions"])
    results = {"mlm_loss": sums["mlm_nll"] / positions, "mlm_accuracy": sums["mlm_correct"] / positions}
    if nsp:
        pairs = max(1, sums["nsp_sequences"])
        results["nsp_loss"] = sums["nsp_nll"] / pairs
        results["nsp_accuracy"] = sums["nsp_correct"] / pairs
    results["loss"] = results["mlm_loss"] + results.get("nsp_loss", 0.0)
    results["predicted_positions"] = sums["positions"]
    results["sequences"] = sequences
    return results
