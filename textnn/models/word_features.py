"""What every tagger encoder shares: how characters and casing become word features.

A tagger family (models/tagger.py, models/window_tagger.py) differs in how it turns word features
into per-token states; the character encoder and the feature concatenation are the same for all of
them, so they live here. The tag scores and their likelihood are `modules.heads.TaggerHead`.

Not a family of its own (no registry entry): a part of the two tagger families, among the models
since it reads their config objects and the task's `TokenFeatures` (models/base.py); modules/ keeps
to layers that take explicit arguments.
"""

# B batch, T words per sentence

from __future__ import annotations

import torch
from torch import nn

from textnn.config import check_model_field as check, is_int
from textnn.errors import TextnnError
from textnn.models.base import TokenFeatures, require_bools, require_choice, require_ints, require_probabilities
from textnn.modules.char_encoders import CharCNN, CharLSTM
from textnn.modules.embeddings import TokenEmbedding

CHAR_ENCODERS = ("none", "cnn", "lstm")


def check_word_feature_options(cfg) -> None:
    """The checks of the word-representation options both taggers share (word and character sizes, casing,
    characters, dropout, frozen embeddings: what `add_word_features` reads); each tagger checks its own
    sizes and layers."""
    require_ints(cfg, "word_dim", "char_dim", "char_filters", "char_width", "char_hidden")
    check(is_int(cfg.casing_dim) and cfg.casing_dim >= 0, "casing_dim", cfg.casing_dim,
          "an integer >= 0 (0 = no casing feature)")
    require_choice(cfg, "char_encoder", CHAR_ENCODERS, one_of=True)
    require_probabilities(cfg, "dropout")
    require_bools(cfg, "freeze_embeddings")


def build_char_encoder(kind: str, num_chars: int, char_dim: int, num_filters: int, width: int,
                       hidden_size: int, dropout: float) -> CharCNN | CharLSTM | None:
    """A character encoder of the given kind ("none" -> None); its `output_size` is the feature count."""
    if kind == "cnn":
        return CharCNN(num_chars, char_dim, num_filters, width, dropout)
    if kind == "lstm":
        return CharLSTM(num_chars, char_dim, hidden_size)
    return None


def add_word_features(encoder: nn.Module, cfg, spec) -> int:
    """Give a tagger its word representation: `word_embedding`, `char_encoder` and `casing_embedding`
    (None when off), set on `encoder` under those names (the names its weights are saved under), from
    the model options (word_dim, char_*, casing_dim, dropout, freeze_embeddings) and the task's
    InputSpec. Returns the size of the concatenation `concat_word_features` makes of them."""
    encoder.word_embedding = TokenEmbedding(spec.vocab_size, cfg.word_dim, spec.pad_id, spec.pretrained,
                                            cfg.freeze_embeddings, field="model.word_dim")
    encoder.char_encoder = build_char_encoder(cfg.char_encoder, spec.num_chars, cfg.char_dim, cfg.char_filters,
                                              cfg.char_width, cfg.char_hidden, cfg.dropout)
    encoder.casing_embedding = TokenEmbedding(spec.num_casings, cfg.casing_dim, 0) if cfg.casing_dim else None
    char_size = encoder.char_encoder.output_size if encoder.char_encoder is not None else 0
    return cfg.word_dim + char_size + cfg.casing_dim


def concat_word_features(word_embedding: nn.Module, char_encoder: nn.Module | None,
                         casing_embedding: nn.Module | None, words: torch.Tensor,
                         features: TokenFeatures | None) -> torch.Tensor:
    """[word embedding; character features; casing embedding] per token: [B, T, D + F + A]."""
    parts = [word_embedding(words)]  # [B, T, D]
    if char_encoder is not None or casing_embedding is not None:
        if features is None:
            raise TextnnError("this tagger reads character and casing features; the task must pass them")
    if char_encoder is not None:
        parts.append(char_encoder(features.chars))  # [B, T, F]
    if casing_embedding is not None:
        parts.append(casing_embedding(features.casing))  # [B, T, A]
    return torch.cat(parts, dim=-1)
