"""Tokenizers: text -> list of token strings. Saved as a small JSON dict in the run directory.

`bpe` is a byte-level BPE (the GPT-2 scheme: Radford et al. 2019 §2.2; Sennrich et al. 2016 merges)
trained with the `tokenizers` library; its token strings are the library's byte-level pieces
("Ġthe" for " the"), and the whole trained model travels inside the saved dict, so a run directory
rebuilds exactly the tokenizer it was trained with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from textnn.errors import TextnnError

# A word is a run of letters/digits; an English clitic keeps its apostrophe ("it 's" -> ["it", "'s"],
# "don't" -> ["don", "'t"]); every other non-space character stands alone, so a quoting apostrophe
# is not glued to the word it opens ("the 'best' film" -> ["the", "'", "best", "'", "film"]).
_WORD_RE = re.compile(r"'(?:[stdm]|re|ve|ll)\b|\w+|[^\w\s]", re.IGNORECASE)
# Bumped whenever the rules above change, so tokens cached under the old rules are not reused.
_WORD_RULES_VERSION = 2


class Tokenizer:
    """Splits text into tokens. `kind` is word (regex), whitespace, char or bpe (see `train_bpe`)."""

    KINDS = ("word", "whitespace", "char")  # rule-based: built from the name alone
    TRAINED = "bpe"  # learned from data: built by `train_bpe` (or `from_dict` of a saved one)

    def __init__(self, kind: str = "word", lowercase: bool = False, bpe=None):
        if bpe is not None:
            kind = self.TRAINED
        elif kind not in self.KINDS:
            hint = " (bpe is trained on the data: set data.tokenizer=bpe)" if kind == self.TRAINED else ""
            raise TextnnError(f"unknown tokenizer '{kind}'; valid: {', '.join(self.KINDS)}{hint}")
        self.kind = kind
        self.lowercase = lowercase
        self.bpe = bpe  # a tokenizers.Tokenizer for kind "bpe"

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
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        bpe.train_from_iterator((line.lower() if lowercase else line for line in lines), trainer=trainer)
        return cls("bpe", lowercase, bpe)

    def vocabulary(self) -> list[str]:
        """A bpe tokenizer's token strings in id order (the run's vocabulary is exactly this list)."""
        if self.bpe is None:
            raise ValueError(f"a {self.kind} tokenizer has no fixed vocabulary; build one from the data")
        table = self.bpe.get_vocab(with_added_tokens=True)
        return sorted(table, key=table.__getitem__)

    def tokenize_lines(self, lines: list[str]) -> list[list[str]]:
        """`self(line)` for every line; bpe encodes them all in one parallel call of the library."""
        if self.bpe is None:
            return [self(line) for line in lines]
        return [encoding.tokens for encoding in
                self.bpe.encode_batch([line.lower() for line in lines] if self.lowercase else lines)]

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        if self.kind == "word":
            return _WORD_RE.findall(text)
        if self.kind == "whitespace":
            return text.split()
        if self.kind == "bpe":
            return self.bpe.encode(text).tokens
        return list(text)

    def to_dict(self) -> dict:
        data = {"kind": self.kind, "lowercase": self.lowercase}
        if self.kind == "word":  # part of the tokenized-data cache key
            data["rules"] = _WORD_RULES_VERSION
        if self.bpe is not None:  # the library's own JSON, nested: merges and vocabulary included
            data["bpe"] = json.loads(self.bpe.to_str())
        return data

    @classmethod
    def load(cls, path: Path) -> "Tokenizer":
        """The tokenizer saved in a run (tokenizer.json); a damaged or foreign file is one error naming it."""
        from textnn.data.vocab import read_run_json

        data = read_run_json(path)
        kinds = (*cls.KINDS, cls.TRAINED)
        if (not isinstance(data, dict) or data.get("kind") not in kinds or not isinstance(data.get("lowercase"), bool)
                or (data["kind"] == cls.TRAINED and not isinstance(data.get("bpe"), dict))):
            raise TextnnError(f"{path}: expected {{\"kind\": {'|'.join(kinds)}, \"lowercase\": true|false, ...}} as "
                              f"`textnn train` writes it; the file is damaged or from elsewhere: re-train the run")
        try:
            return cls.from_dict(data)
        except Exception as err:  # the tokenizers library has its own error type for a damaged model
            raise TextnnError(f"{path}: the saved BPE model does not load ({str(err)[:80]}); the file is damaged: "
                              f"re-train the run") from None

    @classmethod
    def from_dict(cls, data: dict) -> "Tokenizer":
        bpe = None
        if data["kind"] == "bpe":
            from tokenizers import Tokenizer as HFTokenizer

            bpe = HFTokenizer.from_str(json.dumps(data["bpe"]))
        return cls(kind=data["kind"], lowercase=bool(data["lowercase"]), bpe=bpe)

    def join(self, tokens: list[str]) -> str:
        """Inverse for display: characters concatenate, words join with spaces, BPE pieces decode to text."""
        if self.kind == "bpe":
            return self.bpe.decoder.decode(tokens)
        return "".join(tokens) if self.kind == "char" else " ".join(tokens)
