"""The attention view of a translation run (`AttentionView`, a part of `TranslationTask`): what `textnn
visualize` draws for it."""

# T target length, S source length, H heads

from __future__ import annotations

import sys
from pathlib import Path

import torch

from textnn.errors import TextnnError
from textnn.tasks.translation.data import BOS, EOS
from textnn.tasks.translation.model import Translator


class AttentionView:
    """`write_views` of `TranslationTask` (the `write_views` capability)."""

    @torch.no_grad()
    def write_views(self, model: Translator, text: str, output_dir: Path, title: str) -> list[Path]:
        """The source x target attention of the first non-empty line of `text`, translated greedily:
        one PNG for a single attention (RNN families), one per layer with a panel per head (Transformer)."""
        from textnn.viz.attention import plot_source_attention

        line = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if not line:
            raise TextnnError("no text to translate: give a source sentence with --text or a file")
        source = self.encode_sources([line])[0]
        hypothesis = self.translate_ids(model, [source], self.decoding_config())[0][0]
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        target = [bos, *hypothesis.tokens]
        device = next(model.parameters()).device
        tensor = lambda ids: torch.tensor([ids], dtype=torch.long, device=device)  # noqa: E731
        out = model(tensor(source), tensor(source) >= 0, tensor(target), tensor(target) >= 0, need_weights=True)
        if not out.attention:
            raise TextnnError(f"model {self.config.model_name} has no source attention to draw (a seq2seq without "
                              f"attention reads one summary vector); train it with an attention score")
        rows = self.target_labels(hypothesis.tokens + [eos])  # row t: the decoder predicting output token t
        columns = self.source_labels(source)
        output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name, weights in out.attention.items():
            weights = weights[0].float().cpu()  # [T, S] or [H, T, S]
            heads = weights if weights.dim() == 3 else weights[None]  # -> [H, T, S]
            written.append(plot_source_attention(heads.numpy(), columns, rows, output_dir / f"attention_{name}.png",
                                                 f"{title}: {name}"))
        print(f"source: {line}\ntranslation: {self.detokenize(hypothesis.tokens)}", file=sys.stderr)
        return written
