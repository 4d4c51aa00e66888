"""What a language-modelling run reads before its task exists (`LanguageModelingTask.from_data`): the
training file as one token stream, its tokenizer and vocabulary, and where the held-out part begins."""

# N stream length

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from textnn.config import Config
from textnn.data.streams import to_vocab_ids, vocab_from_counts
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.tasks import pipeline
from textnn.tasks.language_modeling.data import SPECIALS, kept_lines, read_stream, text_lines, train_bpe


@dataclass
class TrainingStream:
    tokenizer: Tokenizer
    vocab: Vocab
    ids: torch.Tensor  # [N] the whole training file as vocabulary ids
    cut: int  # ids[:cut] are trained on, ids[cut:] held out as dev (data.holdout)
    holdout: float  # data.holdout, or 0 when data.dev names a file
    start_vocab_size: int | None  # data.extend_vocab: the starting run's vocabulary size


def training_stream(config: Config) -> TrainingStream:
    """data.train as ids, with the starting run's tokenizer and vocabulary (model.init_from; grown by
    data.extend_vocab), or a BPE trained on the lines before the held-out part and its own vocabulary, or a
    rule-based tokenizer and a vocabulary of the tokens before the held-out part."""
    data = config.data
    holdout = data.holdout if not data.dev else 0.0
    vocab: Vocab | None = None
    lines: list[str] | None = None
    if config.start is not None:  # the starting run's tokenizer and vocabulary: its encoder was trained on them
        tokenizer, vocab = config.start.pipeline
    elif data.tokenizer == "bpe":
        # The BPE must not see held-out text, and until it exists there are no tokens to count:
        # the held-out part is the final fraction of the LINES, and the stream is cut there too.
        lines = text_lines(data, data.train)
        tokenizer = train_bpe(config, lines[:kept_lines(lines, holdout, data.train)])
    else:
        tokenizer = Tokenizer(data.tokenizer, data.lowercase)
    stream = read_stream(data, data.train, tokenizer)
    if tokenizer.kind == "bpe":
        lines = lines if lines is not None else text_lines(data, data.train)
        kept = kept_lines(lines, holdout, data.train)
        held = sum(len(tokens) + 1 for tokens in tokenizer.tokenize_lines(lines[kept:]))  # + <eos> per line
        cut = len(stream.ids) - held
    else:
        cut = len(stream.ids) - int(round(len(stream.ids) * holdout))
    start_vocab_size = None
    if vocab is not None and data.extend_vocab:
        counts = np.bincount(stream.ids[:cut], minlength=len(stream.types))
        start_vocab_size = len(vocab)
        vocab = pipeline.extend_start_vocab(vocab, dict(zip(stream.types, counts.tolist())), data.extend_vocab)
    elif vocab is None and tokenizer.kind == "bpe":
        vocab = Vocab(tokenizer.vocabulary())
    elif vocab is None:
        counts = np.bincount(stream.ids[:cut], minlength=len(stream.types))
        specials = (PAD, UNK) if tokenizer.kind == "char" else SPECIALS
        vocab = vocab_from_counts(stream.types, counts, data.min_freq, data.max_vocab, specials)
    return TrainingStream(tokenizer, vocab, to_vocab_ids(stream, vocab), cut, holdout, start_vocab_size)
