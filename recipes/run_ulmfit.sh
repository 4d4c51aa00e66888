#!/usr/bin/env bash
# ULMFiT (Howard & Ruder 2018) for one task, its three stages in order, each starting from the last:
#   (a) recipes/wikitext2_ulmfit_lm.yaml  the general AWD-LSTM language model on WikiText-2 (~20 min);
#       trained once per OUT_DIR: a finished one there is reused (the other task's run made it)
#   (b) recipes/TASK_ulmfit_lm.yaml       that language model fine-tuned on the task's sentences (~5 min)
#   (c) recipes/TASK_ulmfit.yaml          the classifier on the fine-tuned encoder (~10 min)
# --variants also trains the docs/RESULTS.md comparisons (~10 min each), with the commands the stage (c)
# recipe documents: TASK_ulmfit_no_unfreezing ((a)+(b), gradual unfreezing off), TASK_ulmfit_a_only
# (from stage (a), no stage (b); it adds the task's words to the vocabulary, as stage (b) does) and
# TASK_ulmfit_scratch (a random AWD-LSTM). Then the table rows
# (recipes/results_table.py). Each run's log (OUT_DIR/<run>.log) starts with its command and ends in
# a `WALL <seconds>` line. Further section.key=value arguments go to every run (train.max_steps=5
# for a quick check of the whole chain; use another OUT_DIR for it, since stage (a) is reused).
# --dry-run prints the commands, one a line, and runs none (nor makes OUT_DIR).
#   usage: bash recipes/run_ulmfit.sh sst2|cola [OUT_DIR] [--variants] [--dry-run] [section.key=value ...]
#          (default OUT_DIR runs/ulmfit)
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash recipes/run_ulmfit.sh sst2|cola [OUT_DIR] [--variants] [--dry-run] [section.key=value ...]"
task=${1:-}
case $task in
  sst2 | cola) shift ;;
  *) echo "run_ulmfit.sh: the first argument names the task, sst2 or cola (got '$task'); $usage" >&2; exit 2 ;;
esac
out=runs/ulmfit
if [[ $# -gt 0 && $1 != --* && $1 != *=* ]]; then
  out=$1
  shift
fi
variants=false
dry_run=false
while [[ $# -gt 0 && ($1 == --variants || $1 == --dry-run) ]]; do
  [[ $1 == --variants ]] && variants=true
  [[ $1 == --dry-run ]] && dry_run=true
  shift
done
for override in "$@"; do
  [[ $override == *=* ]] || { echo "run_ulmfit.sh: '$override' is not a section.key=value override; $usage" >&2; exit 2; }
done
$dry_run || mkdir -p "$out"

train() {  # train RECIPE RUN [section.key=value ...]: one run into OUT_DIR/RUN, logged in OUT_DIR/RUN.log
  local recipe=$1 run=$2
  shift 2
  if $dry_run; then
    printf '%q ' textnn train "recipes/$recipe.yaml" --run-dir "$out/$run" train.progress=false "$@"
    echo
    return
  fi
  local start
  start=$(date +%s.%N)
  echo "COMMAND textnn train recipes/$recipe.yaml $*" > "$out/$run.log"
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$run" train.progress=false "$@" >> "$out/$run.log" 2>&1
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$run.log"
}

general=$out/wikitext2_ulmfit_lm
if grep -qs '"status": "finished"' "$general/run.json"; then
  echo "stage (a): reusing the finished $general" >&2
else
  train wikitext2_ulmfit_lm wikitext2_ulmfit_lm "$@"
fi
train "${task}_ulmfit_lm" "${task}_ulmfit_lm" "model.init_from=$general" "$@"
train "${task}_ulmfit" "${task}_ulmfit" "model.init_from=$out/${task}_ulmfit_lm" "$@"
if $variants; then
  train "${task}_ulmfit" "${task}_ulmfit_no_unfreezing" "model.init_from=$out/${task}_ulmfit_lm" train.unfreeze=0 "$@"
  train "${task}_ulmfit" "${task}_ulmfit_a_only" "model.init_from=$general" data.extend_vocab=2 "$@"
  train "${task}_ulmfit" "${task}_ulmfit_scratch" model.init_from= model.name=awd_lstm model.preset=cpu \
    data.tokenizer=word data.lowercase=true train.unfreeze=0 train.layer_lr_decay=1 "$@"
fi
if $dry_run; then
  printf '%q ' python recipes/results_table.py "$out"
  echo
else
  python recipes/results_table.py "$out"
fi
