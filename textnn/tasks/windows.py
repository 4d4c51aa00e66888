"""What the tasks that read WordPiece windows packed for a BERT-style encoder share (pre-training, span QA):
their text pipeline (model.init_from's, or a WordPiece trained on data.train), saved with a run and read back
as it is, the length of a window, and the checks of their options."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from textnn import registry
from textnn.config import Config, check_key, is_int
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask


class WordPieceWindowTask(BatchTask):
    """A task built as `cls(config, tokenizer, vocab)` from a WordPiece pipeline alone."""

    tokenizer: Tokenizer
    vocab: Vocab

    @staticmethod
    def wordpiece_pipeline(config: Config, texts: Callable[[], Iterable[str]], source: dict, kind: str
                           ) -> tuple[Tokenizer, Vocab]:
        """model.init_from's tokenizer and vocabulary, or a WordPiece trained on `texts()` (cached as `kind`,
        `source` telling readings of one file apart: `pipeline.train_wordpiece`) and its own vocabulary."""
        tokenizer, vocab = pipeline.tokenizer(config, texts, source, kind)
        return tokenizer, vocab if vocab is not None else pipeline.piece_vocabulary(tokenizer)

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "WordPieceWindowTask":
        """The run's tokenizer and vocabulary as saved: a start's WordPiece keeps its own casing (a Hugging Face
        checkpoint's), whatever data.lowercase says."""
        return cls(config, *cls.load_text_pipeline(run_path))

    def save(self, run_path: Path) -> None:
        pipeline.save(run_path, self.tokenizer, self.vocab)


def check_window_length(config: Config) -> None:
    """data.max_length (tokens per packed [CLS] ... [SEP] window) within the positions the encoder reads."""
    limit = registry.encoder_class(config.model_name).max_length(config.model)
    if limit and config.data.max_length > limit:
        raise TextnnError(f"config key data.max_length: got {config.data.max_length}, but the encoder reads at "
                          f"most {limit} positions; lower data.max_length")


def window_length(config: Config, default: int) -> int:
    """Tokens per packed window: data.max_length, or else `default` (what BERT used for the task), or the
    encoder's own limit when that is lower."""
    limit = registry.encoder_class(config.model_name).max_length(config.model)
    return config.data.max_length or min(default, limit or default)


def check_wordpiece_windows(data) -> None:
    """The data options of these tasks (`__post_init__`): the tokenizer is a WordPiece, and data.max_length is 0 (the task's default) or a real window."""
    check_key(data.tokenizer == "wordpiece", "data.tokenizer", data.tokenizer, "wordpiece")
    check_key(is_int(data.max_length) and (data.max_length == 0 or data.max_length >= 8), "data.max_length",
              data.max_length, "0 (the default) or an integer >= 8")
