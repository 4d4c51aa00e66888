"""Language modelling on plain text: token streams -> BPTT windows -> next-token loss, perplexity, bpc.

Data (`data.format: text`): each file is ONE token stream (data/streams.py). With `data.tokenizer:
char` every character is a token, newlines included (Karpathy et al. 2015 train on raw characters);
with `word` or `whitespace` each line's tokens are followed by `<eos>`, the end-of-line token of the
PTB and WikiText language models (Mikolov et al. 2010; Merity et al. 2017; PyTorch's
word_language_model); with `bpe` a byte-level BPE of `data.bpe_vocab_size` tokens is trained on
data.train (the tokenizers library) and each line's pieces are followed by `<eos>` in the same way.
The vocabulary comes from the training stream; tokens seen fewer than `data.min_freq` times there
(and every token of dev/test never seen in training) become `<unk>`. A BPE's vocabulary is its own
(byte-level: nothing is unknown). With no data.dev, `data.holdout` keeps the final fraction of the
training stream as dev (nanoGPT's 90/10 Tiny Shakespeare split; vocabulary and BPE from the rest).

Training, `data.stateful: true` (the default): the training stream is laid out as B =
train.batch_size contiguous rows ([N] -> [B, N/B]) read window by window in order; the task keeps the
recurrent state the model returns and hands it (detached: truncated BPTT, Zaremba et al. 2014) to
the next window, and restarts it at zero at the start of every epoch. `data.bptt_variable: true`
draws each window's length as Merity et al. (2018) §4.1 do and scales that step's learning rate by
length / bptt (`LMBatch.lr_scale`). On `--resume` the carried state is not in the checkpoint: a run
resumed in the middle of an epoch restarts the state at zero for its next window (one context
restart per row, as at an epoch start); a resume from an epoch boundary is exact. Under torchrun
(training/distributed.py) P processes lay the stream out as P * B rows and each reads its own B
contiguous rows, carrying their state.
`data.stateful: false`: independent windows from a random offset, shuffled (both seeded by
(train.seed, epoch)), each from a zero state.

Evaluation reads the WHOLE stream in order: every token but the first is predicted exactly once.
The stream is split into `streams` contiguous rows read side by side, each carrying its state from
one window to the next, so a token's context is everything before it in its row; with `streams=1`
it is everything before it in the file. The default (`EVAL_STREAMS` = 16, fewer for short streams so
that each row has at least `bptt` tokens) trades at most 15 context restarts for batch speed; pass
`streams=1` for the exact sequential number, as AWD-LSTM does for its test scores (Merity et al.
2018, test batch size 1). Reported: `loss` (mean negative log-likelihood, nats per token),
`perplexity` = exp(loss) and `tokens` (predicted tokens, `<eos>` included); for the char tokenizer
`bpc` = loss / ln 2 (bits per character); for bpe also `word_perplexity` = exp(total nll / words),
words = whitespace words + one `<eos>` per line (less the stream's first, never predicted), so the
number compares with word-level perplexities on the same text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from textnn import registry
from textnn.config import Config
from textnn.data.readers import read_lines
from textnn.data.streams import (EOS, LMBatch, StreamBatches, WindowBatches, batchify, bptt_lengths,
                                 document_tokens, read_file_stream, shuffled_windows, to_vocab_ids,
                                 vocab_from_counts)
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.training import distributed

# B batch (parallel windows or rows), T window length (data.bptt), V vocabulary size, N stream length

__all__ = ["EOS", "EVAL_STREAMS", "EncodedStream", "LMBatch", "LanguageModelingTask", "WindowBatches"]

EVAL_STREAMS = 16
SPECIALS = (PAD, UNK, EOS)


class EncodedStream:
    """One file (or a held-out part of one) as a single stream of token ids: what `evaluate` accepts."""

    def __init__(self, ids: torch.Tensor, path: str):
        self.ids = ids  # [N] long
        self.path = path
        self.words: int | None = None  # bpe: word-level targets, counted on first use


def _detach(state: object) -> object:
    """Cut the autograd history of a recurrent state (a tensor, or tuples / lists of them, or None)."""
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
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # batchified train stream
        self._state: object = None  # the recurrent state carried between stateful training windows

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
        if data.bptt_variable and not data.stateful:
            raise TextnnError("config key data.bptt_variable: variable-length windows cut contiguous rows "
                              "(Merity et al. 2018); set data.stateful=true or data.bptt_variable=false")
        holdout = data.holdout if not data.dev else 0.0
        tokenizer = Tokenizer(data.tokenizer, data.lowercase) if data.tokenizer != "bpe" else \
            _train_bpe(config, holdout)
        stream = read_file_stream(data.train, tokenizer, data.encoding, cache=data.cache)
        cut = len(stream.ids) - int(round(len(stream.ids) * holdout))
        if tokenizer.kind == "bpe":
            vocab = Vocab(tokenizer.vocabulary())
        else:
            counts = np.bincount(stream.ids[:cut], minlength=len(stream.types))
            specials = (PAD, UNK) if tokenizer.kind == "char" else SPECIALS
            vocab = vocab_from_counts(stream.types, counts, data.min_freq, data.max_vocab, specials)
        task = cls(config, tokenizer, vocab)
        ids = to_vocab_ids(stream, vocab)  # [N]
        task.splits["train"] = EncodedStream(ids[:cut], data.train)
        if cut < data.bptt + 1:
            raise TextnnError(f"{data.train}: the training stream has {cut} tokens, fewer than "
                              f"data.bptt + 1 = {data.bptt + 1}; lower data.bptt or give more text")
        if holdout:
            if len(ids) - cut < 2:
                raise TextnnError(f"{data.train}: data.holdout={holdout} keeps {len(ids) - cut} token(s) for dev; "
                                  f"a language model needs at least 2; raise data.holdout")
            task.splits["dev"] = EncodedStream(ids[cut:], f"{data.train} (final {holdout:g} held out)")
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
        """tokenizer.json (a BPE model included) and vocab.json: all a run needs to read text again."""
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict(), ensure_ascii=False),
                                                 encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")

    def build_model(self) -> torch.nn.Module:
        _, model_cls, _ = registry.model_entry(self.config.model_name)
        return model_cls(self.config.model, vocab_size=len(self.vocab), pad_id=self.vocab.pad_id)

    # --- encoding and decoding ----------------------------------------------------------------------
    def encode_file(self, path: str, require_labels: bool = True) -> EncodedStream:
        """A text file as one encoded stream (`require_labels` is accepted for the task protocol: text has none)."""
        stream = read_file_stream(path, self.tokenizer, self.config.data.encoding, cache=self.config.data.cache)
        if len(stream.ids) < 2:
            raise TextnnError(f"{path}: {len(stream.ids)} token(s); a language model needs at least 2 to predict one")
        return EncodedStream(to_vocab_ids(stream, self.vocab), str(path))

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

    # --- batches ----------------------------------------------------------------------------------
    def has_split(self, split: str) -> bool:
        return split in self.splits

    def train_batches(self, epoch: int) -> StreamBatches | WindowBatches:
        """This epoch's windows: contiguous rows in order (stateful) or shuffled independent windows."""
        data, train = self.config.data, self.config.train
        if not data.stateful:
            return shuffled_windows(self.splits["train"].ids, data.bptt, train.batch_size, train.seed, epoch)
        if self._rows is None:
            # Several processes (training/distributed.py): batch_size rows for each, of one layout.
            rows = train.batch_size * distributed.world()
            self._rows = batchify(self.splits["train"].ids, rows, self.vocab.pad_id)
        inputs, targets, mask = self._rows
        lengths = bptt_lengths(inputs.size(1), data.bptt, data.bptt_variable, train.seed, epoch)
        batches = StreamBatches(inputs, targets, mask, lengths, data.bptt, scale_lr=data.bptt_variable)
        return distributed.stream_row_blocks(batches, train.batch_size)  # each process its own rows

    def eval_batches(self, data: EncodedStream, streams: int = 0) -> StreamBatches:
        """The stream as `streams` contiguous rows side by side (`batchify`), cut into windows of data.bptt."""
        bptt = self.config.data.bptt
        if streams <= 0:
            streams = max(1, min(self.eval_streams, (len(data.ids) - 1) // bptt))
        inputs, targets, mask = batchify(data.ids, streams, self.vocab.pad_id)
        return StreamBatches(inputs, targets, mask, bptt_lengths(inputs.size(1), bptt), bptt)

    # --- loss and evaluation ----------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: LMBatch) -> torch.Tensor:
        """Sum of the next-token negative log-likelihoods over the batch's real targets (+ regularizer).

        A stateful batch starts from the state the previous window left (zeros when `batch.reset`),
        and its own final state is kept, detached, for the next one. A model's `regularizer` (AWD-LSTM's
        AR/TAR, a mean per target; returned in training only) is added as regularizer * count, so that
        the trainer's division by the count gives mean loss + regularizer.
        """
        state = self._state if batch.carry and not batch.reset else None
        out = model(batch.ids, state)
        if batch.carry:
            self._state = _detach(out.state)
        total = self._nll(out.logits, batch)
        if out.regularizer is not None:
            total = total + out.regularizer * batch.count
        return total

    @staticmethod
    def _nll(logits: torch.Tensor, batch: LMBatch) -> torch.Tensor:
        flat = logits.float().reshape(-1, logits.size(-1))  # [B, T, V] -> [B*T, V]
        nll = F.cross_entropy(flat, batch.targets.reshape(-1), reduction="none")  # [B*T]
        return (nll * batch.mask.reshape(-1)).sum()  # mask [B, T] -> [B*T]

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str | EncodedStream, bootstrap_samples: int = 0,
                 streams: int = 0) -> dict:
        """Loss (nats/token), perplexity, bpc (char) or word perplexity (bpe), and counts, over the whole stream.

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
        nll = float(total)
        loss = nll / count
        results = {"loss": loss, "perplexity": _exp(loss)}
        if self.tokenizer.kind == "char":
            results["bpc"] = loss / math.log(2)
        if self.tokenizer.kind == "bpe":
            words = self.word_count(data)
            results["word_perplexity"] = _exp(nll / words)
            results["words"] = words
        results["tokens"] = count
        return results

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


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")


def _train_bpe(config: Config, holdout: float) -> Tokenizer:
    """Train the byte-level BPE on data.train (less a held-out tail), cached by file content and settings."""
    from textnn.data.cache import cached

    data = config.data

    def compute() -> dict:
        lines = read_lines(data.train, data.encoding)
        kept = lines[:len(lines) - int(round(len(lines) * holdout))] or lines
        return Tokenizer.train_bpe(kept, data.bpe_vocab_size, SPECIALS, data.lowercase).to_dict()

    settings = {"kind": "bpe_model", "vocab_size": data.bpe_vocab_size, "lowercase": data.lowercase,
                "holdout": holdout, "encoding": data.encoding, "specials": list(SPECIALS)}
    return Tokenizer.from_dict(cached(data.train, settings, compute, enabled=data.cache))
