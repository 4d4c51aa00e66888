"""The language-modelling task: building its pipeline and streams, BPTT batches with the carried state,
the next-token loss, perplexity / bpc / word perplexity (the training stream is read in building.py; text
is encoded and decoded for generation in text.py)."""

# B batch (parallel windows or rows), T window length (data.bptt), V vocabulary size, N stream length,
# D encoder state size, B' batch rows kept by reorder_state, L layers, H heads

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from textnn import registry
from textnn.config import Config
from textnn.data.streams import (LMBatch, SlidingWindows, StreamBatches, WindowBatches, batchify, bptt_lengths,
                                 shuffled_windows, to_vocab_ids)
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.models.base import detach_state
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask, perplexity
from textnn.tasks.checks import require_train
from textnn.tasks.language_modeling.building import training_stream
from textnn.tasks.language_modeling.data import EncodedStream, LanguageModelingData, LanguageModelingOptions, read_stream
from textnn.tasks.language_modeling.model import LanguageModel, LanguageModelingHead, language_model
from textnn.tasks.language_modeling.text import StreamText
from textnn.training import distributed

DIRECTIONS = ("forward", "backward")  # a bidirectional LM reports each one's loss and perplexity


class LanguageModelingTask(StreamText, BatchTask):
    """Next-token prediction on plain-text streams, in the trainer's task protocol (see the module doc)."""

    Options = LanguageModelingOptions
    intervals = False  # perplexity has no bootstrap interval here

    data_config = LanguageModelingData
    head_config = LanguageModelingHead
    formats = ("text", "tsv", "csv")
    keeps_start_head = True  # its output layer scores the vocabulary, which a run it starts from gives
    metric_directions = {"loss": False, "perplexity": False, "bpc": False, "word_perplexity": False,
                         **{f"{direction}_{name}": False for direction in DIRECTIONS for name in ("loss", "perplexity")}}

    def __init__(self, config: Config, tokenizer: Tokenizer, vocab: Vocab):
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.splits: dict[str, EncodedStream] = {}
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # batchified train stream
        self._state: object = None  # the recurrent state carried between stateful training windows

    @property
    def default_metric(self) -> str:
        """Bits per character for character models, perplexity for word models (both lower = better)."""
        return "bpc" if self.tokenizer.kind == "char" else "perplexity"

    # --- what the task can use ----------------------------------------------------------------------
    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if encoder_cls.bidirectional_lm:
            return None  # it reads the vocabulary's words itself (BidirectionalLanguageModel)
        if not (encoder_cls.gives_tokens and encoder_cls.causal):
            return ("a language model predicts each token from the ones before it: it needs a causal encoder "
                    "that gives a state per token")
        if encoder_cls.reads:
            return f"it reads {', '.join(encoder_cls.reads)} besides the token ids, which a text stream does not give"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        """The common checks, then data.bptt against the longest window the encoder can read (GPT's
        learned positions), so a too-long window fails here rather than at the first training step."""
        super().check_config(config)
        pipeline.check_extend_vocab(config)
        encoder_cls = registry.encoder_class(config.model_name)
        softmax = encoder_cls.lm_softmax if config.head.softmax == "auto" else config.head.softmax
        if config.data.extend_vocab and softmax == "adaptive":
            raise TextnnError(f"config key data.extend_vocab: the adaptive softmax of {config.model_name} groups the "
                              f"vocabulary by frequency, which added words would break; set data.extend_vocab=0 "
                              f"(or head.softmax=full)")
        limit = encoder_cls.max_length(config.model)
        if limit and config.data.bptt > limit:
            raise TextnnError(f"config key data.bptt: got {config.data.bptt}, but {config.model_name} reads at most "
                              f"{limit} tokens at once (model.context = {limit}); lower data.bptt to <= {limit} or "
                              f"raise model.context")

    @classmethod
    def metrics_for(cls, config: Config) -> list[str]:
        """loss and perplexity; bpc for character models, word_perplexity for BPE models."""
        extra = {"char": ["bpc"], "bpe": ["word_perplexity"]}.get(config.data.tokenizer, [])
        if registry.encoder_class(config.model_name).bidirectional_lm:
            extra += [f"{direction}_{name}" for direction in DIRECTIONS for name in ("loss", "perplexity")]
        return ["loss", "perplexity", *extra]

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "LanguageModelingTask":
        """Read train/dev/test as token streams and encode every split, with the vocabulary built from
        train, or the tokenizer and vocabulary of the run in model.init_from."""
        data = config.data
        require_train(config, "the training text file")
        stream = training_stream(config)
        task = cls(config, stream.tokenizer, stream.vocab)
        task.start_vocab_size = stream.start_vocab_size
        ids, cut, holdout = stream.ids, stream.cut, stream.holdout
        task.splits["train"] = EncodedStream(ids[:cut], data.train)
        if cut < data.bptt + 1:
            raise TextnnError(f"{data.train}: the training stream has {cut} tokens, fewer than "
                              f"data.bptt + 1 = {data.bptt + 1}; lower data.bptt or give more text")
        if holdout:
            if len(ids) - cut < 2:
                raise TextnnError(f"{data.train}: data.holdout={holdout} keeps {len(ids) - cut} token(s) for dev; "
                                  f"a language model needs at least 2; raise data.holdout")
            task.splits["dev"] = EncodedStream(ids[cut:], f"{data.train} (final {holdout:g} held out)")
        task.encode_files()
        return task

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "LanguageModelingTask":
        return cls(config, *cls.load_text_pipeline(run_path, config.data))

    def save(self, run_path: Path) -> None:
        """tokenizer.json (a BPE model included) and vocab.json: all a run needs to read text again."""
        pipeline.save(run_path, self.tokenizer, self.vocab)

    def build_model(self) -> LanguageModel:
        return language_model(self.config.model_name, self.config.model, len(self.vocab), self.vocab.pad_id,
                              self.config.head, words=self.vocab.itos)

    # --- encoding ---------------------------------------------------------------------------------
    def encode_file(self, path: str, require_labels: bool = True) -> EncodedStream:
        """A text file as one encoded stream (`require_labels` is accepted for the task protocol: text has none)."""
        stream = read_stream(self.config.data, path, self.tokenizer)
        if len(stream.ids) < 2:
            raise TextnnError(f"{path}: {len(stream.ids)} token(s); a language model needs at least 2 to predict one")
        return EncodedStream(to_vocab_ids(stream, self.vocab), str(path))

    # --- batches ----------------------------------------------------------------------------------
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

    def num_train_batches(self, epoch: int) -> int:
        """Windows in this epoch (they differ from epoch to epoch with variable BPTT or stateless windows)."""
        return len(self.train_batches(epoch))  # cheap: the batches are built on access

    def eval_batches(self, data: EncodedStream, streams: int = 0) -> StreamBatches | SlidingWindows:
        """How evaluation reads a whole stream (module docstring): one row carrying its state (`streams`
        rows side by side when asked), or overlapping windows for an encoder that carries no state."""
        bptt = self.config.data.bptt
        if self._reads_windows(streams):
            stride = self.config.data.eval_stride or max(1, bptt // 2)
            size = self.inference_batch_size or self.config.train.batch_size  # windows per batch
            return SlidingWindows(data.ids, bptt, stride, size, self.vocab.pad_id)
        inputs, targets, mask = batchify(data.ids, streams or 1, self.vocab.pad_id)
        return StreamBatches(inputs, targets, mask, bptt_lengths(inputs.size(1), bptt), bptt)

    def _reads_windows(self, streams: int = 0) -> bool:
        """Whether evaluation reads overlapping windows side by side (an encoder that carries no state),
        rather than rows that carry their state from window to window."""
        return registry.encoder_class(self.config.model_name).windowed and not streams

    # --- loss and evaluation ----------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: LMBatch) -> torch.Tensor:
        """Sum of the next-token negative log-likelihoods over the batch's real targets (+ regularizer).

        A stateful batch starts from the state the previous window left (zeros when `batch.reset`),
        and its own final state is kept, detached, for the next one. A model's `regularizer` (AWD-LSTM's
        AR/TAR, a mean per target; returned in training only) is added as regularizer * count, so that
        the trainer's division by the count gives mean loss + regularizer.
        """
        state = self._state if batch.carry and not batch.reset else None
        out = model(batch.ids, state, batch.mask, batch.targets)  # a real target's input is real: padding fills both
        if batch.carry:
            self._state = detach_state(out.state)
        total = out.loss
        if out.regularizer is not None:
            total = total + out.regularizer * batch.count
        return total

    def carried_state(self) -> object:
        """The detached state the next stateful training window starts from (None before the first)."""
        return self._state

    def restore_carried_state(self, state: object) -> None:
        self._state = state

    def evaluate_file(self, model: torch.nn.Module, path: str, bootstrap_samples: int = 0,
                      options: LanguageModelingOptions | None = None) -> dict:
        """`textnn evaluate` on a text file, its rows read as options.streams says."""
        streams = options.streams if options is not None else 0
        if self.inference_batch_size and not self._reads_windows(streams):
            print(f"note: --batch-size {self.inference_batch_size} does not apply here: model "
                  f"{self.config.model_name} carries its state from window to window, so the file is read as "
                  f"{streams or 1} row(s) (--streams N reads N parts side by side)", file=sys.stderr)
        return self.evaluate(model, self.encode_file(path), bootstrap_samples=bootstrap_samples, streams=streams)

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
        parts: dict[str, torch.Tensor] = {}  # a bidirectional LM's summed nll per direction
        for batch in self.eval_batches(data, streams):
            batch = batch.to(device)
            out = model(batch.ids, state, batch.mask, batch.targets)
            state = detach_state(out.state)
            total += out.loss.double()
            for name, value in (out.losses or {}).items():
                parts[name] = parts.get(name, 0.0) + value.double()
            count += batch.count
        nll = float(total)
        loss = nll / count
        results = {"loss": loss, "perplexity": perplexity(loss)}
        for name, value in parts.items():  # the mean's perplexity is the geometric mean of these two
            results[f"{name}_loss"] = float(value) / count
            results[f"{name}_perplexity"] = perplexity(float(value) / count)
        if self.tokenizer.kind == "char":
            results["bpc"] = loss / math.log(2)
        if self.tokenizer.kind == "bpe":
            words = self.word_count(data)
            results["word_perplexity"] = perplexity(nll / words)
            results["words"] = words
        results["tokens"] = count
        return results
