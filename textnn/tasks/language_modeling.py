"""Language modelling on plain text: token streams -> BPTT windows -> next-token loss, perplexity, bpc.

Data (`data.format: text`): each file is ONE token stream. With `data.tokenizer: char` every
character is a token, newlines included (Karpathy et al. 2015 train on raw characters); with `word`
or `whitespace` each line's tokens are followed by `<eos>`, the end-of-line token of the PTB and
WikiText language models (Mikolov et al. 2010; Merity et al. 2017; PyTorch's word_language_model).
The vocabulary comes from the training stream; tokens seen fewer than `data.min_freq` times there
(and every token of dev/test never seen in training) become `<unk>`.

Training: the stream is cut into windows of `data.bptt` inputs, each paired with the `bptt` tokens
that follow them one position later (the next-token targets). Every epoch starts the first window at
a random offset in [0, bptt) so that window boundaries move between epochs, and shuffles the windows;
both come from a generator seeded by (train.seed, epoch), so an epoch always yields the same batches
(exact resume depends on it). `train.batch_size` windows form a batch.
Each training window starts from a zero recurrent state: no hidden state is carried across training
batches yet. Stateful truncated BPTT over contiguous streams (Zaremba et al. 2014; Merity et al. 2018)
comes with the full language-modelling task.

Evaluation reads the WHOLE stream in order: every token but the first is predicted exactly once.
The stream is split into `streams` contiguous segments read side by side (a batch of B = streams),
each carrying its recurrent state from one window to the next, so a token's context is everything
before it in its segment; with `streams=1` it is everything before it in the file. The default
(`EVAL_STREAMS` = 16, fewer for short streams so that each segment has at least `bptt` tokens) trades
at most 15 context restarts for batch speed; pass `streams=1` for the exact sequential number, as
AWD-LSTM does for its test scores (Merity et al. 2018, test batch size 1).
Reported: `loss` (mean negative log-likelihood, nats per token), `perplexity` = exp(loss), `tokens`
(number of predicted tokens) and, for the char tokenizer, `bpc` = loss / ln 2 (bits per character).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config
from textnn.data.cache import cached
from textnn.data.readers import read_lines
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError

# B batch (parallel windows or streams), T window length (data.bptt), V vocabulary size, N stream length

EOS = "<eos>"
EVAL_STREAMS = 16


@dataclass
class LMBatch:
    ids: torch.Tensor  # [B, T] input token ids
    targets: torch.Tensor  # [B, T] the token after each input: targets[b, t] = stream[start_b + t + 1]
    mask: torch.Tensor  # [B, T] bool, True = a real target (False only for evaluation padding)
    num_targets: int  # mask.sum(), counted once on the CPU

    @property
    def count(self) -> int:
        """Loss terms in this batch: one per predicted token."""
        return self.num_targets

    @property
    def num_tokens(self) -> int:
        return self.num_targets

    def to(self, device: torch.device) -> "LMBatch":
        return replace(self, ids=self.ids.to(device, non_blocking=True),
                       targets=self.targets.to(device, non_blocking=True),
                       mask=self.mask.to(device, non_blocking=True))


@dataclass
class EncodedStream:
    """One file as a single stream of token ids (what `encode_file` returns and `evaluate` accepts)."""

    ids: torch.Tensor  # [N] long
    path: str


class WindowBatches(Sequence):
    """An epoch's training batches, built on access: only window start positions are stored.

    batch k holds the windows starting at starts[k*B:(k+1)*B]; a window starting at s has inputs
    stream[s : s+T] and targets stream[s+1 : s+T+1]. Slicing returns a list of batches.
    """

    def __init__(self, stream: torch.Tensor, starts: torch.Tensor, bptt: int, batch_size: int):
        self.stream, self.starts, self.bptt, self.batch_size = stream, starts, bptt, batch_size
        self.offsets = torch.arange(bptt + 1)  # [T+1]

    def __len__(self) -> int:
        return math.ceil(len(self.starts) / self.batch_size)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        starts = self.starts[index * self.batch_size:(index + 1) * self.batch_size]  # [B]
        windows = self.stream[starts[:, None] + self.offsets]  # [B, T+1]
        mask = torch.ones(len(starts), self.bptt, dtype=torch.bool)  # [B, T]
        return LMBatch(ids=windows[:, :-1], targets=windows[:, 1:], mask=mask, num_targets=mask.numel())


def _detach(state: object) -> object:
    """Cut the autograd history of a recurrent state ((h, c), h, or None)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.detach()
    return type(state)(_detach(s) for s in state)


class LanguageModelingTask:
    """Next-token prediction on plain-text streams, in the trainer's task protocol (see the module doc)."""

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.splits: dict[str, EncodedStream] = {}
        self.eval_streams = EVAL_STREAMS

    @property
    def default_metric(self) -> str:
        """Bits per character for character models, perplexity for word models (both lower = better)."""
        return "bpc" if self.tokenizer.kind == "char" else "perplexity"

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "LanguageModelingTask":
        """Read train/dev/test as token streams, build the vocabulary from train, encode every split."""
        data = config.data
        if data.format != "text":
            raise TextnnError(f"config key data.format: got {data.format!r}, but language_modeling reads "
                              f"plain text files (one token stream per file); set data.format=text")
        if not data.train:
            raise TextnnError("config key data.train is empty; set it to the training text file")
        tokenizer = Tokenizer(data.tokenizer, data.lowercase)
        train_tokens = read_stream(config, tokenizer, data.train)
        specials = (PAD, UNK) if tokenizer.kind == "char" else (PAD, UNK, EOS)
        vocab = Vocab.build([train_tokens], min_freq=data.min_freq, max_size=data.max_vocab, specials=specials)
        task = cls(config, tokenizer, vocab)
        task.splits["train"] = task.encode_tokens(train_tokens, data.train)
        if len(train_tokens) < data.bptt + 1:
            raise TextnnError(f"{data.train}: the training stream has {len(train_tokens)} tokens, fewer than "
                              f"data.bptt + 1 = {data.bptt + 1}; lower data.bptt or give more text")
        for split in ("dev", "test"):
            path = getattr(data, split)
            if path:
                task.splits[split] = task.encode_file(path)
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "LanguageModelingTask":
        tokenizer = Tokenizer.from_dict(json.loads((run_path / "tokenizer.json").read_text(encoding="utf-8")))
        return cls(config, tokenizer, Vocab.load(run_path / "vocab.json"))

    def save(self, run_path: Path) -> None:
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict()), encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")

    def build_model(self) -> torch.nn.Module:
        _, model_cls, _ = registry.model_entry(self.config.model_name)
        return model_cls(self.config.model, vocab_size=len(self.vocab), pad_id=self.vocab.pad_id)

    # --- encoding ---------------------------------------------------------------------------------
    def encode_tokens(self, tokens: list[str], path: str) -> EncodedStream:
        return EncodedStream(ids=torch.tensor(self.vocab.encode(tokens), dtype=torch.long), path=str(path))

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedStream:
        """A text file as one encoded stream (`require_labels` is accepted for the task protocol: text has none)."""
        tokens = read_stream(self.config, self.tokenizer, path)
        if len(tokens) < 2:
            raise TextnnError(f"{path}: {len(tokens)} token(s); a language model needs at least 2 to predict one")
        return self.encode_tokens(tokens, path)

    def encode_text(self, text: str) -> list[int]:
        """Ids of a piece of text as the model reads it (a generation prompt): no `<eos>` is added."""
        return self.vocab.encode(self.tokenizer(text))

    def decode(self, ids) -> str:
        """Text of a list of ids: characters concatenate; words join with spaces, `<eos>` ends a line."""
        tokens = self.vocab.decode(ids)
        if self.tokenizer.kind == "char":
            return "".join(tokens)
        text, line = [], []
        for token in tokens:
            if token == EOS:
                text.append(" ".join(line) + "\n")
                line = []
            else:
                line.append(token)
        return "".join(text) + " ".join(line)

    # --- batches ----------------------------------------------------------------------------------
    def has_split(self, split: str) -> bool:
        return split in self.splits

    def train_batches(self, epoch: int) -> WindowBatches:
        """Windows of data.bptt tokens from a seeded random offset, shuffled by (train.seed, epoch)."""
        stream = self.splits["train"].ids
        bptt = self.config.data.bptt
        rng = np.random.default_rng([self.config.train.seed, epoch])
        offset = int(rng.integers(bptt))
        if (len(stream) - 1 - offset) // bptt == 0:
            offset = 0  # a stream of fewer than 2 * bptt tokens: keep its one window
        count = (len(stream) - 1 - offset) // bptt  # windows whose bptt targets all exist
        starts = offset + bptt * torch.from_numpy(rng.permutation(count))  # [W]
        return WindowBatches(stream, starts, bptt, self.config.train.batch_size)

    def eval_batches(self, data: EncodedStream, streams: int = 0) -> list[LMBatch]:
        """The stream as `streams` contiguous segments side by side, cut into windows of data.bptt.

        Targets are stream[1:], each predicted from the token before it, so segments overlap by one
        input token and every token but the first is a target exactly once. The last segment is
        padded at its end (mask False), after all its real targets.
        """
        bptt = self.config.data.bptt
        inputs, targets = data.ids[:-1], data.ids[1:]  # [N-1] each
        n = len(targets)
        if streams <= 0:
            streams = max(1, min(self.eval_streams, n // bptt))
        streams = min(streams, n)
        length = math.ceil(n / streams)  # tokens per segment
        pad = streams * length - n
        fill = torch.full((pad,), self.vocab.pad_id, dtype=torch.long)
        inputs = torch.cat([inputs, fill]).view(streams, length)  # [N-1+pad] -> [B, N/B]
        targets = torch.cat([targets, fill]).view(streams, length)  # [B, N/B]
        mask = torch.cat([torch.ones(n, dtype=torch.bool), torch.zeros(pad, dtype=torch.bool)]).view(streams, length)
        return [LMBatch(ids=inputs[:, t:t + bptt], targets=targets[:, t:t + bptt], mask=mask[:, t:t + bptt],
                        num_targets=int(mask[:, t:t + bptt].sum())) for t in range(0, length, bptt)]

    # --- loss and evaluation ----------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: LMBatch, state: object = None) -> torch.Tensor:
        """Sum of the next-token negative log-likelihoods over the batch's real targets."""
        return self._nll(model(batch.ids, state).logits, batch)

    @staticmethod
    def _nll(logits: torch.Tensor, batch: LMBatch) -> torch.Tensor:
        flat = logits.float().reshape(-1, logits.size(-1))  # [B, T, V] -> [B*T, V]
        nll = F.cross_entropy(flat, batch.targets.reshape(-1), reduction="none")  # [B*T]
        return (nll * batch.mask.reshape(-1)).sum()  # mask [B, T] -> [B*T]

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str | EncodedStream, bootstrap_samples: int = 0,
                 streams: int = 0) -> dict:
        """Loss (nats/token), perplexity, bpc (char tokenizer) and token count over the whole stream.

        The recurrent state is carried from each window to the next (see the module docstring for
        `streams`). `bootstrap_samples` is accepted for the task protocol; no confidence interval is
        computed for language models (consecutive tokens are not independent samples).
        """
        data = self.splits[split] if isinstance(split, str) else split
        model.eval()
        device = next(model.parameters()).device
        total, count, state = torch.zeros((), dtype=torch.float64, device=device), 0, None
        for batch in self.eval_batches(data, streams):
            batch = batch.to(device)
            out = model(batch.ids, state)
            state = _detach(out.state)
            total += self._nll(out.logits, batch).double()
            count += batch.count
        loss = float(total) / count
        results = {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf")}
        if self.tokenizer.kind == "char":
            results["bpc"] = loss / math.log(2)
        results["tokens"] = count
        return results


# --- reading and tokenizing ------------------------------------------------------------------------

def tokenize_stream(text_lines: list[str], tokenizer: Tokenizer) -> list[str]:
    """The tokens of a file's lines as one stream: characters with their newlines, or words + <eos> per line."""
    if tokenizer.kind == "char":
        return tokenizer("".join(line + "\n" for line in text_lines))
    return [token for line in text_lines for token in (*tokenizer(line), EOS)]


def read_stream(config: Config, tokenizer: Tokenizer, path: str) -> list[str]:
    """A text file's token stream, cached by file content + tokenizer settings."""
    def compute() -> list[str] | str:
        tokens = tokenize_stream(read_lines(path, config.data.encoding), tokenizer)
        # A character stream is stored as one string: same content, a fraction of the JSON size.
        return "".join(tokens) if tokenizer.kind == "char" else tokens

    settings = {"kind": "language_modeling", "tokenizer": tokenizer.to_dict(), "encoding": config.data.encoding,
                "eos": EOS if tokenizer.kind != "char" else None}
    value = cached(path, settings, compute, enabled=config.data.cache)
    return list(value)
