"""Intrinsic evaluation of word vectors: analogies (3CosAdd, 3CosMul) and word-pair similarity.

Analogy files are word2vec's `questions-words.txt` format: `: section` lines, then `a b c d`
lines read "a is to b as c is to d". Neither textnn nor its data ship such a file: word2vec's own
source does (`ANALOGY_FILE_SOURCE` says where). As word2vec's compute-accuracy (and gensim's
`evaluate_word_analogies`) do, only the `top_n` most frequent words are candidates, a question
with a word outside them is not answered (counted, and reported as coverage), the comparison is
case-insensitive, and a, b and c are never the answer. Sections whose name starts with "gram" are
syntactic, the others semantic (Mikolov et al. 2013a, section 4.1).

Similarity files hold `w1<TAB>w2<TAB>score` lines (`#` starts a comment): Spearman's rank
correlation between the scores and the cosine similarities of the pairs whose words are known.
"""

# Q questions, N candidate words, D vector size

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textnn.data.readers import missing_file, read_text
from textnn.errors import TextnnError, where
from textnn.metrics.correlation import spearman

# 3CosMul's epsilon, which keeps the division finite (Levy & Goldberg 2014, section 3).
COSMUL_EPSILON = 1e-3


# Where a user gets the analogy questions of Mikolov et al. (2013a): its error for a missing file and
# the README both say it.
ANALOGY_FILE_SOURCE = ("word2vec's analogy questions are questions-words.txt in word2vec's source "
                       "(https://github.com/tmikolov/word2vec, questions-words.txt; download that file), and "
                       "gensim installs a copy: python -c \"from gensim.test.utils import datapath; "
                       "print(datapath('questions-words.txt'))\"")


def _read_lines(path: str | Path) -> list[str]:
    """The lines of an evaluation file; a missing one is an error that says where analogy files come from."""
    if not Path(path).exists():
        raise TextnnError(f"{missing_file(path)}; {ANALOGY_FILE_SOURCE}; a similarity file holds "
                          f"word1<TAB>word2<TAB>score lines")
    return read_text(path).splitlines()


def is_analogy_file(path: str | Path) -> bool:
    """Whether a file is an analogy file: its first line that is not blank is a `: section` line."""
    for line in _read_lines(path):
        if line.strip():
            return line.lstrip().startswith(":")
    return False


@dataclass
class Analogy:
    section: str
    words: tuple[str, str, str, str]


def read_analogies(path: str | Path) -> list[Analogy]:
    """The questions of an analogy file; a line that is not four words raises naming path:line."""
    questions, section = [], ""
    for number, line in enumerate(_read_lines(path), start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith(":"):
            section = text[1:].strip()
            continue
        words = text.split()
        if len(words) != 4:
            raise TextnnError(f"{where(str(path), number)}: expected four words 'a b c d' or a ': section' line, "
                              f"got {len(words)} fields; fix or remove that line")
        if not section:
            raise TextnnError(f"{where(str(path), number)}: a question before the first ': section' line; "
                              f"start the file with a section name")
        questions.append(Analogy(section, (words[0], words[1], words[2], words[3])))
    if not questions:
        raise TextnnError(f"{path}: no analogy questions found; expected ': section' lines then 'a b c d' lines")
    return questions


def read_similarity_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """(w1, w2, score) of a similarity file; a malformed line raises naming path:line."""
    pairs = []
    for number, line in enumerate(_read_lines(path), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = text.split("\t")
        if len(fields) != 3:
            raise TextnnError(f"{where(str(path), number)}: expected 'word1<TAB>word2<TAB>score', got "
                              f"{len(fields)} tab-separated fields; fix or remove that line")
        try:
            score = float(fields[2])
        except ValueError:
            raise TextnnError(f"{where(str(path), number)}: score {fields[2]!r} is not a number; "
                              f"fix that line") from None
        pairs.append((fields[0].strip(), fields[1].strip(), score))
    if not pairs:
        raise TextnnError(f"{path}: no word pairs found; expected 'word1<TAB>word2<TAB>score' lines")
    return pairs


class WordVectors:
    """Words (most frequent first) and their vectors, with the look-ups the commands and metrics need."""

    def __init__(self, words: list[str], vectors: np.ndarray) -> None:
        self.words = list(words)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
        self.unit = self.vectors / np.maximum(norms, 1e-12)  # [V, D]
        self.index = {word: i for i, word in enumerate(self.words)}
        self.lower_index: dict[str, int] = {}
        for i, word in enumerate(self.words):  # the most frequent casing wins, as in gensim
            self.lower_index.setdefault(word.lower(), i)

    def find(self, word: str) -> int | None:
        """The row of `word`: the exact form, else its most frequent casing."""
        index = self.index.get(word)
        return index if index is not None else self.lower_index.get(word.lower())

    def _require(self, word: str) -> int:
        index = self.find(word)
        if index is None:
            raise TextnnError(f"word {word!r} is not in the vocabulary ({len(self.words):,} words); "
                              f"try another word or a lower data.min_freq")
        return index

    def _top(self, scores: np.ndarray, exclude: set[int], k: int) -> list[tuple[str, float]]:
        order = np.argsort(-scores)
        found = []
        for i in order:
            if int(i) not in exclude:
                found.append((self.words[int(i)], float(scores[i])))
                if len(found) == k:
                    break
        return found

    def neighbors(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The k words of highest cosine similarity to `word` (itself left out)."""
        index = self._require(word)
        return self._top(self.unit @ self.unit[index], {index}, k)

    def analogy(self, a: str, b: str, c: str, k: int = 10) -> list[tuple[str, float]]:
        """a is to b as c is to ?: the k best words by 3CosAdd, cos(x, b) - cos(x, a) + cos(x, c)."""
        ia, ib, ic = self._require(a), self._require(b), self._require(c)
        scores = self.unit @ (self.unit[ib] - self.unit[ia] + self.unit[ic])
        return self._top(scores, {ia, ib, ic}, k)

    def similarity(self, a: str, b: str) -> float:
        return float(self.unit[self._require(a)] @ self.unit[self._require(b)])


def evaluate_analogies(vectors: WordVectors, questions: list[Analogy], top_n: int = 30000,
                       chunk: int = 256) -> dict:
    """Accuracy of 3CosAdd and 3CosMul (Levy & Goldberg 2014) over the answerable questions.

    Returns {"3cosadd", "3cosmul", "semantic_3cosadd", "syntactic_3cosadd", (same for 3cosmul),
    "coverage", "questions", "answered", "sections": {name: {...}}}: accuracies over the answered
    questions, coverage = answered / questions.
    """
    if top_n < 1:
        raise TextnnError(f"top_n = {top_n}; give the number of most frequent words to search (e.g. 30000)")
    limit = min(top_n, len(vectors.words))
    # Case-insensitive, as compute-accuracy: a form stands for its most frequent casing in the top N.
    canonical: dict[str, int] = {}
    for i in range(limit):
        canonical.setdefault(vectors.words[i].lower(), i)
    canon_of_row = np.array([canonical[vectors.words[i].lower()] for i in range(limit)], np.int64)  # [N]
    unit = vectors.unit[:limit]  # [N, D]
    answered_rows, answered_ids = [], []
    for number, question in enumerate(questions):
        ids = [canonical.get(word.lower()) for word in question.words]
        if all(i is not None for i in ids):
            answered_rows.append(number)
            answered_ids.append(ids)
    ids = np.array(answered_ids, np.int64).reshape(-1, 4)  # [Q, 4]
    add_right = np.zeros(len(ids), bool)
    mul_right = np.zeros(len(ids), bool)
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        cos = unit[part[:, :3]].reshape(-1, unit.shape[1]) @ unit.T  # [Q*3, N]: a, b, c against every word
        cos = cos.reshape(len(part), 3, -1)  # [Q, 3, N]
        cos_a, cos_b, cos_c = cos[:, 0], cos[:, 1], cos[:, 2]
        excluded = (canon_of_row[None, :] == part[:, 0:1]) | (canon_of_row[None, :] == part[:, 1:2]) | (
            canon_of_row[None, :] == part[:, 2:3])  # [Q, N]
        add = np.where(excluded, -np.inf, cos_b - cos_a + cos_c)
        # 3CosMul on cosines shifted to [0, 1] (Levy & Goldberg 2014, section 3)
        mul = np.where(excluded, -np.inf, ((cos_b + 1) / 2) * ((cos_c + 1) / 2) / ((cos_a + 1) / 2 + COSMUL_EPSILON))
        add_right[start:start + chunk] = canon_of_row[add.argmax(1)] == part[:, 3]
        mul_right[start:start + chunk] = canon_of_row[mul.argmax(1)] == part[:, 3]

    def accuracy(right: np.ndarray, rows: np.ndarray) -> float:
        return float(right[rows].mean()) if rows.size else 0.0

    sections_of = np.array([questions[r].section for r in answered_rows], dtype=object)
    syntactic = np.array([s.startswith("gram") for s in sections_of], bool)
    everything = np.arange(len(ids))
    result: dict = {
        "3cosadd": accuracy(add_right, everything),
        "3cosmul": accuracy(mul_right, everything),
        "semantic_3cosadd": accuracy(add_right, np.flatnonzero(~syntactic)),
        "syntactic_3cosadd": accuracy(add_right, np.flatnonzero(syntactic)),
        "semantic_3cosmul": accuracy(mul_right, np.flatnonzero(~syntactic)),
        "syntactic_3cosmul": accuracy(mul_right, np.flatnonzero(syntactic)),
        "coverage": len(ids) / len(questions),
        "questions": len(questions),
        "answered": len(ids),
        "top_n": limit,
    }
    sections: dict[str, dict] = {}
    for name in dict.fromkeys(q.section for q in questions):
        rows = np.flatnonzero(sections_of == name) if len(ids) else np.array([], np.int64)
        total = sum(1 for q in questions if q.section == name)
        sections[name] = {"3cosadd": accuracy(add_right, rows), "3cosmul": accuracy(mul_right, rows),
                          "answered": int(rows.size), "questions": total}
    result["sections"] = sections
    return result


def evaluate_similarity(vectors: WordVectors, pairs: list[tuple[str, str, float]]) -> dict:
    """Spearman correlation between human scores and cosine similarities, over the pairs whose two
    words are known (case-insensitive); the rest are counted in `missing` and in `coverage`."""
    gold, predicted = [], []
    for first, second, score in pairs:
        i, j = vectors.find(first), vectors.find(second)
        if i is None or j is None:
            continue
        gold.append(score)
        predicted.append(float(vectors.unit[i] @ vectors.unit[j]))
    return {"spearman": spearman(gold, predicted) if len(gold) >= 2 else 0.0,
            "coverage": len(gold) / len(pairs), "pairs": len(pairs), "missing": len(pairs) - len(gold)}
