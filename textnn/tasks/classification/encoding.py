"""How a classifier's texts become ids (`ClassificationEncoding`, a part of `ClassificationTask`): each text
(or pair) cut to the tokens the encoder reads, packed as [CLS] a [SEP] (b [SEP]) for an encoder that reads
segments, its label as a class id (or a real value), and the words a frozen feature encoder reads."""

from __future__ import annotations

from textnn import registry
from textnn.data.packing import pack
from textnn.data.readers import Record
from textnn.data.tokenizers import CLS, SEP
from textnn.errors import TextnnError, where
from textnn.tasks.classification.data import EncodedTexts, read_and_tokenize, real_label


class ClassificationEncoding:
    """`encode` and `encode_file` of `ClassificationTask` (its config, tokenizer, vocab, labels, features)."""

    @property
    def is_pair(self) -> bool:
        return bool(self.config.data.text_pair_column)

    @property
    def packs(self) -> bool:
        """Inputs are packed into one [CLS] a [SEP] (b [SEP]) sequence with segment ids (BERT)."""
        return "segments" in registry.encoder_class(self.config.model_name).reads

    def _max_length(self) -> int | None:
        """Tokens kept per input: data.max_length, and never more than the encoder reads (a GPT's context)."""
        limits = [n for n in (self.config.data.max_length,
                              registry.encoder_class(self.config.model_name).max_length(self.config.model)) if n]
        return min(limits) if limits else None

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
        labels = [self._label(record, require_known_labels) for record in records]
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

    def _label(self, record: Record, require_known: bool) -> int | float:
        """A record's label as the model is trained on it: a real value (regression; NaN without one), or a
        class id (-1 without one, or for a label training never saw when `require_known` is off)."""
        if self.config.data.regression:
            return real_label(record) if record.label is not None else float("nan")
        if record.label is None:
            return -1
        if record.label in self.label_ids:
            return self.label_ids[record.label]
        if require_known:
            raise TextnnError(f"{where(record.path, record.line)}: label {record.label!r} never occurs in the "
                              f"training data (labels: {', '.join(self.labels)}); fix the label or add "
                              f"training examples for it")
        return -1

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedTexts:
        records, tokens = read_and_tokenize(self.config, self.tokenizer, path, require_labels=require_labels)
        return self.encode(records, tokens, require_known_labels=require_labels)
