"""Language modelling on plain text: token streams -> BPTT windows -> next-token loss, perplexity, bpc.

Data (`data.format: text`): each file is ONE token stream (data/streams.py); `tsv` or `csv` reads the
text column of a table instead, each row's text a line (`data.text_column`, `data.header`, as for
classification): a classifier's own training text, on which ULMFiT fine-tunes its language model
(Howard & Ruder 2018 §3.2) before the classifier starts from it. With `data.tokenizer:
char` every character is a token, newlines included (Karpathy et al. 2015 train on raw characters);
with `word` or `whitespace` each line's tokens are followed by `<eos>`, the end-of-line token of the
PTB and WikiText language models (Mikolov et al. 2010; Merity et al. 2017; PyTorch's
word_language_model); with `bpe` a byte-level BPE of `data.bpe_vocab_size` tokens is trained on
data.train (the tokenizers library) and each line's pieces are followed by `<eos>` in the same way.
The vocabulary comes from the training stream; tokens seen fewer than `data.min_freq` times there
(and every token of dev/test never seen in training) become `<unk>`. A BPE's vocabulary is its own
(byte-level: nothing is unknown). With no data.dev, `data.holdout` keeps the final fraction of the
training stream as dev (nanoGPT's 90/10 Tiny Shakespeare split; vocabulary and BPE from the rest);
with bpe it is the final fraction of the lines, since the BPE that makes the tokens is trained on
exactly the lines before it.

Training, `data.stateful: true` (the default): the training stream is laid out as B =
train.batch_size contiguous rows ([N] -> [B, N/B]) read window by window in order; the task keeps the
recurrent state the model returns and hands it (detached: truncated BPTT, Zaremba et al. 2014) to
the next window, and restarts it at zero at the start of every epoch. `data.bptt_variable: true`
draws each window's length as Merity et al. (2018) §4.1 do and scales that step's learning rate by
length / bptt (`LMBatch.lr_scale`). The carried state (Transformer-XL: its memory) is saved in every
checkpoint (`carried_state`), so a run resumed in the middle of an epoch goes on exactly as if it
had not stopped. Under torchrun (training/distributed.py) P processes lay the stream out as P * B
rows and each reads its own B contiguous rows, carrying their state (each process's is saved).
`data.stateful: false`: independent windows from a random offset, shuffled (both seeded by
(train.seed, epoch)), each from a zero state.

Model: any registered encoder that is causal, gives per-token states and reads nothing beyond the
token ids (`unusable_reason`), with an `LMHead` on top (tied to the encoder's input embedding
when the family ties): `LanguageModel`. `model.init_from: RUN_DIR` starts from another run: its
tokenizer and vocabulary are used as they are (a BPE is not retrained, the vocabulary not rebuilt
from data.train), and its encoder weights are loaded by the caller; from another language model,
its output layer and head options too (`keeps_start_head`), so the run goes on from exactly the
model that run ended with (ULMFiT's language-model fine-tuning).

Evaluation reads the WHOLE stream in order: every token but the first is predicted exactly once,
and the number does not depend on how the stream is cut into batches. An encoder that carries
state (recurrent LMs, NPLM's last ids, Transformer-XL's memory) reads it as ONE row, window after
window, so a token's context is everything before it in the file, as AWD-LSTM reports its test
scores (Merity et al. 2018, test batch size 1). `streams=N` reads N contiguous rows side by side
instead, N times fewer steps, but each row starts from a zero state, so the number depends on N
(docs/RESULTS.md measures both on the WikiText-2 recipes); sequential is the default so that the
reported number is one number, whatever the batch. An encoder that reads each window afresh (`Encoder.windowed`: GPT) is evaluated in
overlapping windows (`SlidingWindows`, data.eval_stride), batched: each target is scored once,
with at least bptt - eval_stride tokens of context after the first window.
Reported: `loss` (mean negative log-likelihood, nats per token), `perplexity` = exp(loss) and
`tokens` (predicted tokens, `<eos>` included); for the char tokenizer `bpc` = loss / ln 2 (bits per
character); for bpe also `word_perplexity` = exp(total nll / words), words = whitespace words + one
`<eos>` per line (less the stream's first, never predicted), so the number compares with word-level
perplexities on the same text.

A bidirectional LM (`Encoder.bidirectional_lm`: ELMo, Peters et al. 2018 §3.1) is trained in both
directions at once (`BidirectionalLanguageModel`): the forward LM predicts each window's targets, carrying
its state as above, and the backward LM predicts its inputs from the words after them, within the
window. The loss is the mean of the two; `forward_perplexity` and `backward_perplexity` (and their
losses) are reported beside it, `perplexity` being exp of the mean loss (their geometric mean).

Output layer (`head:`): the full softmax (`LMHead`) or the adaptive softmax (`AdaptiveLMHead`,
Grave et al. 2017), whose training loss never scores the whole vocabulary; `auto` (the default) is
the family's choice (`Encoder.lm_softmax`: adaptive for elmo, full for the others). The model is handed the
targets and returns the summed loss, so neither training nor evaluation builds [B, T, V] scores
for it; evaluation is exact either way.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from textnn import registry
from textnn.config import Config, DataConfig, check_key, opt
from textnn.data.readers import line_list, read_classification, read_lines
from textnn.data.streams import (EOS, LMBatch, SlidingWindows, StreamBatches, WindowBatches, batchify,
                                 bptt_lengths, document_tokens, read_file_stream, shuffled_windows, to_vocab_ids,
                                 vocab_from_counts)
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import PAD, UNK, Vocab
from textnn.errors import TextnnError
from textnn.models.base import EncoderWithHead, InputSpec, ModelOutput, detach_state
from textnn.modules.heads import AdaptiveLMHead, LMHead
from textnn.tasks import pipeline
from textnn.tasks.base import BatchTask
from textnn.training import distributed

# B batch (parallel windows or rows), T window length (data.bptt), V vocabulary size, N stream length,
# D encoder state size, B' batch rows kept by reorder_state, L layers, H heads

__all__ = ["EOS", "AttentionLanguageModel", "BidirectionalLanguageModel", "EncodedStream", "LMBatch", "LanguageModel",
           "LanguageModelingData", "LanguageModelingTask", "WindowBatches", "language_model"]

SPECIALS = (PAD, UNK, EOS)
SOFTMAXES = ("auto", "full", "adaptive")
DIRECTIONS = ("forward", "backward")  # a bidirectional LM reports each one's loss and perplexity


@dataclass
class LanguageModelingData(DataConfig):
    """Data options of language modelling: plain-text streams cut into BPTT windows."""

    format: str = opt("text", "text (each file is one token stream), or tsv / csv: the text column of a table, each row's text a line")
    text_column: str = opt("sentence", "tsv/csv: column (name, or 0-based index) holding the text")
    header: bool = opt(True, "tsv/csv: the first line names the columns")
    quoting: bool = opt(False, "tsv/csv: honour \" quoting (GLUE files need it off)")
    delimiter: str = opt("", "tsv/csv field separator; empty means tab for tsv, comma for csv")
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


@dataclass
class LanguageModelingHead:
    """Head options of language modelling: the output layer over the vocabulary."""

    softmax: str = opt("auto", "auto (the family's own choice: adaptive for elmo, full for the others), full (one linear map over the vocabulary) or adaptive (Grave et al. 2017: frequency clusters, smaller dimensions for rare words; the training loss never scores the whole vocabulary, evaluation is exact)")
    cutoffs: list[int] = opt([2000, 10000], "adaptive: where the clusters start, in vocabulary ids (most frequent first): the head holds ids below the first cutoff")
    div_value: float = opt(4.0, "adaptive: cluster i reads the states projected to D / div_value^i dimensions")

    def __post_init__(self) -> None:
        check_key(self.softmax in SOFTMAXES, "head.softmax", self.softmax, " or ".join(SOFTMAXES))
        check_key(bool(self.cutoffs) and all(c >= 1 for c in self.cutoffs) and self.cutoffs == sorted(set(self.cutoffs)),
                  "head.cutoffs", self.cutoffs, "a strictly increasing list of integers >= 1")
        check_key(self.div_value >= 1.0, "head.div_value", self.div_value, "a number >= 1")


class LanguageModel(EncoderWithHead):
    """A causal encoder with an `LMHead` or `AdaptiveLMHead`: logits[b, t] scores the token that follows ids[b, t].

    forward(ids [B, T], state, mask) -> ModelOutput(logits [B, T, V], state, regularizer (training only))
    forward(ids, state, mask, targets [B, T]) -> ModelOutput(loss = summed nll of the masked targets,
                                     no logits: an adaptive head never scores the whole vocabulary)
    step(ids [B, T], state)          -> (logits [B, V] of the last position, state)   (generation)
    reorder_state(state, indices)    -> the state of the batch rows `indices` [B']   (beam search)

    `mask` (True = real token) is handed to the encoder as it comes; a causal encoder needs none,
    since the stream padding of the last row only ever follows real tokens (None is fine).
    """

    def forward(self, ids: torch.Tensor, state: object = None, mask: torch.Tensor | None = None,
                targets: torch.Tensor | None = None) -> ModelOutput:
        out = self.encoder(ids, mask, state)
        if targets is None:
            return ModelOutput(logits=self.head(out.tokens), state=out.state,
                               regularizer=out.regularizer)  # [B, T, D] -> [B, T, V]
        states = out.tokens.reshape(-1, out.tokens.size(-1))  # [B, T, D] -> [B*T, D]
        nll = self.head.nll(states, targets.reshape(-1))  # [B*T]
        if mask is not None:
            nll = nll * mask.reshape(-1)  # mask [B, T] -> [B*T]
        return ModelOutput(logits=None, state=out.state, regularizer=out.regularizer, loss=nll.sum())

    def step(self, ids: torch.Tensor, state: object = None) -> tuple[torch.Tensor, object]:
        """One decoding step (`generation.decoding`, through `LMDecoder`): logits of the last position [B, V];
        the state is the encoder's cache or recurrent state."""
        last, state = self.encoder.step(ids, state)  # [B, D]
        return self.head(last), state  # [B, V]

    def reorder_state(self, state: object, indices: torch.Tensor) -> object:
        return self.encoder.reorder_state(state, indices)


class AttentionLanguageModel(LanguageModel):
    """A language model whose encoder can also return its attention maps (GPT): the attention view."""

    shows_attention = True

    @torch.no_grad()
    def forward_with_attention(self, ids: torch.Tensor) -> tuple[ModelOutput, torch.Tensor]:
        """ids [B, T] -> (ModelOutput(logits [B, T, V]), attention [L, B, H, T, T]) on the explicit path."""
        states, attention = self.encoder.forward_with_attention(ids)  # [B, T, D], [L, B, H, T, T]
        return ModelOutput(logits=self.head(states)), attention


class BidirectionalLanguageModel(EncoderWithHead):
    """A forward and a backward language model over one encoder, sharing its softmax (ELMo's biLM,
    Peters et al. 2018 §3.1: the two directions' log-likelihoods are maximised jointly).

    forward(ids [B, T], state, mask, targets [B, T]) -> ModelOutput(loss = the mean of the two directions'
        summed nll, losses = {"forward": .., "backward": ..}, state = the forward LM's state)
    forward(ids, state)                  -> ModelOutput(logits [B, T, V] of the forward LM)

    The window read is ids followed by the last target: s_0 .. s_T. The forward LM predicts the
    targets s_1 .. s_T, the backward LM the inputs s_0 .. s_{T-1} (from the words after each); both
    count the same masked positions, so their mean is a mean per predicted token. Words are read as
    bytes through `word_bytes` [V, C], the byte ids of every vocabulary word (not saved: it follows
    from the vocabulary).
    """

    def __init__(self, encoder, head, word_bytes: torch.Tensor) -> None:
        super().__init__(encoder, head)
        self.register_buffer("word_bytes", word_bytes, persistent=False)  # [V, C]

    def forward(self, ids: torch.Tensor, state: object = None, mask: torch.Tensor | None = None,
                targets: torch.Tensor | None = None) -> ModelOutput:
        if mask is None:
            mask = torch.ones_like(ids, dtype=torch.bool)
        if targets is None:
            window = torch.cat([ids, ids[:, -1:]], dim=1)  # [B, T+1]: the extra word's prediction is not used
            forward, _, state = self.encoder.lm_states(self.word_bytes[window], mask.sum(dim=1), state)
            return ModelOutput(logits=self.head(forward), state=state)  # [B, T, P] -> [B, T, V]
        window = torch.cat([ids, targets[:, -1:]], dim=1)  # [B, T+1]: s_0 .. s_T
        forward, backward, state = self.encoder.lm_states(self.word_bytes[window], mask.sum(dim=1), state)
        flat_mask = mask.reshape(-1)  # [B, T] -> [B*T]
        size = forward.size(-1)
        nll_forward = self.head.nll(forward.reshape(-1, size), targets.reshape(-1)) * flat_mask  # [B*T]
        nll_backward = self.head.nll(backward.reshape(-1, size), ids.reshape(-1)) * flat_mask  # [B*T]
        losses = {"forward": nll_forward.sum(), "backward": nll_backward.sum()}
        return ModelOutput(logits=None, state=state, loss=(losses["forward"] + losses["backward"]) / 2, losses=losses)


class EncodedStream:
    """One file (or a held-out part of one) as a single stream of token ids: what `evaluate` accepts."""

    def __init__(self, ids: torch.Tensor, path: str):
        self.ids = ids  # [N] long
        self.path = path
        self.words: int | None = None  # bpe: word-level targets, counted on first use


def language_model(model_name: str, cfg: object, vocab_size: int, pad_id: int = 0,
                   head_cfg: LanguageModelingHead | None = None,
                   words: list[str] | None = None) -> LanguageModel | BidirectionalLanguageModel:
    """The registered encoder `model_name` built from its config `cfg`, with an LMHead (sharing the
    encoder's input embedding when the family ties; no bias where the family has none), or the
    adaptive softmax that `head_cfg` asks for (its head words tied in the same way; head.softmax=auto
    takes the family's `lm_softmax`). A bidirectional LM (ELMo) reads the vocabulary's `words` as bytes."""
    encoder = registry.encoder_class(model_name)(cfg, InputSpec(vocab_size=vocab_size, pad_id=pad_id))
    head_cfg = head_cfg or LanguageModelingHead()
    softmax = encoder.lm_softmax if head_cfg.softmax == "auto" else head_cfg.softmax
    size = encoder.lm_size if encoder.bidirectional_lm else encoder.token_size
    if softmax == "adaptive":
        if head_cfg.cutoffs[-1] >= vocab_size:
            raise TextnnError(f"config key head.cutoffs: got {head_cfg.cutoffs}, but the vocabulary has {vocab_size} "
                              f"tokens; every cutoff must be below it (lower them, or use head.softmax=full)")
        head = AdaptiveLMHead(size, vocab_size, head_cfg.cutoffs, head_cfg.div_value,
                              tied=encoder.output_embedding(), bias=encoder.lm_bias)
    else:
        head = LMHead(size, vocab_size, tied=encoder.output_embedding(), bias=encoder.lm_bias)
    if encoder.bidirectional_lm:
        if words is None or len(words) != vocab_size:
            raise ValueError(f"{model_name} reads the words of its vocabulary: pass all {vocab_size} of them")
        word_bytes = encoder.word_bytes(words)  # [V, C]
        word_bytes[pad_id] = 0  # the padding word has no bytes: the encoder reads it as padding
        return BidirectionalLanguageModel(encoder, head, word_bytes)
    model_cls = AttentionLanguageModel if encoder.gives_attention else LanguageModel
    return model_cls(encoder, head)


class LanguageModelingTask(BatchTask):
    """Next-token prediction on plain-text streams, in the trainer's task protocol (see the module doc)."""

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
        if not data.train:
            raise TextnnError("config key data.train is empty; set it to the training text file")
        holdout = data.holdout if not data.dev else 0.0
        vocab: Vocab | None = None
        lines: list[str] | None = None
        if config.init_from:  # the starting run's tokenizer and vocabulary: its encoder was trained on them
            tokenizer, vocab = pipeline.load(Path(config.init_from))
        elif data.tokenizer == "bpe":
            # The BPE must not see held-out text, and until it exists there are no tokens to count:
            # the held-out part is the final fraction of the LINES, and the stream is cut there too.
            lines = text_lines(data, data.train)
            tokenizer = _train_bpe(config, lines[:_kept_lines(lines, holdout, data.train)])
        else:
            tokenizer = Tokenizer(data.tokenizer, data.lowercase)
        stream = read_stream(data, data.train, tokenizer)
        if tokenizer.kind == "bpe":
            lines = lines if lines is not None else text_lines(data, data.train)
            kept = _kept_lines(lines, holdout, data.train)
            held = sum(len(tokens) + 1 for tokens in tokenizer.tokenize_lines(lines[kept:]))  # + <eos> per line
            cut = len(stream.ids) - held
        else:
            cut = len(stream.ids) - int(round(len(stream.ids) * holdout))
        start_vocab_size = None
        if vocab is not None and data.extend_vocab:
            counts = np.bincount(stream.ids[:cut], minlength=len(stream.types))
            start_vocab_size = len(vocab)
            vocab = pipeline.extend_start_vocab(vocab, dict(zip(stream.types, counts.tolist())), data.extend_vocab)
        elif vocab is None and tokenizer.kind == "bpe":
            vocab = Vocab(tokenizer.vocabulary())
        elif vocab is None:
            counts = np.bincount(stream.ids[:cut], minlength=len(stream.types))
            specials = (PAD, UNK) if tokenizer.kind == "char" else SPECIALS
            vocab = vocab_from_counts(stream.types, counts, data.min_freq, data.max_vocab, specials)
        task = cls(config, tokenizer, vocab)
        task.start_vocab_size = start_vocab_size
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
        return cls(config, *cls.load_text_pipeline(run_path, config.data))

    def save(self, run_path: Path) -> None:
        """tokenizer.json (a BPE model included) and vocab.json: all a run needs to read text again."""
        (run_path / "tokenizer.json").write_text(json.dumps(self.tokenizer.to_dict(), ensure_ascii=False),
                                                 encoding="utf-8")
        self.vocab.save(run_path / "vocab.json")

    def build_model(self) -> LanguageModel:
        return language_model(self.config.model_name, self.config.model, len(self.vocab), self.vocab.pad_id,
                              self.config.head, words=self.vocab.itos)

    # --- encoding and decoding ----------------------------------------------------------------------
    def encode_file(self, path: str, require_labels: bool = True) -> EncodedStream:
        """A text file as one encoded stream (`require_labels` is accepted for the task protocol: text has none)."""
        stream = read_stream(self.config.data, path, self.tokenizer)
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

    def num_train_batches(self, epoch: int) -> int:
        """Windows in this epoch (they differ from epoch to epoch with variable BPTT or stateless windows)."""
        return len(self.train_batches(epoch))  # cheap: the batches are built on access

    def eval_batches(self, data: EncodedStream, streams: int = 0) -> StreamBatches | SlidingWindows:
        """How evaluation reads a whole stream (module docstring): one row carrying its state (`streams`
        rows side by side when asked), or overlapping windows for an encoder that carries no state."""
        bptt = self.config.data.bptt
        if registry.encoder_class(self.config.model_name).windowed and not streams:
            stride = self.config.data.eval_stride or max(1, bptt // 2)
            return SlidingWindows(data.ids, bptt, stride, self.config.train.batch_size, self.vocab.pad_id)
        inputs, targets, mask = batchify(data.ids, streams or 1, self.vocab.pad_id)
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
                      options: dict | None = None) -> dict:
        """`textnn evaluate` on a text file; options["streams"]: rows read side by side (0 = the default reading)."""
        options = dict(options or {})
        streams = options.pop("streams", 0)
        if options:
            raise TextnnError(f"{', '.join('--' + key for key in options)}: not an option of language modelling")
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
        results = {"loss": loss, "perplexity": _exp(loss)}
        for name, value in parts.items():  # the mean's perplexity is the geometric mean of these two
            results[f"{name}_loss"] = float(value) / count
            results[f"{name}_perplexity"] = _exp(float(value) / count)
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


def _source(data: LanguageModelingData) -> dict | None:
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
    return read_file_stream(path, tokenizer, data.encoding, cache=data.cache, lines=lambda: lines, source=_source(data))


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")


def _kept_lines(lines: list[str], holdout: float, path: str) -> int:
    """How many of a training file's lines are trained on when its final `holdout` fraction is dev."""
    kept = len(lines) - int(round(len(lines) * holdout))
    if kept == 0:
        raise TextnnError(f"{path}: data.holdout={holdout} holds out all {len(lines)} line(s), leaving none to "
                          f"train on; lower data.holdout or give more text")
    return kept


def _train_bpe(config: Config, lines: list[str]) -> Tokenizer:
    """Train the byte-level BPE on `lines`, the first lines of data.train (all but the held-out ones),
    cached by the file's content and these settings."""
    from textnn.data.cache import cached

    data = config.data

    def compute() -> dict:
        return Tokenizer.train_bpe(lines, data.bpe_vocab_size, SPECIALS, data.lowercase).to_dict()

    settings = {"kind": "bpe_model", "vocab_size": data.bpe_vocab_size, "lowercase": data.lowercase,
                "lines": len(lines), "encoding": data.encoding, "specials": list(SPECIALS),
                **({"source": _source(data)} if _source(data) else {})}
    return Tokenizer.from_dict(cached(data.train, settings, compute, enabled=data.cache))
