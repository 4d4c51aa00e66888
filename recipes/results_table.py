"""Print the result rows of docs/RESULTS.md (classification, tagging, language modelling, translation) from finished runs.

Every number comes from a run's own files: the dev metric and its bootstrap 95% CI from run.json,
the wall time (process start to finish, data loading included) from the `WALL` line that
run_recipes.sh (and the other run_*.sh) append to `<run>.log`, and the command from its `COMMAND`
line where the script wrote one (run_ulmfit.sh), else `textnn train recipes/<run>.yaml`; translation
scores from the `<run>.greedy.json` and `<run>.beam5.json` that evaluate_translation.sh writes. Only
the published numbers are written here, each with its source.
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
    "wikitext2_awd_lstm": ("AWD-LSTM, WikiText-2 test perplexity (750 epochs, GPU)", 65.8,
                           "Merity et al. 2018, Table 2"),
    "tinyshakespeare_gpt": ("nanoGPT CPU config (4x128, context 64), val loss after ~3 min on a laptop CPU",
                            1.88, "nanoGPT README"),
}

# Translation: bentrevett's pytorch-seq2seq tutorials, German->English Multi30k, BLEU of tokenised,
# lower-cased output on the 2016 test set (not the scale of sacreBLEU's detokenised, cased val BLEU here).
PUBLISHED_MT = {
    "multi30k_seq2seq": ("GRU encoder-decoder without attention (Cho et al. 2014), test BLEU", 20.6,
                         "bentrevett/pytorch-seq2seq tutorial 2"),
    "multi30k_attention_gru": ("attention GRU (Bahdanau et al. 2015), test BLEU", 28.3,
                               "bentrevett/pytorch-seq2seq tutorial 3"),
    "multi30k_transformer": ("Transformer 3x256, test BLEU", 36.5, "bentrevett/pytorch-seq2seq tutorial 6"),
}


def row(run: Path) -> str:
    status = json.loads((run / "run.json").read_text())
    metric = status["metric"]
    dev = status["dev"]
    value = 100 * dev[metric]
    ci = f"[{100 * dev[metric + '_ci_low']:.1f}, {100 * dev[metric + '_ci_high']:.1f}]" \
        if metric + "_ci_low" in dev else "(no CI: train.bootstrap_samples 0)"
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
    lines = log.read_text().splitlines() if log.is_file() else []
    return next((line[len(key) + 1:] for line in lines if line.startswith(key + " ")), None)


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


def mt_row(run: Path) -> str:
    """A translation row: val BLEU and chrF of greedy and beam-5 output (from evaluate_translation.sh)."""
    status = json.loads((run / "run.json").read_text())
    scores = []
    for name, label in (("greedy", "greedy"), ("beam5", "beam 5")):
        path = run.with_name(f"{run.name}.{name}.json")
        if path.is_file():
            result = json.loads(path.read_text())
            scores.append(f"{label}: BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}")
        else:
            scores.append(f"{label}: not scored (run evaluate_translation.sh)")
    what, number, source = PUBLISHED_MT.get(run.name, ("", None, ""))
    published = f"{number} ({what}; {source})" if number is not None else "no comparable published number"
    return (f"| {run.name} | {'; '.join(scores)} | {published} | `{command(run)}` | "
            f"{float(wall_seconds(run)):.0f} s ({status['train_seconds']:.0f} s training) | {status['steps']} |")


def metric(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["metric"]


def main(root: str) -> None:
    runs = sorted(p.parent for p in Path(root).glob("*/run.json")
                  if json.loads(p.read_text())["status"] == "finished")
    lm_runs = [r for r in runs if metric(r) in ("perplexity", "bpc")]
    mt_runs = [r for r in runs if metric(r) in ("bleu", "chrf")]
    other_runs = [r for r in runs if r not in lm_runs and r not in mt_runs]
    print(f"hardware: {platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads, "
          f"torch {torch.__version__}")
    tables = (("ours (dev, 95% CI)", other_runs, row), ("ours", lm_runs, lm_row),
              ("ours (Multi30k val, sacreBLEU)", mt_runs, mt_row))
    for ours, table_runs, make_row in tables:
        if table_runs:
            print(f"\n| recipe | {ours} | published | command | wall time | steps |")
            print("|---|---|---|---|---|---|")
            for run in table_runs:
                print(make_row(run))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/recipes")
