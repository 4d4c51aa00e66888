"""The text pipeline every task reads its text with: tokenizer, vocabulary, pretrained word vectors.

A task builds it in three steps, each decided here once for all tasks:
  1. `tokenizer(config, ...)`   the starting run's (model.init_from: its encoder was trained on those
                                pieces), a WordPiece trained on the training texts, or a rule-based one
  2. `vocabulary(config, ...)`  the starting run's (grown by data.extend_vocab), the WordPiece's own, or
                                one built from the training tokens; then data.vectors_vocab's words
  3. `pretrained_vectors(...)`  the embedding rows data.vectors gives the vocabulary
`load(run_path)` reads a run's own pipeline back; a start's (model.init_from) is `config.start.pipeline`,
read by `transfer` (the one module that reads a start). A task with a pipeline of another shape (a language model's token
stream, translation's two sides) uses the steps it shares.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import torch

from textnn.config import Config, DataConfig
from textnn.data.cache import cached
from textnn.data.tokenizers import CLS, MASK, SEP, UNK as WORDPIECE_UNK, WORDPIECE_CONVENTIONS, Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.files import atomic_write_text

# Evaluation batches hold at least this many examples: no gradients are kept, so a larger batch costs
# little memory and reads a split in fewer, fuller steps; the training batch size rules when larger.
MIN_EVAL_BATCH = 64


def eval_batch_size(config: Config, requested: int | None = None) -> int:
    """Examples per evaluation batch: `requested` (a command's --batch-size, `Task.inference_batch_size`)
    when given, else the run's own rule."""
    return requested or max(MIN_EVAL_BATCH, config.train.batch_size)


# --- 1. tokenizer ------------------------------------------------------------------------------------

def load(run_path: Path, saved: tuple[str, bool] | None = None, data: DataConfig | None = None
         ) -> tuple[Tokenizer, Vocab]:
    """The tokenizer and vocabulary a run read its text with (tokenizer.json, vocab.json). A start's
    (model.init_from) come from the start itself: `config.start.pipeline`.

    With `saved` = (kind, lowercase) of the tokenizer the run's own config says it saved (and `data`, the
    options that say so), any other tokenizer.json is refused: the config.yaml beside it was edited, or
    one of the two files comes from another run.
    """
    tokenizer, vocab = Tokenizer.load(run_path / "tokenizer.json"), Vocab.load(run_path / "vocab.json")
    if saved is not None and data is not None and (tokenizer.kind, tokenizer.lowercase) != saved:
        raise TextnnError(f"{run_path / 'tokenizer.json'}: holds a {tokenizer.kind} tokenizer with lowercase="
                          f"{tokenizer.lowercase}, but config.yaml (data.tokenizer={data.tokenizer}, "
                          f"data.lowercase={data.lowercase}) says the run saved a {saved[0]} tokenizer with "
                          f"lowercase={saved[1]}; the files do not belong together: put back the run's own "
                          f"config.yaml or re-train")
    return tokenizer, vocab


def save(run_path: Path, tokenizer: Tokenizer, vocab: Vocab, prefix: str = "") -> None:
    """Write what `load` reads back: PREFIXtokenizer.json (a BPE or WordPiece model included) and
    PREFIXvocab.json (prefix "target_" for a translation run's second side), each atomically."""
    atomic_write_text(run_path / f"{prefix}tokenizer.json", json.dumps(tokenizer.to_dict(), ensure_ascii=False))
    vocab.save(run_path / f"{prefix}vocab.json")


def train_wordpiece(config: Config, texts: Callable[[], Iterable[str]], source: dict,
                    kind: str = "wordpiece_model") -> Tokenizer:
    """A WordPiece of data.wordpiece_vocab_size pieces trained on `texts()` (the training file's texts),
    cached by data.train's content, these settings and `source` (how the task reads the texts out of
    the file: the cache key part that tells two readings of one file apart)."""
    data = config.data

    def compute() -> dict:
        return Tokenizer.train_wordpiece(texts(), data.wordpiece_vocab_size, data.lowercase).to_dict()

    settings = {"kind": kind, "vocab_size": data.wordpiece_vocab_size, "lowercase": data.lowercase,
                "conventions": WORDPIECE_CONVENTIONS, **source}  # a WordPiece cached under older conventions is not reused
    return Tokenizer.from_dict(cached(data.train, settings, compute, enabled=data.cache))


def tokenizer(config: Config, wordpiece_texts: Callable[[], Iterable[str]], wordpiece_source: dict,
              wordpiece_kind: str = "wordpiece_model") -> tuple[Tokenizer, Vocab | None]:
    """(tokenizer, the starting run's vocabulary or None): model.init_from's pipeline, a WordPiece trained
    on `wordpiece_texts()` (data.tokenizer wordpiece; cached as `train_wordpiece` says), or the rule-based
    tokenizer data.tokenizer names."""
    data = config.data
    if config.start is not None:  # the starting run's: its encoder was trained on its pieces
        return config.start.pipeline
    if data.tokenizer == "wordpiece":
        return train_wordpiece(config, wordpiece_texts, wordpiece_source, wordpiece_kind), None
    return Tokenizer(data.tokenizer, data.lowercase), None


# --- 2. vocabulary -----------------------------------------------------------------------------------

def piece_vocabulary(tokenizer: Tokenizer) -> Vocab:
    """A WordPiece's vocabulary as its own: its pieces in its order, [UNK] for what it cannot cut."""
    return Vocab(tokenizer.vocabulary(), unk=WORDPIECE_UNK)


def check_extend_vocab(config: Config) -> None:
    """data.extend_vocab adds words to the vocabulary of the run in model.init_from: it needs one, and
    words (a word or whitespace tokenizer; sub-word vocabularies are fixed by their tokenizer)."""
    if not config.data.extend_vocab:
        return
    if not config.init_from:
        raise TextnnError("config key data.extend_vocab: it adds words to the vocabulary of the run in "
                          "model.init_from, and none is set; set model.init_from or data.extend_vocab=0")
    if config.data.tokenizer not in ("word", "whitespace"):
        raise TextnnError(f"config key data.extend_vocab: the starting run reads {config.data.tokenizer} "
                          f"pieces, whose vocabulary its tokenizer fixes; only word vocabularies grow "
                          f"(data.tokenizer word or whitespace), so set data.extend_vocab=0")


def extend_start_vocab(vocab: Vocab, counts: dict[str, int], min_count: int) -> Vocab:
    """The starting run's vocabulary with the training words it lacks that occur at least `min_count`
    times appended, most frequent first (existing ids unchanged). Howard & Ruder's (2018) ULMFiT code
    builds the target task's vocabulary this way and starts the new words' rows at the mean of the
    pretrained rows (`Start.load_into(grown_rows=...)`)."""
    new = [word for word, count in counts.items() if count >= min_count and word not in vocab.stoi]
    return vocab.extend(sorted(new, key=lambda word: -counts[word]))  # stable: ties keep reading order


def vocabulary(config: Config, tokenizer: Tokenizer, start: Vocab | None,
               train_tokens: Callable[[], Iterable[list[str]]], packs: bool = False, extend: int = 0) -> Vocab:
    """The word (or piece) vocabulary of a run that reads `train_tokens()` (each example's tokens).

    The starting run's (grown by the training words seen `extend` times or more: data.extend_vocab), a
    WordPiece's own, or one built from the training
    tokens (data.min_freq, data.max_vocab), with [CLS], [SEP] and [MASK] for an encoder that frames its
    inputs with them (`packs`); then the words of data.vectors when data.vectors_vocab says so.
    """
    data = config.data
    if start is not None and extend:
        counts = Counter(token for tokens in train_tokens() for token in tokens)
        vocab = extend_start_vocab(start, counts, extend)
    elif start is not None:
        vocab = start
    elif tokenizer.kind == "wordpiece":
        vocab = piece_vocabulary(tokenizer)
    else:
        specials = (PAD, UNK, CLS, SEP, MASK) if packs else (PAD, UNK)
        vocab = Vocab.build(train_tokens(), min_freq=data.min_freq, max_size=data.max_vocab, specials=specials)
    if packs and not (CLS in vocab.stoi and SEP in vocab.stoi):
        raise TextnnError(f"model {config.model_name} reads inputs framed as [CLS] a [SEP] b [SEP], but the "
                          f"vocabulary of model.init_from={config.init_from} has no {CLS} or {SEP}; start from "
                          f"a run or checkpoint of that family")
    if data.vectors and data.vectors_vocab:
        from textnn.interop.vectors import read_vectors

        # Kim (2014) built the vocabulary over all the data and initialised it from word2vec, so words
        # absent from training still had a meaningful vector; adding the vector file's words does the
        # same without looking at dev or test text.
        _whole_vector_files[data.vectors] = read_vectors(data.vectors)
        vocab = vocab.extend(_whole_vector_files[data.vectors][0])
    return vocab


# data.vectors read whole by `vocabulary` (data.vectors_vocab), kept until `pretrained_vectors` takes its
# rows from it: a large file (GloVe) is read once per run, not twice.
_whole_vector_files: dict[str, tuple] = {}


# --- 3. pretrained vectors ---------------------------------------------------------------------------

def check_vectors(config: Config) -> None:
    """data.vectors needs an encoder that starts its word embedding from them (`Encoder.uses_vectors`)."""
    from textnn import registry

    if config.data.vectors and not registry.encoder_class(config.model_name).uses_vectors:
        raise TextnnError(f"config key data.vectors: model {config.model_name} does not start from word vectors; "
                          f"remove data.vectors or choose a model that does")


def pretrained_vectors(config: Config, vocab: Vocab) -> tuple[torch.Tensor, dict]:
    """(rows [V, E] of data.vectors for the vocabulary, coverage), said on stderr. Words the file lacks get
    random rows (train.seed); the pad row is zero."""
    from textnn.interop.vectors import build_embedding_matrix

    data = config.data
    matrix, coverage = build_embedding_matrix(vocab.itos, data.vectors, seed=config.train.seed,
                                              read=_whole_vector_files.pop(data.vectors, None))
    if data.vectors_std:
        # Optimizers take steps of about the same size whatever a weight's scale, so vectors five times
        # larger than a random init (50-d GloVe) barely move when fine-tuned; rescaling (pad row 0 stays
        # zero) lets them adapt as readily as random ones.
        matrix *= data.vectors_std / matrix[1:].std()
    print(f"vectors {data.vectors}: {coverage['found']:,} of {coverage['total']:,} vocabulary "
          f"tokens found ({100 * coverage['coverage']:.1f}%), dim {coverage['dim']}", file=sys.stderr)
    return torch.from_numpy(matrix), coverage
