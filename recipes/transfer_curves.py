"""The transfer learning curves: dev accuracy against the number of labelled training examples.

Reads the runs recipes/run_transfer_curves.sh writes (OUT_DIR/<method>_<size>_s<seed>/run.json, the
dev accuracy of each run's best checkpoint) and prints a markdown table: the mean accuracy per method
and size, with the spread over seeds, and each method's gain over its scratch counterpart (ULMFiT over
the random AWD-LSTM, our BERT over BERT from random weights, ELMo over the same BiLSTM without its
features). With --plot PNG it also draws one line per method (the mean over seeds, with a band from
the lowest to the highest seed) on a log x axis; run_transfer_curves.sh draws docs/img/transfer_curves.png.
Several OUT_DIRs may be given, each as DIR or DIR=NOTE: a method found in a later one replaces the
earlier one's runs, and its label gains the note (runs/transfer_mean="mean pooling" for the BERT runs
trained again with another sentence representation).
    usage: python recipes/transfer_curves.py runs/transfer [runs/transfer_mean="mean pooling" ...]
               [--plot docs/img/transfer_curves.png]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

METHODS = {  # name -> (label in the plot and table, the scratch method it is compared with)
    "scratch_lstm": ("AWD-LSTM from scratch", None),
    "ulmfit": ("ULMFiT (our WikiText-2 LM)", "scratch_lstm"),
    "ulmfit_one_rate": ("ULMFiT, one rate, no gradual unfreezing", "scratch_lstm"),
    "scratch_bert": ("BERT-Mini from scratch", None),
    "bert": ("BERT-Mini, our pre-training", "scratch_bert"),
    "bilstm": ("BiLSTM on GloVe", None),
    "elmo": ("BiLSTM on GloVe + our ELMo", "bilstm"),
    "minilm": ("all-MiniLM-L6-v2 (imported)", None),
}
RUN = re.compile(r"(?P<method>[a-z_]+)_(?P<size>\d+|all)_s(?P<seed>\d+)$")
ALL_ROWS = 67_349  # SST-2's training rows: where "all" sits on the x axis


def read(root: Path) -> dict[str, dict[int, list[float]]]:
    """method -> labelled rows -> dev accuracies (one per seed), of the finished runs under root."""
    found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    if not root.is_dir():
        raise SystemExit(f"{root}: no such folder (give the OUT_DIR of run_transfer_curves.sh)")
    for status_file in sorted(root.glob("*/run.json")):
        match = RUN.match(status_file.parent.name)
        status = json.loads(status_file.read_text())
        if not match or match["method"] not in METHODS or status.get("status") != "finished":
            continue
        size = ALL_ROWS if match["size"] == "all" else int(match["size"])
        found[match["method"]][size].append(100 * status["dev"]["accuracy"])
    return found


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def read_all(roots: list[str]) -> tuple[dict, dict[str, str]]:
    """The runs of every DIR[=NOTE] in `roots` (a later folder's methods replace an earlier one's), and the
    note of each method that came from a folder with one."""
    found: dict = {}
    notes: dict[str, str] = {}
    for root in roots:
        folder, _, note = root.partition("=")
        for method, by_size in read(Path(folder)).items():
            found[method] = by_size
            notes.pop(method, None)
            if note:
                notes[method] = note
    return found, notes


def label(method: str, notes: dict[str, str]) -> str:
    name = METHODS[method][0]
    return f"{name}, {notes[method]}" if method in notes else name


def table(found: dict, notes: dict[str, str]) -> str:
    sizes = sorted({size for by_size in found.values() for size in by_size})
    header = "| method | " + " | ".join("all" if s == ALL_ROWS else f"{s:,}" for s in sizes) + " |"
    lines = [header, "|---|" + "---|" * len(sizes)]
    for method, (_, scratch) in METHODS.items():
        if method not in found:
            continue
        cells = []
        for size in sizes:
            values = found[method].get(size)
            if not values:
                cells.append("-")
                continue
            cell = f"{mean(values):.1f}"
            if len(values) > 1:
                cell += f" ({min(values):.1f}-{max(values):.1f}, {len(values)} seeds)"
            if scratch and found.get(scratch, {}).get(size):
                cell += f"; {mean(values) - mean(found[scratch][size]):+.1f}"
            cells.append(cell)
        lines.append(f"| {label(method, notes)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(found: dict, notes: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for method, (_, scratch) in METHODS.items():
        if method not in found:
            continue
        sizes = sorted(found[method])
        means = [mean(found[method][s]) for s in sizes]
        style = "--" if scratch is None and method.startswith("scratch") else "-"
        line, = axes.plot(sizes, means, style, marker="o", label=label(method, notes))
        axes.fill_between(sizes, [min(found[method][s]) for s in sizes], [max(found[method][s]) for s in sizes],
                          color=line.get_color(), alpha=0.15, linewidth=0)
    axes.set_xscale("log")
    axes.set_xlabel("labelled SST-2 training examples (log scale; all of them: 67,349)")
    axes.set_ylabel("dev accuracy (%)")
    axes.set_title("Pre-training against training from scratch, by labelled-set size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("roots", nargs="+", metavar="DIR[=NOTE]",
                        help="OUT_DIRs of run_transfer_curves.sh; a later one's methods replace an earlier one's")
    parser.add_argument("--plot", metavar="PNG", help="also draw the curves into this file (the grid's own plot is "
                                                      "docs/img/transfer_curves.png); without it, only the table")
    args = parser.parse_args()
    found, notes = read_all(args.roots)
    if not found:
        raise SystemExit(f"{' '.join(args.roots)}: no finished transfer run there (run recipes/run_transfer_curves.sh "
                         f"first)")
    print(table(found, notes))
    if args.plot:
        plot(found, notes, Path(args.plot))


if __name__ == "__main__":
    main()
