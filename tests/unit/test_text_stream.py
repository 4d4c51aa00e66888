"""generation/lm.py's TextStream: the pieces of an output given as its tokens come join to the text decoded
at once, and never show what a later token may still change (half of a character's bytes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from textnn.generation.lm import TextStream


class ByteTask:
    """A task whose tokens are UTF-8 bytes (as byte-level BPE pieces): a character may span several."""

    tokenizer = SimpleNamespace(kind="bpe")

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace")


@pytest.mark.parametrize("text", ["héllo wörld\nñandú 😀 end", "x" * 300 + "é" * 100 + "\n" + "y" * 70, "\n\n"])
def test_pieces_join_to_the_whole_text_and_never_show_half_a_character(text):
    pieces = []
    stream = TextStream(ByteTask(), line_end_id=ord("\n"), prompt="", on_text=pieces.append)
    for byte in text.encode("utf-8"):
        stream.push(byte)
    stream.finish()
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)
    assert len(pieces) > 3 or len(text) < 10  # given as it came, not all at the end


def test_the_prompt_comes_first_and_words_are_joined_by_a_space():
    words = SimpleNamespace(tokenizer=SimpleNamespace(kind="word"),
                            decode=lambda ids: " ".join(["the", "cat", "sat"][i] for i in ids))
    pieces = []
    stream = TextStream(words, line_end_id=None, prompt="look", on_text=pieces.append)
    for token in (0, 1, 2):
        stream.push(token)
    stream.finish()
    assert pieces[0] == "look" and "".join(pieces) == "look the cat sat"
