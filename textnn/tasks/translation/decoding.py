"""Decoding a translation model (`TranslationDecoding`, a part of `TranslationTask`): the decoding a command
asks for under the head's length rule, sources decoded in batches of similar length, lines translated."""

# B batch (sentences)

from __future__ import annotations

from dataclasses import replace

import torch

from textnn.data.batching import bucket_batches, pad
from textnn.generation.decoding import DecodingConfig, Hypothesis, decode
from textnn.tasks.translation.data import BOS, EOS, TranslationBatch
from textnn.tasks.translation.model import Translator
from textnn.training.progress import progress_bar

MAX_OUTPUT_TOKENS = 256  # a hard cap on an output, whatever max_len_a * S + b allows
# Sentences decoded side by side, unless a command's --batch-size says (`Task.inference_batch_size`)
GREEDY_SENTENCES = 128  # greedy, sampling
BEAM_SENTENCES = 32  # beam search (each K rows)


class TranslationDecoding:
    """`decoding_config`, `translate_ids` and `translate_lines` of `TranslationTask`."""

    def decoding_config(self, requested: DecodingConfig | None = None) -> DecodingConfig:
        """The decoding a command asked for (built and checked by `DecodingConfig.from_flags`; default
        greedy) under the head's length rule: at most min(MAX_OUTPUT_TOKENS, a * S + b) tokens."""
        head = self.config.head
        return replace(requested or DecodingConfig(), max_tokens=MAX_OUTPUT_TOKENS, max_len_a=float(head.max_len_a),
                       max_len_b=head.max_len_b)

    @torch.no_grad()
    def translate_ids(self, model: Translator, sources: list[list[int]], decoding: DecodingConfig,
                      progress: bool = False) -> list[list[Hypothesis]]:
        """Hypotheses (best first) for each source id list, decoded in batches of similar length; with
        `progress`, a bar counts the sentences (a dev set under beam search takes minutes)."""
        model.eval()
        device = next(model.parameters()).device
        size = self.inference_batch_size or (BEAM_SENTENCES if decoding.search.rows_per_input(decoding) > 1
                                             else GREEDY_SENTENCES)
        order = bucket_batches([len(s) for s in sources], size, shuffle=False)
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        banned = [self.target_vocab.pad_id, bos]
        found: list[list[Hypothesis]] = [[] for _ in sources]
        with progress_bar("decode", "sentence", total=len(sources), enabled=progress, leave=False) as bar:
            for index in order:
                src_ids, src_mask = pad([sources[i] for i in index], self.source_vocab.pad_id)
                batch = TranslationBatch(src_ids, src_mask, src_ids[:, :0], src_ids[:, :0], src_mask[:, :0],
                                         index).to(device)
                prefix = torch.full((len(index), 1), bos, dtype=torch.long, device=device)  # [B, 1]
                lengths = src_mask.sum(dim=1)  # [B]
                for i, hypotheses in zip(index, decode(model, batch, prefix, decoding, stop_ids=[eos],
                                                       source_lengths=lengths, banned_ids=banned)):
                    found[i] = hypotheses
                bar.update(len(index))
        return found

    def translate_lines(self, model: Translator, lines: list[str], decoding: DecodingConfig) -> list[list[tuple[str, float]]]:
        """(text, score) of each line's hypotheses, best first; an empty line translates to ""."""
        kept = [i for i, line in enumerate(lines) if line.strip()]
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
        if not kept:
            return out
        sources = self.encode_sources([lines[i] for i in kept])
        for i, hypotheses in zip(kept, self.translate_ids(model, sources, decoding)):
            out[i] = [(self.detokenize(h.tokens), h.score) for h in hypotheses]
        return out
