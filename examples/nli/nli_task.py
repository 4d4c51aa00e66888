"""Natural-language inference (GLUE RTE) as a task of one's own, `task: examples.nli.nli_task:NLITask`: one encoder
reads premise and hypothesis apart, classified from [u; v; |u - v|; u * v] (Conneau et al. 2017 §3.1)."""

import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import WordVectorData, opt
from textnn.data.batching import Batch, pad
from textnn.data.readers import Record, read_classification
from textnn.errors import TextnnError
from textnn.metrics import accuracy
from textnn.models.base import EncoderWithHead, InputSpec, ModelOutput
from textnn.modules.heads import PairClassifierHead
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, NoOptions

# --- 1. what `predict` takes and gives; the options of a config's `data:` section ----------------------
@dataclass(frozen=True)
class NLIExample:
    premise: str
    hypothesis: str

@dataclass(frozen=True)
class NLIPrediction(NLIExample):
    label: str  # RTE: entailment or not_entailment
    probability: float  # the model's probability of that label

@dataclass
class NLIData(WordVectorData):
    premise_column: str = opt("sentence1", "tsv column (name) holding the premise")
    hypothesis_column: str = opt("sentence2", "tsv column (name) holding the hypothesis")
    label_column: str = opt("label", "tsv column (name) holding the label")
    wordpiece_vocab_size: int = opt(8000, "data.tokenizer wordpiece: pieces to learn from data.train")

# --- 2. reading, and encoded pairs: a split that batches itself (tasks/base.py `EncodedSplit`) -----------
def read_pairs(config, path: str, require_labels: bool = True) -> list[Record]:
    data = config.data
    return read_classification(path, "tsv", text_column=data.premise_column, text_pair_column=data.hypothesis_column,
                               label_column=data.label_column, encoding=data.encoding, require_labels=require_labels)

@dataclass
class PairBatch(Batch):
    ids: torch.Tensor  # [2B, T] the B premises, then their B hypotheses, padded to the longest (T)
    mask: torch.Tensor  # [2B, T] bool, True = real token
    labels: torch.Tensor  # [B] label ids, -1 where unlabelled
    index: list[int]  # the pairs' positions in their split

@dataclass
class Pairs:
    pairs: list[tuple[list[int], list[int], int]]  # (premise ids, hypothesis ids, label id)
    pad_id: int

    def lengths(self) -> list[int]:
        return [len(premise) + len(hypothesis) for premise, hypothesis, _ in self.pairs]

    def collate(self, index: list[int]) -> PairBatch:
        premises, hypotheses, labels = zip(*[self.pairs[i] for i in index])
        return PairBatch(*pad(premises + hypotheses, self.pad_id), torch.tensor(labels), index)

# --- 3. the model: an encoder with a head --------------------------------------------------------------
class NLIModel(EncoderWithHead):
    def forward(self, batch: PairBatch) -> ModelOutput:
        u, v = self.encoder(batch.ids, batch.mask).sentence.chunk(2)  # [2B, D] -> premises, hypotheses [B, D]
        return ModelOutput(logits=self.head(u, v))  # [B, 4D] -> [B, labels]

# --- 4. the task: building, encoding, loss, metrics, predictions -----------------------------------------
class NLITask(BatchTask):
    Example, Prediction, Options, data_config = NLIExample, NLIPrediction, NoOptions, NLIData
    formats, metric_directions, default_metric = ("tsv",), {"loss": False, "accuracy": True}, "accuracy"

    def __init__(self, config, tokenizer, vocab, labels: list[str], pretrained=None):
        self.config, self.tokenizer, self.vocab, self.labels = config, tokenizer, vocab, labels
        self.pretrained, self.splits = pretrained, {}

    @classmethod
    def unusable_reason(cls, encoder: type) -> str | None:  # which model families it can use
        return None if encoder.gives_sentence and not encoder.reads else "it gives no sentence vector of plain ids"

    @classmethod
    def from_data(cls, config) -> "NLITask":
        data = config.data
        if not data.train:
            raise TextnnError("config key data.train is empty; set it to the training file")
        train = read_pairs(config, data.train)
        texts = [text for r in train for text in (r.text, r.text_pair)]
        columns = {"columns": [data.premise_column, data.hypothesis_column]}  # in a WordPiece's cache key
        tokenizer, start = pipeline.tokenizer(config, lambda: texts, columns)
        vocab = pipeline.vocabulary(config, tokenizer, start, lambda: map(tokenizer, texts))
        pretrained = pipeline.pretrained_vectors(config, vocab)[0] if data.vectors else None
        task = cls(config, tokenizer, vocab, sorted({r.label for r in train}), pretrained)
        task.splits = {split: task.encode(read_pairs(config, path)) for split, path in
                       (("train", data.train), ("dev", data.dev), ("test", data.test)) if path}
        return task

    @classmethod
    def from_run(cls, run_path, config) -> "NLITask":  # labels.json: the list `save` wrote
        return cls(config, *cls.load_text_pipeline(run_path, config.data), cls.read_json(run_path / "labels.json"))

    def save(self, run_path) -> None:
        pipeline.save(run_path, self.tokenizer, self.vocab)
        (run_path / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False), encoding="utf-8")

    def build_model(self) -> NLIModel:
        spec = InputSpec(vocab_size=len(self.vocab), pad_id=self.vocab.pad_id, pretrained=self.pretrained)
        encoder = registry.encoder_class(self.config.model_name)(self.config.model, spec)
        return NLIModel(encoder, PairClassifierHead(encoder.sentence_size, len(self.labels)))

    def encode(self, records: list[Record]) -> Pairs:
        pairs = []
        for r in records:
            premise, hypothesis = (self.vocab.encode(self.tokenizer(text)) for text in (r.text, r.text_pair))
            if not (premise and hypothesis) or (r.label is not None and r.label not in self.labels):
                raise TextnnError(f"{r.path}:{r.line}: a text without tokens, or a label not seen in training; fix it")
            pairs.append((premise, hypothesis, -1 if r.label is None else self.labels.index(r.label)))
        return Pairs(pairs, self.vocab.pad_id)

    def encode_file(self, path: str, require_labels: bool = True) -> Pairs:
        return self.encode(read_pairs(self.config, path, require_labels))

    def loss(self, model, batch: PairBatch) -> torch.Tensor:  # summed over the batch, as BatchTask asks
        return F.cross_entropy(model(batch).logits.float(), batch.labels, reduction="sum")

    @torch.no_grad()
    def probabilities(self, model, pairs: Pairs) -> torch.Tensor:  # [N, labels], in the order of `pairs`
        model.eval()
        probs, device = torch.zeros(len(pairs.pairs), len(self.labels)), next(model.parameters()).device
        for batch in self.eval_batches(pairs):
            probs[batch.index] = model(batch.to(device)).logits.float().softmax(dim=-1).cpu()
        return probs

    def evaluate(self, model, split, bootstrap_samples: int = 0) -> dict:
        pairs = self.splits[split] if isinstance(split, str) else split
        probs, gold = self.probabilities(model, pairs), torch.tensor([label for _, _, label in pairs.pairs])
        return {"loss": F.nll_loss(probs.clamp_min(1e-12).log(), gold).item(), "examples": len(gold),
                "accuracy": accuracy(gold.numpy(), probs.argmax(dim=1).numpy())}

    def predict(self, model, examples: list[NLIExample], options: NoOptions) -> list[NLIPrediction]:
        pairs = self.encode([Record(e.premise, None, e.hypothesis, "<input>") for e in examples])
        return [NLIPrediction(e.premise, e.hypothesis, self.labels[int(row.argmax())], float(row.max()))
                for e, row in zip(examples, self.probabilities(model, pairs))]

    def example_from_text(self, line: str, place: str) -> NLIExample:  # how `predict` reads a line of input
        premise, tab, hypothesis = line.partition("\t")
        if not (tab and premise.strip() and hypothesis.strip()):
            raise TextnnError(f"{place}: give `premise<TAB>hypothesis` on each line")
        return NLIExample(premise, hypothesis)
