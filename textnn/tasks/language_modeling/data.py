"""Language-modelling data: the `data:` options, a file's lines or table column as a token stream
(cached), the held-out part of the training file, the byte-level BPE trained on it, and the options of
`evaluate`."""

# N stream length

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from textnn.config import Config, DataConfig, TableData, check_key, opt
from textnn.data.readers import line_list, read_classification, read_lines
from textnn.data.streams import EOS, read_file_stream
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK
from textnn.errors import TextnnError

SPECIALS = (PAD, UNK, EOS)


@dataclass(frozen=True)
class LanguageModelingOptions:
    """The task's `Options`, set by `evaluate`'s flags (the front layer, textnn/front.py)."""
    streams: int = 0  # --streams N: rows of the file read side by side (0: the task's own reading)


@dataclass
class LanguageModelingData(TableData, DataConfig):
    """Data options of language modelling: plain-text streams cut into BPTT windows."""

    format: str = opt("text", "text (each file is one token stream), or tsv / csv: the text column of a table, each row's text a line")
    text_column: str = opt("sentence", "tsv/csv: column (name, or 0-based index) holding the text")
    bptt: int = opt(128, "tokens per training window")
    bptt_variable: bool = opt(False, "variable-length BPTT (Merity et al. 2018, section 4.1): base bptt w.p. 0.95 else bptt/2, then N(base, 5); lr scaled by length/bptt")
    stateful: bool = opt(True, "read the training stream as batch_size contiguous streams and carry the (detached) state across batches; false = independent shuffled windows")
    holdout: float = opt(0.0, "when data.dev is empty, hold out this final fraction of data.train as dev (nanoGPT's Tiny Shakespeare split: 0.1)")
    bpe_vocab_size: int = opt(8000, "tokenizer bpe: size of the BPE vocabulary trained on data.train")
    extend_vocab: int = opt(0, "with model.init_from (word tokenizers): add the words of data.train seen at least this often that the starting vocabulary lacks, their rows starting at the mean of the starting rows (ULMFiT's fastai code); 0 = keep the starting vocabulary")
    eval_stride: int = opt(0, "models that read each window afresh (GPT): evaluation windows overlap, each scoring its last eval_stride targets, so every target after the first window has >= bptt - eval_stride tokens of context; 0 = bptt / 2")

    # The options that fix how text becomes ids (they come from the run in model.init_from): here
    # also the size of the BPE.
    TOKENIZATION = (*DataConfig.TOKENIZATION, "bpe_vocab_size")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key(self.bptt >= 1, "data.bptt", self.bptt, "an integer >= 1")
        check_key(0.0 <= self.holdout < 1.0, "data.holdout", self.holdout, "a fraction in [0, 1)")
        check_key(self.bpe_vocab_size >= 2, "data.bpe_vocab_size", self.bpe_vocab_size, "an integer >= 2")
        check_key(self.extend_vocab >= 0, "data.extend_vocab", self.extend_vocab, "an integer >= 0 (0 = off)")
        check_key(0 <= self.eval_stride <= self.bptt, "data.eval_stride", self.eval_stride,
                  f"an integer in [0, data.bptt = {self.bptt}] (0 = bptt / 2)")
        if self.bptt_variable and not self.stateful:
            raise TextnnError("config key data.bptt_variable: variable-length windows cut contiguous rows "
                              "(Merity et al. 2018); set data.stateful=true or data.bptt_variable=false")


class EncodedStream:
    """One file (or a held-out part of one) as a single stream of token ids: what `evaluate` accepts."""

    def __init__(self, ids: torch.Tensor, path: str):
        self.ids = ids  # [N] long
        self.path = path
        self.words: int | None = None  # bpe: word-level targets, counted on first use


def text_lines(data: LanguageModelingData, path: str) -> list[str]:
    """A data file's lines of text: its lines (format text), or the text column of a tsv/csv table, one
    row a line; rows with no text are left out, and said so."""
    if data.format == "text":
        return read_lines(path, data.encoding)
    records = read_classification(path, data.format, text_column=data.text_column, label_column="",
                                  header=data.header, quoting=data.quoting, delimiter=data.delimiter,
                                  encoding=data.encoding, require_labels=False)
    if records.no_text:
        print(f"warning: {path}: skipped {len(records.no_text)} of {len(records) + len(records.no_text):,} rows "
              f"with no text in column {data.text_column} ({line_list(records.no_text)})", file=sys.stderr)
    return [record.text for record in records]


def stream_source(data: LanguageModelingData) -> dict | None:
    """How a tsv/csv file's text is read (a cache key part); None for plain text."""
    if data.format == "text":
        return None
    return {"format": data.format, "text_column": data.text_column, "header": data.header,
            "quoting": data.quoting, "delimiter": data.delimiter}


def read_stream(data: LanguageModelingData, path: str, tokenizer: Tokenizer):
    """A data file's token stream (data/streams.read_file_stream) read as `data` says, cached. A table is
    read every time (cheap beside tokenizing), so that rows without text are reported every time."""
    if data.format == "text":
        return read_file_stream(path, tokenizer, data.encoding, cache=data.cache)
    lines = text_lines(data, path)
    return read_file_stream(path, tokenizer, data.encoding, cache=data.cache, lines=lambda: lines, source=stream_source(data))


def kept_lines(lines: list[str], holdout: float, path: str) -> int:
    """How many of a training file's lines are trained on when its final `holdout` fraction is dev."""
    kept = len(lines) - int(round(len(lines) * holdout))
    if kept == 0:
        raise TextnnError(f"{path}: data.holdout={holdout} holds out all {len(lines)} line(s), leaving none to "
                          f"train on; lower data.holdout or give more text")
    return kept


def train_bpe(config: Config, lines: list[str]) -> Tokenizer:
    """Train the byte-level BPE on `lines`, the first lines of data.train (all but the held-out ones),
    cached by the file's content and these settings."""
    from textnn.data.cache import cached

    data = config.data

    def compute() -> dict:
        return Tokenizer.train_bpe(lines, data.bpe_vocab_size, SPECIALS, data.lowercase).to_dict()

    settings = {"kind": "bpe_model", "vocab_size": data.bpe_vocab_size, "lowercase": data.lowercase,
                "lines": len(lines), "encoding": data.encoding, "specials": list(SPECIALS),
                **({"source": stream_source(data)} if stream_source(data) else {})}
    return Tokenizer.from_dict(cached(data.train, settings, compute, enabled=data.cache))
