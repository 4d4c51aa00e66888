"""Token <-> id tables, built from training counts and saved as JSON."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable

from textnn.errors import TextnnError
from textnn.files import atomic_write_text

PAD, UNK = "<pad>", "<unk>"


class Vocab:
    """An ordered token list. Specials come first, so `<pad>` is id 0 and `<unk>` id 1."""

    def __init__(self, tokens: list[str], unk: str | None = UNK):
        self.itos = list(tokens)
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise TextnnError("vocabulary has duplicate tokens")
        self.unk_id = self.stoi[unk] if unk is not None else None
        self.pad_id = self.stoi.get(PAD, 0)

    @classmethod
    def build(cls, token_lists: Iterable[list[str]], min_freq: int = 1, max_size: int = 0,
              specials: tuple[str, ...] = (PAD, UNK)) -> "Vocab":
        """Most frequent first (ties broken alphabetically, so the result is deterministic)."""
        counts = Counter(token for tokens in token_lists for token in tokens)
        kept = sorted((t for t, c in counts.items() if c >= min_freq and t not in specials),
                      key=lambda t: (-counts[t], t))
        if counts and not kept and min_freq > 1:  # a model could learn nothing from such a vocabulary
            raise TextnnError(f"data.min_freq={min_freq} leaves no token in the vocabulary (the most frequent one "
                              f"is seen {max(counts.values())} times in training); lower data.min_freq")
        if max_size:
            kept = kept[: max(0, max_size - len(specials))]
        return cls([*specials, *kept], unk=UNK if UNK in specials else None)

    def extend(self, tokens: Iterable[str]) -> "Vocab":
        """A new vocabulary with `tokens` not yet present appended (existing ids are unchanged)."""
        new = [t for t in dict.fromkeys(tokens) if t not in self.stoi]
        unk = self.itos[self.unk_id] if self.unk_id is not None else None
        return Vocab([*self.itos, *new], unk=unk)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        if self.unk_id is None:
            missing = [t for t in tokens if t not in self.stoi]
            if missing:
                raise TextnnError(f"token {missing[0]!r} is not in the vocabulary (which has no <unk>)")
            return [self.stoi[t] for t in tokens]
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        out = []
        for i in ids:
            if not 0 <= int(i) < len(self.itos):
                raise TextnnError(f"token id {int(i)} is outside the vocabulary (size {len(self.itos)})")
            out.append(self.itos[int(i)])
        return out

    def save(self, path: str | Path) -> None:
        unk = self.itos[self.unk_id] if self.unk_id is not None else None
        atomic_write_text(path, json.dumps({"tokens": self.itos, "unk": unk}, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """A saved vocabulary; a missing, damaged or foreign file is one error naming it."""
        path = Path(path)
        data = read_run_json(path)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        unk = data.get("unk") if isinstance(data, dict) else None
        if (not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens)
                or not (unk is None or unk in tokens)):
            raise TextnnError(f"{path}: expected {{\"tokens\": [...], \"unk\": ...}} as `textnn train` writes it; "
                              f"the file is damaged or from elsewhere: re-train the run")
        try:
            return cls(tokens, unk=unk)
        except TextnnError as err:
            raise TextnnError(f"{path}: {err}; the file is damaged: re-train the run") from None


def read_run_json(path: Path) -> object:
    """A JSON file of a run directory, or one clear error naming it (missing, not UTF-8, not JSON)."""
    if not path.is_file():
        raise TextnnError(f"{path}: missing; the run directory is incomplete (re-train, or copy the file back)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        reason = "not UTF-8" if isinstance(err, UnicodeDecodeError) else "not valid JSON"
        raise TextnnError(f"{path}: {reason} ({str(err)[:80]}); the file is damaged: re-train the run") from None
    except OSError as err:
        raise TextnnError(f"{path}: cannot read it ({err.strerror}); check its permissions") from None
