"""The tagging task: building its pipeline, splits and model, the loss, decoding tags, span metrics,
predictions (what they take and give, and how their input reads, are in io.py; how sentences become ids in
encoding.py) and its part of the report."""

# B batch (sentences), T tokens per sentence, C characters per token, P pieces, K tags

from __future__ import annotations

import json
from pathlib import Path

import torch

from textnn import registry
from textnn.config import Config
from textnn.data.conll import Sentence, convert_tags, normalise_scheme, span_records, split_tag, tag_set
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.metrics.spans import SPAN_METRICS, sentence_counts, span_bootstrap_ci, span_scores
from textnn.modules.heads import TaggerHead
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, NoOptions, build_encoder, unbuilt_inputs
from textnn.tasks.checks import require_train
from textnn.tasks.features import FeatureSource, frozen_layers, read_source, save_source, source_from_run
from textnn.tasks.tagging.data import (NUM_CASINGS, EncodedSentences, TaggingBatch, TaggingData, extra_inputs,
                                       read_sentences, word_form)
from textnn.tasks.tagging.encoding import TaggingEncoding
from textnn.tasks.tagging.io import TaggingExample, TaggingIO, TaggingPrediction
from textnn.tasks.tagging.model import Tagger, TaggingHeadConfig


class TaggingTask(TaggingIO, TaggingEncoding, BatchTask):
    """Sequence labelling in the trainer's task protocol (see the module doc)."""

    Example = TaggingExample
    Prediction = TaggingPrediction
    reads_conll = True
    data_config = TaggingData
    head_config = TaggingHeadConfig
    metric_directions = {"loss": False, **{name: True for name in SPAN_METRICS}}
    formats = ("conll",)
    default_metric = "span_f1"

    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if not encoder_cls.gives_tokens:
            return "it gives no per-token states to tag"
        return unbuilt_inputs(encoder_cls, ("chars", "casing", "segments"), "tagging")

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        require_train(config, "the training CoNLL file")
        pipeline.check_vectors(config)
        subwords = "segments" in registry.encoder_class(config.model_name).reads
        if config.data.tokenizer == "wordpiece" and not subwords:
            raise TextnnError(f"config key data.tokenizer: wordpiece with model {config.model_name}; only a sub-word "
                              f"encoder (bert) reads pieces, a word-level tagger reads word or whitespace tokens")
        if config.data.features_from and not registry.encoder_class(config.model_name).takes_context:
            raise TextnnError(f"config key data.features_from: model {config.model_name} takes no extra features; "
                              f"use a word-level tagger that does (rnn_tagger)")

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab, chars: Vocab, tags: list[str]):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.chars = chars
        self.tags = tags
        self.tag_ids = {tag: i for i, tag in enumerate(tags)}
        self.file_scheme = config.data.tag_scheme
        self.scheme = normalise_scheme(config.data.train_tag_scheme)
        self.splits: dict[str, EncodedSentences] = {}
        self.pretrained: torch.Tensor | None = None
        self.subwords = "segments" in registry.encoder_class(config.model_name).reads
        self.features: FeatureSource | None = None  # data.features_from

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "TaggingTask":
        """Read train/dev/test, build the word, character and tag vocabularies, encode every split."""
        data = config.data
        train = read_sentences(config, data.train)
        tokenizer, start_words = pipeline.tokenizer(config, lambda: (" ".join(s.tokens) for s in train),
                                                     {"format": "conll", "token_column": data.token_column})
        # A sub-word encoder reading whole words still frames them as [CLS] words [SEP]
        words = pipeline.vocabulary(config, tokenizer, start_words,
                                    lambda: ([word_form(config, t) for t in s.tokens] for s in train),
                                    packs="segments" in registry.encoder_class(config.model_name).reads)
        if data.tokenizer != "wordpiece":  # splits raw prediction input into words; a starting run's may lower-case
            tokenizer = Tokenizer(*cls.saved_tokenizer(data))
        start_chars = config.start.file("chars.json") if config.start is not None else None
        if start_chars is not None:
            chars = Vocab.load(start_chars)
        else:
            chars = Vocab.build(([ch for ch in token] for s in train for token in s.tokens), specials=(PAD, UNK))
        types = {split_tag(tag)[1] for s in train for tag in s.tags if tag != "O"}
        task = cls(config, tokenizer, words, chars, tag_set(types, data.train_tag_scheme))
        if data.features_from:
            task.features = read_source(data.features_from)
        task.splits["train"] = task.encode(train)
        task.encode_files()
        if data.vectors:
            task.pretrained = pipeline.pretrained_vectors(config, words)[0]
        return task

    @classmethod
    def saved_tokenizer(cls, data: TaggingData) -> tuple[str, bool]:
        """A word tokenizer never lower-cases: the characters and the casing feature read each token as
        written, and data.lowercase lower-cases the word lookup only (`_word`). A WordPiece lower-cases
        in its own pipeline (an uncased vocabulary)."""
        return data.tokenizer, data.lowercase and data.tokenizer == "wordpiece"

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "TaggingTask":
        tokenizer, vocab = cls.load_text_pipeline(run_path, config.data)
        saved = cls.read_json(run_path / "tags.json")
        if not isinstance(saved, dict) or not isinstance(saved.get("tags"), list) or not saved["tags"]:
            raise TextnnError(f"{run_path / 'tags.json'}: expected {{\"scheme\": ..., \"tags\": [...]}}; the file is "
                              f"damaged: re-train the run")
        task = cls(config, tokenizer, vocab, Vocab.load(run_path / "chars.json"), saved["tags"])
        if config.data.features_from:
            task.features = source_from_run(run_path)
        return task

    def save(self, run_path: Path) -> None:
        pipeline.save(run_path, self.tokenizer, self.vocab)
        self.chars.save(run_path / "chars.json")
        (run_path / "tags.json").write_text(json.dumps({"scheme": self.scheme, "tags": self.tags}, ensure_ascii=False),
                                            encoding="utf-8")
        if self.features is not None:
            save_source(self.features, run_path)

    def build_model(self) -> Tagger:
        frozen = frozen_layers(self.features, self.config.data)
        encoder = build_encoder(self.config, self.vocab, pretrained=self.pretrained, num_chars=len(self.chars),
                                num_casings=NUM_CASINGS, context_dim=frozen.size if frozen is not None else 0)
        head = TaggerHead(encoder.token_size, self.tags, self.scheme, self.config.head.output,
                          self.config.head.constrained)
        return Tagger(encoder, head, frozen)

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedSentences:
        """Read and encode a CoNLL file with the run's column and scheme settings."""
        return self.encode(read_sentences(self.config, path, require_tags=require_labels))

    # --- batches ----------------------------------------------------------------------------------
    def eval_batches(self, data: EncodedSentences, batch_size: int = 0) -> list[TaggingBatch]:
        """Batches sorted by length, built once per split (a dev set is evaluated many times)."""
        if data.batches is None:
            data.batches = super().eval_batches(data, batch_size)
        return data.batches

    # --- loss, prediction, evaluation -------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: TaggingBatch) -> torch.Tensor:
        """Sum over the batch's sentences of each sentence's negative log-likelihood."""
        return model(batch.words, batch.chars, batch.casing, batch.mask, batch.tags, **extra_inputs(batch)).loss

    @torch.no_grad()
    def decode_tags(self, model: torch.nn.Module, data: EncodedSentences) -> tuple[list[list[str]], float | None]:
        """Predicted tags of every sentence in `data.tag_scheme` (file order), and the mean sentence NLL
        of the gold tags (None for unlabelled input)."""
        predicted: list[list[str]] = [[] for _ in data.sentences]
        nll_sum = 0.0
        for batch in self.batches_on_device(model, data):
            emissions = model(batch.words, batch.chars, batch.casing, batch.mask,
                              **extra_inputs(batch)).logits.float()  # [B, T, K]
            best = model.head.decode(emissions, batch.mask).cpu().tolist()  # [B, T]
            if data.tags is not None:
                nll_sum += float(model.head.nll(emissions, batch.tags, batch.mask).sum())
            for row, i in enumerate(batch.index):
                ids = best[row][:len(data.words[i])]
                predicted[i] = convert_tags([self.tags[t] for t in ids], self.scheme, self.file_scheme)
        return predicted, (nll_sum / len(data.sentences) if data.tags is not None else None)

    def evaluate(self, model: torch.nn.Module, split: str | EncodedSentences, bootstrap_samples: int = 0) -> dict:
        """conlleval's span precision/recall/F1 and token accuracy, the loss, a per-type breakdown and
        (optionally) a 95% bootstrap interval of the selected metric over sentences."""
        data = self.splits[split] if isinstance(split, str) else split
        if data.tags is None:
            raise TextnnError("cannot evaluate sentences without gold tags; use `textnn predict` instead")
        predicted, loss = self.decode_tags(model, data)
        gold = [s.tags for s in data.sentences]
        scores = span_scores(gold, predicted, self.file_scheme)
        results: dict = {"loss": loss, "sentences": len(gold)}
        results.update({name: scores[name] for name in SPAN_METRICS})
        results.update({k: scores[k] for k in ("gold_spans", "predicted_spans", "correct_spans", "tokens")})
        metric = self.selected_metric
        if bootstrap_samples and metric in SPAN_METRICS:
            counts = sentence_counts(gold, predicted, self.file_scheme)
            low, high = span_bootstrap_ci(counts, metric, n_samples=bootstrap_samples, seed=self.config.train.seed)
            results[f"{metric}_ci_low"], results[f"{metric}_ci_high"] = low, high
        results["per_type"] = scores["per_type"]
        return results

    # --- commands ---------------------------------------------------------------------------------
    def predict(self, model: torch.nn.Module, examples: list[TaggingExample], options: NoOptions
                ) -> list[TaggingPrediction]:
        """The tags of each sentence, in the run's data.tag_scheme, and the chunks they make."""
        sentences = [Sentence(e.tokens, e.gold, 0, False, e.place or "<input>", None) for e in examples]
        predicted = self.decode_tags(model, self.encode(sentences))[0]
        scheme = self.config.data.tag_scheme
        return [TaggingPrediction(tokens=e.tokens, tags=tags, spans=span_records(e.tokens, tags, scheme), gold=e.gold)
                for e, tags in zip(examples, predicted)]

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        """conlleval's per-type breakdown."""
        from textnn.metrics.spans import per_type_table

        return [per_type_table(metrics["per_type"], markdown=True), ""] if "per_type" in metrics else []

    def format_metrics(self, metrics: dict) -> list[str]:
        from textnn.metrics.spans import per_type_table

        lines = super().format_metrics({k: v for k, v in metrics.items() if k != "per_type"})
        if "per_type" in metrics:
            lines += ["per type:", *("  " + line for line in per_type_table(metrics["per_type"]).splitlines())]
        return lines
