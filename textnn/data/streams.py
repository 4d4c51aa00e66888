"""Language-model token streams: a file read once into an integer array, then cut into batches.

Reading. A file becomes ONE stream of tokens: characters (newlines included) for the char
tokenizer; each line's tokens followed by `<eos>` otherwise (Mikolov et al. 2010; Merity et al.
2017, the PTB/WikiText convention). `read_file_stream` stores it as the file's own table of
distinct tokens plus an int32 array of positions in that table, cached as JSON + `.npy`
(data/cache.py): WikiText-2's 2M training tokens load in milliseconds the second time. The run's
vocabulary is then built from counts over the array (`vocab_from_counts`) and the file is mapped
onto it by one vectorised lookup (`to_vocab_ids`); no Python loop over tokens after the first read.

Batching. `batchify` lays a stream [N] out as B contiguous rows side by side, [N] -> [B, L]: the
inputs are stream[:-1] and the targets stream[1:], so every token but the first is a target exactly
once; the last row is padded at its end (mask False). Training reads the rows window by window in
order (`StreamBatches`) and the task carries the recurrent state from one window to the next
(truncated BPTT over contiguous streams, Zaremba et al. 2014 §4, PyTorch's word_language_model).
Window lengths are fixed (`data.bptt`) or variable (`bptt_lengths`, Merity et al. 2018 §4.1).
`WindowBatches` keeps the other mode: independent windows in a shuffled order (`data.stateful: false`).
"""

# B batch (parallel rows), T window length, N stream length, L row length (ceil((N - 1) / B))

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textnn.data.batching import Batch
from textnn.data.cache import cached_array
from textnn.data.readers import read_lines
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import UNK, Vocab
from textnn.errors import TextnnError

EOS = "<eos>"
# Variable BPTT (Merity et al. 2018 §4.1): the base length is bptt with probability 0.95, else bptt/2,
# and the window length is drawn from N(base, 5). The paper's code floors it at 5; the cap keeps a
# rare long draw from running out of memory (its authors mention the same cap as an option).
BPTT_FULL_PROBABILITY = 0.95
BPTT_STD = 5.0
BPTT_MIN = 5
BPTT_MAX_EXTRA = 20
_STREAM_FORMAT = 1  # bumped when the cached stream layout changes


@dataclass
class LMBatch(Batch):
    """A window of a language-model stream: inputs, next-token targets and what the trainer needs."""

    ids: torch.Tensor  # [B, T] input token ids
    targets: torch.Tensor  # [B, T] the token after each input
    mask: torch.Tensor  # [B, T] bool, True = a real target (False only for padding at a stream's end)
    num_targets: int  # mask.sum(), counted once on the CPU
    lr_scale: float = 1.0  # the trainer multiplies this step's learning rate by it (variable BPTT)
    carry: bool = False  # start from the state the previous window left (stateful training)
    reset: bool = True  # with carry: this window starts its rows, so the state restarts at zero

    @property
    def count(self) -> int:
        """Loss terms in this batch: one per predicted token."""
        return self.num_targets

    @property
    def num_tokens(self) -> int:
        return self.num_targets


# --- reading -----------------------------------------------------------------------------------------

@dataclass
class FileStream:
    """A file's token stream over the file's own token table (before any vocabulary exists)."""

    types: list[str]  # the distinct tokens of the file
    ids: np.ndarray  # [N] int32: position of each token in `types`


def _char_stream(text: str) -> tuple[list[str], np.ndarray]:
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one code point per character
    distinct, ids = np.unique(codes, return_inverse=True)
    return [chr(c) for c in distinct.tolist()], ids.astype(np.int32)


def _token_stream(token_lines: list[list[str]]) -> tuple[list[str], np.ndarray]:
    index: dict[str, int] = {}
    total = sum(len(tokens) + 1 for tokens in token_lines)
    ids = np.fromiter((index.setdefault(token, len(index)) for tokens in token_lines for token in (*tokens, EOS)),
                      dtype=np.int32, count=total)
    return list(index), ids


def read_file_stream(path: str | Path, tokenizer: Tokenizer, encoding: str = "utf-8", cache: bool = True,
                     lines: Callable[[], list[str]] | None = None, source: dict | None = None) -> FileStream:
    """A text file's token stream, cached by file content and tokenizer settings (a BPE model included).

    `lines` gives the file's lines as text when they are not simply its lines (the text column of a
    table), and `source` the options it reads them with, which the cache key then holds too.
    """
    def compute() -> tuple[list[str], np.ndarray]:
        text_lines = lines() if lines is not None else read_lines(path, encoding)
        if tokenizer.kind == "char":
            text = "".join(line + "\n" for line in text_lines)
            return _char_stream(text.lower() if tokenizer.lowercase else text)
        return _token_stream(tokenizer.tokenize_lines(text_lines))

    settings = {"kind": "lm_stream", "format": _STREAM_FORMAT, "tokenizer": tokenizer.to_dict(),
                "encoding": encoding, "eos": None if tokenizer.kind == "char" else EOS,
                **({"source": source} if source else {})}
    types, ids = cached_array(path, settings, compute, enabled=cache)
    return FileStream(types=list(types), ids=np.asarray(ids, dtype=np.int32))


def document_tokens(text: str, tokenizer: Tokenizer) -> list[str]:
    """Tokens of a piece of text read like a file: characters as they are, or each line's tokens + `<eos>`."""
    if tokenizer.kind == "char":
        return tokenizer(text)
    return [token for tokens in tokenizer.tokenize_lines(text.splitlines()) for token in (*tokens, EOS)]


def vocab_from_counts(types: list[str], counts: np.ndarray, min_freq: int = 1, max_size: int = 0,
                      specials: tuple[str, ...] = ()) -> Vocab:
    """The vocabulary `Vocab.build` would make from a stream, from per-type counts [len(types)].

    Same rule: specials first, then tokens seen at least `min_freq` times, most frequent first with
    ties broken alphabetically, at most `max_size` in all (0 = no limit). Counting over the array is
    what makes a 2M-token stream cheap; a test checks that both give the same vocabulary.
    """
    by_type = dict(zip(types, counts.tolist()))
    kept = sorted((t for t, c in by_type.items() if c >= min_freq and t not in specials),
                  key=lambda t: (-by_type[t], t))
    if by_type and not kept and min_freq > 1:  # as Vocab.build: every token would read as <unk>
        raise TextnnError(f"data.min_freq={min_freq} leaves no token in the vocabulary (the most frequent one "
                          f"is seen {max(by_type.values())} times in training); lower data.min_freq")
    if max_size:
        kept = kept[: max(0, max_size - len(specials))]
    return Vocab([*specials, *kept], unk=UNK if UNK in specials else None)


def to_vocab_ids(stream: FileStream, vocab: Vocab) -> torch.Tensor:
    """The stream as vocabulary ids [N] (long); tokens outside the vocabulary become `<unk>`."""
    table = np.fromiter((vocab.stoi.get(t, -1) for t in stream.types), dtype=np.int64, count=len(stream.types))
    if vocab.unk_id is None and (table < 0).any():
        missing = stream.types[int(np.argmax(table < 0))]
        raise ValueError(f"token {missing!r} is not in the vocabulary (which has no <unk>)")
    table[table < 0] = vocab.unk_id if vocab.unk_id is not None else 0
    return torch.from_numpy(table[stream.ids])  # [N]


# --- batching ----------------------------------------------------------------------------------------

def batchify(ids: torch.Tensor, rows: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A stream [N] as `rows` contiguous rows side by side: (inputs, targets, mask), each [B, L].

    Targets are ids[1:], each predicted from the token before it, so consecutive rows overlap by one
    input token and every token but the first is a target exactly once. The last row is padded at
    its end with `pad_id` (mask False), after all its real targets.
    """
    inputs, targets = ids[:-1], ids[1:]  # [N-1] each
    n = len(targets)
    rows = max(1, min(rows, n))
    length = math.ceil(n / rows)  # L tokens per row
    pad = rows * length - n
    fill = torch.full((pad,), pad_id, dtype=ids.dtype)
    mask = torch.cat([torch.ones(n, dtype=torch.bool), torch.zeros(pad, dtype=torch.bool)])
    return (torch.cat([inputs, fill]).view(rows, length),  # [N-1+pad] -> [B, L]
            torch.cat([targets, fill]).view(rows, length),  # [B, L]
            mask.view(rows, length))  # [B, L]


def bptt_lengths(total: int, bptt: int, variable: bool = False, seed: int = 0, epoch: int = 0) -> list[int]:
    """Window lengths that cut a row of `total` positions into consecutive windows (they sum to `total`).

    Fixed: `bptt` each, the last one shorter. Variable (Merity et al. 2018 §4.1): each window draws
    its base length (bptt w.p. 0.95, else bptt / 2) and then its length from N(base, 5), floored at
    5 (or bptt if smaller) and capped at bptt + 20; the generator is seeded by (seed, epoch), so an
    epoch always gets the same windows while window boundaries move from epoch to epoch.
    """
    if not variable:
        return [min(bptt, total - start) for start in range(0, total, bptt)]
    rng = np.random.default_rng([seed, epoch])
    floor, cap = min(BPTT_MIN, bptt), bptt + BPTT_MAX_EXTRA
    lengths, position = [], 0
    while position < total:
        base = bptt if rng.random() < BPTT_FULL_PROBABILITY else bptt / 2
        length = min(cap, max(floor, int(rng.normal(base, BPTT_STD))), total - position)
        lengths.append(length)
        position += length
    return lengths


class _LazyBatches(Sequence):
    """A list of batches built on access: `batch(k)` makes batch k; indexing and slicing as for a list."""

    def batch(self, index: int) -> LMBatch:
        raise NotImplementedError

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.batch(index)


class StreamBatches(_LazyBatches):
    """Consecutive windows over batchified rows, in order: window k continues where window k-1 ended.

    Built on access from (inputs, targets, mask) [B, L] and the window lengths. Each batch says that
    its state carries over (`carry`), whether it is the first window (`reset`: start from zeros) and,
    for variable lengths, `lr_scale` = its length / bptt (Merity et al. 2018 §4.1: a short window
    would otherwise weigh as much per token as a long one). Slicing returns a list of batches.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, lengths: list[int],
                 bptt: int, scale_lr: bool = False):
        self.inputs, self.targets, self.mask, self.bptt, self.scale_lr = inputs, targets, mask, bptt, scale_lr
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int).tolist() if lengths else []

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index: int) -> LMBatch:
        start, length = self.starts[index], self.lengths[index]
        window = slice(start, start + length)
        mask = self.mask[:, window]  # [B, T]
        return LMBatch(ids=self.inputs[:, window], targets=self.targets[:, window], mask=mask,
                       num_targets=int(mask.sum()), lr_scale=length / self.bptt if self.scale_lr else 1.0,
                       carry=True, reset=start == 0)


class WindowBatches(_LazyBatches):
    """An epoch's independent training windows (`data.stateful: false`), built on access.

    batch k holds the windows starting at starts[k*B:(k+1)*B]; a window starting at s has inputs
    stream[s : s+T] and targets stream[s+1 : s+T+1]; each starts from a zero state. Slicing returns
    a list of batches.
    """

    def __init__(self, stream: torch.Tensor, starts: torch.Tensor, bptt: int, batch_size: int):
        self.stream, self.starts, self.bptt, self.batch_size = stream, starts, bptt, batch_size
        self.offsets = torch.arange(bptt + 1)  # [T+1]

    def __len__(self) -> int:
        return math.ceil(len(self.starts) / self.batch_size)

    def batch(self, index: int) -> LMBatch:
        starts = self.starts[index * self.batch_size:(index + 1) * self.batch_size]  # [B]
        windows = self.stream[starts[:, None] + self.offsets]  # [B, T+1]
        mask = torch.ones(len(starts), self.bptt, dtype=torch.bool)  # [B, T]
        return LMBatch(ids=windows[:, :-1], targets=windows[:, 1:], mask=mask, num_targets=mask.numel())


def shuffled_windows(stream: torch.Tensor, bptt: int, batch_size: int, seed: int, epoch: int) -> WindowBatches:
    """Windows of `bptt` tokens from a random offset in [0, bptt), in a shuffled order, seeded by (seed, epoch).

    The offset moves the window grid between epochs, so no window boundary is fixed forever.
    """
    rng = np.random.default_rng([seed, epoch])
    offset = int(rng.integers(bptt))
    if (len(stream) - 1 - offset) // bptt == 0:
        offset = 0  # a stream of fewer than 2 * bptt tokens: keep its one window
    count = (len(stream) - 1 - offset) // bptt  # windows whose bptt targets all exist
    starts = offset + bptt * torch.from_numpy(rng.permutation(count))  # [W]
    return WindowBatches(stream, starts, bptt, batch_size)


class SlidingWindows(_LazyBatches):
    """A whole stream read in overlapping windows, for models that read each window afresh (GPT).

    Window k starts at k * stride and holds up to `bptt` inputs; it scores only the targets no
    earlier window scored, its last `stride` (the first window scores all of its own). So every
    target is scored exactly once, and each one after the first window has at least bptt - stride
    tokens of context, where back-to-back windows would give the first target of every window none
    (the sliding evaluation of Baevski & Auli 2019 §4.3; Radford et al. 2019 evaluate GPT-2 so).
    Batch k holds windows k*B .. (k+1)*B - 1; the last window may be shorter (padding masked).
    """

    def __init__(self, stream: torch.Tensor, bptt: int, stride: int, batch_size: int, pad_id: int):
        if not 1 <= stride <= bptt:
            raise ValueError(f"stride must be in [1, bptt={bptt}]; got {stride}")
        self.stream, self.bptt, self.stride, self.batch_size, self.pad_id = stream, bptt, stride, batch_size, pad_id
        last_target = len(stream) - 1  # targets are stream[1:], numbered 1 .. N-1
        self.starts = [0]  # window k starts at k * stride; the last one reaches the last target
        while self.starts[-1] + bptt < last_target:
            self.starts.append(self.starts[-1] + stride)

    def __len__(self) -> int:
        return math.ceil(len(self.starts) / self.batch_size)

    def batch(self, index: int) -> LMBatch:
        starts = self.starts[index * self.batch_size:(index + 1) * self.batch_size]
        ids = torch.full((len(starts), self.bptt), self.pad_id, dtype=torch.long)  # [B, T]
        targets = torch.full_like(ids, self.pad_id)  # [B, T]
        mask = torch.zeros_like(ids, dtype=torch.bool)  # [B, T]
        for row, start in enumerate(starts):
            window = self.stream[start:start + self.bptt + 1]  # [<= T+1]
            length = len(window) - 1
            ids[row, :length], targets[row, :length] = window[:-1], window[1:]
            # Targets start+1 .. start+length; the previous window (at start - stride) scored those up
            # to start - stride + bptt, the first bptt - stride of them.
            first_new = 0 if start == 0 else self.bptt - self.stride
            mask[row, first_new:length] = True
        return LMBatch(ids=ids, targets=targets, mask=mask, num_targets=int(mask.sum()))
