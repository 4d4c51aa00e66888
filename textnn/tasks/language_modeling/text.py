"""A language model's text as ids and back (`StreamText`, a part of `LanguageModelingTask`): a prompt or a
document as the ids the model reads, ids as text (whole, or token by token for a view), and the words a
stream holds (for word perplexity)."""

from __future__ import annotations

from textnn.data.streams import EOS, document_tokens
from textnn.tasks.language_modeling.data import EncodedStream


class StreamText:
    """Text <-> ids of `LanguageModelingTask` (its tokenizer and vocab)."""

    def encode_text(self, text: str) -> list[int]:
        """Ids of a piece of text as the model reads it (a generation prompt): no `<eos>` is added."""
        return self.vocab.encode(self.tokenizer(text))

    def encode_document(self, text: str) -> list[int]:
        """Ids of a text read as a file would be: characters as they are, or each line followed by `<eos>`."""
        return self.vocab.encode(document_tokens(text, self.tokenizer))

    def decode(self, ids) -> str:
        """Text of a list of ids: characters concatenate; words and BPE pieces form lines that `<eos>` ends."""
        tokens = self.vocab.decode(ids)
        if self.tokenizer.kind == "char":
            return "".join(tokens)
        lines, line = [], []
        for token in tokens:
            if token == EOS:
                lines.append(self.tokenizer.join(line) + "\n")
                line = []
            else:
                line.append(token)
        return "".join(lines) + self.tokenizer.join(line)

    def token_pieces(self, ids) -> list[str]:
        """The text each token stands for, so that a view can colour text token by token.

        Characters are themselves; a word is followed by a space; `<eos>` is a newline. A BPE piece is
        its decoded bytes; a character whose bytes span several pieces belongs to the piece that
        completes it (the others stand for ""), so the pieces of BPE ids join to exactly `decode(ids)`.
        """
        tokens = self.vocab.decode(ids)
        if self.tokenizer.kind == "char":
            return tokens
        pieces: list[str] = []
        pending: list[str] = []  # BPE pieces whose last character is not complete yet
        for token in tokens + [EOS]:  # a final <eos> flushes what is pending; its piece is dropped below
            if pending and (token == EOS or not self.tokenizer.join(pending).endswith("\ufffd")):
                pieces[-1] = self.tokenizer.join(pending)
                pending = []
            if token == EOS:
                pieces.append("\n")
            elif self.tokenizer.kind != "bpe":
                pieces.append(token + " ")
            else:
                pending.append(token)
                pieces.append("")
        return pieces[:-1]

    def word_count(self, data: EncodedStream) -> int:
        """Word-level targets of a stream: its whitespace words + one per `<eos>`, less the first token.

        This is the token count a word-level model predicts on the same text, so total nll / words is
        a per-word perplexity whatever the tokenizer (counted by decoding; cached on the stream).
        """
        if data.words is None:
            ids = data.ids.tolist()
            eos = ids.count(self.vocab.stoi[EOS]) if EOS in self.vocab.stoi else 0
            data.words = max(1, len(self.decode(ids).split()) + eos - 1)
        return data.words
