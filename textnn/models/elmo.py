"""ELMo's bidirectional language model: Peters et al. (2018), "Deep contextualized word representations"
(NAACL), §3.1 and §3.4.

Each word is read from its characters alone (§3.4, following Jozefowicz et al. 2016 and Kim et al.
2016): the UTF-8 bytes of the word between begin- and end-of-word markers (cut at `max_chars`, 50 in
the paper) -> character embeddings -> convolutions of several widths with max-pooling over the
word (`modules.char_encoders.MultiWidthCharCNN`) -> highway layers (`modules.highway`, Srivastava et
al. 2015) -> a linear projection: the context-independent token representation x_k. A word never
seen in training has one all the same.

Two LSTM language models read x: the forward one left to right, predicting the next word, the
backward one right to left, predicting the previous word (§3.1, Eq. before Eq. 1). Each is a stack
of `num_layers` LSTMs with `hidden_size` cells projected to `projection_dim` (LSTMP, Sak et al. 2014:
`nn.LSTM(proj_size=...)`, fused), with a residual connection from each layer's input to its output
from the second layer on (§3.4). The two directions share the token representation and the softmax
(the task's output layer) and have their own LSTMs. The paper's cell and projection clipping (the
bilm-tf code clips at 3) is left out: it would break the fused kernel.

As an encoder (`forward`), ELMo gives per-token states [B, T, 2P]: the forward and the backward top
layers, concatenated; `hidden_layers` gives all L + 1 layers the scalar mix of §3.2 (Eq. 1) weighs:
the token layer (duplicated [x; x] to the width of the others, as the paper does) and each LSTM layer
[forward; backward]. For the language-modelling task `lm_states` reads a window of T + 1 words
s_0 .. s_T: the forward LM predicts s_1 .. s_T, carrying its state to the next window; the backward
LM reads s_T .. s_1 and predicts s_{T-1} .. s_0 from a zero state (it would need the text after the
window to carry one), so its context is the rest of the window.

The input is the words' bytes (`TokenFeatures.word_bytes`, made by `word_byte_ids`); the ids are not
read, so any word list can be encoded, which is what feature-based use needs (tasks/features.py).
"""

# B batch, T words, C bytes per word (markers included), F char-CNN filters, P projection size,
# H LSTM cells, L LSTM layers, V vocabulary size

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from textnn.config import ModelOptions, Preset, PresetHead, check_model_field as _check, is_int, opt
from textnn.models.base import (Encoder, EncoderOutput, InputSpec, LayerGroups, TokenFeatures, require_ints,
                                require_probabilities)
from textnn.modules.char_encoders import MultiWidthCharCNN
from textnn.modules.dropout import Dropout
from textnn.modules.highway import Highway
from textnn.modules.masking import lengths_from_mask

# Byte vocabulary: 0 padding, 1 begin of word, 2 end of word, 3 + b for byte b.
BEGIN_OF_WORD, END_OF_WORD, BYTE_OFFSET = 1, 2, 3
NUM_CHARS = BYTE_OFFSET + 256

State = list[tuple[torch.Tensor, torch.Tensor]] | None

# On the CPU PyTorch runs an LSTM with projections in its own kernel instead of oneDNN's and says so on
# every call; the numbers are the same, so the notice would only repeat itself in every run's output.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")


def word_byte_ids(words: list[str], max_chars: int) -> np.ndarray:
    """Byte ids of each word between its markers, cut to `max_chars` (markers included), zero-padded to
    the longest: [N, C] int16 (C >= 3; an empty word list gives [0, 3])."""
    encoded = [w.encode("utf-8")[: max_chars - 2] for w in words]
    out = np.zeros((len(words), max((len(b) for b in encoded), default=1) + 2), dtype=np.int16)  # [N, C]
    for row, data in enumerate(encoded):
        out[row, 0] = BEGIN_OF_WORD
        out[row, 1:len(data) + 1] = np.frombuffer(data, dtype=np.uint8).astype(np.int16) + BYTE_OFFSET
        out[row, len(data) + 1] = END_OF_WORD
    return out


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first lengths[b] positions of each row, leaving the padding after them in place:
    x [B, T, ...], lengths [B] -> [B, T, ...]. Its own inverse."""
    steps = torch.arange(x.size(1), device=x.device).unsqueeze(0)  # [1, T]
    index = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)  # [B, T]
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)  # [B, T] -> [B, T, ...]
    return x.gather(1, index)


@dataclass
class ELMoConfig(ModelOptions):
    char_dim: int = opt(16, "character (byte) embedding size")
    filters: list[list[int]] = opt([[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                                   "character CNN: [width, number of filters] pairs (the paper's 2048 filters)")
    highway_layers: int = opt(2, "highway layers over the character CNN's output")
    projection_dim: int = opt(512, "size P of the token representation and of each LSTM's projected output")
    hidden_size: int = opt(4096, "LSTM cells H per layer and direction (projected to P; must exceed it)")
    num_layers: int = opt(2, "LSTM layers L per direction")
    dropout: float = opt(0.1, "dropout on each LSTM's input and on the top layer's output", retunable=True)
    max_chars: int = opt(50, "bytes read per word, the begin/end markers included; longer words are cut")

    def __post_init__(self) -> None:
        require_ints(self, "char_dim")
        require_ints(self, "highway_layers", at_least=0)
        require_ints(self, "projection_dim", "hidden_size", "num_layers")
        _check(self.hidden_size > self.projection_dim, "hidden_size", self.hidden_size,
               f"more than model.projection_dim = {self.projection_dim} (the LSTM's cells are projected down)")
        _check(isinstance(self.filters, list) and bool(self.filters) and all(
            isinstance(f, (list, tuple)) and len(f) == 2 and all(is_int(n) and n >= 1 for n in f) for f in self.filters),
            "filters", self.filters, "a non-empty list of [width, count] pairs of integers >= 1")
        require_probabilities(self, "dropout")
        # A word shorter than a filter still gives one (zero-padded) window: no lower bound from the widths.
        _check(is_int(self.max_chars) and self.max_chars >= 3, "max_chars", self.max_chars,
               "an integer >= 3 (a byte and its two markers)")


class ELMo(Encoder):
    """The biLM of ELMo as an encoder (see the module docstring).

    forward(ids, mask, features=TokenFeatures(word_bytes [B, T, C])) -> EncoderOutput(tokens [B, T, 2P])
    hidden_layers(word_bytes, mask)          -> L + 1 layers [B, T, 2P] (token layer first)
    lm_states(word_bytes [B, T+1, C], lengths [B], state) -> (forward [B, T, P], backward [B, T, P], state)
    """

    config_class = ELMoConfig
    gives_tokens = True
    reads = ("word_bytes",)
    bidirectional_lm = True
    lm_softmax = "adaptive"
    gives_layers = True  # hidden_layers: ELMo's features (data.features_from)

    def __init__(self, cfg: ELMoConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        widths, counts = [int(w) for w, _ in cfg.filters], [int(n) for _, n in cfg.filters]
        self.chars = MultiWidthCharCNN(NUM_CHARS, cfg.char_dim, widths, counts)
        self.highway = Highway(self.chars.output_size, cfg.highway_layers)
        self.projection = nn.Linear(self.chars.output_size, cfg.projection_dim)
        p, h = cfg.projection_dim, cfg.hidden_size
        self.forward_lstms = nn.ModuleList(nn.LSTM(p, h, proj_size=p, batch_first=True) for _ in range(cfg.num_layers))
        self.backward_lstms = nn.ModuleList(nn.LSTM(p, h, proj_size=p, batch_first=True) for _ in range(cfg.num_layers))
        self.dropout = Dropout(cfg.dropout)
        self.token_size = 2 * p
        self.lm_size = p  # what the shared softmax reads: one direction's top layer

    @classmethod
    def encode_words(cls, cfg: ELMoConfig, words: list[str]) -> np.ndarray:
        """The input of `words` as encoders built from `cfg` read them: [N, C] byte ids (`word_byte_ids`)."""
        return word_byte_ids(words, cfg.max_chars)

    def word_bytes(self, words: list[str]) -> torch.Tensor:
        """The input of `words` as this encoder reads them: [N, C] long."""
        return torch.from_numpy(self.encode_words(self.cfg, words)).long()

    def layer_groups(self) -> LayerGroups:
        """The token representation first, then each LSTM layer (both directions together)."""
        groups: LayerGroups = [("tokens", [self.chars, self.highway, self.projection])]
        for layer, (fwd, bwd) in enumerate(zip(self.forward_lstms, self.backward_lstms)):
            groups.append((f"lstm{layer + 1}", [fwd, bwd]))
        return groups

    def token_representation(self, word_bytes: torch.Tensor) -> torch.Tensor:
        """Context-independent x_k: [B, T, C] -> [B, T, P] (zeros' projection at padding words)."""
        return self.projection(self.highway(self.chars(word_bytes)))

    def _stack(self, x: torch.Tensor, lstms: nn.ModuleList, state: State = None) -> tuple[list[torch.Tensor], State]:
        """One direction's LSTM stack over x [B, T, P] (in reading order): each layer's output [B, T, P]."""
        layers, new_state = [], []
        for layer, lstm in enumerate(lstms):
            out, layer_state = lstm(self.dropout(x), None if state is None else state[layer])  # [B, T, P]
            if layer > 0:
                out = out + x  # §3.4: a residual connection between the LSTM layers
            layers.append(out)
            new_state.append(layer_state)
            x = out
        return layers, new_state

    def _backward(self, x: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """The backward stack: each row's real words read last to first (padding stays after them), and
        every layer put back in text order: x [B, T, P] -> L x [B, T, P]."""
        layers, _ = self._stack(reverse_padded(x, lengths), self.backward_lstms)
        return [reverse_padded(layer, lengths) for layer in layers]

    def hidden_layers(self, word_bytes: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The L + 1 layers of §3.2: [x; x], then [forward_l; backward_l] for each LSTM layer, [B, T, 2P] each."""
        x = self.token_representation(word_bytes)  # [B, T, P]
        forward, _ = self._stack(x, self.forward_lstms)
        backward = self._backward(x, lengths_from_mask(mask))
        return [torch.cat([x, x], dim=-1), *(torch.cat(pair, dim=-1) for pair in zip(forward, backward))]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        if features is None or features.word_bytes is None:
            raise ValueError("ELMo reads each word's bytes: pass features=TokenFeatures(word_bytes=...)")
        if mask is None:
            mask = torch.ones(features.word_bytes.shape[:2], dtype=torch.bool, device=features.word_bytes.device)
        return EncoderOutput(tokens=self.dropout(self.hidden_layers(features.word_bytes, mask)[-1]))  # [B, T, 2P]

    def lm_states(self, word_bytes: torch.Tensor, lengths: torch.Tensor,
                  state: State = None) -> tuple[torch.Tensor, torch.Tensor, State]:
        """A window s_0 .. s_T of language-model training (module docstring): word_bytes [B, T+1, C],
        lengths [B] the real targets per row (the real words are s_0 .. s_lengths). Returns the forward
        top layer at s_0 .. s_{T-1} (predicting s_1 .. s_T), the backward top layer at s_1 .. s_T
        (predicting s_0 .. s_{T-1}), both [B, T, P] after dropout, and the forward state after s_{T-1}."""
        x = self.token_representation(word_bytes)  # [B, T+1, P]
        forward, state = self._stack(x[:, :-1], self.forward_lstms, state)
        backward = self._backward(x[:, 1:], lengths)
        return self.dropout(forward[-1]), self.dropout(backward[-1]), state


PRESETS: dict[str, Preset] = {
    # For tests: every part present (three filter widths, a highway layer, two residual LSTM layers).
    "tiny": Preset(
        ELMoConfig(char_dim=4, filters=[[1, 3], [2, 4], [3, 5]], highway_layers=1, projection_dim=6,
                   hidden_size=8, num_layers=2, dropout=0.1, max_chars=12),
        PresetHead(softmax="adaptive", cutoffs=(8,), div_value=2.0)),
    # For a 2-core CPU: WikiText-2 in a few minutes. 256 filters of widths 1-5, one highway layer, P = 128,
    # two layers of 512 cells; the adaptive softmax keeps each step's output layer cheap.
    "small": Preset(
        ELMoConfig(char_dim=16, filters=[[1, 16], [2, 32], [3, 64], [4, 64], [5, 80]], highway_layers=1,
                   projection_dim=128, hidden_size=512, num_layers=2, dropout=0.1, max_chars=50)),
    # Peters et al. (2018) §3.4 and the released bilm-tf options of the original model: 2048 character
    # filters (widths 1-7 with 32, 32, 64, 128, 256, 512, 1024 filters) on 16-d character embeddings,
    # two highway layers, a projection to 512, two biLSTM layers of 4096 cells projected to 512 with a
    # residual connection, dropout 0.1, words cut at 50 characters. (They trained 10 epochs on the
    # 1B Word Benchmark with a sampled softmax; the average of the two perplexities was 39.7.)
    "paper": Preset(
        ELMoConfig(char_dim=16,
                   filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]], highway_layers=2,
                   projection_dim=512, hidden_size=4096, num_layers=2, dropout=0.1, max_chars=50)),
}
ELMo.presets = PRESETS
