"""Checks of config options that several tasks make alike, each written once: a task's `check_config` calls
the ones that apply to it."""

from __future__ import annotations

from textnn.config import Config
from textnn.errors import TextnnError


def require_train(config: Config, what: str) -> None:
    """An error when data.train is empty; `what` says what to set it to (the training file, a prefix...)."""
    if not config.data.train:
        raise TextnnError(f"config key data.train is empty; set it to {what}")


def refuse_init_from(config: Config, reason: str) -> None:
    """An error when model.init_from is set for a task that starts from nothing; `reason` says why and what to do."""
    if config.init_from:
        raise TextnnError(f"config key model.init_from: {reason}")
