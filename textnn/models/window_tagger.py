"""Window tagger: each word's tag scores come from a fixed window of words around it (no recurrence).

Collobert, Weston, Bottou, Karlen, Kavukcuoglu & Kuksa (2011), "Natural Language Processing (Almost)
from Scratch", JMLR 12. §3.3.1 "window approach": the features of the `window` words centred on a
word (its word embedding and a capitalisation-feature embedding, §3.2.1) are concatenated and go
through Linear -> HardTanh -> Linear, which gives the word's tag scores; a sentence is extended on
both sides by a special PADDING word, (window-1)/2 times, so that every word has a full window.
Sliding one Linear over all windows of a sentence is exactly a 1-D convolution of kernel size
`window` over the padded sentence, so that is how it is computed here (one call for the batch).
The last Linear and the output, a softmax per word (their word-level log-likelihood, §3.4.1) or their
sentence-level log-likelihood (§3.4.2: learned transition and initial scores, i.e. a linear-chain CRF,
`modules.crf`), are the tagging task's head (`modules.heads.TaggerHead`). Table 5 gives the published sizes: window 5, word dim 50, caps dim 5, 300 hidden units.

Optional character features (`char_encoder`: cnn or lstm, `modules.char_encoders`) are not part of
the paper; they are here so that a comparison with the recurrent taggers can hold the word
representation fixed.

As an encoder: ids [B, T] (word ids), mask [B, T] bool (True = real token) and features (chars
[B, T, C], 0 = padding; casing [B, T], 0 = padding) -> tokens [B, T, H], the HardTanh layer.
"""

# B batch, T words per sentence, C characters per word, D concatenated word features, W window,
# P = (W-1)/2 padding words per side, H hidden units, K tags

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from textnn.config import ModelOptions, Preset, PresetHead, check_model_field as _check, is_int as _is_int, opt
from textnn.models.base import Encoder, EncoderOutput, InputSpec, TokenFeatures, require_ints
from textnn.models.word_features import add_word_features, check_word_feature_options, concat_word_features
from textnn.modules.dropout import Dropout



@dataclass
class WindowTaggerConfig(ModelOptions):
    window: int = opt(5, "words per window (odd): a word's scores see (window-1)/2 words on each side")
    word_dim: int = opt(50, "word embedding size (must match data.vectors when given)")
    casing_dim: int = opt(5, "size of the embedding of each word's casing category (Collobert's caps feature); 0 = none")
    char_encoder: str = opt("none", "character features of each word, an addition to the paper: none, cnn or lstm")
    char_dim: int = opt(30, "character embedding size (cnn or lstm)")
    char_filters: int = opt(30, "char_encoder cnn: number of filters, i.e. character features per word")
    char_width: int = opt(3, "char_encoder cnn: filter width in characters")
    char_hidden: int = opt(25, "char_encoder lstm: hidden size per direction (2 x this many features per word)")
    hidden_size: int = opt(300, "hidden units H of the HardTanh layer")
    dropout: float = opt(0.0, "dropout on the window features (and on the character embeddings before a char CNN), "
                              "in [0, 1); the paper uses none", retunable=True)
    freeze_embeddings: bool = opt(False, "keep the (pretrained) word embeddings fixed during training")

    def __post_init__(self) -> None:
        check_word_feature_options(self)
        require_ints(self, "hidden_size")
        _check(_is_int(self.window) and self.window >= 1 and self.window % 2 == 1, "window", self.window,
               "an odd integer >= 1 (the word in the middle plus the same number of words on each side)")


class WindowTagger(Encoder):
    """Window features -> Conv1d(kernel = window) -> HardTanh: the states the tag scores read."""

    config_class = WindowTaggerConfig
    gives_tokens = True
    reads = ("chars", "casing")
    uses_vectors = True

    def __init__(self, cfg: WindowTaggerConfig, spec: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        features = add_word_features(self, cfg, spec)
        # The features of Collobert's PADDING word (all of its feature columns at once), learned like any
        # word's; it fills the window positions outside the sentence. Same scale as a random embedding.
        # A window of one word never looks outside the sentence, so it has none.
        self.padding_features: nn.Parameter | None = None
        if cfg.window > 1:
            self.padding_features = nn.Parameter(torch.randn(features) * features ** -0.5)  # [D]
        self.dropout = Dropout(cfg.dropout)
        self.window_layer = nn.Conv1d(features, cfg.hidden_size, cfg.window)  # one Linear over each window
        self.token_size = cfg.hidden_size

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, state: object = None,
                features: TokenFeatures | None = None) -> EncoderOutput:
        x = concat_word_features(self.word_embedding, self.char_encoder, self.casing_embedding,
                                 ids, features)  # [B, T, D]
        if self.padding_features is not None:
            pad = self.padding_features.to(x.dtype)  # [D]
            # Batch padding past a sentence's end is outside the sentence too: it becomes PADDING, so a
            # sentence's windows are the same in any batch.
            x = torch.where(mask.unsqueeze(-1), x, pad)  # [B, T, D]
            side = pad.expand(x.size(0), (self.cfg.window - 1) // 2, -1)  # [B, P, D]
            x = torch.cat([side, x, side], dim=1)  # [B, T + 2P, D]
        hidden = F.hardtanh(self.window_layer(self.dropout(x).transpose(1, 2)))  # [B, D, T + 2P] -> [B, H, T]
        return EncoderOutput(tokens=hidden.transpose(1, 2))  # [B, H, T] -> [B, T, H]

    def layer_groups(self):
        inputs = [m for m in (self.word_embedding, self.char_encoder, self.casing_embedding) if m is not None]
        padding = [self.padding_features] if self.padding_features is not None else []
        return [("features", [*inputs, *padding]), ("window", [self.window_layer])]


PRESETS: dict[str, Preset] = {
    # For tests: small, with casing, a window of 3 and the sentence-level likelihood.
    "tiny": Preset(
        WindowTaggerConfig(window=3, word_dim=8, casing_dim=2, char_encoder="none", char_dim=4,
                           char_filters=5, char_width=3, char_hidden=3, hidden_size=10, dropout=0.1),
        PresetHead(output="crf", constrained=True)),
    # Collobert et al. (2011) Table 5: window 5, 50-d words, 5-d caps feature, 300 hidden units; the
    # sentence-level log-likelihood (their NER results use it) with freely learned transitions; no dropout.
    "paper": Preset(
        WindowTaggerConfig(window=5, word_dim=50, casing_dim=5, char_encoder="none", hidden_size=300,
                           dropout=0.0),
        PresetHead(output="crf", constrained=False)),
}

WindowTagger.presets = PRESETS
