"""The parts every tagger shares around its own encoder: character features in, tag likelihood out.

A tagger family (models/tagger.py, models/window_tagger.py) differs in how it turns word features
into per-token tag scores (emissions [B, T, K]); how characters become word features and how
emissions become a sentence likelihood and a decoding is the same for all of them, so it lives here.
"""

# B batch, T words per sentence, K tags

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from textnn.errors import TextnnError
from textnn.modules.char_encoders import CharCNN, CharLSTM
from textnn.modules.crf import LinearChainCRF, transition_constraints

CHAR_ENCODERS = ("none", "cnn", "lstm")
OUTPUTS = ("softmax", "crf")


def build_char_encoder(kind: str, num_chars: int, char_dim: int, num_filters: int, width: int,
                       hidden_size: int, dropout: float) -> CharCNN | CharLSTM | None:
    """A character encoder of the given kind ("none" -> None); its `output_size` is the feature count."""
    if kind == "cnn":
        return CharCNN(num_chars, char_dim, num_filters, width, dropout)
    if kind == "lstm":
        return CharLSTM(num_chars, char_dim, hidden_size)
    return None


def build_crf(output: str, tags: list[str], scheme: str, constrained: bool) -> LinearChainCRF | None:
    """The CRF output layer for output="crf" (with the scheme's transition constraints, read from the
    tag names, if asked), else None (a per-token softmax)."""
    if output != "crf":
        return None
    allowed = transition_constraints(tags, scheme) if constrained else None
    return LinearChainCRF(len(tags), allowed)


def check_tag_names(tags: list[str], num_tags: int) -> None:
    if len(tags) != num_tags:
        raise TextnnError(f"the tagger was given {num_tags} tags but {len(tags)} tag names ({tags[:5]}...); "
                          "the tag list must name every tag id")


def tag_nll(emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor,
            crf: LinearChainCRF | None) -> torch.Tensor:
    """Negative log-likelihood of the gold tags per sentence, [B]: the CRF's log Z - score (a
    sentence-level likelihood, Collobert et al. 2011 §3.4.2), or without a CRF the sum of the tokens'
    cross-entropies over real tokens (their word-level likelihood, §3.4.1)."""
    if crf is not None:
        return crf.nll(emissions, tags, mask)
    flat = F.cross_entropy(emissions.float().flatten(0, 1), tags.masked_fill(~mask, 0).flatten(),
                           reduction="none")  # [B, T, K] -> [B*T]
    return flat.view(mask.shape).masked_fill(~mask, 0.0).sum(dim=1)  # [B*T] -> [B, T] -> [B]


@torch.no_grad()
def tag_decode(emissions: torch.Tensor, mask: torch.Tensor, crf: LinearChainCRF | None) -> torch.Tensor:
    """Best tag ids [B, T] (0 where mask is False): Viterbi with a CRF, else each token's argmax."""
    if crf is not None:
        return crf.viterbi(emissions, mask)
    return emissions.argmax(dim=-1).masked_fill(~mask, 0)


def concat_word_features(word_embedding: nn.Module, char_encoder: nn.Module | None,
                         casing_embedding: nn.Module | None, words: torch.Tensor, chars: torch.Tensor,
                         casing: torch.Tensor) -> torch.Tensor:
    """[word embedding; character features; casing embedding] per token: [B, T, D + F + A]."""
    parts = [word_embedding(words)]  # [B, T, D]
    if char_encoder is not None:
        parts.append(char_encoder(chars))  # [B, T, F]
    if casing_embedding is not None:
        parts.append(casing_embedding(casing))  # [B, T, A]
    return torch.cat(parts, dim=-1)
