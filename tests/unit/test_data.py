"""The data pipeline after the readers: tokenizers, vocabulary, batching (bucketing, padding, masks), cache."""

from __future__ import annotations

import json
import math
import os
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from textnn.data.batching import bucket_batches, pad
from textnn.data.cache import cache_dir, cached
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError

# ------------------------------------------------------------------------------------------------ tokenizers


@pytest.mark.parametrize("text,tokens", [
    ("It's good, isn't it?", ["It", "'s", "good", ",", "is", "n't", "it", "?"]),
    ("it 's a film", ["it", "'s", "a", "film"]),  # pre-tokenized text (SST, PTB) keeps the clitic whole
    ("we'll see, you're sure, I'd go, I'm in, they've won",
     ["we", "'ll", "see", ",", "you", "'re", "sure", ",", "I", "'d", "go", ",", "I", "'m", "in", ",",
      "they", "'ve", "won"]),
    ("IT'S FINE", ["IT", "'S", "FINE"]),
    ("the 'best' film", ["the", "'", "best", "'", "film"]),  # a quote is not a clitic
    ("the students' work", ["the", "students", "'", "work"]),
])
def test_word_tokenizer_clitics_and_quotes(text, tokens):
    assert Tokenizer("word")(text) == tokens


@pytest.mark.parametrize("raw,pretokenized", [
    ("I don't know, she can't", "i do n't know , she ca n't"),  # plain English and PTB/SST-2
    ("i don 't know , she can 't", "i do n't know , she ca n't"),  # WikiText and PTB/SST-2
    ("an old @-@ fashioned , 1 @,@ 000 @.@ 5 film", "an old-fashioned , 1,000.5 film"),  # WikiText and SST-2
    ('a "great" film', "a ``great'' film"),  # plain quotes and PTB's
])
def test_word_tokenizer_reads_the_corpora_conventions_alike(raw, pretokenized):
    # A language model pre-trained on WikiText-2 reads SST-2's negations as the words it learned: under
    # the version 2 rules SST-2's "do n't" was "do n 't" and WikiText's "don 't" was "don 't".
    tokenizer = Tokenizer("word", lowercase=True)
    assert tokenizer(raw) == tokenizer(pretokenized)
    assert "n't" in tokenizer("do n't") and "n" not in tokenizer("do n't")


def test_a_trained_wordpiece_reads_the_corpora_conventions_alike_and_keeps_them_when_saved():
    wikitext = ["i don 't know , she can 't say", "an old @-@ fashioned film of 1 @,@ 000 days"] * 20
    tokenizer = Tokenizer.train_wordpiece(wikitext, 200, lowercase=True)
    for raw, pretokenized in [("i don 't know", "i do n't know"), ("old @-@ fashioned", "old-fashioned"),
                              ('a "great" film', "a ``great'' film")]:
        assert tokenizer(raw) == tokenizer(pretokenized)
    assert Tokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))("don 't") == tokenizer("do n't")


def test_word_tokenizer_reads_wikitext_unknown_as_the_unknown_word():
    tokens = Tokenizer("word")("the <unk> river")
    assert tokens == ["the", "<unk>", "river"]
    vocab = Vocab.build([tokens])
    assert vocab.encode(tokens)[1] == vocab.unk_id


HINDI = "नमस्ते दुनिया"  # "hello world": each word a consonant cluster with vowel signs and a virama
NFD_CAFE = "cafe\u0301"  # "café" decomposed: e and a combining acute accent


@pytest.mark.parametrize("text,tokens", [
    (HINDI, ["नमस्ते", "दुनिया"]),
    (NFD_CAFE + " au lait", ["caf\u00e9", "au", "lait"]),  # NFC: the same token as the composed "café"
    # marks with no precomposed letter, in NFC's canonical order (dot below before acute)
    ("q\u0303 x\u0301\u0323 !\u20e3", ["q\u0303", "x\u0323\u0301", "!\u20e3"]),
    ("สวัสดี ครับ", ["สวัสดี", "ครับ"]),  # Thai vowel and tone marks
    ("\U00011103\U00011134\U00011127 ok", ["\U00011103\U00011134\U00011127", "ok"]),  # Chakma: marks above U+FFFF
    ("пʼять п’ять", ["пʼять", "п", "’", "ять"]),  # Ukrainian's letter apostrophe ʼ is no clitic
])
def test_word_tokenizer_keeps_words_of_every_script_whole(text, tokens):
    assert Tokenizer("word")(text) == tokens


@pytest.mark.parametrize("text,tokens", [
    ("van 't Hoff", ["van", "'t", "Hoff"]),  # Dutch 't ("het") is no English negation
    ("Van't Hoff", ["Van", "'t", "Hoff"]),
    ("don’t, DONʼT, it’s, itʼs", ["do", "n't", ",", "DO", "N'T", ",", "it", "'s", ",", "it", "'s"]),
    ("we’ll see, I’m in, they’ve won, you’re sure, I’d go",
     ["we", "'ll", "see", ",", "I", "'m", "in", ",", "they", "'ve", "won", ",", "you", "'re", "sure", ",", "I", "'d", "go"]),
    ("it didn ’ t , there ’ s", ["it", "did", "n't", ",", "there", "'s"]),  # WikiText writes ’ apart
    ("the ‘best’ film, the students’ work, O’Brien",  # ’ as a quote or inside a name stays as written
     ["the", "‘", "best", "’", "film", ",", "the", "students", "’", "work", ",", "O", "’", "Brien"]),
])
def test_word_tokenizer_reads_english_clitics_where_they_are_english(text, tokens):
    assert Tokenizer("word")(text) == tokens


def test_a_run_saved_under_older_word_rules_keeps_reading_by_them(tmp_path):
    # A run trained before version 3 must read its text as it was trained, or its ids would shift.
    old = Tokenizer.from_dict({"kind": "word", "lowercase": True, "rules": 2})
    assert old("do n't") == ["do", "n", "'t"] and old.to_dict()["rules"] == 2
    assert Tokenizer("word")("do n't") == ["do", "n't"]
    # and one trained under version 3 reads as it did, cut words and all
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"kind": "word", "lowercase": False, "rules": 3}))
    old = Tokenizer.load(path)
    assert old.to_dict() == {"kind": "word", "lowercase": False, "rules": 3}
    assert old(HINDI) == ["नमस", "्", "त", "े", "द", "ु", "न", "ि", "य", "ा"]
    assert old(NFD_CAFE) == ["cafe", "\u0301"]
    assert old("van 't Hoff") == ["va", "n't", "Hoff"]
    assert old("don’t") == ["don", "’", "t"] and old("don't") == ["do", "n't"]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"kind": "word", "lowercase": True, "rules": 99}))
    with pytest.raises(TextnnError, match="newer textnn"):
        Tokenizer.load(path)


def test_word_tokenizer_splits_every_punctuation_mark():
    assert Tokenizer("word")("Wow!!! (really)... $5.99-ish") == [
        "Wow", "!", "!", "!", "(", "really", ")", ".", ".", ".", "$", "5", ".", "99", "-", "ish"]


def test_word_tokenizer_keeps_non_ascii_words_and_drops_whitespace():
    assert Tokenizer("word")("  naïve café\tin Zürich \n") == ["naïve", "café", "in", "Zürich"]
    assert Tokenizer("word")("   ") == []


def test_lowercase_and_whitespace_tokenizers():
    assert Tokenizer("word", lowercase=True)("The FILM's End") == ["the", "film", "'s", "end"]
    assert Tokenizer("whitespace")("It's  good,\tok\n") == ["It's", "good,", "ok"]


def test_char_tokenizer_and_join():
    tokenizer = Tokenizer("char")
    assert tokenizer("ab c!") == ["a", "b", " ", "c", "!"]
    assert Tokenizer("char", lowercase=True)("AbC") == ["a", "b", "c"]
    text = "Hi there,\tfriend é"
    assert tokenizer.join(tokenizer(text)) == text
    assert Tokenizer("word").join(["a", "b"]) == "a b"


@pytest.mark.parametrize("kind", Tokenizer.KINDS)
def test_tokenizer_round_trips_through_its_json(kind):
    tokenizer = Tokenizer(kind, lowercase=True)
    again = Tokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))
    text = "Don't STOP, it's 'fine'."
    assert again(text) == tokenizer(text)
    assert again.to_dict() == tokenizer.to_dict()


def test_unknown_tokenizer_kind():
    with pytest.raises(TextnnError, match="unknown tokenizer 'bpe'.*word, whitespace, char"):
        Tokenizer("bpe")


# ------------------------------------------------------------------------------------------------ vocab

CORPUS = [["b", "a", "c", "a"], ["c", "a", "d"], ["e", "b", "a"]]  # a:4 b:2 c:2 d:1 e:1


def test_vocab_specials_first_then_by_frequency_then_alphabetical():
    vocab = Vocab.build(CORPUS)
    assert vocab.itos == [PAD, UNK, "a", "b", "c", "d", "e"]
    assert (vocab.pad_id, vocab.unk_id) == (0, 1)
    assert len(vocab) == 7


def test_vocab_min_freq_and_max_size():
    assert Vocab.build(CORPUS, min_freq=2).itos == [PAD, UNK, "a", "b", "c"]
    with pytest.raises(TextnnError, match="data.min_freq=5"):  # nothing left to learn from: an error
        Vocab.build(CORPUS, min_freq=5)
    limited = Vocab.build(CORPUS, max_size=4)  # the size counts the specials
    assert limited.itos == [PAD, UNK, "a", "b"] and len(limited) == 4
    assert Vocab.build(CORPUS, min_freq=2, max_size=100).itos == [PAD, UNK, "a", "b", "c"]


def test_vocab_custom_specials_keep_their_order_and_are_not_duplicated():
    vocab = Vocab.build([["<bos>", "x", "<pad>", "x"]], specials=(PAD, UNK, "<bos>", "<eos>"))
    assert vocab.itos == [PAD, UNK, "<bos>", "<eos>", "x"]
    assert Vocab.build(CORPUS, specials=(PAD,)).unk_id is None


def test_unknown_tokens_map_to_unk_and_decode_back():
    vocab = Vocab.build(CORPUS)
    ids = vocab.encode(["a", "zzz", "e", "A"])
    assert ids == [vocab.stoi["a"], vocab.unk_id, vocab.stoi["e"], vocab.unk_id]  # case matters
    assert vocab.decode(ids) == ["a", UNK, "e", UNK]
    with pytest.raises(TextnnError, match="token id 7 is outside the vocabulary"):
        vocab.decode([7])


def test_a_vocab_without_unk_names_the_unknown_token():
    vocab = Vocab.build(CORPUS, specials=(PAD,))
    with pytest.raises(TextnnError, match="'zzz' is not in the vocabulary"):
        vocab.encode(["a", "zzz"])


@pytest.mark.parametrize("specials", [(PAD, UNK), (PAD,), (PAD, UNK, "<bos>")])
def test_vocab_json_round_trip(tmp_path, specials):
    vocab = Vocab.build(CORPUS + [["ünï", "ünï", "日本"]], specials=specials)
    vocab.save(tmp_path / "vocab.json")
    again = Vocab.load(tmp_path / "vocab.json")
    assert again.itos == vocab.itos and again.stoi == vocab.stoi
    assert (again.pad_id, again.unk_id) == (vocab.pad_id, vocab.unk_id)
    assert again.encode(["ünï", "a", "日本"]) == vocab.encode(["ünï", "a", "日本"])


def test_duplicate_tokens_are_refused():
    with pytest.raises(TextnnError, match="duplicate"):
        Vocab([PAD, UNK, "a", "a"])


# ------------------------------------------------------------------------------------------------ padding


def test_pad_right_pads_and_masks_real_tokens():
    ids, mask = pad([[5, 6, 7], [8], []], pad_id=9)
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9], [9, 9, 9]]
    assert mask.tolist() == [[True, True, True], [True, False, False], [False, False, False]]
    assert torch.equal(ids[~mask], torch.full((int((~mask).sum()),), 9))


def test_pad_of_only_empty_sequences_still_has_one_column():
    ids, mask = pad([[], []])
    assert ids.shape == mask.shape == (2, 1) and not mask.any()


# ------------------------------------------------------------------------------------------------ batching


def _lengths(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)]


def _covers_each_once(batches: list[list[int]], n: int) -> bool:
    flat = [i for batch in batches for i in batch]
    return sorted(flat) == list(range(n))


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("n,batch_size", [(1, 4), (10, 3), (103, 8), (1000, 32)])
def test_batches_cover_every_index_exactly_once(n, batch_size, shuffle):
    batches = bucket_batches(_lengths(n), batch_size, shuffle=shuffle, seed=3)
    assert _covers_each_once(batches, n)
    assert all(1 <= len(batch) <= batch_size for batch in batches)


@given(lengths=st.lists(st.integers(0, 50), min_size=0, max_size=300), batch_size=st.integers(1, 20),
       bucket_factor=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_batches_cover_every_index_exactly_once_property(lengths, batch_size, bucket_factor, seed):
    batches = bucket_batches(lengths, batch_size, shuffle=True, seed=seed, bucket_factor=bucket_factor)
    assert _covers_each_once(batches, len(lengths))
    assert all(1 <= len(batch) <= batch_size for batch in batches)
    # pools are batch_size * bucket_factor examples, so only a pool's last batch can be short
    assert len(batches) <= math.ceil(len(lengths) / batch_size) + math.ceil(len(lengths) / (batch_size * bucket_factor))


def test_shuffled_batches_are_reproducible_per_seed_and_differ_across_seeds():
    lengths = _lengths(500)
    first = bucket_batches(lengths, 16, shuffle=True, seed=7)
    assert bucket_batches(lengths, 16, shuffle=True, seed=7) == first
    assert bucket_batches(lengths, 16, shuffle=True, seed=8) != first


def test_bucketing_puts_similar_lengths_together():
    lengths = _lengths(2000, seed=1)

    def padding(batches: list[list[int]]) -> int:
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    rng = random.Random(0)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    unbucketed = [order[i:i + 32] for i in range(0, len(order), 32)]
    bucketed = bucket_batches(lengths, 32, shuffle=True, seed=0)
    assert padding(bucketed) < padding(unbucketed) / 5


def test_unshuffled_batches_are_sorted_by_length():
    lengths = _lengths(100)
    batches = bucket_batches(lengths, 7, shuffle=False)
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths)
    assert bucket_batches(lengths, 7, shuffle=False, seed=1) == batches  # the seed plays no part


# ------------------------------------------------------------------------------------------------ cache


class Counting:
    """A compute function that remembers how often it ran."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTNN_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"


def test_cache_hit_returns_the_same_value_without_recomputing(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\nsome text\t1\n", encoding="utf-8")
    value = [["some", "text"], None, {"n": 1}]
    compute = Counting(value)
    assert cached(data, {"tokenizer": "word"}, compute) == value
    assert cached(data, {"tokenizer": "word"}, compute) == value
    assert compute.calls == 1
    entries = list(cache_dir().glob("*.json"))  # conftest points TEXTNN_CACHE at a tmp dir
    assert len(entries) == 1 and json.loads(entries[0].read_text(encoding="utf-8")) == value


def test_a_changed_file_invalidates_the_cache_even_with_the_same_size_and_mtime(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("good film\t1\n", encoding="utf-8")
    stat = data.stat()
    assert cached(data, {}, Counting("old")) == "old"
    data.write_text("dull film\t0\n", encoding="utf-8")  # same length
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    compute = Counting("new")
    assert cached(data, {}, compute) == "new" and compute.calls == 1
    assert cached(data, {}, Counting("unused")) == "new"  # and the new entry is a hit afterwards


def test_changed_settings_miss_and_equal_settings_hit(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("x\n", encoding="utf-8")
    assert cached(data, {"lowercase": False, "kind": "word"}, Counting("cased")) == "cased"
    assert cached(data, {"lowercase": True, "kind": "word"}, Counting("lower")) == "lower"
    assert cached(data, {"kind": "word", "lowercase": False}, Counting("unused")) == "cased"  # key order is irrelevant


def test_a_changed_file_in_a_directory_invalidates_it(tmp_path):
    folder = tmp_path / "classes"
    folder.mkdir()
    (folder / "pos.txt").write_text("good\n", encoding="utf-8")
    (folder / "neg.txt").write_text("bad\n", encoding="utf-8")
    assert cached(folder, {}, Counting(1)) == 1
    assert cached(folder, {}, Counting(2)) == 1
    (folder / "neg.txt").write_text("bad\nawful\n", encoding="utf-8")
    assert cached(folder, {}, Counting(3)) == 3


def test_a_damaged_entry_is_recomputed(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("x\n", encoding="utf-8")
    cached(data, {}, Counting([1, 2]))
    (entry,) = cache_dir().glob("*.json")
    entry.write_text("{not json", encoding="utf-8")
    compute = Counting([1, 2])
    assert cached(data, {}, compute) == [1, 2] and compute.calls == 1
    assert json.loads(entry.read_text(encoding="utf-8")) == [1, 2]


def test_disabled_cache_always_computes_and_writes_nothing(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("x\n", encoding="utf-8")
    compute = Counting("v")
    assert cached(data, {}, compute, enabled=False) == "v"
    assert cached(data, {}, compute, enabled=False) == "v"
    assert compute.calls == 2
    assert not cache_dir().exists() or not list(cache_dir().glob("*.json"))


def test_word_tokenizer_settings_key_the_cache(tmp_path):
    # the tokenizer's settings (including its rules version) are what classification keys tokens by
    data = tmp_path / "train.tsv"
    data.write_text("don't\n", encoding="utf-8")
    word, char = Tokenizer("word"), Tokenizer("char")
    assert cached(data, {"tokenizer": word.to_dict()}, lambda: word("don't")) == ["do", "n't"]
    assert cached(data, {"tokenizer": char.to_dict()}, lambda: char("don't")) == list("don't")
    assert cached(data, {"tokenizer": Tokenizer("word").to_dict()}, lambda: "unused") == ["do", "n't"]
    older = Tokenizer.from_dict({"kind": "word", "lowercase": False, "rules": 2})
    assert cached(data, {"tokenizer": older.to_dict()}, lambda: older("don't")) == ["don", "'t"]
