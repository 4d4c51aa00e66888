"""What a run shows of itself reading one input, as plain data: the answer of `textnn serve`'s inspect
endpoint, which the page at `/` draws. The arrays are the ones `textnn visualize` draws as files (the same
functions of viz/attention.py and viz/lstm_cells.py find them), put into JSON:

    {"kind": "source_attention", "source": [S tokens], "target": [T tokens], "translation": text,
     "layers": [names], "attention": [L][H][T][S]}      a translation run whose model attends over its source
    {"kind": "self_attention", "tokens": [T tokens], "attention": [L][H][T][T]}
                                                        a Transformer encoder's runs (BERT, GPT): its heads
    {"kind": "cells", "text": text, "layer_sizes": [...], "cells": [{"cell", "name", "feature", "description",
     "correlation", "values": [one per character of text]}]}
                                                        an LSTM language model: the cells `find_cells` chose

Attention rows sum to 1 (row i: query i over the keys; a translation's row t: the decoder writing target
token t over the source). Cell values are tanh(c) in [-1, 1], one per character of `text` (the text as the
model's tokens stand for it), exactly those the cell view colours.
"""

# L layers, H heads, T target or text tokens, S source tokens

from __future__ import annotations

import contextlib

import numpy as np

from textnn.generation.decoding import PromptDecoder
from textnn.models.base import EncoderWithHead
from textnn.viz import NothingToShow
from textnn.viz.attention import encoder_attention, self_attention, source_attention
from textnn.viz.lstm_cells import FEATURES, cell_name, trace_cells

DIGITS = 5  # of an attention probability in the answer (1e-5: finer than any colour of a heatmap)
NEEDS = ("a translation run whose model attends over its source (seq2seq with model.attention, "
         "transformer_mt), a run of a Transformer encoder (BERT, GPT: its attention per layer and head), or an "
         "LSTM language model (rnn_lm with model.cell=lstm, awd_lstm: its memory cells)")


def kind_of(task, model) -> str | None:
    """What the run shows: "source_attention", "self_attention", "cells", or None (nothing)."""
    if "write_views" in task.capabilities:
        return "source_attention"
    if not isinstance(model, EncoderWithHead):
        return None
    if model.shows_attention or model.encoder.gives_attention:
        return "self_attention"
    if model.encoder.gives_cells and isinstance(model, PromptDecoder):
        return "cells"
    return None


def inspect(task, model, text: str, in_precision=contextlib.nullcontext, name: str = "the run") -> dict:
    """What `model` (of `task`, a loaded run called `name`) shows reading `text`, as the module docstring
    says. Attention is computed inside `in_precision()` (the run's precision); LSTM cells in float32, as the
    cell view reads them. A run with nothing to show raises NothingToShow, naming what is needed."""
    kind = kind_of(task, model)
    if kind is None:
        raise NothingToShow(f"{name}: a {task.config.task} run of model {task.config.model_name} has nothing to "
                            f"inspect; the inspect view takes {NEEDS}")
    if kind == "cells":
        return cells_answer(trace_cells((task.config, task, model), text, run_name=name))
    with in_precision():
        if kind == "source_attention":
            found = source_attention(task, model, text)
            return {"kind": kind, "source": found.source, "target": found.target, "translation": found.translation,
                    "layers": list(found.maps), "attention": [rounded(maps) for maps in found.maps.values()]}
        if model.shows_attention:  # a language model reads its text as its training files
            found = self_attention(model, task, text)
        else:
            found = encoder_attention(model.encoder, task.tokenizer, task.vocab, text)
    return {"kind": kind, "tokens": found.tokens, "attention": rounded(found.weights)}


def rounded(weights: np.ndarray) -> list:
    return np.round(weights.astype(np.float64), DIGITS).tolist()


def cells_answer(trace) -> dict:
    cells = []
    for match, label in zip(trace.matches, trace.labels):
        description = FEATURES.get(match.feature, "a cell picked at random, for comparison")
        cells.append({"cell": match.cell, "name": cell_name(match.cell, trace.layer_sizes), "feature": match.feature,
                      "description": description, "label": label, "correlation": round(match.correlation, 4),
                      "values": trace.activations[:, match.cell].astype(np.float64).tolist()})
    return {"kind": "cells", "text": trace.text, "layer_sizes": trace.layer_sizes, "cells": cells}
