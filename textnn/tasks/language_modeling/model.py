"""Language models: a causal encoder with a full or adaptive softmax output layer (`language_model`), the
attention-showing variant, and ELMo's two-direction model sharing one softmax."""

# B batch (parallel windows or rows), T window length (data.bptt), V vocabulary size, N stream length,
# D encoder state size, B' batch rows kept by reorder, L layers, H heads

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn import registry
from textnn.config import HeadOptions, check_key, opt
from textnn.errors import TextnnError
from textnn.generation.decoding import PromptDecoder
from textnn.models.base import EncoderWithHead, InputSpec, ModelOutput
from textnn.modules.heads import AdaptiveLMHead, LMHead

SOFTMAXES = ("auto", "full", "adaptive")


@dataclass
class LanguageModelingHead(HeadOptions):
    """Head options of language modelling: the output layer over the vocabulary."""

    softmax: str = opt("auto", "auto (the family's own choice: adaptive for elmo, full for the others), full (one linear map over the vocabulary) or adaptive (Grave et al. 2017: frequency clusters, smaller dimensions for rare words; the training loss never scores the whole vocabulary, evaluation is exact)")
    cutoffs: list[int] = opt([2000, 10000], "adaptive: where the clusters start, in vocabulary ids (most frequent first): the head holds ids below the first cutoff")
    div_value: float = opt(4.0, "adaptive: cluster i reads the states projected to D / div_value^i dimensions")

    def __post_init__(self) -> None:
        check_key(self.softmax in SOFTMAXES, "head.softmax", self.softmax, " or ".join(SOFTMAXES))
        check_key(bool(self.cutoffs) and all(c >= 1 for c in self.cutoffs) and self.cutoffs == sorted(set(self.cutoffs)),
                  "head.cutoffs", self.cutoffs, "a strictly increasing list of integers >= 1")
        check_key(self.div_value >= 1.0, "head.div_value", self.div_value, "a number >= 1")


class LanguageModel(EncoderWithHead, PromptDecoder):
    """A causal encoder with an `LMHead` or `AdaptiveLMHead`: logits[b, t] scores the token that follows ids[b, t].

    forward(ids [B, T], state, mask) -> ModelOutput(logits [B, T, V], state, regularizer (training only))
    forward(ids, state, mask, targets [B, T]) -> ModelOutput(loss = summed nll of the masked targets,
                                     no logits: an adaptive head never scores the whole vocabulary)
    step(ids [B, T], state)          -> (logits [B, V] of the last position, state)   (generation)
    reorder(state, indices)          -> the state of the batch rows `indices` [B']   (beam search)
    As a `PromptDecoder` it is what every search of generation/decoding.py drives.

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
        """One decoding step (`generation.decoding`): logits of the last position [B, V];
        the state is the encoder's cache or recurrent state."""
        last, state = self.encoder.step(ids, state)  # [B, D]
        return self.head(last), state  # [B, V]

    def reorder(self, state: object, indices: torch.Tensor) -> object:
        return self.encoder.reorder(state, indices)


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
