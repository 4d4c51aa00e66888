"""Explicit name tables: a config names a model family or task, this file says where it lives.

No import-time magic: a name maps to "module:Attribute" and is imported only when asked for.
Unknown names raise a `TextnnError` that lists the valid ones. A model family registers with ONE
line below; which tasks it serves follows from what its encoder gives (models/base.py), checked
by each task's `unusable_reason`. A task of the user's own is named in a config as "package.module:Class"
(`outside_task`) and imported when asked for as Python imports a module (installed packages, PYTHONPATH),
never from the folder of a saved run being read.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import re
import sys
from pathlib import Path
from typing import Any, Iterator

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


# A task of the user's own: "package.module:Class", Class a subclass of TASK_BASE (named here, not imported:
# the tasks are a layer above this module).
OUTSIDE_TASK = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
OUTSIDE_FORM = "'package.module:Class' (a textnn.tasks.base.Task subclass in an importable module)"
TASK_BASE = "textnn.tasks.base.Task"


def task_class(name: str, saved_in: str | Path | None = None) -> type:
    """The Task class of a registered task, or of a task of the user's own given as "package.module:Class"
    (`outside_task`; `saved_in`: the run directory whose config.yaml names it)."""
    if name in TASKS:
        return _import(TASKS[name])
    if ":" in name:
        return outside_task(name, saved_in)
    raise TextnnError(f"{unknown_name('task', name, list(TASKS))}; or a task of your own as {OUTSIDE_FORM}")


def outside_task(name: str, saved_in: str | Path | None = None) -> type:
    """The Task class a config names as "package.module:Class", its module imported now: it must be
    importable (installed, or its top folder on PYTHONPATH; `python -m textnn` adds the current folder).
    Reading a saved run (`saved_in`, its directory), no folder inside that directory is searched, so the
    files of a run someone sent are never run as code."""
    shown = name if len(name) <= 100 else name[:100] + "..."
    if not OUTSIDE_TASK.fullmatch(name):
        raise TextnnError(f"'{shown}': expected a registered task ({', '.join(sorted(TASKS))}) or {OUTSIDE_FORM}")
    module, attr = name.split(":")
    try:
        with _path_outside(saved_in):
            cls = getattr(importlib.import_module(module), attr, None)
    except ModuleNotFoundError as err:
        if not err.name or not (module + ".").startswith(err.name + "."):
            raise  # the module was found, and something it imports is missing: its author's traceback
        outside = f" (never from inside the run directory {saved_in})" if saved_in is not None else ""
        raise TextnnError(f"'{name}': module {module} cannot be imported here{outside}; a task of your own is "
                          f"imported as Python imports a module: install its package, put the folder holding "
                          f"{module.split('.')[0]} on PYTHONPATH, or run `python -m textnn` from that folder") from None
    if not (isinstance(cls, type) and any(f"{base.__module__}.{base.__qualname__}" == TASK_BASE
                                          for base in cls.__mro__)):
        found = f"module {module} has no {attr}" if cls is None else \
            f"{module}.{attr} is {'another class' if isinstance(cls, type) else 'a ' + type(cls).__name__}"
        raise TextnnError(f"'{name}': {found}; expected a subclass of {TASK_BASE}")
    return cls


@contextlib.contextmanager
def _path_outside(folder: str | Path | None) -> Iterator[None]:
    """sys.path without its entries inside `folder` (the current folder too, where it lies inside), for the
    block; all of it when `folder` is None."""
    if folder is None:
        yield
        return
    inside, saved = Path(folder).resolve(), list(sys.path)
    sys.path[:] = [entry for entry in saved if not Path(entry or ".").resolve().is_relative_to(inside)]
    try:
        yield
    finally:
        sys.path[:] = saved


def models_for(task: str) -> list[str]:
    """The registered families the task can put its head on (by what their encoders give)."""
    cls = task_class(task)
    return [name for name in ENCODERS if cls.unusable_reason(encoder_class(name)) is None]
