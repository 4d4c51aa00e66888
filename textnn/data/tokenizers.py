"""Tokenizers: text -> list of token strings. Saved as a small JSON dict in the run directory.

`bpe` is a byte-level BPE (the GPT-2 scheme: Radford et al. 2019 §2.2; Sennrich et al. 2016 merges)
trained with the `tokenizers` library; its token strings are the library's byte-level pieces
("Ġthe" for " the"), and the whole trained model travels inside the saved dict, so a run directory
rebuilds exactly the tokenizer it was trained with.

`wordpiece` is BERT's sub-word tokenizer (Devlin et al. 2019 §3, after Wu et al. 2016): text is
cleaned (and, uncased, lower-cased with accents stripped), split into words and punctuation, and
each word into the longest pieces of the vocabulary from its start ("playing" -> "play", "##ing").
It is trained on data (`train_wordpiece`) or read from a checkpoint's vocab.txt / tokenizer.json
(`load_wordpiece`); its vocabulary starts with the specials [PAD] [UNK] [CLS] [SEP] [MASK].
`__call__` gives the pieces alone: the [CLS] a [SEP] b [SEP] frame is added where sequences are
packed for an encoder (data/packing.py). `encode_with_offsets` keeps, for every piece, the
characters it came from and the index of its word, so predictions map back to words and characters.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Iterable, Iterator

from textnn import progress
from textnn.errors import TextnnError

# The word tokenizer's rules, by version; a run's tokenizer.json names the version it was trained with, so
# the run reads text by its own rules after they change here (and the tokenized-data cache is keyed by it).
# Version 2: a word is a run of letters/digits; an English clitic keeps its apostrophe ("it 's" -> ["it",
# "'s"], "don't" -> ["don", "'t"]); every other non-space character stands alone, so a quoting apostrophe
# is not glued to the word it opens ("the 'best' film" -> ["the", "'", "best", "'", "film"]).
_WORD_RE = re.compile(r"'(?:[stdm]|re|ve|ll)\b|\w+|[^\w\s]", re.IGNORECASE)
# Version 3 reads the conventions of the pre-tokenized corpora alike, so that a model pre-trained
# on one reads another's text as it learned it (WikiText-2 under SST-2: docs/RESULTS.md, ULMFiT):
# - the negation clitic is one token split from its word, as the Penn Treebank does (Marcus et al. 1993):
#   "don't", WikiText's "don 't" and PTB/SST's "do n't" all give ["do", "n't"] (version 2 gave "don 't" for
#   the first two and "do n 't" for the third);
# - WikiText's markers of a split hyphen, comma or point (Merity et al. 2017: "old @-@ fashioned",
#   "1 @,@ 000") are the mark itself, as in "old-fashioned"; its "<unk>" is one token (the unknown word);
# - the Penn Treebank's quotes `` and '' are the plain quote ".
_NEGATION_RE = re.compile(r"(?<=\w)n ?'t\b", re.IGNORECASE)
_WIKITEXT_MARK_RE = re.compile(r" @([-,.])@ ")
_PTB_QUOTE_RE = re.compile(r"``|''")
_WORD_RE_3 = re.compile(r"n't\b|<unk>|'(?:[stdm]|re|ve|ll)\b|\w+|[^\w\s]", re.IGNORECASE)
# Version 4 (current) keeps the words of every script whole and reads English clitics only where they are:
# - text is NFC first, so a decomposed "café" is the word "café", and a combining mark (a Devanagari vowel
#   sign or virama, an accent with no precomposed letter) stays with the letter it sits on ("नमस्ते");
# - the negation clitic is split only from the English words that take it (a closed class), so Dutch
#   "van 't Hoff" and "Van't Hoff" keep their "'t" (the clitic token of version 2);
# - the apostrophes ’ and ʼ read as ' where they begin an English clitic ("don’t" -> "do n't", "it’s" -> "it
#   's"), also as WikiText writes them, apart on both sides ("didn ’ t", "there ’ s"). Elsewhere they stay
#   as written: ’ is also a closing quote, and ʼ a letter of Ukrainian and other orthographies.
_NEGATED = ("do", "does", "did", "is", "are", "was", "were", "has", "have", "had", "ca", "could", "wo", "would",
            "sha", "should", "might", "must", "need", "dare", "ought", "ai")
# Matched from the "n" and checked for the word before it (one look-behind per word: `re` looks behind by a
# fixed width), which is faster than trying each word at every word's start.
_CLITIC_RE_4 = re.compile(r"(?i:(n)(?= ?['’ʼ] ?t\b)(?:" + "|".join(rf"(?<=\b{word}n)" for word in _NEGATED)
                          + r") ?['’ʼ] ?(t)\b|[’ʼ] ?(?=(?:[stdm]|re|ve|ll)\b))")
WORD_RULES_VERSION = 4


@functools.cache
def _word_re_4() -> re.Pattern:
    """Version 4's words: a letter or digit, then letters, digits and combining marks (Unicode categories
    Mn, Mc, Me); any other non-space character stands alone with its marks. Python's `re` has no class for
    the marks, so it is built from the Unicode table on first use (all marks lie below U+20000 but the
    variation selectors at U+E0100). Ranges, and case-insensitive only where it matters, keep it fast."""
    ranges: list[list[int]] = []
    for code in (*range(0x20000), *range(0xE0100, 0xE01F0)):
        if unicodedata.category(chr(code))[0] == "M":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    marks = "".join(f"{chr(first)}-{chr(last)}" for first, last in ranges)  # no mark is special in a class
    return re.compile(rf"(?i:n't)\b|<unk>|'(?i:[stdm]|re|ve|ll)\b|\w[\w{marks}]*|[^\w\s][{marks}]*")


# The word rules whose conventions `_corpus_conventions` gives the WordPieces textnn trains: part of their cache
# key, so a WordPiece is trained again only when they change (version 4 changed none of them).
WORDPIECE_CONVENTIONS = 3


def _corpus_conventions() -> list:
    """The version 3 word rules' conventions as normalisers of the tokenizers library, for the WordPieces
    textnn trains: "n't" split from its word however it arrives, WikiText's @-@ @,@ @.@ as the mark, PTB's
    quotes as ". (BERT's pre-tokenizer then cuts "n't" into n ' t alike in every corpus; WikiText's
    "<unk>" stays three pieces: the library matches special tokens before normalising.)"""
    from tokenizers import Regex, normalizers

    return [normalizers.Replace(Regex("(?i)" + _NEGATION_RE.pattern), " n't"),  # a cased WordPiece's "DON'T" too
            *(normalizers.Replace(f" @{mark}@ ", mark) for mark in "-,."),
            normalizers.Replace(Regex(_PTB_QUOTE_RE.pattern), '"')]


def _words(text: str, rules: int) -> list[str]:
    """`text` split into words and punctuation by the word tokenizer's rules of version `rules`."""
    if rules < 3:
        return _WORD_RE.findall(text)
    if rules == 3:
        text = _NEGATION_RE.sub(lambda found: " " + found.group(0).replace(" ", ""), text)
    else:
        text = unicodedata.normalize("NFC", text)
        if "'" in text or "’" in text or "ʼ" in text:  # searching every line would take as long as the rest
            text = _CLITIC_RE_4.sub(r" \1'\2", text)  # a clitic gets a space before it, dropped below
    text = _PTB_QUOTE_RE.sub('"', _WIKITEXT_MARK_RE.sub(r"\1", text))
    # ASCII has no combining marks: there version 4's words are version 3's, found faster
    return (_WORD_RE_3 if rules == 3 or text.isascii() else _word_re_4()).findall(text)


# BERT's special tokens, in the order a trained WordPiece vocabulary starts with (Devlin et al. 2019 §3).
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
WORDPIECE_SPECIALS = (PAD, UNK, CLS, SEP, MASK)


@dataclass
class Pieces:
    """A text's sub-word pieces and where each came from."""

    tokens: list[str]
    offsets: list[tuple[int, int]]  # [start, end) characters of the (original) text per piece
    word_ids: list[int]  # index of the word (pre-tokenizer split) each piece belongs to


def _training_stage(name: str, vocab_size: int) -> ContextManager[progress.Stage]:
    """The stage lines around training a sub-word vocabulary (textnn/progress.py): seconds to minutes on a
    large corpus, which the `tokenizers` library spends in Rust with no word of its own in a log."""
    return progress.stage(f"train {name} tokenizer ({vocab_size:,} tokens at most)")


def _counted(lines: Iterable[str], stage: progress.Stage) -> Iterator[str]:
    """`lines`, counted into `stage` as the library reads them (its own bar shows the progress)."""
    for line in lines:
        stage.count += 1
        yield line


def _trained_summary(model, stage: progress.Stage) -> str:
    return f"{model.get_vocab_size(with_added_tokens=True):,} tokens from {stage.count:,} lines"


class Tokenizer:
    """Splits text into tokens. `kind` is word (regex), whitespace, char, bpe (see `train_bpe`) or
    wordpiece (`train_wordpiece`, `load_wordpiece`)."""

    KINDS = ("word", "whitespace", "char")  # rule-based: built from the name alone
    TRAINED = ("bpe", "wordpiece")  # learned from data or read from a checkpoint: they carry a model

    def __init__(self, kind: str = "word", lowercase: bool = False, model=None, rules: int = WORD_RULES_VERSION):
        if kind not in self.KINDS and (kind not in self.TRAINED or model is None):
            hint = (f" ({kind} is trained on the data or read from a checkpoint: set data.tokenizer={kind})"
                    if kind in self.TRAINED else "")
            raise TextnnError(f"unknown tokenizer '{kind}'; valid: {', '.join(self.KINDS)}{hint}")
        self.kind = kind
        self.lowercase = lowercase
        self.model = model  # a tokenizers.Tokenizer for the trained kinds, else None
        self.rules = rules  # the word kind's rules version (see _words)

    @property
    def bpe(self):
        """The byte-level BPE model (kind bpe), else None."""
        return self.model if self.kind == "bpe" else None

    @classmethod
    def train_bpe(cls, lines: Iterable[str], vocab_size: int, specials: tuple[str, ...],
                  lowercase: bool = False) -> "Tokenizer":
        """Train a byte-level BPE of `vocab_size` tokens on `lines`; `specials` get ids 0, 1, 2, ...

        Byte-level: every string is a sequence of bytes and all 256 bytes are in the vocabulary, so no
        text is ever unknown and decoding gives back the exact input (Radford et al. 2019 §2.2). No
        space is added before a line's first word, so a line decodes to itself; a special written in
        the text (WikiText's literal `<unk>`) becomes that special token.
        """
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

        bpe = HFTokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        with _training_stage("BPE", vocab_size) as stage:
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                          show_progress=progress.own_bar_allowed(),
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            bpe.train_from_iterator(_counted((line.lower() if lowercase else line for line in lines), stage),
                                    trainer=trainer)
            stage.summary = _trained_summary(bpe, stage)
        return cls("bpe", lowercase, bpe)

    @staticmethod
    def _wordpiece_pipeline(model, lowercase: bool):
        """BERT's text pipeline around a WordPiece model: the BasicTokenizer's cleaning, Chinese-character
        splitting and (uncased) lower-casing with accent stripping, then words and punctuation."""
        from tokenizers import Tokenizer as HFTokenizer, decoders, normalizers, pre_tokenizers

        tokenizer = HFTokenizer(model)
        tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                          strip_accents=None, lowercase=lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        return tokenizer

    @classmethod
    def train_wordpiece(cls, lines: Iterable[str], vocab_size: int, lowercase: bool = True) -> "Tokenizer":
        """Train a WordPiece vocabulary of at most `vocab_size` pieces on `lines` (cased or uncased);
        the specials [PAD] [UNK] [CLS] [SEP] [MASK] get ids 0-4. Its normaliser also reads the corpora's
        conventions alike, as the word rules of version 3 do (`_corpus_conventions`); it is saved with the
        run, so a run trained before keeps its own. A checkpoint's WordPiece (`load_wordpiece`) keeps
        BERT's pipeline exactly."""
        from tokenizers import models, normalizers, trainers

        tokenizer = cls._wordpiece_pipeline(models.WordPiece(unk_token=UNK), lowercase)
        tokenizer.normalizer = normalizers.Sequence([tokenizer.normalizer, *_corpus_conventions()])
        with _training_stage("WordPiece", vocab_size) as stage:
            trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(WORDPIECE_SPECIALS),
                                                show_progress=progress.own_bar_allowed())
            tokenizer.train_from_iterator(_counted(lines, stage), trainer=trainer)
            stage.summary = _trained_summary(tokenizer, stage)
        return cls("wordpiece", lowercase, tokenizer)

    @classmethod
    def load_wordpiece(cls, path: str | Path, lowercase: bool) -> "Tokenizer":
        """A checkpoint's WordPiece: a tokenizer.json (the library's own file) or a vocab.txt (one piece per
        line, id = line number) with BERT's pipeline, uncased when `lowercase`.

        Both read a special token written in the text ("a [SEP] b") as that one token, as `transformers`
        does: a tokenizer.json lists them as special added tokens, and for a vocab.txt the specials it
        holds (WORDPIECE_SPECIALS) are added the same way, matched in the raw text before lower-casing
        and splitting, so they are never cut into "[", "sep", "]"."""
        from tokenizers import Tokenizer as HFTokenizer, models

        path = Path(path)
        try:
            if path.name == "vocab.txt":
                vocab = {}
                for line in path.read_text(encoding="utf-8").splitlines():
                    vocab.setdefault(line, len(vocab))  # a repeated line keeps its first id, as BERT's reader
                tokenizer = cls._wordpiece_pipeline(models.WordPiece(vocab, unk_token=UNK), lowercase)
                tokenizer.add_special_tokens([special for special in WORDPIECE_SPECIALS if special in vocab])
            else:
                tokenizer = HFTokenizer.from_file(str(path))
        except (OSError, UnicodeDecodeError, Exception) as err:  # the library raises its own types on bad JSON
            raise TextnnError(f"{path}: not a readable WordPiece vocabulary ({err}); give the checkpoint's "
                              f"vocab.txt or tokenizer.json") from None
        if type(tokenizer.model).__name__ != "WordPiece":
            raise TextnnError(f"{path}: holds a {type(tokenizer.model).__name__} model, not WordPiece; a BERT "
                              f"checkpoint needs its WordPiece vocabulary")
        # A checkpoint's tokenizer.json may pad and truncate everything to a fixed length and add
        # [CLS]/[SEP] itself: here it gives pieces alone; packing and truncation are the task's.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.post_processor = None
        return cls("wordpiece", lowercase, tokenizer)

    def vocabulary(self) -> list[str]:
        """A trained tokenizer's token strings in id order (the run's vocabulary is exactly this list)."""
        if self.model is None:
            raise ValueError(f"a {self.kind} tokenizer has no fixed vocabulary; build one from the data")
        table = self.model.get_vocab(with_added_tokens=True)
        return sorted(table, key=table.__getitem__)

    def _prepare(self, text: str) -> str:
        # WordPiece lower-cases in its own normaliser, which keeps offsets into the original text.
        return text.lower() if self.lowercase and self.kind != "wordpiece" else text

    def tokenize_lines(self, lines: list[str]) -> list[list[str]]:
        """`self(line)` for every line; trained kinds encode them all in one parallel call of the library."""
        if self.model is None:
            return [self(line) for line in lines]
        return [encoding.tokens for encoding in
                self.model.encode_batch([self._prepare(line) for line in lines], add_special_tokens=False)]

    def __call__(self, text: str) -> list[str]:
        text = self._prepare(text)
        if self.kind == "word":
            return _words(text, self.rules)
        if self.kind == "whitespace":
            return text.split()
        if self.model is not None:
            return self.model.encode(text, add_special_tokens=False).tokens
        return list(text)

    def encode_with_offsets(self, text: str) -> Pieces:
        """The pieces of `text` with their character spans in `text` and their word indices (trained kinds)."""
        if self.model is None:
            raise ValueError(f"encode_with_offsets needs a bpe or wordpiece tokenizer, not {self.kind}")
        encoding = self.model.encode(self._prepare(text), add_special_tokens=False)
        return Pieces(tokens=list(encoding.tokens), offsets=[tuple(o) for o in encoding.offsets],
                      word_ids=[-1 if w is None else w for w in encoding.word_ids])

    def to_dict(self) -> dict:
        data = {"kind": self.kind, "lowercase": self.lowercase}
        if self.kind == "word":  # part of the tokenized-data cache key
            data["rules"] = self.rules
        if self.model is not None:  # the library's own JSON, nested: merges and vocabulary included
            data[self.kind] = json.loads(self.model.to_str())
        return data

    @classmethod
    def load(cls, path: Path) -> "Tokenizer":
        """The tokenizer saved in a run (tokenizer.json); a damaged or foreign file is one error naming it."""
        from textnn.data.vocab import read_run_json

        data = read_run_json(path)
        kinds = (*cls.KINDS, *cls.TRAINED)
        if (not isinstance(data, dict) or data.get("kind") not in kinds or not isinstance(data.get("lowercase"), bool)
                or (data["kind"] in cls.TRAINED and not isinstance(data.get(data["kind"]), dict))):
            raise TextnnError(f"{path}: expected {{\"kind\": {'|'.join(kinds)}, \"lowercase\": true|false, ...}} as "
                              f"`textnn train` writes it; the file is damaged or from elsewhere: re-train the run")
        if data["kind"] == "word" and data.get("rules", 2) not in range(2, WORD_RULES_VERSION + 1):
            raise TextnnError(f"{path}: word rules {data['rules']!r}; this textnn knows versions 2 to "
                              f"{WORD_RULES_VERSION}: the run was made by a newer textnn, so read it with that one")
        try:
            return cls.from_dict(data)
        except Exception as err:  # the tokenizers library has its own error type for a damaged model
            raise TextnnError(f"{path}: the saved {data['kind']} model does not load ({str(err)[:80]}); the file is damaged: "
                              f"re-train the run") from None

    @classmethod
    def from_dict(cls, data: dict) -> "Tokenizer":
        model = None
        if data["kind"] in cls.TRAINED:
            from tokenizers import Tokenizer as HFTokenizer

            model = HFTokenizer.from_str(json.dumps(data[data["kind"]]))
        rules = data.get("rules", 2)  # every run saved before version 3 names its version
        return cls(kind=data["kind"], lowercase=bool(data["lowercase"]), model=model, rules=rules)

    def join(self, tokens: list[str]) -> str:
        """Inverse for display: characters concatenate, words join with spaces, sub-word pieces decode to text."""
        if self.model is not None:
            return self.model.decoder.decode(tokens)
        return "".join(tokens) if self.kind == "char" else " ".join(tokens)
