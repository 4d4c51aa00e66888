"""The translation model: an encoder-decoder family with an output layer over the target vocabulary
(teacher forcing, or its own predictions fed back), and the decoder interface searches drive."""

# B batch (sentence pairs), S source length, T target length, V target vocabulary, D decoder state size

from __future__ import annotations

from dataclasses import dataclass

import torch

from textnn.config import HeadOptions, check_key, is_int, opt
from textnn.generation.decoding import Decoder
from textnn.models.base import EncoderDecoder, EncoderWithHead
from textnn.modules.heads import LMHead
from textnn.tasks.translation.data import TranslationBatch


@dataclass
class TranslationHeadConfig(HeadOptions):
    """The output layer, the loss and the decoding length rule."""

    label_smoothing: float = opt(0.0, "eps of label-smoothed cross-entropy (Vaswani et al. 2017 §5.4: 0.1); 0 = plain")
    teacher_forcing: float = opt(1.0, "probability of feeding the reference token at each target position in "
                                      "training; below 1 the model's own greedy prediction is fed otherwise")
    tie: bool = opt(True, "share the output layer with the family's target embedding, when it gives one "
                          "(Press & Wolf 2017)")
    max_len_a: float = opt(1.5, "decoding: at most a * S + b output tokens for a source of S tokens")
    max_len_b: int = opt(10, "decoding: the b of a * S + b")

    def __post_init__(self) -> None:
        check_key(isinstance(self.label_smoothing, (int, float)) and 0.0 <= self.label_smoothing < 1.0,
                  "head.label_smoothing", self.label_smoothing, "a number in [0, 1)")
        check_key(isinstance(self.teacher_forcing, (int, float)) and 0.0 <= self.teacher_forcing <= 1.0,
                  "head.teacher_forcing", self.teacher_forcing, "a probability in [0, 1]")
        check_key(self.max_len_a >= 0, "head.max_len_a", self.max_len_a, "a number >= 0")
        check_key(is_int(self.max_len_b) and self.max_len_b >= 1, "head.max_len_b", self.max_len_b, "an integer >= 1")


@dataclass
class TranslationOutput:
    """What `Translator.forward` returns: scores of each next target token and, when asked, the
    decoder's source attention (`DecoderOutput.attention`)."""

    logits: torch.Tensor  # [B, T, V]
    attention: dict[str, torch.Tensor] | None = None


class Translator(EncoderWithHead, Decoder):
    """An encoder-decoder family (`encoder`, an EncoderDecoder) with an `LMHead` over the target vocabulary.

    forward(src_ids [B, S], src_mask, tgt_ids [B, T] (from <s>), tgt_mask, need_weights) -> logits [B, T, V]
    As a `generation.decoding.Decoder`: start(batch) encodes the batch's sources once, each step scores
    the next target token, reorder follows beam hypotheses.
    """

    def __init__(self, family: EncoderDecoder, head: LMHead, teacher_forcing: float = 1.0) -> None:
        super().__init__(family, head)  # type: ignore[arg-type]
        self.teacher_forcing = teacher_forcing

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_ids: torch.Tensor, tgt_mask: torch.Tensor,
                need_weights: bool = False) -> TranslationOutput:
        memory = self.encoder.encode(src_ids, src_mask)
        if self.training and self.teacher_forcing < 1.0:
            return TranslationOutput(logits=self._fed_own_predictions(memory, tgt_ids))
        out = self.encoder.decode(memory, tgt_ids, tgt_mask, need_weights=need_weights)
        return TranslationOutput(logits=self.head(out.tokens), attention=out.attention)  # [B, T, D] -> [B, T, V]

    def _fed_own_predictions(self, memory: object, tgt_ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] with the decoder run one step at a time; at every position after the first
        each row is fed the reference token with probability `teacher_forcing`, else its own greedy
        prediction of the step before. Gradients flow through the states, not through the choice."""
        state = self.encoder.start(memory)
        steps: list[torch.Tensor] = []
        tokens = tgt_ids[:, :1]  # [B, 1]: <s>
        for t in range(tgt_ids.size(1)):
            if t:
                own = steps[-1].detach().argmax(dim=-1)  # [B]
                use_reference = torch.rand(own.shape, device=own.device) < self.teacher_forcing
                tokens = torch.where(use_reference, tgt_ids[:, t], own)[:, None]  # [B] -> [B, 1]
            last, state = self.encoder.step(tokens, state)  # [B, D]
            steps.append(self.head(last))  # [B, V]
        return torch.stack(steps, dim=1)  # T x [B, V] -> [B, T, V]

    def start(self, batch: TranslationBatch) -> object:
        return self.encoder.start(self.encoder.encode(batch.src_ids, batch.src_mask))

    def step(self, tokens: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        last, state = self.encoder.step(tokens, state)  # [B, D]
        return self.head(last), state  # [B, V]

    def reorder(self, state: object, indices: torch.Tensor) -> object:
        return self.encoder.reorder(state, indices)
