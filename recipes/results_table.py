"""Print the classification rows of docs/RESULTS.md from finished run directories.

Every number comes from a run's own files: the dev metric and its bootstrap 95% CI from run.json,
the wall time (process start to finish, data loading included) from the `WALL` line that
run_classification.sh appends to `<run>.log`. Only the published numbers are written here, each
with its source.
    usage: python recipes/results_table.py runs/recipes
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

# recipe -> (what the published number measures, the number, its source); recipes without one say so
PUBLISHED = {
    "sst2_cbow": ("NBOW (averaged embeddings), SST-2 test", 80.5, "Kalchbrenner et al. 2014, Table 1"),
    "sst2_dan": ("DAN, SST-2 test", 86.3, "Iyyer et al. 2015, Table 1 (300-d GloVe)"),
    "sst2_cnn_rand": ("CNN-rand, SST-2 test", 82.7, "Kim 2014, Table 2"),
    "sst2_cnn_static": ("CNN-static, SST-2 test", 86.8, "Kim 2014, Table 2 (300-d word2vec)"),
    "sst2_cnn_nonstatic": ("CNN-non-static, SST-2 test", 87.2, "Kim 2014, Table 2 (300-d word2vec)"),
    "sst2_cnn_multichannel": ("CNN-multichannel, SST-2 test", 88.1, "Kim 2014, Table 2 (300-d word2vec)"),
    "sst2_bilstm": ("BiLSTM, SST-2 test", 87.5, "Tai et al. 2015, Table 2 (300-d GloVe)"),
}


def row(run: Path) -> str:
    status = json.loads((run / "run.json").read_text())
    metric = status["metric"]
    dev = status["dev"]
    value = 100 * dev[metric]
    ci = f"[{100 * dev[metric + '_ci_low']:.1f}, {100 * dev[metric + '_ci_high']:.1f}]"
    log = run.with_name(run.name + ".log")
    wall = next((line.split()[1] for line in log.read_text().splitlines() if line.startswith("WALL ")), "?")
    published = "no comparable published number"
    if run.name in PUBLISHED:
        what, paper, source = PUBLISHED[run.name]
        published = f"{paper:.1f} ({what}; {source})"
    return (f"| {run.name} | {metric} {value:.1f} {ci} | {published} | "
            f"`textnn train recipes/{run.name}.yaml` | {float(wall):.0f} s | {status['steps']} |")


def main(root: str) -> None:
    runs = sorted(p.parent for p in Path(root).glob("*/run.json"))
    print(f"hardware: {platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads, "
          f"torch {torch.__version__}")
    print("| recipe | ours (dev, 95% CI) | published | command | wall time | steps |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(row(run))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/recipes")
