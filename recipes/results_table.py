"""Print the result rows of docs/RESULTS.md (classification, tagging, language modelling) from finished runs.

Every number comes from a run's own files: the dev metric and its bootstrap 95% CI from run.json,
the wall time (process start to finish, data loading included) from the `WALL` line that
run_recipes.sh (and the other run_*.sh) append to `<run>.log`, and the command from its `COMMAND`
line where the script wrote one (run_ulmfit.sh), else `textnn train recipes/<run>.yaml`. Only the
published numbers are written here, each with its source.
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
    "conll_bilstm_crf_glove_charlstm": ("LSTM-CRF + char-LSTM, 100-d pretrained, CoNLL-2003 test",
                                        90.94, "Lample et al. 2016, Table 1"),
    "conll_bilstm_crf_glove_charcnn": ("BiLSTM-CNN-CRF, 100-d GloVe, CoNLL-2003 test", 91.21, "Ma & Hovy 2016"),
    "conll_window_cnn_crf": ("window approach + sentence-level likelihood, embeddings pretrained as a language "
                             "model (NN+SLL+LM2), CoNLL-2003 test", 88.67, "Collobert et al. 2011"),
}

# Language models: (what the published number measures, the number, its source); lower is better.
PUBLISHED_LM = {
    "wikitext2_lstm": ("2x200 tied LSTM, WikiText-2 test perplexity", 102.3, "gluon-nlp model zoo"),
    "wikitext2_awd_lstm": ("AWD-LSTM, WikiText-2 test perplexity (750 epochs, GPU)", 65.6,
                           "Merity et al. 2018, Table 2"),
    "tinyshakespeare_gpt": ("nanoGPT CPU config (4x128, context 64), val loss after ~3 min on a laptop CPU",
                            1.88, "nanoGPT README"),
}


def row(run: Path) -> str:
    status = json.loads((run / "run.json").read_text())
    metric = status["metric"]
    dev = status["dev"]
    value = 100 * dev[metric]
    ci = f"[{100 * dev[metric + '_ci_low']:.1f}, {100 * dev[metric + '_ci_high']:.1f}]"
    wall = wall_seconds(run)
    published = "no comparable published number"
    if run.name in PUBLISHED:
        what, paper, source = PUBLISHED[run.name]
        published = f"{paper:g} ({what}; {source})"
    return (f"| {run.name} | {metric} {value:.1f} {ci} | {published} | "
            f"`{command(run)}` | {float(wall):.0f} s | {status['steps']} |")


def log_line(run: Path, key: str) -> str | None:
    """What follows `KEY ` on a line of the run's log (`<run>.log` beside it), if there is one."""
    log = run.with_name(run.name + ".log")
    return next((line[len(key) + 1:] for line in log.read_text().splitlines() if line.startswith(key + " ")), None)


def wall_seconds(run: Path) -> str:
    return (log_line(run, "WALL") or "nan").split()[0]


def command(run: Path) -> str:
    """The command the run script logged (recipes/run_ulmfit.sh writes one), else the recipe of the run's name."""
    return (log_line(run, "COMMAND") or f"textnn train recipes/{run.name}.yaml").strip()


def lm_row(run: Path) -> str:
    """A language-model row: dev and test perplexity (or dev loss in nats/char for character models)."""
    status = json.loads((run / "run.json").read_text())
    dev, test = status["dev"], status.get("test") or {}
    if status["metric"] == "bpc":
        ours = f"dev loss {dev['loss']:.3f} nats/char ({dev['bpc']:.3f} bpc, {dev['tokens']:,} chars)"
    else:
        ours = f"dev ppl {dev['perplexity']:.1f}" + (f", test ppl {test['perplexity']:.1f} ({test['tokens']:,} test "
                                                     f"tokens)" if test else f" ({dev['tokens']:,} dev tokens)")
    published = "no comparable published number"
    if run.name in PUBLISHED_LM:
        what, number, source = PUBLISHED_LM[run.name]
        published = f"{number} ({what}; {source})"
    return (f"| {run.name} | {ours} | {published} | `{command(run)}` | "
            f"{float(wall_seconds(run)):.0f} s ({status['train_seconds']:.0f} s training) | {status['steps']} |")


def main(root: str) -> None:
    runs = sorted(p.parent for p in Path(root).glob("*/run.json")
                  if json.loads(p.read_text())["status"] == "finished")
    lm_runs = [r for r in runs if json.loads((r / "run.json").read_text())["metric"] in ("perplexity", "bpc")]
    runs = [r for r in runs if r not in lm_runs]
    print(f"hardware: {platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads, "
          f"torch {torch.__version__}")
    print("| recipe | ours (dev, 95% CI) | published | command | wall time | steps |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(row(run))
    if lm_runs:
        print()
        print("| recipe | ours | published | command | wall time | steps |")
        print("|---|---|---|---|---|---|")
        for run in lm_runs:
            print(lm_row(run))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/recipes")
