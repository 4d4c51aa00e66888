"""How a tagger's sentences become ids (`TaggingEncoding`, a part of `TaggingTask`): words, the characters
of each word and its casing, tags in the training scheme, and for a sub-word encoder (or a frozen feature
encoder) the [CLS] pieces [SEP] of each sentence with the first piece of every word."""

# T tokens per sentence, C characters per token

from __future__ import annotations

import sys

import numpy as np

from textnn import registry
from textnn.data.conll import MAX_WORD_CHARS, Sentence, convert_tags, split_tag
from textnn.data.tokenizers import CLS, SEP, UNK as WORDPIECE_UNK
from textnn.errors import where
from textnn.limits import check_example
from textnn.tasks.tagging.data import EncodedSentences, casing, word_form


class TaggingEncoding:
    """`encode` and `encode_pieces` of `TaggingTask` (its config, tokenizer, vocabularies, tags, features)."""

    def encode(self, sentences: list[Sentence]) -> EncodedSentences:
        """Id arrays of each sentence; tags (if present) converted to the training scheme."""
        words, chars, casings, tags = [], [], [], []
        unknown: dict[str, int] = {}
        for s in sentences:
            check_example(len(s.tokens), where(s.path, s.line), "a sentence")  # read whole, the CRF's table too
            words.append(np.asarray(self.vocab.encode([word_form(self.config, t) for t in s.tokens]), dtype=np.int64))
            width = min(MAX_WORD_CHARS, max(len(t) for t in s.tokens))
            table = np.zeros((len(s.tokens), width), dtype=np.int64)  # [T, C]
            for i, token in enumerate(s.tokens):
                ids = self.chars.encode(list(token[:MAX_WORD_CHARS]))
                table[i, :len(ids)] = ids
            chars.append(table)
            casings.append(np.asarray([casing(t) for t in s.tokens], dtype=np.int64))
            if s.tags is not None:
                converted = convert_tags(s.tags, self.file_scheme, self.scheme)
                for tag in converted:
                    if tag not in self.tag_ids:
                        unknown[split_tag(tag)[1]] = unknown.get(split_tag(tag)[1], 0) + 1
                # A chunk of an unseen type is O for the loss; whole chunks go, so the rest stays valid.
                tags.append(np.asarray([self.tag_ids.get(tag, 0) for tag in converted], dtype=np.int64))
        if unknown:
            print(f"{sentences[0].path}: {sum(unknown.values())} tokens are in chunks of types never seen in "
                  f"training ({', '.join(sorted(unknown))}); they cannot be predicted and count as misses",
                  file=sys.stderr)
        labelled = all(s.tags is not None for s in sentences)
        encoded = EncodedSentences(sentences, words, chars, casings, tags if labelled else None)
        if self.features is not None and self.features.word_level:  # ELMo reads the words as they are
            encoded.word_inputs = [self.features.encode_words(s.tokens) for s in sentences]
        elif self.subwords or self.features is not None:
            encoded.pieces, encoded.first = self.encode_pieces(sentences)
            encoded.piece_pad_id = self.features.vocab.pad_id if self.features is not None else self.vocab.pad_id
        return encoded

    def encode_pieces(self, sentences: list[Sentence]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """[CLS] pieces [SEP] of each sentence (words split one at a time, so pieces never straddle
        words) and the position of each word's first piece; see the module docstring."""
        if self.features is not None:  # the frozen feature encoder's pieces
            tokenizer, vocab = self.features.tokenizer, self.features.vocab
            name, model = self.features.model_name, self.features.model
        else:
            tokenizer, vocab, name, model = self.tokenizer, self.vocab, self.config.model_name, self.config.model
        limit = [n for n in (self.config.data.max_length, registry.encoder_class(name).max_length(model)) if n]
        budget = (min(limit) if limit else 512) - 2
        unk = vocab.stoi.get(WORDPIECE_UNK, vocab.pad_id)
        words = [t for s in sentences for t in s.tokens]
        # a trained tokenizer splits each word into pieces; a rule-based one's "piece" is the word itself
        pieces = iter(tokenizer.tokenize_lines(words) if tokenizer.model is not None
                      else [[word_form(self.config, w)] for w in words])
        cls_id, sep_id = vocab.stoi[CLS], vocab.stoi[SEP]
        all_ids, all_first, cut = [], [], 0
        for s in sentences:
            ids, first = [cls_id], []
            for _ in s.tokens:
                word = vocab.encode(next(pieces)) or [unk]  # a word the pipeline drops entirely reads as [UNK]
                room = budget - (len(ids) - 1)
                if room <= 0:
                    first.append(-1)  # past the cut: tagged from [SEP], below
                    continue
                first.append(len(ids))
                ids += word[:room]
            ids.append(sep_id)
            cut += sum(f < 0 for f in first)
            all_ids.append(np.asarray(ids, dtype=np.int64))
            all_first.append(np.asarray([f if f >= 0 else len(ids) - 1 for f in first], dtype=np.int64))
        if cut:
            print(f"warning: {sentences[0].path}: {cut} words lie past data.max_length pieces in their sentence; "
                  f"they are tagged from the [SEP] state (raise data.max_length)", file=sys.stderr)
        return all_ids, all_first
