"""Shared fixtures: small labelled text files the tests write, and the path of the real data."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

POSITIVE = "good great fine lovely excellent superb charming".split()
NEGATIVE = "bad awful poor terrible horrible dull tedious".split()
FILLER = "the movie was a film plot and it is quite".split()


def write_sentiment_tsv(path: Path, n: int, seed: int, pair: bool = False) -> Path:
    """A learnable toy sentiment set: filler words plus two words that carry the label."""
    rng = random.Random(seed)
    lines = ["sentence\tsentence2\tlabel" if pair else "sentence\tlabel"]
    for _ in range(n):
        label = rng.randint(0, 1)
        words = rng.choices(FILLER, k=rng.randint(2, 8)) + rng.choices(POSITIVE if label else NEGATIVE, k=2)
        rng.shuffle(words)
        if pair:
            other = rng.choices(FILLER, k=3)
            lines.append(f"{' '.join(words)}\t{' '.join(other)}\t{label}")
        else:
            lines.append(f"{' '.join(words)}\t{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def sentiment_files(tmp_path: Path) -> dict[str, Path]:
    return {"train": write_sentiment_tsv(tmp_path / "train.tsv", 300, seed=1),
            "dev": write_sentiment_tsv(tmp_path / "dev.tsv", 80, seed=2)}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's tokenization cache."""
    monkeypatch.setenv("TEXTNN_CACHE", str(tmp_path_factory.mktemp("cache")))


def shared_data(*parts: str) -> Path:
    """A file of the shared datasets, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real dataset not available: {path} (the shared data folder sits beside the repo)")
    return path


# Two CoNLL-2003 sentences whose words WordPiece splits (Smithson, unbelievably): sub-word tagging tests.
SUBWORD_CONLL = """-DOCSTART- -X- O O

John NNP I-NP I-PER
Smithson NNP I-NP I-PER
visited VBD I-VP O
Paris NNP I-NP I-LOC
. . O O

Reuters NNP I-NP I-ORG
reported VBD I-VP O
unbelievably RB I-ADVP O
. . O O
"""
