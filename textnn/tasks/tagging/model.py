"""The tagging model: an encoder with a tagger head (softmax or CRF), optionally over a frozen feature
encoder's layers."""

# B batch (sentences), T tokens per sentence, C characters per token, K tags

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import HeadOptions, check_key, opt
from textnn.models.base import EncoderWithHead, ModelOutput, TokenFeatures
from textnn.modules.heads import TAGGER_OUTPUTS
from textnn.tasks.features import FrozenLayers
from textnn.tasks.tagging.data import SubwordInput


@dataclass
class TaggingHeadConfig(HeadOptions):
    output: str = opt("crf", "softmax (each tag on its own, cross-entropy) or crf (linear-chain CRF, Lample et al. 2016 §2.2)")
    constrained: bool = opt(True, "crf: forbid the tag transitions that data.train_tag_scheme never produces "
                                  "(e.g. O -> I-PER in bio), in training and decoding; no effect with softmax")

    def __post_init__(self) -> None:
        check_key(self.output in TAGGER_OUTPUTS, "head.output", self.output, " or ".join(TAGGER_OUTPUTS))


class Tagger(EncoderWithHead):
    """An encoder with a tagging head: words (+ characters, casing) -> tag scores (emissions) [B, T, K]."""

    def __init__(self, encoder, head, frozen: FrozenLayers | None = None) -> None:
        super().__init__(encoder, head)
        self.frozen = frozen  # data.features_from: a frozen encoder whose layers join the input

    def forward(self, words: torch.Tensor, chars: torch.Tensor, casing: torch.Tensor, mask: torch.Tensor,
                tags: torch.Tensor | None = None, pieces: "SubwordInput | None" = None,
                word_inputs: torch.Tensor | None = None) -> ModelOutput:
        """Emissions, and with gold `tags` the summed sentence negative log-likelihood as `loss`.
        With `pieces` a sub-word encoder reads the pieces and each word takes the state of its first
        piece; with a frozen feature encoder, its features join the word-level encoder's input (read
        from the pieces, or from `word_inputs` [B, T, C] for a word-level one: ELMo)."""
        if self.frozen is not None:
            if self.frozen.word_level:
                context = self.frozen(word_inputs, mask)  # [B, T, E]
            else:
                context = self.frozen(pieces.ids, pieces.mask, pieces.first)  # [B, T, E]
            features = TokenFeatures(chars=chars, casing=casing, context=context)
            states = self.encoder(words, mask, features=features).tokens  # [B, T, D]
        elif pieces is None:
            states = self.encoder(words, mask, features=TokenFeatures(chars=chars, casing=casing)).tokens  # [B, T, D]
        else:
            out = self.encoder(pieces.ids, pieces.mask, features=TokenFeatures(segments=torch.zeros_like(pieces.ids)))
            index = pieces.first.unsqueeze(-1).expand(-1, -1, out.tokens.size(-1))  # [B, T] -> [B, T, D]
            states = out.tokens.gather(1, index)  # [B, P, D] -> [B, T, D]: each word's first piece
        emissions = self.head(states).float()  # [B, T, K]
        loss = self.head.nll(emissions, tags, mask).sum() if tags is not None else None
        return ModelOutput(logits=emissions, loss=loss)
