"""A translation run's text on both sides (`TranslationText`, a part of `TranslationTask`): the tokenizers
and vocabularies built from the training pairs, sentences as the ids the model reads and writes, and output
ids as text again."""

from __future__ import annotations

from textnn import registry
from textnn.config import Config
from textnn.data.parallel import ParallelText, detokenize_words
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import UNK, Vocab
from textnn.limits import MAX_PAIR_TOKENS
from textnn.tasks.translation.data import BOS, EOS, SPECIALS


def text_pipelines(config: Config, train: ParallelText) -> tuple[tuple[Tokenizer, Tokenizer], tuple[Vocab, Vocab]]:
    """Tokenizers and vocabularies from the training pairs: joint (the same objects twice) or one per side."""
    data = config.data
    sides = [train.source + train.target] if data.joint_vocab else [train.source, train.target]
    pipelines = []
    for lines in sides:
        if data.tokenizer == "bpe":
            tokenizer = Tokenizer.train_bpe(lines, data.bpe_vocab_size, SPECIALS, data.lowercase)
            vocab = Vocab(tokenizer.vocabulary())
        else:
            tokenizer = Tokenizer(data.tokenizer, data.lowercase)
            vocab = Vocab.build(tokenizer.tokenize_lines(lines), min_freq=data.min_freq,
                                max_size=data.max_vocab, specials=SPECIALS)
        pipelines.append((tokenizer, vocab))
    (src_tok, src_vocab), (tgt_tok, tgt_vocab) = pipelines[0], pipelines[-1]
    return (src_tok, tgt_tok), (src_vocab, tgt_vocab)


class TranslationText:
    """Text <-> ids of `TranslationTask` (its config, source and target tokenizers and vocabularies)."""

    def _length_limit(self) -> int:
        """Most tokens per side before </s> (or after <s>): data.max_length and the family's own limit, and
        without either the input-size policy's limit on a sentence (textnn/limits.py)."""
        family = registry.encoder_class(self.config.model_name).max_length(self.config.model)
        limits = [n for n in (self.config.data.max_length, family - 1 if family else 0) if n > 0]
        return min(limits) if limits else MAX_PAIR_TOKENS

    def source_ids(self, lines: list[str]) -> list[list[int]]:
        """Ids of source sentences as the encoder reads them: tokens then </s>."""
        eos = self.source_vocab.stoi[EOS]
        return [self.source_vocab.encode(tokens) + [eos] for tokens in self.source_tokenizer.tokenize_lines(lines)]

    def target_ids(self, lines: list[str]) -> list[list[int]]:
        """Ids of target sentences: <s> tokens </s>."""
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        return [[bos, *self.target_vocab.encode(tokens), eos]
                for tokens in self.target_tokenizer.tokenize_lines(lines)]

    def detokenize(self, ids: list[int]) -> str:
        """Plain text of output ids (specials dropped): BPE pieces decode to the exact text; words are joined
        with the spaces before punctuation removed."""
        specials = {self.target_vocab.stoi[s] for s in SPECIALS if s != UNK and s in self.target_vocab.stoi}
        tokens = self.target_vocab.decode(i for i in ids if i not in specials)
        if self.target_tokenizer.kind == "word":
            return detokenize_words(tokens)
        # A BPE output may begin with a piece made for mid-sentence (" the"): lines carry no outer spaces.
        return self.target_tokenizer.join(tokens).strip()

    def source_labels(self, ids: list[int]) -> list[str]:
        return [self._piece(self.source_tokenizer, self.source_vocab, i) for i in ids]

    def target_labels(self, ids: list[int]) -> list[str]:
        return [self._piece(self.target_tokenizer, self.target_vocab, i) for i in ids]

    @staticmethod
    def _piece(tokenizer: Tokenizer, vocab: Vocab, index: int) -> str:
        token = vocab.itos[index]
        if tokenizer.kind != "bpe" or token in SPECIALS:
            return token
        return tokenizer.join([token])  # "Ġdog" -> " dog"

    def encode_sources(self, lines: list[str]) -> list[list[int]]:
        """Source ids for translation, cut to the length limit (keeping </s>)."""
        limit = self._length_limit()
        return [s[:limit] + s[-1:] if limit and len(s) - 1 > limit else s for s in self.source_ids(lines)]
