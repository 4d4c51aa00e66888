"""Word embeddings: train word2vec on plain text, write the vectors, evaluate them.

Data: one sentence or paragraph per line, tokens separated by whitespace (`data.format: text`).
The corpus is read once into an integer array (tokens below data.min_freq dropped and counted, as
word2vec does), with a sentence number per token so that no window crosses a line. The
vocabulary is ordered most frequent first, so "the N most frequent words" are the first N rows.

A run writes, beside the usual files, `vectors.txt` and `vectors.bin` (word2vec's text and
binary formats, which gensim's `KeyedVectors.load_word2vec_format` and textnn's `data.vectors`
read). Training is `training/word2vec.py`'s own loop (sparse SGD, not the generic Trainer).

Evaluation (`textnn evaluate RUN --data FILE`, and data.dev / data.test when given): an analogy
file (`: section` lines) gives 3CosAdd / 3CosMul accuracy; a word-pair file gives Spearman's rho
(metrics/word_vectors.py).
"""

# V vocabulary size, M corpus tokens

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from textnn.config import Config, DataConfig, opt
from textnn.data.readers import read_text
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError, short
from textnn.interop.vectors import write_word2vec
from textnn.metrics.word_vectors import (WordVectors, evaluate_analogies, evaluate_similarity, is_analogy_file,
                                        read_analogies, read_similarity_pairs)
from textnn.models.base import InputSpec
from textnn.models.word2vec import Word2Vec, huffman_tree, keep_probabilities, noise_distribution, seed_of
from textnn.tasks.base import Task
from textnn.tasks.checks import refuse_init_from, require_train

# Rows of the noise table (word2vec.c uses 1e8): enough that a word of probability p holds about
# p * size rows, so the table's distribution is the unigram^0.75 one to within 1e-7 per word.
NOISE_TABLE_SIZE = 10_000_000
TOP_N = 30000  # analogy candidates: the most frequent words (word2vec's compute-accuracy default)


def read_evaluation_file(path: str) -> tuple[str, list]:
    """("analogy", questions) for a file of `: section` and `a b c d` lines, else ("similarity", pairs)."""
    if is_analogy_file(path):
        return "analogy", read_analogies(path)
    return "similarity", read_similarity_pairs(path)


@dataclass
class EmbeddingsData(DataConfig):
    format: str = opt("text", "text: one sentence or paragraph per line, tokens separated by whitespace")
    tokenizer: str = opt("whitespace", "whitespace: the corpus is read as already tokenized")
    min_freq: int = opt(5, "words seen fewer times are dropped from the corpus before training (word2vec's min_count)")
    dev: str = opt("", "optional analogy (': section' lines) or word-pair similarity file, evaluated with the final vectors")
    test: str = opt("", "optional analogy or similarity file, evaluated with the final vectors")
    analogy_top_n: int = opt(TOP_N, "analogies: only the N most frequent words are candidates; questions with other words are not answered")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.analogy_top_n < 1:
            raise TextnnError(f"config key data.analogy_top_n: got {short(self.analogy_top_n)}, expected an integer >= 1")


@dataclass(frozen=True)
class EmbeddingsOptions:
    top_n: int = 0  # `evaluate --top-n N`: analogy candidates are the N most frequent words (0: data.analogy_top_n)


class EmbeddingsTask(Task):
    Options = EmbeddingsOptions
    capabilities: ClassVar[frozenset[str]] = frozenset({"word_vectors"})
    mixed_precision: ClassVar[bool] = False  # word2vec trains in float32; so do the commands that read it
    data_config: ClassVar[type] = EmbeddingsData
    formats: ClassVar[tuple[str, ...]] = ("text",)
    metric_directions: ClassVar[dict[str, bool]] = {
        "3cosadd": True, "3cosmul": True, "semantic_3cosadd": True, "syntactic_3cosadd": True,
        "semantic_3cosmul": True, "syntactic_3cosmul": True, "spearman": True, "coverage": True}

    def __init__(self, config: Config, vocab: Vocab, counts: np.ndarray) -> None:
        self.config = config
        self.vocab = vocab
        self.counts = counts  # [V] corpus counts, most frequent first
        self.ids = np.zeros(0, np.int64)  # [M] the corpus (training only)
        self.sentence = np.zeros(0, np.int64)  # [M] line number of each token
        self.corpus_words = 0  # tokens of data.train, those dropped by min_freq included
        self.dropped = 0

    # --- what the task can use --------------------------------------------------------------------
    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if not issubclass(encoder_cls, Word2Vec):
            return "it is not a word-vector model (model word2vec)"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        data = config.data
        if data.tokenizer != "whitespace":
            raise TextnnError(f"config key data.tokenizer: got {short(data.tokenizer)}; task embeddings reads "
                              f"whitespace-separated tokens: set data.tokenizer: whitespace (tokenize the corpus "
                              f"first)")
        refuse_init_from(config, "task embeddings trains its vectors from scratch; remove it")
        require_train(config, "a plain text file (one sentence per line)")

    @property
    def default_metric(self) -> str:
        dev = self.config.data.dev
        return "3cosadd" if not dev or is_analogy_file(dev) else "spearman"

    # --- building -----------------------------------------------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "EmbeddingsTask":
        data = config.data
        for split in ("dev", "test"):  # read now: a bad line must not wait for the end of training
            if getattr(data, split):
                read_evaluation_file(getattr(data, split))
        path = Path(data.train)
        text = read_text(path, data.encoding)
        if data.lowercase:
            text = text.lower()
        lines = [line.split() for line in text.splitlines()]
        counts = Counter(token for tokens in lines for token in tokens)
        total = sum(counts.values())
        if total == 0:
            raise TextnnError(f"{path}: the corpus is empty (no tokens); give a text file with one sentence per line")
        kept = sorted((t for t, c in counts.items() if c >= data.min_freq), key=lambda t: (-counts[t], t))
        if data.max_vocab:
            kept = kept[: data.max_vocab]
        if not kept:
            raise TextnnError(f"{path}: no word occurs data.min_freq={data.min_freq} times or more "
                              f"({len(counts):,} distinct words, {total:,} tokens); lower data.min_freq")
        vocab = Vocab(kept, unk=None)
        task = cls(config, vocab, np.array([counts[t] for t in kept], np.int64))
        index = vocab.stoi
        ids = np.fromiter((index.get(t, -1) for tokens in lines for t in tokens), np.int64, count=total)  # [M]
        lengths = np.fromiter((len(tokens) for tokens in lines), np.int64, count=len(lines))
        sentence = np.repeat(np.arange(len(lines)), lengths)  # [M]
        known = ids >= 0
        # Dropped words are removed before windows are drawn, as word2vec.c does: a window reaches past them.
        task.ids, task.sentence = ids[known], sentence[known]
        task.raw_position = np.flatnonzero(known)  # [M'] where each kept token was in the corpus (learning rate)
        task.corpus_words, task.dropped = total, int((~known).sum())
        if not np.any(task.sentence[1:] == task.sentence[:-1]):  # no window crosses a line (module docstring)
            raise TextnnError(f"{path}: no line holds two words of the vocabulary ({total:,} tokens, {len(vocab):,} "
                              f"words seen data.min_freq={data.min_freq} times), so there is no training window "
                              f"and the vectors would stay random; give a corpus of sentences, one per line, or "
                              f"lower data.min_freq")
        if len(kept) == 1:  # no context word but itself and no other word to sample as a negative: 0 steps
            frequent = sum(c >= data.min_freq for c in counts.values())
            cut, fix = ((f"data.max_vocab={data.max_vocab}", "raise data.max_vocab") if frequent > 1 else
                        (f"data.min_freq={data.min_freq}", "give a corpus of more words" +
                         (", or lower data.min_freq" if len(counts) > 1 else "")))
            raise TextnnError(f"{path}: one word type ({short(kept[0])}) left after {cut} ({len(counts):,} distinct "
                              f"words, {total:,} tokens); word2vec needs at least 2, for a word's context and the "
                              f"negative samples it is told apart from; {fix}")
        print(f"{path}: {total:,} tokens, {len(vocab):,} words seen at least {data.min_freq} times; "
              f"{task.dropped:,} tokens ({task.dropped / total:.1%}) of rarer words left out", file=sys.stderr)
        return task

    @classmethod
    def from_run(cls, path: Path, config: Config) -> "EmbeddingsTask":
        vocab = Vocab.load(path / "vocab.json")
        counts = np.asarray(cls.read_json(path / "counts.json"), np.int64)
        return cls(config, vocab, counts)

    def save(self, path: Path) -> None:
        self.vocab.save(path / "vocab.json")
        (path / "counts.json").write_text(f"[{', '.join(str(int(c)) for c in self.counts)}]", encoding="utf-8")

    def build_model(self) -> Word2Vec:
        return Word2Vec(self.config.model, InputSpec(vocab_size=len(self.vocab)))

    def trainer(self, model, cfg, run):
        from textnn.training.word2vec import Word2VecTrainer

        return Word2VecTrainer(self, model, cfg, run)

    # --- training data ------------------------------------------------------------------------------
    def device_arrays(self, device: torch.device) -> dict[str, torch.Tensor]:
        """What the training loop reads, on its device: the corpus, subsampling and noise tables, the tree."""
        mcfg = self.config.model
        arrays = {"ids": torch.from_numpy(self.ids).to(device),
                  "sentence": torch.from_numpy(self.sentence).to(device),
                  "raw_position": torch.from_numpy(self.raw_position).to(device),
                  "keep": torch.from_numpy(keep_probabilities(self.counts, mcfg.sample)).float().to(device)}
        if mcfg.loss == "hierarchical":
            points, codes, lengths = huffman_tree(self.counts)
            arrays["points"] = torch.from_numpy(points).to(device)  # [V, L]
            arrays["codes"] = torch.from_numpy(codes).to(device)  # [V, L]
            arrays["path_mask"] = torch.arange(points.shape[1]) < torch.from_numpy(lengths).unsqueeze(1)  # [V, L]
            arrays["path_mask"] = arrays["path_mask"].to(device)
        else:
            # word2vec.c's table: word w fills a share of the rows equal to its noise probability,
            # so drawing a row uniformly draws w with that probability, at the cost of one index.
            probabilities = noise_distribution(self.counts, mcfg.ns_exponent)
            rows = np.round(np.cumsum(probabilities) * NOISE_TABLE_SIZE).astype(np.int64)
            table = np.repeat(np.arange(len(self.counts)), np.diff(np.concatenate([[0], rows])))
            arrays["noise_table"] = torch.from_numpy(table).to(device)
        return arrays

    def _keep_mask(self, epoch: int, seed: int, keep: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        generator = torch.Generator(device=ids.device)
        generator.manual_seed(seed_of(seed, epoch, -1))
        return torch.rand(len(ids), device=ids.device, generator=generator) < keep[ids]

    def subsample(self, epoch: int, seed: int, arrays: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The epoch's corpus after subsampling frequent words (2013b section 2.3), drawn anew each epoch."""
        mask = self._keep_mask(epoch, seed, arrays["keep"], arrays["ids"])
        return arrays["ids"][mask], arrays["sentence"][mask], arrays["raw_position"][mask]

    def num_train_batches(self, epoch: int) -> int:
        keep = torch.from_numpy(keep_probabilities(self.counts, self.config.model.sample)).float()
        kept = int(self._keep_mask(epoch, self.config.train.seed, keep, torch.from_numpy(self.ids)).sum())
        return max(1, -(-kept // self.config.model.batch_words))

    # --- vectors and evaluation ---------------------------------------------------------------------
    def word_vectors(self, model: Word2Vec) -> WordVectors:
        return WordVectors(self.vocab.itos, model.vectors())

    def write_vectors(self, model: Word2Vec, run_path: Path) -> None:
        vectors = model.vectors()
        write_word2vec(run_path / "vectors.txt", self.vocab.itos, vectors, binary=False)
        write_word2vec(run_path / "vectors.bin", self.vocab.itos, vectors, binary=True)

    def has_split(self, split: str) -> bool:
        return bool(getattr(self.config.data, split))

    def evaluate_split(self, model: Word2Vec, split: str) -> dict:
        path = getattr(self.config.data, split)
        return self.evaluate_file(model, path) if path else {}

    def evaluate_file(self, model, path: str, bootstrap_samples: int = 0, options: EmbeddingsOptions | None = None
                      ) -> dict:
        """Analogy accuracy or similarity correlation, by the file's content (see the module docstring)."""
        top_n = (options.top_n if options is not None else 0) or self.config.data.analogy_top_n
        if self.inference_batch_size:
            print(f"note: --batch-size {self.inference_batch_size} does not apply here: a word-embeddings run is "
                  f"scored from its word vectors, with no forward pass", file=sys.stderr)
        vectors = self.word_vectors(model)
        kind, items = read_evaluation_file(path)
        if kind == "analogy":
            return {"kind": kind, **evaluate_analogies(vectors, items, top_n=top_n)}
        return {"kind": kind, **evaluate_similarity(vectors, items)}

    def format_metrics(self, metrics: dict) -> list[str]:
        if metrics.get("kind") != "analogy":
            return [f"spearman: {metrics['spearman']:.4f}  coverage: {metrics['coverage']:.1%} "
                    f"({metrics['pairs'] - metrics['missing']} of {metrics['pairs']} pairs; {metrics['missing']} "
                    f"with a word not in the vocabulary)"]
        lines = [f"{'section':<30} {'3CosAdd':>8} {'3CosMul':>8} {'answered':>14}"]
        for name, section in metrics["sections"].items():
            lines.append(f"{name:<30} {section['3cosadd']:>8.1%} {section['3cosmul']:>8.1%} "
                         f"{section['answered']:>6} / {section['questions']:<6}")
        for group in ("semantic", "syntactic"):
            lines.append(f"{group:<30} {metrics[group + '_3cosadd']:>8.1%} {metrics[group + '_3cosmul']:>8.1%}")
        lines.append(f"{'all':<30} {metrics['3cosadd']:>8.1%} {metrics['3cosmul']:>8.1%} "
                     f"{metrics['answered']:>6} / {metrics['questions']:<6}")
        lines.append(f"coverage: {metrics['coverage']:.1%} of the questions have all four words among the "
                     f"{metrics['top_n']:,} most frequent words")
        return lines

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        return ["```", *self.format_metrics(metrics), "```", ""]
