"""CoNLL reading (documents, columns, errors with line numbers), chunks, scheme conversion, writing."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data
from textnn.data.conll import (Sentence, convert_tags, format_conll, looks_like_conll, parse_conll, read_conll,
                               sentences_from_text, span_records, spans, tag_problem, tag_set, tags_from_spans)
from textnn.data.tokenizers import Tokenizer
from textnn.errors import TextnnError

SAMPLE = """\
-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O


Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O
"""


def write(tmp_path: Path, text: str, name: str = "data.conll") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ reading


def test_reader_splits_sentences_and_documents(tmp_path):
    sentences = read_conll(write(tmp_path, SAMPLE))
    assert [s.tokens for s in sentences] == [("EU", "rejects", "German", "call", "."), ("Peter", "Blackburn"),
                                             ("BRUSSELS", "1996-08-22")]
    assert [s.tags for s in sentences] == [("I-ORG", "O", "I-MISC", "O", "O"), ("I-PER", "I-PER"), ("I-LOC", "O")]
    assert [s.document for s in sentences] == [0, 0, 1]
    assert [s.doc_start for s in sentences] == [True, False, True]
    assert [s.line for s in sentences] == [3, 10, 15]  # the two blank lines before "Peter" are one break


def test_reader_picks_columns_by_index(tmp_path):
    path = write(tmp_path, SAMPLE)
    chunks = read_conll(path, token_column=1, tag_column=2, scheme="iob1")
    assert chunks[0].tokens == ("NNP", "VBZ", "JJ", "NN", ".")
    assert chunks[0].tags == ("I-NP", "I-VP", "I-NP", "I-NP", "O")


def test_gzipped_file_reads_the_same(tmp_path):
    plain = write(tmp_path, SAMPLE)
    packed = tmp_path / "data.conll.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [(s.tokens, s.tags, s.document) for s in read_conll(packed)] == \
        [(s.tokens, s.tags, s.document) for s in read_conll(plain)]


def test_sentences_before_the_first_docstart_are_document_0(tmp_path):
    text = "a O\n\n-DOCSTART- O\n\nb I-PER\n\n-DOCSTART- O\n-DOCSTART- O\nc O\n"
    sentences = read_conll(write(tmp_path, text))
    assert [(s.tokens, s.document, s.doc_start) for s in sentences] == [
        (("a",), 0, False), (("b",), 1, True), (("c",), 3, True)]  # two markers in a row: an empty document 2


def test_prediction_input_without_tag_column_has_no_tags(tmp_path):
    sentences = read_conll(write(tmp_path, "John\nlives\n\nhere\n"), require_tags=False)
    assert [(s.tokens, s.tags) for s in sentences] == [(("John", "lives"), None), (("here",), None)]


@pytest.mark.parametrize("text, line, words", [
    ("a DT O\nb NN\n", 2, ["expected 3", "found 2", "line 1"]),
    ("-DOCSTART- O\n\nx NN O\ny NN O\n\nz NN O extra\n", 6, ["expected 3", "found 4", "line 3"]),
])
def test_wrong_column_count_names_the_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(TextnnError) as err:
        read_conll(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:")
    assert all(word in message for word in words), message


@pytest.mark.parametrize("tag, scheme, hint", [
    ("X-PER", "iob1", "prefix 'X'"),
    ("B-", "iob2", "needs an entity type"),
    ("PER", "iob1", "no prefix"),
    ("S-PER", "iob1", "bioes"),
    ("E-LOC", "bio", "bioes"),
    ("U-PER", "bioes", "prefix 'U'"),
    ("i-PER", "iob1", "prefix 'i'"),
])
def test_invalid_tag_names_the_line_and_the_scheme(tmp_path, tag, scheme, hint):
    path = write(tmp_path, f"Peter O\nwent O\n\nto O\nRome {tag}\n")
    with pytest.raises(TextnnError) as err:
        read_conll(path, scheme=scheme)
    message = str(err.value)
    assert message.startswith(f"{path}:5: tag {tag!r} is not valid") and hint in message, message


@pytest.mark.parametrize("tag, scheme", [("S-PER", "bioes"), ("E-LOC", "bioes"), ("B-ORG-X", "iob1"), ("O", "bio")])
def test_valid_tags_pass(tag, scheme):
    assert tag_problem(tag, scheme) is None


@pytest.mark.parametrize("kwargs, words", [
    ({"token_column": 4}, ["data.token_column=4", "out of range", "3 columns"]),
    ({"tag_column": 3}, ["data.tag_column=3", "out of range"]),
    ({"tag_column": 0}, ["data.tag_column=0", "token column"]),
])
def test_column_index_out_of_range(tmp_path, kwargs, words):
    path = write(tmp_path, "\n-DOCSTART- -X- O\n\nEU NNP I-ORG\n")
    with pytest.raises(TextnnError) as err:
        read_conll(path, **kwargs)
    assert str(err.value).startswith(f"{path}:4:") and all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("text, words", [("", ["empty"]), ("\n\n-DOCSTART- -X- O O\n\n", ["no tokens"])])
def test_file_without_tokens_is_an_error(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(TextnnError) as err:
        read_conll(path)
    assert str(err.value).startswith(str(path)) and all(w in str(err.value) for w in words)


def test_unknown_scheme_is_an_error():
    with pytest.raises(TextnnError, match="unknown tag scheme 'bilou'.*iob1, iob2, bio, bioes"):
        parse_conll(["a O"], "x", scheme="bilou")


# ------------------------------------------------------------------------------------------------ chunks


@pytest.mark.parametrize("tags, scheme, expected", [
    # IOB1: I- runs are chunks; B- splits two adjacent chunks of one type
    (["I-PER", "I-PER", "B-PER", "O", "I-LOC"], "iob1", [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]),
    # a type change inside a run of I- tags starts a new chunk
    (["I-ORG", "I-LOC"], "iob1", [("ORG", 0, 1), ("LOC", 1, 2)]),
    # IOB2: a stray I- after O opens a chunk, as in conlleval
    (["O", "I-MISC", "I-MISC", "B-MISC"], "iob2", [("MISC", 1, 3), ("MISC", 3, 4)]),
    # BIOES: S- alone, B-..E-, a stray E- after O is a chunk of its own, B- after I- closes the chunk
    (["S-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "E-ORG"], "bioes",
     [("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 5), ("ORG", 6, 7)]),
    (["B-LOC", "I-LOC", "B-LOC", "E-LOC", "I-LOC"], "bioes", [("LOC", 0, 2), ("LOC", 2, 4), ("LOC", 4, 5)]),
    (["O", "O"], "iob1", []),
])
def test_spans_by_hand(tags, scheme, expected):
    assert spans(tags, scheme) == expected


@pytest.mark.parametrize("scheme, expected", [
    ("iob1", ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]),
    ("iob2", ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]),
    ("bioes", ["B-PER", "E-PER", "S-PER", "O", "S-LOC", "S-ORG"]),
])
def test_tags_from_spans_by_hand(scheme, expected):
    chunks = [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5), ("ORG", 5, 6)]
    assert tags_from_spans(chunks, 6, scheme) == expected


def test_overlapping_chunks_are_rejected():
    with pytest.raises(TextnnError, match="overlaps"):
        tags_from_spans([("PER", 0, 2), ("LOC", 1, 3)], 4, "bio")


def test_tag_set_lists_o_first_then_every_prefix_of_each_type():
    assert tag_set({"PER", "LOC"}, "bioes") == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC",
                                                "B-PER", "I-PER", "E-PER", "S-PER"]
    assert tag_set(["MISC"], "iob2") == tag_set(["MISC"], "bio") == ["O", "B-MISC", "I-MISC"]


@st.composite
def chunk_layouts(draw):
    """(length, chunks): disjoint chunks of random types, often touching each other."""
    length = draw(st.integers(0, 14))
    chunks, position = [], 0
    while position < length:
        position += draw(st.integers(0, 2))  # 0: the next chunk touches the previous one
        if position >= length:
            break
        end = draw(st.integers(position + 1, length))
        chunks.append((draw(st.sampled_from(["PER", "LOC", "B-X"])), position, end))
        position = end
    return length, chunks


SCHEME_NAMES = ["iob1", "iob2", "bio", "bioes"]


@settings(max_examples=300, deadline=None)
@given(chunk_layouts(), st.sampled_from(SCHEME_NAMES), st.sampled_from(SCHEME_NAMES))
def test_conversion_round_trips_through_any_scheme(layout, source, target):
    length, chunks = layout
    tags = tags_from_spans(chunks, length, source)
    assert spans(tags, source) == chunks  # writing then reading chunks is the identity
    assert all(tag_problem(tag, source) is None for tag in tags)
    converted = convert_tags(tags, source, target)
    assert spans(converted, target) == chunks
    assert convert_tags(converted, target, source) == tags


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]), max_size=14))
def test_any_iob_sequence_converts_without_losing_chunks(tags):
    # ill-formed sequences too (stray I-, B- after O in iob1): conversion keeps what conlleval reads
    assert spans(tags, "iob1") == spans(tags, "iob2")  # conlleval reads both schemes alike
    for target in ("iob1", "bio", "bioes"):
        assert spans(convert_tags(tags, "iob1", target), target) == spans(tags, "iob1")


# ------------------------------------------------------------------------------------------------ text, writing


def test_raw_text_is_one_sentence_per_line():
    sentences = sentences_from_text(["John lives in New York.\n", "\n", "  \n", "Hi"], Tokenizer("word"), "in.txt")
    assert [(s.tokens, s.line, s.tags) for s in sentences] == [
        (("John", "lives", "in", "New", "York", "."), 1, None), (("Hi",), 4, None)]
    with pytest.raises(TextnnError, match="in.txt: no text"):
        sentences_from_text(["", " "], Tokenizer("word"), "in.txt")


@pytest.mark.parametrize("lines, expected", [
    (SAMPLE.splitlines(), True),  # -DOCSTART- first
    (["John NNP I-PER", "lives VBZ O", "", "Rome NNP I-LOC"], True),
    (["John lives in Rome", "", "Mary is in Oslo"], True),  # same field count, blank line: columns it is
    (["John lives in Rome .", "Mary is here ."], False),  # no blank line
    (["John lives in Rome .", "", "Mary is here ."], False),  # different field counts
    (["John", "", "Mary"], False),  # one column: ambiguous, needs --input-format conll
    (["", ""], False),
])
def test_looks_like_conll_rule(lines, expected):
    assert looks_like_conll(lines) is expected


def test_written_conll_reads_back(tmp_path):
    sentences = read_conll(write(tmp_path, SAMPLE))
    predicted = [["O"] * len(s.tokens) for s in sentences]
    predicted[1] = ["I-PER", "O"]
    text = format_conll(sentences, predicted)
    assert text.splitlines()[:3] == ["-DOCSTART- O O", "", "EU I-ORG O"]
    gold_back = parse_conll(text.splitlines(), "out", tag_column=1)
    pred_back = parse_conll(text.splitlines(), "out", tag_column=2)
    assert [s.tokens for s in gold_back] == [s.tokens for s in sentences]
    assert [s.tags for s in gold_back] == [s.tags for s in sentences]
    assert [list(s.tags) for s in pred_back] == predicted
    assert [s.document for s in pred_back] == [s.document for s in sentences]
    unlabelled = [Sentence(("a", "b"), None)]
    assert format_conll(unlabelled, [["B-X", "I-X"]]) == "a B-X\nb I-X\n\n"


def test_span_records_give_exclusive_ends_and_text():
    tokens = ["Peter", "Blackburn", "visited", "New", "York"]
    assert span_records(tokens, ["B-PER", "E-PER", "O", "B-LOC", "E-LOC"], "bioes") == [
        {"type": "PER", "start": 0, "end": 2, "text": "Peter Blackburn"},
        {"type": "LOC", "start": 3, "end": 5, "text": "New York"}]


# ------------------------------------------------------------------------------------------------ real data


def test_conll2003_dev_counts():
    path = shared_data("conll2003", "eng.testa")
    sentences = read_conll(path)
    # independent count: split the raw text at blank lines, drop -DOCSTART- blocks
    blocks = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    token_blocks = [b for b in blocks if not b.strip().startswith("-DOCSTART-")]
    assert len(sentences) == len(token_blocks)
    assert 1 + max(s.document for s in sentences) == sum(b.strip().startswith("-DOCSTART-") for b in blocks)
    assert sum(len(s.tokens) for s in sentences) == sum(len(b.strip().splitlines()) for b in token_blocks)
    # and the published CoNLL-2003 numbers (Tjong Kim Sang & De Meulder 2003, Table 2)
    assert (len(sentences), 1 + max(s.document for s in sentences)) == (3250, 216)
    assert sum(len(s.tokens) for s in sentences) == 51362
