"""Tests for textnn.data.readers: every format, every user error, and the k-fold helpers."""

from __future__ import annotations

import gzip
import json
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textnn.data.readers import (
    FORMATS,
    Record,
    kfold_splits,
    read_classification,
    read_lines,
    stratified_kfold_splits,
)
from textnn.errors import TextnnError

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content.encode("utf-8"))
    return path


def raises(fragments: list[str], fn, *args, **kwargs) -> str:
    """Call fn expecting a TextnnError whose one-line message holds every fragment."""
    with pytest.raises(TextnnError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --------------------------------------------------------------------------------------------------
# tsv / csv


def test_tsv_header_by_name_strips_text_and_numbers_lines(tmp_path):
    f = write(tmp_path / "train.tsv", "sentence\tlabel\nit 's great . \t1\n\n  dull  \t0\n")
    records = read_classification(f, "tsv")
    assert records == [
        Record("it 's great .", "1", None, str(f), 2),
        Record("dull", "0", None, str(f), 4),
    ]


def test_tsv_sentence_pair_and_columns_by_index(tmp_path):
    f = write(tmp_path / "pairs.tsv", "id\ta\tb\tgold\n7\tA man runs.\tSomeone moves.\tyes\n")
    by_name = read_classification(
        f, "tsv", text_column="a", text_pair_column="b", label_column="gold"
    )
    by_index = read_classification(f, "tsv", text_column=1, text_pair_column="2", label_column=3)
    expected = [Record("A man runs.", "yes", "Someone moves.", str(f), 2)]
    assert by_name == expected
    assert by_index == expected


def test_header_name_wins_over_digit_string(tmp_path):
    # A column literally named "0" is found by name even though "0" also reads as an index.
    f = write(tmp_path / "d.tsv", "label\t0\nneg\tsome text\n")
    assert read_classification(f, "tsv", text_column="0")[0].text == "some text"


def test_tsv_without_header_uses_indices(tmp_path):
    f = write(tmp_path / "cola.tsv", "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n")
    records = read_classification(f, "tsv", header=False, text_column=3, label_column=1)
    got = [(r.text, r.label, r.line) for r in records]
    assert got == [("The cat sat.", "1", 1), ("Cat the sat.", "0", 2)]


def test_no_header_rejects_column_names(tmp_path):
    f = write(tmp_path / "cola.tsv", "gj04\t1\t\tThe cat sat.\n")
    raises([str(f), "data.header=false", "'sentence'", "0-based"],
           read_classification, f, "tsv", header=False)


def test_quoting_off_keeps_stray_quotes(tmp_path):
    # An unbalanced quote must neither swallow the tab nor join the next line into this record.
    f = write(
        tmp_path / "mrpc.tsv",
        'sentence\tlabel\n"The pie business does not fit.\t1\nHe said "no.\t0\n',
    )
    records = read_classification(f, "tsv")
    assert [r.text for r in records] == ['"The pie business does not fit.', 'He said "no.']
    assert [r.label for r in records] == ["1", "0"]


def test_csv_with_quoting_handles_commas_quotes_and_newlines(tmp_path):
    f = write(
        tmp_path / "d.csv",
        'text,label\n"good, really",pos\n"she said ""hi""",neg\n"two\nlines",pos\nplain,neg\n',
    )
    records = read_classification(f, "csv", text_column="text", quoting=True)
    assert [r.text for r in records] == ["good, really", 'she said "hi"', "two\nlines", "plain"]
    # A record is numbered by the line it starts on; the one after a two-line record is line 6.
    assert [r.line for r in records] == [2, 3, 4, 6]


def test_csv_without_quoting_sees_a_quoted_comma_as_a_ragged_line(tmp_path):
    f = write(tmp_path / "d.csv", 'text,label\n"good, really",pos\n')
    raises([f"{f}:2:", "expected 2 comma-separated fields", "found 3", "data.quoting=true"],
           read_classification, f, "csv", text_column="text")


def test_custom_delimiter_and_crlf(tmp_path):
    f = write(tmp_path / "d.txt", "sentence;label\r\nfine film;pos\r\nbad film;neg\r\n")
    records = read_classification(f, "csv", delimiter=";")
    assert [(r.text, r.label) for r in records] == [("fine film", "pos"), ("bad film", "neg")]


def test_bom_is_removed_from_header(tmp_path):
    f = write(tmp_path / "mrpc.tsv", b"\xef\xbb\xbfQuality\t#1 String\t#2 String\n1\tA.\tB.\n")
    records = read_classification(
        f, "tsv", text_column="#1 String", text_pair_column="#2 String", label_column="Quality"
    )
    assert records == [Record("A.", "1", "B.", str(f), 2)]


def test_prediction_input_without_labels(tmp_path):
    no_column = write(tmp_path / "a.tsv", "sentence\nsome text\n")
    assert read_classification(no_column, "tsv", require_labels=False)[0].label is None
    empty_label = write(tmp_path / "b.tsv", "sentence\tlabel\nsome text\t\nother\tpos\n")
    records = read_classification(empty_label, "tsv", require_labels=False)
    assert [r.label for r in records] == [None, "pos"]
    raises([f"{empty_label}:2:", "empty label", "'label'"], read_classification, empty_label, "tsv")


def test_unknown_column_suggests_the_closest(tmp_path):
    f = write(tmp_path / "train.tsv", "sentence\tlabel\nok\t1\n")
    message = raises([f"{f}:1:", "'sentense'", "did you mean 'sentence'", "'label'"],
                     read_classification, f, "tsv", text_column="sentense")
    assert "data.text_column" in message
    raises(["'Label'", "did you mean 'label'"], read_classification, f, "tsv", label_column="Label")


def test_column_index_out_of_range(tmp_path):
    f = write(tmp_path / "train.tsv", "sentence\tlabel\nok\t1\n")
    raises([f"{f}:1:", "data.text_column=5", "2 fields", "0-1"],
           read_classification, f, "tsv", text_column=5)
    g = write(tmp_path / "nohead.tsv", "ok\t1\n")
    raises([f"{g}:1:", "data.label_column='2'", "line 1 has 2 fields"],
           read_classification, g, "tsv", header=False, text_column=0, label_column="2")


def test_ragged_line_names_line_and_both_counts(tmp_path):
    f = write(tmp_path / "train.tsv", "sentence\tlabel\nok\t1\nfine\t1\na\tstray\ttab\t0\n")
    raises([f"{f}:4:", "expected 2 tab-separated fields (header has 2), found 4", "stray tab"],
           read_classification, f, "tsv")
    g = write(tmp_path / "nohead.tsv", "a\t1\nb\n")
    raises([f"{g}:2:", "(line 1 has 2), found 1"],
           read_classification, g, "tsv", header=False, text_column=0, label_column=1)


def test_lines_without_text_are_left_out_and_numbered_and_a_label_same_as_text_is_an_error(tmp_path):
    f = write(tmp_path / "train.tsv", "sentence\tlabel\nok\t1\n \t1\nfine\t0\n\t0\n")
    records = read_classification(f, "tsv")
    assert [r.line for r in records] == [2, 4] and records.no_text == [3, 5]
    only = write(tmp_path / "only.tsv", "sentence\tlabel\n \t1\n")
    raises([str(only), "no examples", "label but no text (line 2)"], read_classification, only, "tsv")
    g = write(tmp_path / "g.tsv", "sentence\tlabel\nok\t1\n")
    raises([str(g), "same column"], read_classification, g, "tsv", label_column="sentence")


def test_header_only_and_empty_files(tmp_path):
    header_only = write(tmp_path / "h.tsv", "sentence\tlabel\n")
    raises([str(header_only), "no examples", "header"], read_classification, header_only, "tsv")
    empty = write(tmp_path / "e.tsv", "")
    raises([str(empty), "empty"], read_classification, empty, "tsv")
    blank = write(tmp_path / "b.jsonl", "\n  \n")
    raises([str(blank), "no examples", "blank"], read_classification, blank, "jsonl")


# --------------------------------------------------------------------------------------------------
# jsonl, fasttext, label_text, text, class_files


def test_jsonl(tmp_path):
    lines = [
        json.dumps({"sentence": " good ", "label": "pos"}),
        "",
        json.dumps({"sentence": "meh", "label": 1, "extra": [1]}),
    ]
    f = write(tmp_path / "d.jsonl", "\n".join(lines) + "\n")
    records = read_classification(f, "jsonl")
    assert records == [Record("good", "pos", None, str(f), 1), Record("meh", "1", None, str(f), 3)]
    g = write(tmp_path / "p.jsonl", json.dumps({"premise": "a", "hypothesis": "b", "gold": "e"}))
    pair = read_classification(
        g, "jsonl", text_column="premise", text_pair_column="hypothesis", label_column="gold"
    )
    assert pair == [Record("a", "e", "b", str(g), 1)]


def test_jsonl_errors(tmp_path):
    bad = write(tmp_path / "bad.jsonl", '{"sentence": "a", "label": "x"}\n{"sentence": "b", "label": }')
    raises([f"{bad}:2:", "not valid JSON"], read_classification, bad, "jsonl")
    missing = write(tmp_path / "m.jsonl", '{"sentence": "a", "label": "x"}\n{"sentece": "b", "label": 1}')
    raises([f"{missing}:2:", "'sentence'", "did you mean 'sentece'"],
           read_classification, missing, "jsonl")
    not_object = write(tmp_path / "n.jsonl", '["a", "b"]\n')
    raises([f"{not_object}:1:", "JSON object"], read_classification, not_object, "jsonl")
    no_label = write(tmp_path / "u.jsonl", '{"sentence": "a"}\n')
    raises([f"{no_label}:1:", "'label'"], read_classification, no_label, "jsonl")
    assert read_classification(no_label, "jsonl", require_labels=False)[0].label is None


def test_fasttext(tmp_path):
    f = write(tmp_path / "d.txt", "__label__pos great  film\n\n__label__neg __label__meh\tdull one")
    records = read_classification(f, "fasttext")
    assert records == [
        Record("great  film", "pos", None, str(f), 1),
        Record("dull one", "neg", None, str(f), 3),
    ]


def test_fasttext_errors(tmp_path):
    f = write(tmp_path / "d.txt", "__label__pos great\nno label here\n")
    raises([f"{f}:2:", "no label", "__label__"], read_classification, f, "fasttext")
    g = write(tmp_path / "g.txt", "__label__pos\n")
    raises([str(g), "no examples", "no text (line 1)"], read_classification, g, "fasttext")
    h = write(tmp_path / "h.txt", "__label__ text\n")
    raises([f"{h}:1:", "empty label"], read_classification, h, "fasttext")


def test_label_text(tmp_path):
    f = write(tmp_path / "d.txt", "pos a fine film\nneg\tdull  and long\n")
    records = read_classification(f, "label_text")
    got = [(r.label, r.text, r.line) for r in records]
    assert got == [("pos", "a fine film", 1), ("neg", "dull  and long", 2)]
    g = write(tmp_path / "g.txt", "pos fine\nneg\n")
    records = read_classification(g, "label_text")
    assert [(r.label, r.text) for r in records] == [("pos", "fine")] and records.no_text == [2]


def test_plain_text_and_pairs(tmp_path):
    f = write(tmp_path / "in.txt", "first one\n\n second \n")
    records = read_classification(f, "text")
    got = [(r.text, r.label, r.line) for r in records]
    assert got == [("first one", None, 1), ("second", None, 3)]
    g = write(tmp_path / "pairs.txt", "a premise\ta hypothesis\twith a tab\n")
    pair = read_classification(g, "text", text_pair_column="hypothesis")
    assert pair == [Record("a premise", None, "a hypothesis\twith a tab", str(g), 1)]
    h = write(tmp_path / "nopair.txt", "a\tb\nno tab here\n")
    raises([f"{h}:2:", "tab"], read_classification, h, "text", text_pair_column="x")


def test_class_files(tmp_path):
    write(tmp_path / "mr" / "pos.txt", "a fine film\n\nwonderful\n")
    write(tmp_path / "mr" / "neg.txt", "dull\n")
    write(tmp_path / "mr" / "README.md", "not a class\n")
    records = read_classification(tmp_path / "mr", "class_files")
    assert [(r.label, r.text, Path(r.path).name, r.line) for r in records] == [
        ("neg", "dull", "neg.txt", 1),
        ("pos", "a fine film", "pos.txt", 1),
        ("pos", "wonderful", "pos.txt", 3),
    ]


def test_class_files_errors(tmp_path):
    missing = tmp_path / "nowhere"
    raises([str(missing), "does not exist"], read_classification, missing, "class_files")
    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    raises([str(empty_dir), "no .txt files"], read_classification, empty_dir, "class_files")
    write(tmp_path / "d" / "pos.txt", "fine\n")
    write(tmp_path / "d" / "neg.txt", "\n")
    raises([str(tmp_path / "d" / "neg.txt"), "'neg'", "no examples"],
           read_classification, tmp_path / "d", "class_files")
    a_file = write(tmp_path / "f.txt", "x\n")
    raises([str(a_file), "directory"], read_classification, a_file, "class_files")
    raises(["text_pair_column", "tsv"],
           read_classification, tmp_path / "d", "class_files", text_pair_column="b")


# --------------------------------------------------------------------------------------------------
# Errors shared by every format


def test_unknown_format_suggests_and_lists():
    message = raises(["'tsvv'", "did you mean 'tsv'", "data.format"],
                     read_classification, "x.tsv", "tsvv")
    for name in FORMATS:
        assert name in message


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "class_files"])
def test_missing_file_and_directory(tmp_path, fmt):
    missing = tmp_path / "no_such.tsv"
    raises([str(missing), "does not exist"], read_classification, missing, fmt)
    raises([str(tmp_path), "is a directory"], read_classification, tmp_path, fmt)


@pytest.mark.parametrize("fmt", ["tsv", "jsonl", "fasttext", "label_text", "text"])
def test_non_utf8_bytes_name_line_and_offset(tmp_path, fmt):
    good = {
        "tsv": b"sentence\tlabel\nok\t1\n",
        "jsonl": b'{"sentence": "ok", "label": "1"}\n\n',
        "fasttext": b"__label__1 ok\n\n",
        "label_text": b"1 ok\n\n",
        "text": b"ok\n\n",
    }[fmt]
    f = write(tmp_path / "data.txt", good + b"caf\xe9 1\n")
    offset = len(good) + 3
    raises([f"{f}:3:", "0xe9", f"byte offset {offset}", "UTF-8", "data.encoding"],
           read_classification, f, fmt)


def test_other_encoding_and_unknown_encoding(tmp_path):
    f = write(tmp_path / "latin.tsv", "sentence\tlabel\ncafé\t1\n".encode("latin-1"))
    assert read_classification(f, "tsv", encoding="latin-1")[0].text == "café"
    raises([str(f), "'klingon'", "data.encoding"],
           read_classification, f, "tsv", encoding="klingon")


def test_gzip_input(tmp_path):
    f = tmp_path / "train.tsv.gz"
    f.write_bytes(gzip.compress("sentence\tlabel\nok\t1\n".encode()))
    assert read_classification(f, "tsv") == [Record("ok", "1", None, str(f), 2)]
    bad = write(tmp_path / "bad.txt.gz", b"not gzip at all")
    raises([str(bad), "gzip"], read_lines, bad)


def test_pair_column_with_single_text_format(tmp_path):
    f = write(tmp_path / "d.txt", "__label__a x\n")
    raises([str(f), "fasttext", "data.text_pair_column"],
           read_classification, f, "fasttext", text_pair_column="b")


# --------------------------------------------------------------------------------------------------
# read_lines


def test_read_lines_keeps_blank_lines_and_in_line_separators(tmp_path):
    # Form feed and U+2028 are characters inside a line, not line breaks.
    f = write(tmp_path / "corpus.txt", "= Title =\r\n\r\npara\x0cgraph\u2028x\nlast")
    assert read_lines(f) == ["= Title =", "", "para\x0cgraph\u2028x", "last"]
    g = write(tmp_path / "one.txt", "only\n")
    assert read_lines(g) == ["only"]


def test_read_lines_errors(tmp_path):
    raises([str(tmp_path / "x.txt"), "does not exist"], read_lines, tmp_path / "x.txt")
    empty = write(tmp_path / "e.txt", "")
    raises([str(empty), "empty"], read_lines, empty)
    bad = write(tmp_path / "b.txt", b"fine\nfine\n\x80bad\n")
    raises([f"{bad}:3:", "0x80", "byte offset 10"], read_lines, bad)


# --------------------------------------------------------------------------------------------------
# Property: what a tsv writer puts in, the reader gives back

# NUL is refused by the readers: no text file holds one (UTF-16 read as UTF-8 does)
_cell = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r\x00"),
    min_size=1,
    max_size=20,
).filter(lambda s: s.strip() != "")


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_cell, st.sampled_from(["pos", "neg", "0"])), min_size=1, max_size=20))
def test_tsv_round_trip(rows):
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "d.tsv"
        body = "".join(f"{text}\t{label}\n" for text, label in rows)
        f.write_text("sentence\tlabel\n" + body, encoding="utf-8")
        records = read_classification(f, "tsv")
    assert [(r.text, r.label) for r in records] == [(t.strip(), l) for t, l in rows]
    assert [r.line for r in records] == list(range(2, len(rows) + 2))


# --------------------------------------------------------------------------------------------------
# k-fold


def _check_partition(splits, n, k):
    assert len(splits) == k
    tests = [test for _, test in splits]
    assert sorted(i for test in tests for i in test) == list(range(n))
    for train, test in splits:
        assert not set(train) & set(test)
        assert len(train) + len(test) == n
    sizes = [len(t) for t in tests]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=80, deadline=None)
@given(data=st.data(), n=st.integers(2, 300), seed=st.integers(0, 2**31 - 1))
def test_kfold_properties(data, n, seed):
    k = data.draw(st.integers(2, min(n, 25)))
    splits = kfold_splits(n, k, seed)
    _check_partition(splits, n, k)
    assert kfold_splits(n, k, seed) == splits


def test_kfold_shuffles_by_seed():
    a, b = kfold_splits(100, 5, seed=0), kfold_splits(100, 5, seed=1)
    assert a != b
    assert a[0][1] != list(range(20))  # not simply contiguous blocks


@pytest.mark.parametrize("n,k", [(10, 1), (10, 0), (3, 4), (1, 2)])
def test_kfold_bad_k(n, k):
    raises([str(k)], kfold_splits, n, k)
    raises([str(k)], stratified_kfold_splits, ["a"] * n, k)


@settings(max_examples=80, deadline=None)
@given(
    data=st.data(),
    labels=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=2, max_size=200),
    seed=st.integers(0, 2**31 - 1),
)
def test_stratified_kfold_properties(data, labels, seed):
    k = data.draw(st.integers(2, min(len(labels), 12)))
    splits = stratified_kfold_splits(labels, k, seed)
    _check_partition(splits, len(labels), k)
    for cls in set(labels):
        per_fold = [sum(labels[i] == cls for i in test) for _, test in splits]
        assert max(per_fold) - min(per_fold) <= 1, (cls, per_fold)
    assert stratified_kfold_splits(labels, k, seed) == splits


def test_stratified_kfold_keeps_exact_proportions():
    labels = ["pos"] * 80 + ["neg"] * 20
    for _, test in stratified_kfold_splits(labels, 10, seed=3):
        assert Counter(labels[i] for i in test) == {"pos": 8, "neg": 2}


# --------------------------------------------------------------------------------------------------
# Real GLUE files (see shared/data/README.md for their quirks)

needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"shared benchmark data not found at {DATA}"
)


@needs_data
def test_real_glue_dev_sets():
    sst2 = read_classification(DATA / "sst2" / "dev.tsv", "tsv")
    assert len(sst2) == 872
    assert {r.label for r in sst2} == {"0", "1"}
    # The header is line 1, and the space SST-2 leaves before each tab is stripped.
    assert sst2[0].line == 2 and not sst2[0].text.endswith(" ")

    mrpc = read_classification(
        DATA / "glue" / "MRPC" / "dev.tsv", "tsv",
        text_column="#1 String", text_pair_column="#2 String", label_column="Quality",
    )
    assert len(mrpc) == 408
    assert {r.label for r in mrpc} == {"0", "1"}
    assert all(r.text_pair for r in mrpc)
    assert any(r.text_pair.startswith('"') for r in mrpc)  # stray quotes survive with quoting off

    rte = read_classification(
        DATA / "glue" / "RTE" / "dev.tsv", "tsv",
        text_column="sentence1", text_pair_column="sentence2",
    )
    assert len(rte) == 277
    assert {r.label for r in rte} == {"entailment", "not_entailment"}

    cola = read_classification(
        DATA / "glue" / "CoLA" / "dev.tsv", "tsv", header=False, text_column=3, label_column=1
    )
    assert len(cola) == 527
    assert {r.label for r in cola} == {"0", "1"}
    assert cola[0].line == 1
