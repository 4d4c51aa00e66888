"""Finding interpretable cells (text features + correlation) and the self-contained HTML view."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pytest

from textnn.errors import TextnnError
from textnn.viz.lstm_cells import FEATURES, correlations, find_cells, text_features, write_cell_html

SNIPPET = 'def f(a, b):\n    x = "hi (" + \'y\\\'z\'  # c(\n    """doc\n  str""" ; g([1,\n 2])\n'


def row(values: np.ndarray) -> str:
    return "".join(str(int(v)) for v in values)


def test_text_features_follow_strings_comments_indentation_and_brackets():
    f = text_features(SNIPPET)
    lines = SNIPPET.split("\n")
    assert len(f["in_string"]) == len(SNIPPET)
    start = SNIPPET.index('"hi')
    assert row(f["in_string"][start:start + 6]) == "111111"  # "hi (" incl. both quotes
    assert f["in_string"][start + 6] == 0
    escaped = SNIPPET.index("'y")
    assert row(f["in_string"][escaped:escaped + 6]) == "111111"  # 'y\'z' : the escaped quote stays inside
    assert f["bracket_depth"][SNIPPET.index("hi (") + 3] == 0  # "(" inside a string opens nothing
    comment = SNIPPET.index("# c(")
    assert row(f["in_comment"][comment - 1:comment + 5]) == "011110"  # ends at the newline
    doc = SNIPPET.index('"""doc')
    end = SNIPPET.index('str"""') + 6
    assert f["in_docstring"][doc:end].all() and f["in_string"][doc:end].all()
    assert not f["in_docstring"][:doc].any() and not f["in_docstring"][end:].any()
    second_line = len(lines[0]) + 1
    assert f["indentation"][second_line:second_line + 6].tolist() == [1, 2, 3, 4, 4, 4]
    assert f["position_in_line"][:4].tolist() == [1, 2, 3, 4]
    assert f["position_in_line"][len(lines[0])] == 0  # the newline starts a new line
    g = SNIPPET.index("g([")
    assert f["bracket_depth"][g:g + 3].tolist() == [0, 1, 2]
    assert f["bracket_depth"][-2] == 0
    assert f["in_word"][:4].tolist() == [1, 1, 1, 0]


def test_correlation_finds_a_planted_cell():
    rng = np.random.default_rng(0)
    text = (SNIPPET * 40)[:3000]
    feats = text_features(text)
    acts = np.tanh(rng.normal(size=(len(text), 64)))  # [T, H] noise cells
    acts[:, 41] = np.tanh(2.0 * feats["in_string"] - 1.0 + 0.5 * rng.normal(size=len(text)))  # a quote cell
    acts[:, 7] = -np.tanh(feats["position_in_line"] / 10)  # a (negative) line-position cell
    matches = {m.feature: m for m in find_cells(text, acts, random_cells=2)}
    assert matches["in_string"].cell == 41 and matches["in_string"].correlation > 0.7
    assert matches["position_in_line"].cell == 7 and matches["position_in_line"].correlation < -0.85
    cells = [m.cell for m in find_cells(text, acts, random_cells=2)]
    assert len(cells) == len(set(cells)) == len(FEATURES) + 2  # each cell shown once
    assert correlations(np.ones((5, 2)), np.arange(5.0)).tolist() == [0.0, 0.0]  # constant cell: no r
    with pytest.raises(TextnnError, match="one row per character"):
        find_cells(text, acts[:10])


class _Checker(HTMLParser):
    """Collects tags and checks that every opened tag is closed in order."""

    VOID = {"meta", "br", "hr", "img", "link", "input"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.tags, self.text, self.attrs = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def test_html_escapes_text_and_is_well_formed(tmp_path):
    text = 'if a < b and c > d:\n    s = "<script>alert(1)</script> & more"\n'
    acts = np.linspace(-1.5, 1.5, len(text) * 3).reshape(len(text), 3)  # [T, H], clipped to [-1, 1]
    path = write_cell_html(text, acts, [(0, "cell <0> tracks 'quotes'"), (2, "another cell")], tmp_path / "c.html")
    page = path.read_text(encoding="utf-8")
    assert "<script" not in page and "&lt;" in page and "&amp;" in page
    assert "cell &lt;0&gt; tracks" in page
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.stack == []
    assert checker.tags.count("section") == 2 and checker.tags[0] == "html"
    assert not {"src", "href"} & set(checker.attrs)  # self-contained: nothing loaded from outside
    shown = "".join(checker.text)
    assert shown.count(text.replace("\n", "\u21b5\n")) == 2  # each block shows the text, newlines marked
    assert ".c0 {" in page and ".c20 {" in page  # the full legend scale
    with pytest.raises(TextnnError, match="outside"):
        write_cell_html(text, acts, [(3, "no such cell")], tmp_path / "bad.html")
