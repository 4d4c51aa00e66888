"""Checks of config options that several tasks make alike, each written once: a task's `check_config` (or its
data options' `__post_init__`) calls the ones that apply to it."""

from __future__ import annotations

from textnn import registry
from textnn.config import Config, check_key, is_int
from textnn.errors import TextnnError


def require_train(config: Config, what: str) -> None:
    """An error when data.train is empty; `what` says what to set it to (the training file, a prefix...)."""
    if not config.data.train:
        raise TextnnError(f"config key data.train is empty; set it to {what}")


def refuse_init_from(config: Config, reason: str) -> None:
    """An error when model.init_from is set for a task that starts from nothing; `reason` says why and what to do."""
    if config.init_from:
        raise TextnnError(f"config key model.init_from: {reason}")


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
    """The data options of a task that reads WordPiece windows for a BERT encoder (pre-training, span QA):
    the tokenizer is a WordPiece, and data.max_length is 0 (the task's default) or a real window."""
    check_key(data.tokenizer == "wordpiece", "data.tokenizer", data.tokenizer, "wordpiece")
    check_key(is_int(data.max_length) and (data.max_length == 0 or data.max_length >= 8), "data.max_length",
              data.max_length, "0 (the default) or an integer >= 8")
