"""Attention heatmaps: one PNG per layer with a grid of its heads, and an HTML page that shows them all.

Cell (i, j) of a head's map is the probability with which position i (a query: the token from which
the next one is predicted) attends to position j (a key). In a causal model everything above the
diagonal is zero. Token labels run along both axes. The maps come from the model's explicit
attention path (`forward_with_attention`), which computes the same numbers as the fused kernel
used in training (Vig & Belinkov 2019, "Analyzing the Structure of Attention in a Transformer
Language Model", look at GPT-2's heads the same way).

The arrays are found apart from the drawing (`self_attention`, `encoder_attention`, `source_attention`),
so the files written here and `textnn serve`'s inspect endpoint (viz/inspection.py) show the same numbers.
"""

# L layers, H heads, T tokens

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textnn.data.tokenizers import CLS, SEP
from textnn.errors import TextnnError
from textnn.files import atomic_write_text
from textnn.limits import InputTooLarge
from textnn.tasks.translation.data import BOS, EOS
from textnn.viz import NothingToShow
from textnn.viz.plots import _new_figure, _save

MAX_TOKENS = 128  # beyond this the labels of a T x T map can no longer be read
HEAD_COLUMNS = 4


def token_label(token: str) -> str:
    """A token as an axis label: whitespace made visible, long tokens shortened."""
    shown = token.replace("\n", "\u21b5").replace("\t", "\u21e5").replace(" ", "\u2423")
    return shown if len(shown) <= 12 else shown[:11] + "\u2026"


def plot_attention_heads(weights: np.ndarray, labels: list[str], path: str | Path, title: str) -> Path:
    """Write a PNG with one heatmap per head: weights [H, T, T] (rows = queries, columns = keys)."""
    if len(labels) != weights.shape[1]:
        raise TextnnError(f"{len(labels)} labels for attention maps over {weights.shape[1]} tokens")
    return _plot_heads(weights, labels, labels, path, title, "attends to (key)", "position (query)")


def plot_source_attention(weights: np.ndarray, source: list[str], target: list[str], path: str | Path,
                          title: str) -> Path:
    """A translation's alignment picture (Bahdanau et al. 2015, Figure 3): weights [H, T, S], row t the
    attention over the source tokens while the decoder predicts target token t; one panel per head."""
    if weights.shape[1:] != (len(target), len(source)):
        raise TextnnError(f"attention maps of shape {weights.shape[1:]} for {len(target)} target and "
                          f"{len(source)} source tokens")
    return _plot_heads(weights, [token_label(t) for t in target], [token_label(s) for s in source], path, title,
                       "source token", "output token")


def _plot_heads(weights: np.ndarray, rows_labels: list[str], column_labels: list[str], path: str | Path,
                title: str, xlabel: str, ylabel: str) -> Path:
    """One heatmap per head of weights [H, R, C], in a grid of at most HEAD_COLUMNS columns, one colour scale."""
    heads = weights.shape[0]
    length = max(weights.shape[1], weights.shape[2])
    columns = min(heads, HEAD_COLUMNS)
    rows = math.ceil(heads / columns)
    panel = min(10.0, max(3.0, 0.16 * length))  # inches per head
    font = max(4.0, min(9.0, 0.7 * 72 * panel / length))  # points: 70% of a cell's height
    figure = _new_figure(columns * panel + 1.0, rows * panel + 0.8)
    figure.set_layout_engine("constrained")  # room for the token labels, no empty margins
    axes = figure.subplots(rows, columns, squeeze=False)
    image = None
    for head in range(rows * columns):
        ax = axes[head // columns][head % columns]
        if head >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        if heads > 1:
            ax.set_title(f"head {head + 1}", fontsize=9)
        ax.set_xticks(range(weights.shape[2]), column_labels, rotation=90, fontsize=font)
        ax.set_yticks(range(weights.shape[1]), rows_labels, fontsize=font)
        ax.set_xlabel(xlabel, fontsize=8)
        if head % columns == 0:
            ax.set_ylabel(ylabel, fontsize=8)
    figure.suptitle(title, fontsize=11)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention probability")
    _save(figure, path)
    return Path(path)


def _index_html(title: str, text: str, tokens: list[str], images: list[tuple[str, str]]) -> str:
    """The page listing every layer's PNG (relative links, no external resources)."""
    figures = "\n".join(f'<figure>\n<img src="{html.escape(name)}" alt="{html.escape(caption)}">\n'
                        f"<figcaption>{html.escape(caption)}</figcaption>\n</figure>" for name, caption in images)
    token_list = " ".join(f"<code>{html.escape(token_label(t))}</code>" for t in tokens)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
img {{ max-width: 100%; border: 1px solid #ccc; }}
figure {{ margin: 2em 0; }}
pre {{ white-space: pre-wrap; border: 1px solid #ccc; padding: 0.6em; }}
code {{ background: #f2f2f2; margin-right: 0.2em; }}
</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>Each map shows, for one attention head, how much each position (row) attends to each earlier
position (column) when predicting the next token. Brighter = more attention; rows sum to 1.</p>
<pre>{html.escape(text)}</pre>
<p>{len(tokens)} tokens: {token_list}</p>
{figures}
</body>
</html>
"""


@dataclass
class SelfAttention:
    """Every head's attention of a model reading one text: what the attention view draws."""

    tokens: list[str]  # the T tokens the model read, as its vocabulary spells them
    weights: np.ndarray  # [L, H, T, T] float32: row i (a query) over the keys j; rows sum to 1


@dataclass
class SourceAttention:
    """A translation's attention over its source (Bahdanau et al. 2015, Figure 3): what its view draws."""

    source: list[str]  # the S source tokens, </s> included
    target: list[str]  # the T output tokens, row t the decoder predicting target[t] (the last: </s>)
    translation: str  # the greedy translation, as `translate` prints it
    maps: dict[str, np.ndarray]  # name ("attention" for an RNN; "layer1", ... for a Transformer) -> [H, T, S]


def _attention_length(tokens: int, limit: int) -> None:
    if not tokens:
        raise TextnnError("the text to visualise is empty; give at least one token")
    if tokens > limit:
        raise InputTooLarge(f"the text is {tokens} tokens long; attention maps are drawn for at most {limit} "
                            f"tokens: give a shorter text")


def self_attention(model: torch.nn.Module, task, text: str) -> SelfAttention:
    """Every head of every layer of a language model reading `text` (the explicit attention path of
    `forward_with_attention`, tasks.language_modeling.AttentionLanguageModel), at most the encoder's
    `max_length` tokens. `task` supplies the run's tokenizer and vocabulary (`encode_document`, `vocab`)."""
    ids = list(task.encode_document(text))  # as the model read its training text (word models: <eos> per line)
    _attention_length(len(ids), min(MAX_TOKENS, model.encoder.max_length(model.encoder.cfg) or MAX_TOKENS))
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        _, attention = model.forward_with_attention(torch.tensor([ids], device=device))  # [L, 1, H, T, T]
    return SelfAttention(task.vocab.decode(ids), attention[:, 0].float().cpu().numpy())  # [L, H, T, T]


def encoder_attention(encoder: torch.nn.Module, tokenizer, vocab, text: str) -> SelfAttention:
    """Every head of every layer of an encoder with `forward_with_attention` (BERT, GPT) reading `text` as
    its run tokenizes one input: `tokenizer`'s tokens, between [CLS] and [SEP] where the vocabulary has them
    (BERT's framing of a single text; Devlin et al. 2019 §3)."""
    ids = vocab.encode(tokenizer(text))
    if ids and CLS in vocab.stoi and SEP in vocab.stoi:
        ids = [vocab.stoi[CLS], *ids, vocab.stoi[SEP]]
    _attention_length(len(ids), min(MAX_TOKENS, encoder.max_length(encoder.cfg) or MAX_TOKENS))
    encoder.eval()
    device = next(encoder.parameters()).device
    with torch.no_grad():
        _, attention = encoder.forward_with_attention(torch.tensor([ids], device=device))  # [L, 1, H, T, T]
    return SelfAttention(vocab.decode(ids), attention[:, 0].float().cpu().numpy())  # [L, H, T, T]


def source_attention(task, model: torch.nn.Module, text: str) -> SourceAttention:
    """The attention over the source while `model` (a tasks.translation Translator) writes its greedy
    translation of the first non-empty line of `text`, read teacher-forced on that translation with the
    explicit attention path. `task` is the run's translation task (its vocabularies, encoding, decoding)."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        raise TextnnError("no text to translate: give a source sentence with --text or a file")
    source = task.encode_sources([line])[0]
    hypothesis = task.translate_ids(model, [source], task.decoding_config())[0][0]
    bos, eos = task.target_vocab.stoi[BOS], task.target_vocab.stoi[EOS]
    target = [bos, *hypothesis.tokens]
    device = next(model.parameters()).device
    tensor = lambda ids: torch.tensor([ids], dtype=torch.long, device=device)  # noqa: E731
    with torch.no_grad():
        out = model(tensor(source), tensor(source) >= 0, tensor(target), tensor(target) >= 0, need_weights=True)
    if not out.attention:
        raise NothingToShow(f"model {task.config.model_name} has no source attention to draw (a seq2seq without "
                          f"attention reads one summary vector); train it with an attention score")
    maps = {}
    for name, weights in out.attention.items():
        weights = weights[0].float().cpu().numpy()  # [T, S] or [H, T, S]
        maps[name] = weights if weights.ndim == 3 else weights[None]  # -> [H, T, S]
    return SourceAttention(task.source_labels(source), task.target_labels(hypothesis.tokens + [eos]),
                           task.detokenize(hypothesis.tokens), maps)


def write_attention_view(model: torch.nn.Module, task, text: str, output_dir: str | Path,
                         title: str = "Attention") -> list[Path]:
    """Heatmaps of every head of every layer of `model` reading `text`: layer_<l>.png + index.html.

    `model` is a language model with `forward_with_attention` (tasks.language_modeling.AttentionLanguageModel);
    at most the encoder's `max_length` tokens are drawn (`self_attention`). `task` supplies the run's
    tokenizer and vocabulary (`encode_document`, `vocab`). Returns the written paths, index.html first.
    """
    found = self_attention(model, task, text)
    labels = [token_label(t) for t in found.tokens]
    output_dir = Path(output_dir)
    images = []
    for layer, weights in enumerate(found.weights, start=1):
        name = f"layer_{layer}.png"
        plot_attention_heads(weights, labels, output_dir / name, f"{title}: layer {layer} of {len(found.weights)}")
        images.append((name, f"layer {layer}: {weights.shape[0]} heads"))
    index = output_dir / "index.html"
    atomic_write_text(index, _index_html(title, text, found.tokens, images))
    return [index, *(output_dir / name for name, _ in images)]
