"""Interpretable LSTM cells: find cells that track a property of the text, and show them as HTML.

Karpathy, Johnson & Fei-Fei (2015), "Visualizing and Understanding Recurrent Networks" §4.2 and
Figure 2, colour a text by the activation tanh(c) of single memory cells of a character LSTM and find
cells that follow quotes, line length, indentation, brackets or comments. Here the search is made
explicit: simple per-character features are computed from the text itself (inside a string
literal, indentation, position in the line, ...) and each feature gets the cell whose activation
over a held-out text correlates with it most strongly (Pearson r, either sign).
`write_cell_view` does all of it for any trained LSTM language-model run (rnn_lm with cell lstm,
awd_lstm, the demo's char_lstm_lm): trace a text, find the cells, write the page.

Features are "after reading this character" quantities, as the cell's value at a position is its
state after reading that character. The string/comment/bracket scanner is a lenient Python lexer: it
follows quotes (single, double, triple), backslash escapes and `#` comments; it needs no valid code.
"""

# T text length (characters), H number of cells (all layers flattened)

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textnn.errors import TextnnError
from textnn.files import atomic_write_text
from textnn.viz import NothingToShow

# feature name -> what a cell tracking it does (used in the HTML headings)
FEATURES: dict[str, str] = {
    "in_string": "inside a string literal (quotes included)",
    "in_docstring": "inside a triple-quoted string (docstrings)",
    "in_comment": "inside a # comment",
    "indentation": "indentation of the current line (spaces read so far)",
    "position_in_line": "position in the line (characters since the last newline)",
    "bracket_depth": "depth of open ( [ { brackets in code",
    "in_word": "inside a word (letters, digits, underscore)",
}


def text_features(text: str) -> dict[str, np.ndarray]:
    """Per-character features of `text` (each a float array [T]), keyed as in `FEATURES`."""
    n = len(text)
    feats = {name: np.zeros(n, dtype=np.float64) for name in FEATURES}
    quote = ""  # the open string's delimiter: ', ", ''' or """; "" = not in a string
    in_comment = escaped = False
    depth = column = indent = 0
    at_line_start = True

    def put(j: int, string: str) -> None:
        """Record position j's features; `string` is the delimiter of the string j belongs to, or ""."""
        feats["in_string"][j] = 1.0 if string else 0.0
        feats["in_docstring"][j] = 1.0 if len(string) == 3 else 0.0
        feats["in_comment"][j] = 1.0 if in_comment else 0.0
        feats["indentation"][j] = indent
        feats["position_in_line"][j] = column
        feats["bracket_depth"][j] = depth
        feats["in_word"][j] = 1.0 if (text[j].isalnum() or text[j] == "_") else 0.0

    def put_delimiter(i: int, delimiter: str) -> int:
        """An opening or closing quote belongs to its string; returns the position after it."""
        nonlocal column
        for j in range(i, i + len(delimiter)):
            column += j > i  # the first character was counted by the caller
            put(j, delimiter)
        return i + len(delimiter)

    i = 0
    while i < n:
        ch = text[i]
        if ch == "\n":
            in_comment = escaped = False
            quote = "" if len(quote) == 1 else quote  # a one-line string cannot span lines
            column = indent = 0
            at_line_start = True
            put(i, quote)
            i += 1
            continue
        column += 1
        if at_line_start and ch in " \t":
            indent += 4 if ch == "\t" else 1
        else:
            at_line_start = False
        if quote:
            if escaped or ch == "\\":
                escaped = not escaped
            elif text.startswith(quote, i):
                closing, quote = quote, ""
                i = put_delimiter(i, closing)
                continue
            put(i, quote)
        elif in_comment:
            put(i, "")
        elif ch == "#":
            in_comment = True
            put(i, "")
        elif ch in "\'\"":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i = put_delimiter(i, quote)
            continue
        else:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(0, depth - 1)
            put(i, "")
        i += 1
    return feats


# --------------------------------------------------------------------------------------------------
# Finding cells


@dataclass
class CellMatch:
    feature: str  # the key of FEATURES it was chosen for, or "random" for a comparison cell
    cell: int  # column of the activation matrix
    correlation: float  # Pearson r between the cell and `closest` over the text (sign kept)
    closest: str  # the feature the cell correlates with most (= `feature` unless random)


def correlations(activations: np.ndarray, feature: np.ndarray) -> np.ndarray:
    """Pearson r of every cell with one feature: activations [T, H], feature [T] -> [H].

    A constant cell or a constant feature has no correlation: its r is 0.
    """
    acts = np.asarray(activations, dtype=np.float64)
    f = np.asarray(feature, dtype=np.float64)
    if acts.ndim != 2 or f.shape != (acts.shape[0],):
        raise TextnnError(f"activations must be [T, H] and the feature [T]; got {acts.shape} and {f.shape}")
    a = acts - acts.mean(axis=0)  # [T, H]
    f = f - f.mean()  # [T]
    denom = np.sqrt((a * a).sum(axis=0) * (f * f).sum())  # [H]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * f[:, None]).sum(axis=0) / denom  # [H]
    return np.where(denom > 1e-12, r, 0.0)


def find_cells(text: str, activations: np.ndarray, features: list[str] | None = None,
               random_cells: int = 0, seed: int = 0) -> list[CellMatch]:
    """For each feature (default: all of `FEATURES`) the cell most correlated with it (|r|), each
    cell used once (strongest pairs assigned first), in the order of `features`, plus `random_cells`
    other cells drawn at random for comparison (Karpathy et al. 2015 note that most cells are not
    interpretable). activations: [T, H], one row per character of `text`.
    """
    acts = np.asarray(activations, dtype=np.float64)
    if acts.ndim != 2 or acts.shape[0] != len(text):
        raise TextnnError(f"activations must have one row per character of the text ({len(text)}), "
                          f"got shape {acts.shape}")
    values = text_features(text)
    names = list(FEATURES) if features is None else list(features)
    unknown = [name for name in names if name not in FEATURES]
    if unknown:
        raise TextnnError(f"unknown cell feature {unknown[0]!r}; valid: {', '.join(FEATURES)}")
    # Greedy matching by strength: the strongest (feature, cell) pair first, so that a cell that
    # tracks two related features (indentation and position in line) goes to the one it tracks best.
    r = np.stack([correlations(acts, values[name]) for name in names]) if names else np.zeros((0, acts.shape[1]))
    strength = np.abs(r)  # [F, H]
    strength[~strength.any(axis=1)] = -1.0  # a feature constant over this text has nothing to find
    chosen: dict[str, int] = {}
    used: set[int] = set()
    while len(chosen) < min(len(names), acts.shape[1]):
        f, cell = np.unravel_index(np.argmax(strength), strength.shape)
        if strength[f, cell] < 0:
            break
        chosen[names[f]] = int(cell)
        used.add(int(cell))
        strength[f, :] = -1.0
        strength[:, cell] = -1.0
    matches = [CellMatch(name, chosen[name], float(r[names.index(name), chosen[name]]), name)
               for name in names if name in chosen]
    rest = [c for c in range(acts.shape[1]) if c not in used]
    rng = np.random.default_rng(seed)
    for cell in rng.choice(rest, size=min(random_cells, len(rest)), replace=False) if rest else []:
        cell_r = {name: float(correlations(acts[:, [cell]], values[name])[0]) for name in FEATURES}
        best = max(cell_r, key=lambda name: abs(cell_r[name]))
        matches.append(CellMatch("random", int(cell), cell_r[best], best))
    return matches


# --------------------------------------------------------------------------------------------------
# HTML

LEVELS = 21  # colour steps from -1 to +1 (0.1 apart)
_NEGATIVE = (59, 110, 220)  # the colour of -1 (blue); 0 is white
_POSITIVE = (220, 60, 50)  # the colour of +1 (red)


def _level_colour(level: int) -> str:
    value = 2 * level / (LEVELS - 1) - 1  # [-1, 1]
    end = _NEGATIVE if value < 0 else _POSITIVE
    mix = abs(value)
    r, g, b = (round(255 + (c - 255) * mix) for c in end)
    return f"rgb({r},{g},{b})"


def _levels(values: np.ndarray) -> np.ndarray:
    clipped = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), -1.0, 1.0)
    return np.rint((clipped + 1) * (LEVELS - 1) / 2).astype(int)  # [T] in 0 .. LEVELS-1


def _coloured_text(text: str, levels: np.ndarray) -> str:
    """The text as runs of same-coloured characters; a newline shows as a coloured ↵ and breaks the line."""
    parts: list[str] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and levels[i] == levels[start] and text[i] != "\n" and text[start] != "\n":
            continue
        chunk = text[start:i]
        if chunk == "\n":
            parts.append(f'<span class="c{levels[start]} nl">\u21b5</span>\n')
        else:
            parts.append(f'<span class="c{levels[start]}">{html.escape(chunk)}</span>')
        start = i
    return "".join(parts)


def write_cell_html(text: str, activations, cells: list[tuple[int, str]], path: str | Path,
                    title: str = "LSTM cell activations") -> Path:
    """Write a self-contained HTML page: one block per cell, each character of `text` coloured by that
    cell's activation after reading it, from blue (-1) through white (0) to red (+1).

    activations: [T, H] array (values outside [-1, 1] are clipped; pass tanh(c) for memory cells);
    cells: (column of activations, description) pairs, shown in this order. No external resources.
    """
    acts = np.asarray(activations.detach().cpu() if hasattr(activations, "detach") else activations, dtype=np.float64)
    if acts.ndim != 2 or acts.shape[0] != len(text):
        raise TextnnError(f"activations must be [T, H] with T = {len(text)} characters of text, got shape {acts.shape}")
    for cell, _ in cells:
        if not 0 <= cell < acts.shape[1]:
            raise TextnnError(f"cell {cell} is outside the activations' {acts.shape[1]} columns")
    style = "\n".join(f".c{k} {{ background: {_level_colour(k)}; }}" for k in range(LEVELS))
    legend = "".join(f'<span class="c{k}">&nbsp;&nbsp;</span>' for k in range(LEVELS))
    blocks = []
    for cell, description in cells:
        blocks.append(f'<section>\n<h2>{html.escape(description)}</h2>\n'
                      f'<pre>{_coloured_text(text, _levels(acts[:, cell]))}</pre>\n</section>')
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 70em; }}
pre {{ font-family: monospace; font-size: 13px; line-height: 1.35; white-space: pre-wrap;
      border: 1px solid #ccc; padding: 0.6em; }}
.nl {{ color: #999; }}
h2 {{ font-size: 1.05em; margin-top: 1.6em; }}
{style}
</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>Each character is coloured by one cell's activation after the model has read it
(Karpathy, Johnson &amp; Fei-Fei 2015, &ldquo;Visualizing and Understanding Recurrent Networks&rdquo;, &sect;4.2).
&#8629; marks a newline.</p>
<p class="legend">&minus;1 {legend} +1</p>
{chr(10).join(blocks)}
</body>
</html>
"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, page)
    return path


# --------------------------------------------------------------------------------------------------
# A run's cells, end to end

SHOW_CHARS = 2_500  # characters of the traced text shown per cell


@dataclass
class CellView:
    path: Path  # the HTML page written
    matches: list[CellMatch]  # the cells shown, as `find_cells` chose them
    labels: list[str]  # the heading of each cell's block, in the same order
    characters: int  # characters of text the cells were correlated over


def cell_name(column: int, layer_sizes: list[int]) -> str:
    """"layer k, cell j" for a column of the layers' concatenated cells (layers of any sizes)."""
    for layer, size in enumerate(layer_sizes):
        if column < size:
            return f"layer {layer + 1}, cell {column}"
        column -= size
    raise IndexError(f"column beyond the {sum(layer_sizes)} cells of the layers")


def excerpt(text: str, size: int) -> tuple[int, int]:
    """(start, end) of the piece of `text`, at most `size` characters, whose features vary most.

    It starts at the beginning or after a blank line (a paragraph, or a file in the demo's corpus)
    and ends at a line end when one falls inside it, so the page shows whole lines.
    """
    features = text_features(text)
    spread = {name: values.std() or 1.0 for name, values in features.items()}
    best, best_score = (0, min(len(text), size)), -1.0
    start = 0
    while start != -1:
        end = text.rfind("\n", start, start + size) + 1 or min(len(text), start + size)
        score = sum(min(1.0, values[start:end].std() / spread[name]) for name, values in features.items())
        if score > best_score:
            best, best_score = (start, end), score
        start = text.find("\n\n", start + 1)
        start = start if start == -1 else start + 2
        if start >= len(text):
            break
    return best


@dataclass
class CellTrace:
    """A run's LSTM memory cells over one text, and the cells `find_cells` chose: what the cell view shows."""

    text: str  # the text as the model's tokens stand for it (a word model: words, spaces, newlines)
    activations: np.ndarray  # [characters, sum H_l] float32: tanh(c) after reading each character's token
    layer_sizes: list[int]  # cells per layer (columns of `activations`, layer by layer)
    matches: list[CellMatch]  # the chosen cells, each feature's then the random ones
    labels: list[str]  # the heading of each chosen cell, in the same order


def trace_cells(loaded: tuple, text: str, random_cells: int = 2, seed: int = 0, run_name: str = "") -> CellTrace:
    """The memory cells of a trained LSTM language model reading `text`, and the cells that follow its
    features best.

    `loaded`: the run as (config, task, model), weights loaded (`experiment.load_run` gives it; taken as an
    argument, since runs are loaded a layer above this one); `run_name` names it in errors. The model reads
    `text` as it read its training files (characters, or each line's tokens then `<eos>`), from a zero
    state; every layer's tanh(c_t) is taken at every token, and each token's value stands for the characters
    it stands for. `find_cells` picks, for each text feature, the cell that follows it best over the whole
    text, plus `random_cells` others for comparison (Karpathy et al. 2015 §4.2). Works for any run whose
    encoder has `memory_cells` (rnn_lm / char_lstm_lm with cell lstm, awd_lstm).
    """
    import torch

    config, task, model = loaded
    if not model.encoder.gives_cells:
        raise NothingToShow(f"{run_name or 'the run'}: model {config.model_name!r} is not an LSTM language model; the "
                          f"cell view reads runs of rnn_lm (model.cell=lstm) or awd_lstm")
    if not text.strip():
        raise TextnnError("the text to trace is empty; give some text for the cell view")
    ids = task.encode_document(text)
    # A character model reads the text one character per token: show the text itself (an <unk>
    # character stays what it was); other tokens show the text each one stands for.
    pieces = list(text) if task.tokenizer.kind == "char" else task.token_pieces(ids)
    try:
        with torch.no_grad():
            layers = model.encoder.memory_cells(torch.tensor([ids], device=next(model.parameters()).device))
    except TextnnError as err:  # an encoder of the family that has none (rnn_lm with a GRU)
        raise NothingToShow(f"{run_name or 'the run'}: {err}") from None
    sizes = [layer.size(1) for layer in layers]  # L x [T, H_l]
    per_token = torch.tanh(torch.cat(layers, dim=1)).cpu().numpy()  # [T, sum H_l]
    shown = "".join(pieces)
    activations = np.repeat(per_token, [len(piece) for piece in pieces], axis=0)  # [characters, sum H_l]
    matches = find_cells(shown, activations, random_cells=random_cells, seed=seed)
    labels = []
    for m in matches:
        if m.feature == "random":
            labels.append(f"{cell_name(m.cell, sizes)}: a cell picked at random, for comparison "
                          f"(closest feature: {m.closest}, r = {m.correlation:+.2f})")
        else:
            labels.append(f"{cell_name(m.cell, sizes)}: {FEATURES[m.feature]} (r = {m.correlation:+.2f})")
    return CellTrace(shown, activations, sizes, matches, labels)


def write_cell_view(run_dir: str | Path, loaded: tuple, text: str, output_path: str | Path, title: str = "",
                    show_chars: int = SHOW_CHARS, random_cells: int = 2, seed: int = 0) -> CellView:
    """Colour `text` by the memory cells of a trained LSTM language model: one HTML block per cell.

    `loaded`: the run in `run_dir` as (config, task, model), weights loaded (`experiment.load_run`
    gives it). The cells and their values are `trace_cells`'s; the page shows the `show_chars`-character
    `excerpt` of the text.
    """
    found = trace_cells(loaded, text, random_cells, seed, str(run_dir))
    start, end = excerpt(found.text, show_chars)
    path = write_cell_html(found.text[start:end], found.activations[start:end],
                           [(m.cell, label) for m, label in zip(found.matches, found.labels)], output_path,
                           title=title or f"LSTM cells of {Path(run_dir).name} ({loaded[0].model_name})")
    return CellView(path=path, matches=found.matches, labels=found.labels, characters=len(found.text))
