"""The attention view of a translation run (`AttentionView`, a part of `TranslationTask`): what `textnn
visualize` draws for it, from the arrays `viz.attention.source_attention` finds (the HTTP server's inspect
endpoint answers with the same arrays)."""

# T target length, S source length, H heads

from __future__ import annotations

import sys
from pathlib import Path

from textnn.tasks.translation.model import Translator


class AttentionView:
    """`write_views` of `TranslationTask` (the `write_views` capability)."""

    def write_views(self, model: Translator, text: str, output_dir: Path, title: str) -> list[Path]:
        """The source x target attention of the first non-empty line of `text`, translated greedily:
        one PNG for a single attention (RNN families), one per layer with a panel per head (Transformer)."""
        from textnn.viz.attention import plot_source_attention, source_attention

        found = source_attention(self, model, text)
        output_dir.mkdir(parents=True, exist_ok=True)
        written = [plot_source_attention(heads, found.source, found.target, output_dir / f"attention_{name}.png",
                                         f"{title}: {name}")
                   for name, heads in found.maps.items()]  # heads: [H, T, S]
        line = next(line.strip() for line in text.splitlines() if line.strip())
        print(f"source: {line}\ntranslation: {found.translation}", file=sys.stderr)
        return written
