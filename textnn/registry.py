"""Explicit name tables: a config names a model family or task, this file says where it lives.

No import-time magic: a name maps to "module:Attribute" and is imported only when asked for.
Unknown names raise a `TextnnError` that lists the valid ones. A model family registers with ONE
line below; which tasks it serves follows from what its encoder gives (models/base.py), checked
by each task's `unusable_reason`.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from textnn.errors import TextnnError

# name -> "module:EncoderClass". The class names its Config dataclass and presets ("tiny" for
# tests, "paper" for the published setting).
ENCODERS: dict[str, str] = {
    "bow": "textnn.models.bow:BOW",
    "cbow": "textnn.models.bow:CBOW",
    "deep_cbow": "textnn.models.bow:DeepCBOW",
    "dan": "textnn.models.dan:DAN",
    "cnn": "textnn.models.cnn:KimCNN",
    "rnn": "textnn.models.rnn:RNNClassifier",
    "rnn_tagger": "textnn.models.tagger:RNNTagger",
    "window_tagger": "textnn.models.window_tagger:WindowTagger",
    "nplm": "textnn.models.nplm:NPLM",
    "rnn_lm": "textnn.models.rnn_lm:RNNLM",
    "char_lstm_lm": "textnn.models.rnn_lm:RNNLM",  # rnn_lm's older name
    "awd_lstm": "textnn.models.awd_lstm:AWDLSTM",
    "elmo": "textnn.models.elmo:ELMo",
    "gpt": "textnn.models.gpt:GPT",
    "bert": "textnn.models.bert:Bert",
    "transformer_xl": "textnn.models.transformer_xl:TransformerXL",
    "seq2seq": "textnn.models.seq2seq:Seq2Seq",
    "transformer_mt": "textnn.models.transformer_mt:TransformerMT",
    "word2vec": "textnn.models.word2vec:Word2Vec",
}

TASKS: dict[str, str] = {
    "classification": "textnn.tasks.classification:ClassificationTask",
    "tagging": "textnn.tasks.tagging:TaggingTask",
    "language_modeling": "textnn.tasks.language_modeling:LanguageModelingTask",
    "embeddings": "textnn.tasks.embeddings:EmbeddingsTask",
    "translation": "textnn.tasks.translation:TranslationTask",
    "pretraining": "textnn.tasks.pretraining:PretrainingTask",
    "qa": "textnn.tasks.qa:QATask",
}


def unknown_name(kind: str, name: str, valid: list[str] | tuple[str, ...]) -> TextnnError:
    """An error for a name not in a table, with a 'did you mean' and the full list."""
    close = difflib.get_close_matches(name, list(valid), n=1) if len(name) <= 100 else []
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    shown = f"'{name}'" if len(name) <= 60 else f"'{name[:60]}...' ({len(name)} characters)"
    return TextnnError(f"unknown {kind} {shown}{hint}; valid: {', '.join(sorted(valid))}")


def _import(target: str) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def encoder_class(name: str) -> type:
    """The Encoder class of a registered model family (its `config_class` and `presets` ride on it)."""
    if name not in ENCODERS:
        raise unknown_name("model", name, list(ENCODERS))
    return _import(ENCODERS[name])


def model_entry(name: str) -> tuple[type, type, dict]:
    """(Config class, Encoder class, presets) of a registered model family."""
    cls = encoder_class(name)
    return cls.config_class, cls, cls.presets


def task_class(name: str) -> type:
    if name not in TASKS:
        raise unknown_name("task", name, list(TASKS))
    return _import(TASKS[name])


def models_for(task: str) -> list[str]:
    """The registered families the task can put its head on (by what their encoders give)."""
    cls = task_class(task)
    return [name for name in ENCODERS if cls.unusable_reason(encoder_class(name)) is None]
