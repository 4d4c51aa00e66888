"""Plot the scalar-mix weights feature-based runs learned (ELMo, Peters et al. 2018 eq. 1): one group of
bars per run, one bar per layer (the token layer first), with each run's gamma in its label.

Reads each run's model.safetensors through textnn.tasks.features.mix_weights, so the picture shows
what the runs learned, nothing typed in.
    usage: python recipes/plot_scalar_mix.py OUT.png RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from textnn.tasks.features import mix_weights  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    mixes = {Path(run).name: mix_weights(run) for run in args.runs}
    missing = [name for name, mix in mixes.items() if mix is None]
    if missing:
        print(f"plot_scalar_mix.py: {', '.join(missing)} mix no layers (not feature-based runs)", file=sys.stderr)
        return 2
    layers = max(len(mix["weights"]) for mix in mixes.values())
    width = 0.8 / len(mixes)
    figure, axes = plt.subplots(figsize=(1.6 + 1.4 * layers, 3.2))
    for index, (name, mix) in enumerate(mixes.items()):
        positions = [layer + (index - (len(mixes) - 1) / 2) * width for layer in range(len(mix["weights"]))]
        axes.bar(positions, mix["weights"], width, label=f"{name} (gamma {mix['gamma']:.2f})")
    axes.axhline(1 / layers, color="grey", linewidth=0.8, linestyle="--", label="uniform")
    axes.set_xticks(range(layers))
    axes.set_xticklabels(["token layer" if layer == 0 else f"LSTM layer {layer}" for layer in range(layers)])
    axes.set_ylabel("softmax-normalised weight")
    axes.set_title("Learned ELMo scalar-mix weights")
    # the legend goes below the axes, where it cannot hide a bar
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    figure.tight_layout()
    figure.savefig(args.output, dpi=120, bbox_inches="tight")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
