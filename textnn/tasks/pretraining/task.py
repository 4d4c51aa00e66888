"""The pre-training task: building its WordPiece and masking instances, batches drawn per epoch, the
MLM + NSP loss per sequence, and the MLM/NSP metrics."""

# B batch, T sequence length, D model dim, V vocabulary size, N predicted positions in the batch

from __future__ import annotations


import numpy as np
import torch
import torch.nn.functional as F

from textnn.config import Config
from textnn.data.batching import bucket_batches, pad
from textnn.data.cache import cached
from textnn.data.masking import (IGNORE, Sentence, full_sentence_blocks, mask_instances, nsp_instances,
                                 read_documents)
from textnn.data.tokenizers import CLS, MASK, SEP, WORDPIECE_SPECIALS, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.tasks import pipeline
from textnn.tasks.base import build_encoder
from textnn.tasks.checks import require_train
from textnn.tasks.pretraining.data import PretrainingBatch, PretrainingData, PretrainingSplit
from textnn.tasks.pretraining.model import Pretrainer, PretrainingHead, PretrainingOutput
from textnn.tasks.windows import WordPieceWindowTask, check_window_length, window_length


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


class PretrainingTask(WordPieceWindowTask):
    data_config = PretrainingData
    formats = ("text",)
    intervals = False  # MLM/NSP metrics have no bootstrap interval
    metric_directions = {"loss": False, "mlm_loss": False, "mlm_accuracy": True, "nsp_loss": False,
                         "nsp_accuracy": True}
    default_metric = "mlm_loss"
    # Pre-training that starts from a pre-training run (more MLM on a task's own text: Gururangan et al.
    # 2020's task-adaptive pre-training) goes on with its MLM head, whose output layer scores the
    # inherited vocabulary; an NSP classifier carries over where both runs have one.
    keeps_start_head = True

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if "segments" not in encoder_cls.reads or not encoder_cls.gives_sentence:
            return "MLM/NSP pre-training needs a BERT-style encoder (reads segments, gives a pooled sentence)"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        require_train(config, "the text file to pre-train on")
        check_window_length(config)

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
        self.max_length = window_length(config, 128)

    # --- building ---------------------------------------------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "PretrainingTask":
        data = config.data
        # without model.init_from: a WordPiece trained on the sentences of data.train
        task = cls(config, *cls.wordpiece_pipeline(
            config, lambda: (s for d in read_documents(data.train, data.documents == "wikitext", data.encoding)
                             for s in d), {"documents": data.documents}, "wordpiece_model"))
        task.encode_files(("train", "dev", "test"))
        return task

    def build_model(self) -> Pretrainer:
        encoder = build_encoder(self.config, self.vocab)
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

    def _batch(self, split: PretrainingSplit, masked: list, index: list[int]) -> PretrainingBatch:
        ids, mask = pad([masked[i][0] for i in index], self.vocab.pad_id)
        targets = pad([masked[i][1] for i in index], IGNORE)[0]
        segments = pad([split.instances[i].segments for i in index], 0)[0]
        is_next = torch.tensor([split.instances[i].is_next for i in index], dtype=torch.long)
        return PretrainingBatch(ids, mask, segments, targets, is_next)

    def train_batches(self, epoch: int) -> list[PretrainingBatch]:
        """The epoch's batches, masked afresh each epoch (data.dynamic_masking) or with epoch 0's masks."""
        split = self.splits["train"]
        masked = self._masked(split, epoch)
        return [self._batch(split, masked, index) for index in self.train_order(epoch)]

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
        size = pipeline.eval_batch_size(self.config, self.inference_batch_size)
        for index in bucket_batches(data.lengths(), size, shuffle=False):
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
