"""word2vec: CBOW and skip-gram word vectors (Mikolov et al. 2013a, "Efficient Estimation of Word
Representations in Vector Space"; 2013b, "Distributed Representations of Words and Phrases and their
Compositionality").

Two tables of vectors: `input` [V, D], the word vectors a run exports, and `output`, what the
words (negative sampling, [V, D]) or the inner nodes of a Huffman tree (hierarchical softmax,
[V - 1, D]) are predicted with. Skip-gram predicts each word from every word of its window, CBOW
from the mean of them. The family owns the vectors and the Huffman tree; the update rule lives in
`training/word2vec.py` and the data (vocabulary, subsampling, noise distribution) in
`tasks/embeddings.py`. The vocabulary is ordered most frequent first.
"""

# V vocabulary size, D vector size, L longest Huffman code

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field, is_int, opt
from textnn.models.base import Encoder, EncoderOutput, InputSpec, LayerGroups, require_choice, require_ints


@dataclass
class Word2VecConfig(ModelOptions):
    architecture: str = opt("skipgram", "skipgram (predict each window word from the word) or cbow (the word from the window's mean)")
    loss: str = opt("negative", "negative (negative sampling, Mikolov et al. 2013b section 2.2) or hierarchical (softmax over a Huffman tree, section 2.1)")
    dim: int = opt(100, "vector size")
    window: int = opt(5, "largest distance to a context word; each word draws its own window in 1..window (section 3.1 of 2013a)")
    negative: int = opt(5, "noise words per prediction (negative sampling)")
    ns_exponent: float = opt(0.75, "noise words are drawn from the unigram distribution raised to this power (2013b section 2.2)")
    sample: float = opt(1e-3, "subsampling threshold t of frequent words (2013b section 2.3); 0 = keep every word")
    alpha: float = opt(0.0, "starting learning rate, decayed linearly to min_alpha over the run; 0 = 0.025 for skipgram, 0.05 for cbow (word2vec's defaults)")
    min_alpha: float = opt(1e-4, "learning rate at the end of the run")
    batch_words: int = opt(2048, "words whose windows are trained in one step (more: faster, coarser; on a GPU try 32768)")
    noise_group: int = opt(1, "cbow with loss negative: this many words of a step, far apart, share their noise words, which makes their scores one matrix product (Ji et al. 2016, section 3); 1 = a draw per word, as word2vec.c")

    def __post_init__(self) -> None:
        require_choice(self, "architecture", ("skipgram", "cbow"))
        require_choice(self, "loss", ("negative", "hierarchical"))
        require_ints(self, "dim", "window", "batch_words", "noise_group")
        check_model_field(is_int(self.negative) and (self.negative >= 1 or self.loss == "hierarchical"),
                          "negative", self.negative, "an integer >= 1 (with loss: negative)")
        check_model_field(0 <= self.sample < 1, "sample", self.sample, "a number in [0, 1), e.g. 1e-3 or 1e-5")
        check_model_field(self.alpha >= 0, "alpha", self.alpha, "a number >= 0")
        check_model_field(0 <= self.min_alpha, "min_alpha", self.min_alpha, "a number >= 0")
        check_model_field(self.ns_exponent >= 0, "ns_exponent", self.ns_exponent, "a number >= 0")

    @property
    def start_alpha(self) -> float:
        return self.alpha or (0.05 if self.architecture == "cbow" else 0.025)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(Word2VecConfig(dim=16, window=2, negative=3, batch_words=256)),
    # The 2013b setting: 300-d skip-gram, 5 negatives, t = 1e-5 (they report 1e-5 for large corpora).
    "paper": Preset(Word2VecConfig(dim=300, window=5, negative=5, sample=1e-5)),
}


def seed_of(*numbers: int) -> int:
    """A seed for a torch.Generator from integers (run seed, epoch, step): the same in every process,
    unlike Python's hash of a string."""
    return int(np.random.SeedSequence([n % (1 << 32) for n in numbers]).generate_state(1, np.uint64)[0] >> 1)


def huffman_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Huffman tree of the word counts as word2vec's hierarchical softmax walks it (2013b section 2.1).

    Returns (points [V, L] inner-node ids root first, codes [V, L] the branch (0/1) taken below each,
    lengths [V]). Inner nodes are numbered 0..V-2 with the root V-2, as rows of the output table.
    Frequent words get short codes, so the expected cost per word is near the entropy.
    """
    vocab = len(counts)
    if vocab < 2:  # a tree needs two leaves; a one-word vocabulary has one node and a 1-bit code
        return np.zeros((vocab, 1), np.int64), np.zeros((vocab, 1), np.int64), np.ones(vocab, np.int64)
    # heap of (count, tie-break, node); leaves are 0..V-1, inner node k is V + k
    heap = [(int(c), i, i) for i, c in enumerate(counts)]
    heapq.heapify(heap)
    parent = np.zeros(2 * vocab - 1, np.int64)
    branch = np.zeros(2 * vocab - 1, np.int64)
    order = vocab
    for inner in range(vocab, 2 * vocab - 1):
        c1, _, n1 = heapq.heappop(heap)
        c2, _, n2 = heapq.heappop(heap)
        parent[n1], parent[n2] = inner, inner
        branch[n2] = 1  # the larger of the two takes code 1, as in word2vec.c's CreateBinaryTree
        heapq.heappush(heap, (c1 + c2, order, inner))
        order += 1
    root = 2 * vocab - 2
    paths, codes = [], []
    for word in range(vocab):
        node, path, code = word, [], []
        while node != root:
            code.append(branch[node])
            node = parent[node]
            path.append(node - vocab)
        paths.append(path[::-1])
        codes.append(code[::-1])
    lengths = np.array([len(p) for p in paths], np.int64)
    longest = int(lengths.max())
    points = np.zeros((vocab, longest), np.int64)
    code_array = np.zeros((vocab, longest), np.int64)
    for word in range(vocab):
        points[word, : lengths[word]] = paths[word]
        code_array[word, : lengths[word]] = codes[word]
    return points, code_array, lengths


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """Probability of keeping each occurrence of a word when frequent words are subsampled.

    word2vec.c's form of 2013b section 2.3: with f = count / total, keep = (sqrt(f / t) + 1) * t / f,
    capped at 1 (the paper's discard probability 1 - sqrt(t / f), smoothed so rarer words stay).
    """
    if sample <= 0:
        return np.ones(len(counts), np.float64)
    threshold = sample * float(counts.sum())
    counts = counts.astype(np.float64)
    return np.minimum((np.sqrt(counts / threshold) + 1) * threshold / counts, 1.0)


def noise_distribution(counts: np.ndarray, exponent: float) -> np.ndarray:
    """Unigram counts raised to `exponent`, normalised (2013b section 2.2: 3/4 beats both 0 and 1)."""
    weights = counts.astype(np.float64) ** exponent
    return weights / weights.sum()


class Word2Vec(Encoder):
    """The input and output vector tables of word2vec (see the module docstring).

    It serves only the embeddings task: it gives neither per-token states a head could read nor a
    sentence vector, so the other tasks refuse it by what it declares.
    """

    config_class: ClassVar[type[ModelOptions]] = Word2VecConfig
    presets: ClassVar[dict[str, Preset]] = PRESETS

    def __init__(self, cfg: Word2VecConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        vocab, dim = spec.vocab_size, cfg.dim
        # word2vec.c's initialisation: input U(-0.5/D, 0.5/D), output zeros; a zero output table
        # makes every first score 0 (probability 1/2), so early updates are all of the same size.
        self.input = nn.Parameter(((torch.rand(vocab, dim) - 0.5) / dim), requires_grad=False)
        rows = vocab if cfg.loss == "negative" else max(vocab - 1, 1)
        self.output = nn.Parameter(torch.zeros(rows, dim), requires_grad=False)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: object = None) -> EncoderOutput:
        return EncoderOutput(tokens=self.input[ids] * mask.unsqueeze(-1))

    def layer_groups(self) -> LayerGroups:
        """Both tables in one group (they are parameters of this module itself, not of a child)."""
        return [("vectors", [self.input, self.output])]

    def vectors(self) -> np.ndarray:
        """The word vectors [V, D] (the input table), float32 on the CPU."""
        return self.input.detach().float().cpu().numpy()
