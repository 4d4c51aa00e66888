"""Explicit name tables: a config names a model or task, this file says where it lives.

No import-time magic: a name maps to "module:Attribute" and is imported only when asked for.
Unknown names raise a `TextnnError` that lists the valid ones.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from textnn.errors import TextnnError

# name -> (module, Config class, Model class, presets table). A presets table maps a preset name
# ("tiny" for tests, "paper" for the published setting) to a dict of Config field values.
MODELS: dict[str, tuple[str, str, str, str]] = {
    "bow": ("textnn.models.bow", "BOWConfig", "BOW", "BOW_PRESETS"),
    "cbow": ("textnn.models.bow", "CBOWConfig", "CBOW", "CBOW_PRESETS"),
    "deep_cbow": ("textnn.models.bow", "DeepCBOWConfig", "DeepCBOW", "DEEP_CBOW_PRESETS"),
    "dan": ("textnn.models.dan", "DANConfig", "DAN", "PRESETS"),
    "cnn": ("textnn.models.cnn", "KimCNNConfig", "KimCNN", "PRESETS"),
    "rnn": ("textnn.models.rnn", "RNNClassifierConfig", "RNNClassifier", "PRESETS"),
    "nplm": ("textnn.models.nplm", "NPLMConfig", "NPLM", "PRESETS"),
    "rnn_lm": ("textnn.models.rnn_lm", "RNNLMConfig", "RNNLM", "PRESETS"),
    "char_lstm_lm": ("textnn.models.rnn_lm", "RNNLMConfig", "RNNLM", "PRESETS"),  # rnn_lm's older name
    "awd_lstm": ("textnn.models.awd_lstm", "AWDLSTMConfig", "AWDLSTM", "PRESETS"),
    "rnn_tagger": ("textnn.models.tagger", "RNNTaggerConfig", "RNNTagger", "PRESETS"),
    "window_tagger": ("textnn.models.window_tagger", "WindowTaggerConfig", "WindowTagger", "PRESETS"),
    "gpt": ("textnn.models.gpt", "GPTConfig", "GPT", "PRESETS"),
    "transformer_xl": ("textnn.models.transformer_xl", "TransformerXLConfig", "TransformerXL", "PRESETS"),
}

# Which models each task can train.
TASK_MODELS: dict[str, tuple[str, ...]] = {
    "classification": ("bow", "cbow", "deep_cbow", "dan", "cnn", "rnn"),
    "tagging": ("rnn_tagger", "window_tagger"),
    "language_modeling": ("nplm", "rnn_lm", "char_lstm_lm", "awd_lstm", "gpt", "transformer_xl"),
}

TASKS: dict[str, str] = {
    "classification": "textnn.tasks.classification:ClassificationTask",
    "tagging": "textnn.tasks.tagging:TaggingTask",
    "language_modeling": "textnn.tasks.language_modeling:LanguageModelingTask",
}


def unknown_name(kind: str, name: str, valid: list[str] | tuple[str, ...]) -> TextnnError:
    """An error for a name not in a table, with a 'did you mean' and the full list."""
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return TextnnError(f"unknown {kind} '{name}'{hint}; valid: {', '.join(sorted(valid))}")


def _import(module: str, attr: str) -> Any:
    return getattr(importlib.import_module(module), attr)


def model_entry(name: str) -> tuple[type, type, dict]:
    """(Config class, Model class, PRESETS) for a registered model name."""
    if name not in MODELS:
        raise unknown_name("model", name, list(MODELS))
    module, config_cls, model_cls, presets = MODELS[name]
    mod = importlib.import_module(module)
    return getattr(mod, config_cls), getattr(mod, model_cls), getattr(mod, presets)


def task_class(name: str) -> type:
    if name not in TASKS:
        raise unknown_name("task", name, list(TASKS))
    module, attr = TASKS[name].split(":")
    return _import(module, attr)
