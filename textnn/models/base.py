"""What every model family shares: the encoder contract, its output, and an encoder with a head.

A model family is an ENCODER: token ids and a bool mask in (plus the token features it reads and,
for language models, the state carried from the previous window), an `EncoderOutput` out. It owns
no task output: the task puts a head on it (`modules/heads.py`) and trains the pair,
`EncoderWithHead`. Which tasks an encoder can serve follows from what it declares it gives:

    gives_tokens     per-token states [B, T, token_size]   -> tagging; classification (pooled)
    gives_sentence   one vector per sequence [B, sentence_size] -> classification
    causal           tokens[:, t] depends on ids[:, :t + 1] only -> language modelling
    reads            token features it needs beyond ids and mask ("chars", "casing", "segments"); a
                     task that cannot supply one cannot use the encoder. "segments" means more: the
                     encoder reads ONE sequence framed as [CLS] a [SEP] (b [SEP]) with segment ids
                     (BERT's input, data/packing.py), so a task packs a pair into it
    uses_vectors     starts its word embedding from pretrained vectors (data.vectors) when given
    windowed         causal, but carries no state from one window to the next (GPT's fixed
                     context): a language model evaluates it in overlapping windows
    bidirectional_lm two language models in one (ELMo's biLM): not causal, but a language model
                     trains it through `lm_states` (forward and backward states, `lm_size` wide)
                     and reports each direction

A family registers with one line in `registry.ENCODERS` ("name": "module:Class"); the class names
its Config dataclass (`config_class`) and presets (`presets`). Every encoder is built the same way,
`Encoder(cfg, spec)`, from its config and an `InputSpec` (vocabulary size, padding id, pretrained
vectors, character and casing vocabulary sizes).
"""

# B batch, T sequence length, D state size

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field, is_int
from textnn.modules.heads import Head

# Named groups, input first: each a list of modules (or of parameters a module holds directly).
LayerGroups = list[tuple[str, list[nn.Module | nn.Parameter]]]


@dataclass
class InputSpec:
    """What an encoder needs to know about its inputs to build its embeddings."""

    vocab_size: int
    pad_id: int = 0
    pretrained: torch.Tensor | None = None  # [vocab_size, D] word vectors, or None
    num_chars: int = 0  # character vocabulary size (encoders that read "chars")
    num_casings: int = 0  # casing categories (encoders that read "casing")
    context_dim: int = 0  # size of per-token features from a frozen encoder (encoders with `takes_context`)


@dataclass
class TokenFeatures:
    """Per-token inputs beyond the ids, for the encoders that read them (`Encoder.reads`)."""

    chars: torch.Tensor | None = None  # [B, T, C] character ids per word, 0 = padding
    casing: torch.Tensor | None = None  # [B, T] casing category, 0 = padding
    segments: torch.Tensor | None = None  # [B, T] segment id: 0 first sentence (with [CLS]), 1 second; 0 = padding
    context: torch.Tensor | None = None  # [B, T, context_dim] per-token features from a frozen encoder
    word_bytes: torch.Tensor | None = None  # [B, T, C] each word's byte ids between markers, 0 = padding (ELMo)


@dataclass
class EncoderOutput:
    """What an encoder's `forward` returns (DESIGN.md convention 5)."""

    tokens: torch.Tensor | None = None  # [B, T, token_size] per-token states
    sentence: torch.Tensor | None = None  # [B, sentence_size] one vector per sequence
    state: object | None = None  # language models: the state to carry into the next window
    regularizer: torch.Tensor | None = None  # training only: a scalar added to the mean loss (AWD-LSTM AR/TAR)


@dataclass
class ModelOutput:
    """What a task's model (an encoder with its head) returns.

    logits: [B, C] for classifiers, [B, T, K] tag scores for taggers, [B, T, V] for language models.
    state: recurrent state to carry to the next window (language models), else None.
    regularizer: a scalar added to the mean training loss, training mode only; None when there is none.
    loss: the summed loss over the batch when the task's targets were given to `forward`, else None.
    """

    logits: torch.Tensor | None  # None when the model was given its targets and returns only the loss
    state: object | None = None
    regularizer: torch.Tensor | None = None
    loss: torch.Tensor | None = None  # the summed loss, when the model computes it itself (a CRF's likelihood)
    losses: dict[str, torch.Tensor] | None = None  # summed loss of each part, where there are several (a biLM's directions)


def detach_state(state: object) -> object:
    """A carried state (a tensor, or tuples / lists of them, or None) cut from its autograd history:
    truncated BPTT (Zaremba et al. 2014) for language models, BPT3C for classifiers reading in windows."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.detach()
    return type(state)(detach_state(s) for s in state)


# Checks for a family's Config `__post_init__`: each names the fields it checks and raises the TextnnError
# of every bad model setting (config.check_model_field: "config key model.<name>: got ..., expected ...").

def require_ints(config: object, *names: str, at_least: int = 1) -> None:
    """Each field in `names` must be an integer (a bool is not one) >= `at_least`."""
    for name in names:
        value = getattr(config, name)
        check_model_field(is_int(value) and value >= at_least, name, value, f"an integer >= {at_least}")


def require_probabilities(config: object, *names: str, expected: str = "a probability in [0, 1)") -> None:
    """Each field in `names` must be a number (int or float; a bool is not one) in [0, 1): a dropout rate.
    `expected` is how the error describes such a value ("a number in [0, 1)" in some families)."""
    for name in names:
        value = getattr(config, name)
        check_model_field(isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0,
                          name, value, expected)


def require_bools(config: object, *names: str) -> None:
    """Each field in `names` must be true or false (a bool, not 0 or 1)."""
    for name in names:
        value = getattr(config, name)
        check_model_field(isinstance(value, bool), name, value, "true or false")


def require_choice(config: object, name: str, choices: tuple[str, ...] | dict, one_of: bool = False) -> None:
    """The field `name` must be one of `choices`, which the error lists as "a or b", or with `one_of` as
    "one of a, b, c"."""
    value = getattr(config, name)
    listed = "one of " + ", ".join(choices) if one_of else " or ".join(choices)
    check_model_field(value in choices, name, value, listed)


class Family(nn.Module):
    """What every model family has, an `Encoder` or an `EncoderDecoder`: its Config dataclass and presets,
    what it gives (the ClassVars the tasks read; all False here), and the hooks the tasks and the trainer
    call on it."""

    config_class: ClassVar[type[ModelOptions]]
    presets: ClassVar[dict[str, Preset]]
    gives_tokens: ClassVar[bool] = False
    gives_sentence: ClassVar[bool] = False
    causal: ClassVar[bool] = False
    reads: ClassVar[tuple[str, ...]] = ()
    uses_vectors: ClassVar[bool] = False  # builds its word embedding from InputSpec.pretrained when given
    bidirectional_lm: ClassVar[bool] = False  # a forward and a backward language model sharing one softmax (ELMo)
    lm_bias: ClassVar[bool] = True  # whether a language-model head (the output layer over the vocabulary) has a bias

    def __init__(self) -> None:
        super().__init__()
        self.token_size = 0  # D of the per-token states it gives (EncoderOutput.tokens, DecoderOutput.tokens); 0 = none

    @classmethod
    def max_length(cls, cfg: object) -> int:
        """The longest input (tokens per window; source or target) families built from `cfg` can read; 0 = no
        limit. Tasks check their window sizes against it before a run starts (a GPT's learned positions)."""
        return 0

    def output_embedding(self) -> nn.Parameter | None:
        """The [V, token_size] matrix a language-model head shares (tied weights, Press & Wolf 2017), or None."""
        return None

    def init_head(self, head: "Head") -> None:
        """Initialise the head a task put on this family as the family's paper initialises its output
        layers (GPT, Transformer-XL: N(0, 0.02)). Parameters the head shares with the family (a tied
        output embedding) are left alone. The default keeps the head's own initialisation."""

    def after_optimizer_step(self) -> None:
        """Apply parameter constraints after each optimizer step. No-op by default."""

    def layer_groups(self) -> LayerGroups:
        """The parameters as named groups of modules (or parameters) from the input up (embeddings first;
        an encoder-decoder: source side, target side, then the decoder's top).

        Discriminative learning rates and gradual unfreezing work on these groups. The default is
        one group per child module, in the order the family registered them (inputs first).
        """
        return [(name, [child]) for name, child in self.named_children()
                if any(True for _ in child.parameters())]


class Encoder(Family):
    """Base class of every encoder family (see the module docstring)."""

    windowed: ClassVar[bool] = False  # reads each window afresh: no state carries context across windows
    takes_context: ClassVar[bool] = False  # reads TokenFeatures.context (InputSpec.context_dim wide) beside its own inputs
    lm_softmax: ClassVar[str] = "full"  # the language-model output layer head.softmax=auto gives: full or adaptive
    gives_layers: ClassVar[bool] = False  # has hidden_layers(...) -> every layer's states (feature extraction)
    gives_attention: ClassVar[bool] = False  # has forward_with_attention(...) -> states and attention weights
    gives_cells: ClassVar[bool] = False  # has memory_cells(ids, state) -> every layer's LSTM memory cells

    def __init__(self) -> None:
        super().__init__()
        self.sentence_size = 0  # D of EncoderOutput.sentence (0 = none)

    @classmethod
    def carries_state(cls) -> bool:
        """Whether text can be read window by window with the state carried from one to the next and
        give the states of one pass (recurrent LMs, NPLM, Transformer-XL; not GPT's fixed context)."""
        return cls.causal and cls.gives_tokens and not cls.gives_sentence and not cls.windowed \
            and not cls.bidirectional_lm

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        raise NotImplementedError

    def step(self, ids: torch.Tensor, state: object = None) -> tuple[torch.Tensor, object]:
        """Decoding with a causal encoder: read the new tokens ids [B, T'] after `state` (None = nothing
        read yet); return the states of the LAST position [B, token_size] and the new state.

        The default runs `forward` on the new tokens alone, which is exact for encoders whose state
        holds all they need of the past (a recurrent state, a memory of ids or of hidden states);
        an encoder with a key/value cache overrides it.
        """
        out = self(ids, torch.ones_like(ids, dtype=torch.bool), state)
        return out.tokens[:, -1], out.state

    def reorder(self, state: object, indices: torch.Tensor) -> object:
        """Decoding with a causal encoder: the state of the batch rows `indices` [B'] (beam search
        follows its hypotheses with it). Every causal family implements it."""
        raise NotImplementedError(f"{type(self).__name__} is not a causal encoder: it has no decoding state")


class EncoderWithHead(nn.Module):
    """An encoder and the head its task put on it: what the trainer trains and a run saves.

    Parameters are named `encoder.*` and `head.*`, so another run can take the encoder alone
    (`model.init_from`). Each task subclasses this with the `forward` its batches need.
    """

    # Has forward_with_attention(ids) -> (ModelOutput, attention [L, B, H, T, T]): `visualize` draws it.
    shows_attention: ClassVar[bool] = False

    def __init__(self, encoder: Encoder, head: Head) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        encoder.init_head(head)

    def after_optimizer_step(self) -> None:
        self.encoder.after_optimizer_step()
        self.head.after_optimizer_step()

    def describe(self) -> dict:
        """What the model is, as plain JSON: the head's own description (`Head.describe`) and what it reads
        of the encoder's output (`head_input`). A run keeps it (run.json `model`, written as training
        starts) and export reads it to choose the Hugging Face class (interop/huggingface.py)."""
        return {"head": self.head.describe(), "head_input": self.head_input()}

    def head_input(self) -> str:
        """What the head reads: "tokens", the encoder's per-token states (the default); a model that feeds
        it something else (the encoder's sentence vector, pooled states) says so."""
        return "tokens"

    def layer_groups(self) -> LayerGroups:
        """The encoder's groups (input first), then the head: the top group."""
        return [*self.encoder.layer_groups(), ("head", [self.head])]

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


@dataclass
class DecoderOutput:
    """What an encoder-decoder's `decode` returns: the decoder's states, before any output layer."""

    tokens: torch.Tensor  # [B, T, token_size] decoder states, one per target position
    # Source attention, only when asked for (need_weights=True): name -> weights over the source,
    # [B, T, S] for one attention ("attention") or [B, H, T, S] per layer ("layer1", ...), rows sum to 1.
    attention: dict[str, torch.Tensor] | None = None


class EncoderDecoder(Family):
    """Base class of the translation families: a source encoder and a target decoder (Sutskever et al.
    2014; Bahdanau et al. 2015; Vaswani et al. 2017).

    Like an `Encoder`, a family owns no output layer: the translation task puts a language-model
    head over the target vocabulary on the decoder's states (tied to `output_embedding()` when the
    family shares it). A family is built as `cls(cfg, source: InputSpec, target: InputSpec)`; under a joint
    vocabulary both specs are the same and a family may share its embeddings.

        encode(src_ids [B, S], src_mask [B, S]) -> memory    opaque to the task; holds the source mask
        decode(memory, ids [B, T], mask [B, T], need_weights) -> DecoderOutput
                                             teacher forcing: all target positions at once (ids start with BOS)
        start(memory) -> state               the decoding state before the first target token
        step(ids [B, T'], state) -> (tokens [B, token_size] of the last position, state)
                                             reads T' new target tokens; n tokens cost n steps, not n passes
        reorder(state, indices [B']) -> state   rows `indices` of the state (memory included), for beam search

    What it gives (the ClassVars of `Family`) is all False, so the tasks for encoders refuse these
    families by what they give (`Task.unusable_reason`), and the translation task refuses encoders.
    """

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> object:
        raise NotImplementedError

    def decode(self, memory: object, ids: torch.Tensor, mask: torch.Tensor,
               need_weights: bool = False) -> DecoderOutput:
        raise NotImplementedError

    def start(self, memory: object) -> object:
        raise NotImplementedError

    def step(self, ids: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        raise NotImplementedError

    def reorder(self, state: object, indices: torch.Tensor) -> object:
        raise NotImplementedError
