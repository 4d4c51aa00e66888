"""A tiny encoder-decoder on the `EncoderDecoder` contract, for the translation task's unit tests.

A GRU reads the source; a GRU decoder started from its last state attends (dot product, Luong et al.
2015) over the source states. Small enough to build in milliseconds; not a registered family.
"""

# B batch, S source length, T target length, D size

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.models.base import DecoderOutput, EncoderDecoder, InputSpec


@dataclass
class TinyConfig:
    size: int = 16


class TinyEncoderDecoder(EncoderDecoder):
    config_class = TinyConfig
    presets = {"tiny": {}}

    def __init__(self, cfg: TinyConfig, source: InputSpec, target: InputSpec) -> None:
        super().__init__()
        size = cfg.size
        self.source_embedding = nn.Embedding(source.vocab_size, size, padding_idx=source.pad_id)
        self.target_embedding = nn.Embedding(target.vocab_size, size, padding_idx=target.pad_id)
        self.encoder_rnn = nn.GRU(size, size, batch_first=True)
        self.decoder_rnn = nn.GRU(size, size, batch_first=True)
        self.combine = nn.Linear(2 * size, size)
        self.token_size = size

    def encode(self, src_ids, src_mask):
        states, _ = self.encoder_rnn(self.source_embedding(src_ids))  # [B, S, D]
        last = src_mask.sum(dim=1) - 1  # [B]
        final = states[torch.arange(states.size(0)), last]  # [B, D]
        return states, src_mask, final

    def _attend(self, outputs, memory):
        states, mask, _ = memory
        scores = outputs @ states.transpose(1, 2)  # [B, T, S]
        weights = torch.softmax(scores.masked_fill(~mask[:, None, :], float("-inf")), dim=-1)
        context = weights @ states  # [B, T, D]
        return torch.tanh(self.combine(torch.cat([outputs, context], dim=-1))), weights

    def decode(self, memory, ids, mask, need_weights=False):
        outputs, _ = self.decoder_rnn(self.target_embedding(ids), memory[2][None])  # [B, T, D]
        tokens, weights = self._attend(outputs, memory)
        return DecoderOutput(tokens=tokens, attention={"attention": weights} if need_weights else None)

    def start(self, memory):
        return memory, memory[2][None]  # hidden [1, B, D]

    def step(self, ids, state):
        memory, hidden = state
        outputs, hidden = self.decoder_rnn(self.target_embedding(ids), hidden)
        tokens, _ = self._attend(outputs[:, -1:], memory)
        return tokens[:, 0], (memory, hidden)

    def reorder(self, state, indices):
        (states, mask, final), hidden = state
        return (states[indices], mask[indices], final[indices]), hidden[:, indices]

    def output_embedding(self):
        return self.target_embedding.weight
