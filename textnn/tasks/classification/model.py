"""The classification model: an encoder with a classifier, pair-classifier or regression head, and how
per-token states become the sentence vector (pooling, BPT3C windows, a frozen feature encoder)."""

# B batch, T tokens, D sentence vector size, C classes

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn import registry
from textnn.config import Config, HeadOptions, check_key, is_int, opt
from textnn.errors import TextnnError
from textnn.models.base import Encoder, EncoderWithHead, ModelOutput, TokenFeatures, detach_state
from textnn.modules.heads import ClassifierHead, PairClassifierHead, RegressionHead
from textnn.modules.pooling import concat_pool, last_valid, masked_max, masked_mean
from textnn.tasks.classification.data import ClassificationBatch
from textnn.tasks.features import FrozenLayers

POOLINGS = ("max", "mean", "last", "concat")
ACTIVATIONS = ("tanh", "relu")
# How per-token states [B, T, D] become the sentence vector (head.pooling).
POOLS = {"max": masked_max, "mean": masked_mean, "last": last_valid, "concat": concat_pool}


@dataclass
class ClassificationHeadConfig(HeadOptions):
    dropout: float = opt(0.0, "dropout on the sentence vector (and on the hidden layer, unless head.hidden_dropout says otherwise), in [0, 1)")
    hidden: int = opt(0, "size of a hidden layer before the output layer (InferSent's MLP: tanh; ULMFiT: 50, relu); 0 = linear output")
    hidden_dropout: float = opt(-1.0, "head.hidden > 0: dropout on the hidden layer before the output layer, in [0, 1); -1 = head.dropout")
    activation: str = opt("tanh", "head.hidden > 0: the hidden layer's activation, tanh or relu")
    batch_norm: bool = opt(False, "batch-normalise the sentence vector (and the hidden layer) before each dropout: with head.hidden and relu, ULMFiT's two linear blocks (Howard & Ruder 2018 section 3.3)")
    max_norm: float = opt(0.0, "after each step, rescale every output weight row whose L2 norm exceeds this "
                               "back to it (Kim 2014 §2.1: 3); 0 = off")
    pooling: str = opt("max", "encoders that give per-token states only (language models): how they become the "
                              "sentence vector: max, mean, last (the state after the last token) or concat "
                              "([last; max; mean], ULMFiT's concat pooling, Howard & Ruder 2018 section 3.3)")
    sentence: str = opt("encoder", "encoders that give a sentence vector as well as token states (bert: its pooler over [CLS]): encoder = classify that vector; pooled = pool the token states by head.pooling instead (mean is how sentence-transformers checkpoints such as all-MiniLM-L6-v2 were trained)")
    bptt: int = opt(0, "encoders that carry a state (recurrent language models): read each input in windows of this many tokens, the state carried (detached) from one window to the next, and pool over all of them (ULMFiT's BPT3C, section 3.3); 0 = the whole input at once")

    def __post_init__(self) -> None:
        for key in ("dropout", "hidden_dropout"):
            value = getattr(self, key)
            allowed = isinstance(value, (int, float)) and (0.0 <= value < 1.0 or (key == "hidden_dropout" and value == -1))
            check_key(allowed, f"head.{key}", value,
                      "a probability in [0, 1)" + (" or -1 (= head.dropout)" if key == "hidden_dropout" else ""))
        check_key(is_int(self.hidden) and self.hidden >= 0, "head.hidden", self.hidden, "an integer >= 0")
        check_key(self.activation in ACTIVATIONS, "head.activation", self.activation, " or ".join(ACTIVATIONS))
        check_key(self.max_norm >= 0, "head.max_norm", self.max_norm, "a number >= 0 (0 = off)")
        check_key(self.pooling in POOLINGS, "head.pooling", self.pooling, ", ".join(POOLINGS))
        check_key(self.sentence in ("encoder", "pooled"), "head.sentence", self.sentence, "encoder or pooled")
        check_key(is_int(self.bptt) and self.bptt >= 0, "head.bptt", self.bptt, "an integer >= 0 (0 = off)")

    @property
    def hidden_dropout_or_none(self) -> float | None:
        """The hidden layer's dropout as the heads take it: None = the same as head.dropout."""
        return None if self.hidden_dropout == -1 else self.hidden_dropout


def classifier_head(encoder, num_classes: int, cfg: ClassificationHeadConfig, pair: bool = False,
                    regression: bool = False):
    """The head a classification run puts on `encoder`: over its sentence vector, or over its per-token
    states pooled as head.pooling says (concat pooling gives three times the state size)."""
    own = encoder.sentence_size and cfg.sentence == "encoder"
    size = encoder.sentence_size if own else encoder.token_size * (3 if cfg.pooling == "concat" else 1)
    options = dict(hidden=cfg.hidden, dropout=cfg.dropout, hidden_dropout=cfg.hidden_dropout_or_none,
                   activation=cfg.activation, batch_norm=cfg.batch_norm)
    if regression:
        return RegressionHead(size, **options)
    return (PairClassifierHead if pair else ClassifierHead)(size, num_classes, max_norm=cfg.max_norm, **options)


class Classifier(EncoderWithHead):
    """An encoder with a classification head: ids (and a pair's second ids) -> class scores [B, C]."""

    def __init__(self, encoder, head, pooling: str, frozen: FrozenLayers | None = None, bptt: int = 0,
                 own_sentence: bool = True) -> None:
        super().__init__(encoder, head)
        self.pooling = pooling
        self.own_sentence = own_sentence  # head.sentence=encoder: the encoder's sentence vector, when it gives one
        self.frozen = frozen  # data.features_from: a frozen encoder whose layers join the input
        self.bptt = bptt  # head.bptt: read inputs in windows of this many tokens (BPT3C); 0 = at once

    def sentence(self, ids: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor | None = None,
                 word_inputs: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's sentence vector (unless head.sentence=pooled), or its per-token states pooled by
        `head.pooling`: [B, D] (3D
        for concat). With a frozen feature encoder, its features of `word_inputs` [B, T, C] join the
        encoder's input."""
        if self.bptt:
            return POOLS[self.pooling](self.windowed_states(ids, mask), mask)  # [B, T, D] -> [B, D]
        features = TokenFeatures(segments=segments) if segments is not None else None
        if self.frozen is not None:
            features = TokenFeatures(context=self.frozen(word_inputs, mask))  # [B, T, E]
        out = self.encoder(ids, mask, features=features)
        if out.sentence is not None and self.own_sentence:
            return out.sentence
        return POOLS[self.pooling](out.tokens, mask)  # [B, T, D] -> [B, D]

    def head_input(self) -> str:
        """ "sentence" when the head reads the encoder's own sentence vector, else how the tokens are pooled."""
        if self.encoder.sentence_size and self.own_sentence and not self.bptt:
            return "sentence"
        return f"tokens pooled by {self.pooling}"

    def windowed_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-token states [B, T, D] of inputs read in windows of `bptt` tokens, each window starting
        from the (detached) state the one before left: ULMFiT's BPT3C (Howard & Ruder 2018 §3.3), so
        a long document costs the memory of its states, not of one graph through all of it. Every
        window's states are pooled, so each gets the gradient of the prediction; none flows back
        through the carried state. In evaluation the states equal those of one pass over the input."""
        states, state = [], None
        for start in range(0, ids.size(1), self.bptt):
            window = slice(start, start + self.bptt)
            out = self.encoder(ids[:, window], mask[:, window], state)  # tokens [B, bptt, D]
            states.append(out.tokens)
            state = detach_state(out.state)
        return torch.cat(states, dim=1)  # bptt-long pieces -> [B, T, D]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pair_ids: torch.Tensor | None = None,
                pair_mask: torch.Tensor | None = None, segments: torch.Tensor | None = None,
                word_inputs: torch.Tensor | None = None, pair_word_inputs: torch.Tensor | None = None) -> ModelOutput:
        """Scores [B, C] of single inputs, of pairs read one sentence at a time (pair_ids), or of inputs
        packed into one sequence (segments [B, T]: 0 first sentence, 1 second); word_inputs [B, T, C]
        (and the pair's) feed a frozen feature encoder."""
        u = self.sentence(ids, mask, segments, word_inputs)
        if pair_ids is None:
            return ModelOutput(logits=self.head(u))
        return ModelOutput(logits=self.head(u, self.sentence(pair_ids, pair_mask, word_inputs=pair_word_inputs)))



def scores(model: torch.nn.Module, batch: ClassificationBatch) -> ModelOutput:
    """The model's output on a batch: class scores (or regression values) as `logits`."""
    return model(batch.ids, batch.mask, batch.pair_ids, batch.pair_mask, batch.segments, batch.word_inputs,
                 batch.pair_word_inputs)


def check_head(config: Config) -> None:
    """The head options against the encoder they go on (`ClassificationTask.check_config`): windows carrying a
    state (head.bptt) need an encoder that carries one; pooling (head.sentence: pooled) needs per-token states."""
    encoder_cls = registry.encoder_class(config.model_name)
    if config.head.bptt and (not encoder_cls.carries_state() or config.data.features_from):
        carriers = [name for name in registry.ENCODERS if issubclass(registry.encoder_class(name), Encoder)
                    and registry.encoder_class(name).carries_state()]
        raise TextnnError(f"config key head.bptt: reading inputs in windows carries a recurrent state from one to "
                          f"the next, which model {config.model_name} does not"
                          f"{' with data.features_from' if encoder_cls.carries_state() else ''}; use one of "
                          f"{', '.join(carriers)} or set head.bptt=0")
    if config.head.sentence == "pooled" and not encoder_cls.gives_tokens:
        raise TextnnError(f"config key head.sentence: pooled pools per-token states, which model "
                          f"{config.model_name} does not give; set head.sentence=encoder")
