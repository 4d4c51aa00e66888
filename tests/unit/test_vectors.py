"""Word-vector files: every format read back, embedding-matrix building, and every error case."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from textnn.errors import TextnnError
from textnn.interop.vectors import build_embedding_matrix, read_vectors, write_word2vec

WORDS = ["the", "cat", "café", "Apple", "apple", "--"]
GLOVE_SAMPLE = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "glove" / "glove.6B.50d.100k.txt.gz"
)


@pytest.fixture
def vectors() -> np.ndarray:
    # Values with few binary digits print and parse exactly in any text format.
    rng = np.random.default_rng(0)
    return (rng.integers(-64, 64, size=(len(WORDS), 4)) / 16).astype(np.float32)


def _text_lines(matrix: np.ndarray, words=WORDS, trailing: str = "") -> list[str]:
    return [w + " " + " ".join(repr(float(v)) for v in row) + trailing for w, row in zip(words, matrix)]


# --- reading each format ----------------------------------------------------------------------------


def test_glove_text(tmp_path, vectors):
    path = tmp_path / "vectors.txt"
    path.write_text("\n".join(_text_lines(vectors)) + "\n", encoding="utf-8")
    words, matrix = read_vectors(path)
    assert words == WORDS
    assert matrix.dtype == np.float32 and matrix.shape == (6, 4)
    np.testing.assert_array_equal(matrix, vectors)


def test_word2vec_text_with_header(tmp_path, vectors):
    path = tmp_path / "vectors.w2v.txt"
    path.write_text("6 4\n" + "\n".join(_text_lines(vectors)) + "\n", encoding="utf-8")
    words, matrix = read_vectors(path)
    assert words == WORDS
    np.testing.assert_array_equal(matrix, vectors)


def test_fasttext_vec_with_trailing_spaces(tmp_path, vectors):
    # fastText writes a space after the last value of each line.
    path = tmp_path / "wiki.vec"
    path.write_text("6 4\n" + "\n".join(_text_lines(vectors, trailing=" ")) + "\n", encoding="utf-8")
    words, matrix = read_vectors(path)
    assert words == WORDS
    np.testing.assert_array_equal(matrix, vectors)


@pytest.mark.parametrize("header", ["", "6 4\n"], ids=["glove", "word2vec"])
def test_gzipped_text(tmp_path, vectors, header):
    path = tmp_path / "vectors.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(header + "\n".join(_text_lines(vectors)) + "\n")
    words, matrix = read_vectors(path)
    assert words == WORDS
    np.testing.assert_array_equal(matrix, vectors)


def test_word2vec_binary_hand_built(tmp_path):
    # Two words in the C tool's layout: "word" SPACE float32 x D (little-endian), "\n" after each;
    # the second entry has no trailing newline, which other writers produce.
    data = b"2 3\n"
    data += "naïve".encode("utf-8") + b" " + struct.pack("<3f", 0.5, -1.25, 3.0) + b"\n"
    data += b"dog " + struct.pack("<3f", 1e-3, 2.0, -0.0)
    path = tmp_path / "vectors.bin"
    path.write_bytes(data)
    words, matrix = read_vectors(path)
    assert words == ["naïve", "dog"]
    expected = np.array([[0.5, -1.25, 3.0], [1e-3, 2.0, -0.0]], dtype=np.float32)
    np.testing.assert_array_equal(matrix, expected)


def test_word2vec_binary_round_trip_and_layout(tmp_path, vectors):
    path = tmp_path / "vectors.bin"
    write_word2vec(path, WORDS, vectors, binary=True)
    raw = path.read_bytes()
    # The layout is the C tool's: header, then word, space, packed floats, newline.
    first_entry = b"the " + struct.pack("<4f", *vectors[0].tolist()) + b"\n"
    assert raw.startswith(b"6 4\n" + first_entry)
    words, matrix = read_vectors(path)
    assert words == WORDS
    np.testing.assert_array_equal(matrix, vectors)


@pytest.mark.parametrize("name", ["out.txt", "out.txt.gz"])
def test_word2vec_text_round_trip_is_exact(tmp_path, name):
    rng = np.random.default_rng(1)
    matrix = rng.normal(size=(len(WORDS), 7)).astype(np.float32)  # full-precision float32 values
    path = tmp_path / name
    write_word2vec(path, WORDS, matrix, binary=False)
    words, loaded = read_vectors(path)
    assert words == WORDS
    np.testing.assert_array_equal(loaded, matrix)


@pytest.mark.parametrize("binary", [True, False])
def test_wanted_keeps_only_those_words_in_file_order(tmp_path, vectors, binary):
    path = tmp_path / ("v.bin" if binary else "v.txt")
    write_word2vec(path, WORDS, vectors, binary=binary)
    words, matrix = read_vectors(path, wanted={"apple", "the", "missing"})
    assert words == ["the", "apple"]
    np.testing.assert_array_equal(matrix, vectors[[0, 4]])
    words, matrix = read_vectors(path, wanted=set())
    assert words == [] and matrix.shape == (0, 4)


# --- embedding matrix -------------------------------------------------------------------------------


def test_build_embedding_matrix_coverage_and_rows(tmp_path, vectors):
    path = tmp_path / "v.txt"
    write_word2vec(path, WORDS, vectors, binary=False)
    tokens = ["<pad>", "<unk>", "the", "CAT", "Apple", "APPLE", "zebra"]
    matrix, report = build_embedding_matrix(tokens, path, seed=3, init_range=0.1)
    assert matrix.shape == (7, 4) and matrix.dtype == np.float32
    # Found: the (exact), CAT -> cat, Apple (exact, not the lower-case row), APPLE -> apple.
    assert report == {"found": 4, "total": 7, "coverage": pytest.approx(4 / 7), "dim": 4, "init_range": 0.1}
    np.testing.assert_array_equal(matrix[0], np.zeros(4))
    np.testing.assert_array_equal(matrix[2], vectors[WORDS.index("the")])
    np.testing.assert_array_equal(matrix[3], vectors[WORDS.index("cat")])
    np.testing.assert_array_equal(matrix[4], vectors[WORDS.index("Apple")])
    np.testing.assert_array_equal(matrix[5], vectors[WORDS.index("apple")])
    for row in (1, 6):  # not in the file: uniform in [-init_range, init_range]
        assert np.all(np.abs(matrix[row]) <= 0.1) and np.any(matrix[row] != 0)


def test_build_embedding_matrix_without_lowercase_fallback(tmp_path, vectors):
    path = tmp_path / "v.txt"
    write_word2vec(path, WORDS, vectors, binary=False)
    matrix, report = build_embedding_matrix(["CAT", "cat"], path, lowercase_fallback=False)
    assert report["found"] == 1 and report["coverage"] == 0.5
    assert not np.array_equal(matrix[0], vectors[WORDS.index("cat")])
    np.testing.assert_array_equal(matrix[1], vectors[WORDS.index("cat")])


def test_random_rows_depend_on_seed_only(tmp_path, vectors):
    path = tmp_path / "v.bin"
    write_word2vec(path, WORDS, vectors, binary=True)
    tokens = ["<pad>", "xx", "yy", "the"]
    first, _ = build_embedding_matrix(tokens, path, seed=5, init_range=0.25)
    again, _ = build_embedding_matrix(tokens, path, seed=5, init_range=0.25)
    other, _ = build_embedding_matrix(tokens, path, seed=6, init_range=0.25)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[1:3], other[1:3])
    np.testing.assert_array_equal(first[3], other[3])  # found rows do not depend on the seed
    # Rows drawn for missing words are the seed's U[-0.25, 0.25] draws at their positions.
    expected = np.random.default_rng(5).uniform(-0.25, 0.25, size=(4, 4)).astype(np.float32)
    np.testing.assert_array_equal(first[1:3], expected[1:3])


def test_missing_rows_match_the_variance_of_the_pretrained_vectors(tmp_path):
    """Kim 2014 section 3.1: random vectors for unknown words get the pretrained vectors' variance."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(500)]
    vectors = rng.normal(0.0, 0.7, size=(500, 8)).astype(np.float32)
    path = tmp_path / "vectors.txt"
    write_word2vec(path, words, vectors, binary=False)
    tokens = ["<pad>", *words[:100], *[f"unknown{i}" for i in range(2000)]]
    matrix, report = build_embedding_matrix(tokens, path, seed=1)
    assert report["init_range"] == pytest.approx(np.sqrt(3 * vectors[:100].var()), rel=1e-5)
    assert matrix[101:].var() == pytest.approx(vectors[:100].var(), rel=0.05)


# --- errors -----------------------------------------------------------------------------------------


def _error_text(path: Path) -> str:
    with pytest.raises(TextnnError) as info:
        read_vectors(path)
    return str(info.value)


def test_missing_file(tmp_path):
    message = _error_text(tmp_path / "nope.txt")
    assert "nope.txt" in message and "not found" in message


def test_wrong_number_of_values_names_line_and_counts(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a 1 2 3\nb 4 5 6\nc 7 8\n", encoding="utf-8")
    message = _error_text(path)
    assert f"{path}:3" in message
    assert "'c' has 2 values" in message and "have 3" in message


def test_wrong_number_of_values_after_header(tmp_path):
    path = tmp_path / "bad.vec"
    path.write_text("2 3\na 1 2 3\nb 4 5 6 7\n", encoding="utf-8")
    message = _error_text(path)
    assert f"{path}:3" in message and "4 values" in message and "header on line 1" in message


def test_wrong_count_is_reported_even_for_unwanted_words(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a 1 2 3\nb 4 5\n", encoding="utf-8")
    with pytest.raises(TextnnError, match=r":2: word 'b' has 2 values"):
        read_vectors(path, wanted={"a"})


def test_non_numeric_value(tmp_path):
    path = tmp_path / "bad.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("a 1 2 3\nb 4 x5 6\n")
    message = _error_text(path)
    assert f"{path}:2" in message and "'x5'" in message and "'b'" in message


@pytest.mark.parametrize("name", ["empty.txt", "empty.bin"])
def test_empty_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    assert "empty" in _error_text(path)


def test_empty_gzip_file(tmp_path):
    path = tmp_path / "empty.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8"):
        pass
    assert "empty" in _error_text(path)


def test_header_count_mismatch(tmp_path):
    path = tmp_path / "short.vec"
    path.write_text("3 2\na 1 2\nb 3 4\n", encoding="utf-8")
    message = _error_text(path)
    assert "header says 3 words but the file has 2" in message


def test_truncated_binary(tmp_path):
    path = tmp_path / "cut.bin"
    path.write_bytes(b"2 3\nab " + struct.pack("<3f", 1, 2, 3) + b"\ncd " + struct.pack("<2f", 1, 2))
    message = _error_text(path)
    assert "entry 2 of the 2" in message and "truncated" in message


def test_text_file_named_bin(tmp_path):
    path = tmp_path / "wrong.bin"
    path.write_text("2 3\nab 0.1 0.2 0.3\ncd 0.4 0.5 0.6\n", encoding="utf-8")
    assert "rename" in _error_text(path)


def test_binary_file_not_named_bin(tmp_path):
    path = tmp_path / "vectors.dat"
    path.write_bytes(b"1 2\nab " + struct.pack("<2f", -1.0, 2.5e-38))
    message = _error_text(path)
    assert f"{path}:2" in message and "not valid UTF-8" in message and "*.bin" in message


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(TextnnError, match=r"words\[1\] = 'a b'"):
        write_word2vec(tmp_path / "x.bin", ["ok", "a b"], np.zeros((2, 3)), binary=True)
    with pytest.raises(TextnnError, match="2 words but the matrix has 3 rows"):
        write_word2vec(tmp_path / "x.txt", ["a", "b"], np.zeros((3, 3)), binary=False)


# --- the real GloVe sample --------------------------------------------------------------------------


def test_real_glove_sample():
    if not GLOVE_SAMPLE.is_file():
        pytest.skip(f"GloVe sample not present at {GLOVE_SAMPLE} (shared data not downloaded)")
    # Independent parse of the first lines, to compare against.
    with gzip.open(GLOVE_SAMPLE, "rt", encoding="utf-8") as handle:
        head = [next(handle).rstrip().split(" ") for _ in range(3)]
    wanted = {fields[0] for fields in head} | {"definitely-not-a-glove-word"}
    words, matrix = read_vectors(GLOVE_SAMPLE, wanted=wanted)
    assert words == [fields[0] for fields in head]
    assert matrix.shape == (3, 50)
    np.testing.assert_array_equal(matrix, np.array([fields[1:] for fields in head], dtype=np.float32))
