#!/usr/bin/env bash
# ELMo: the biLM on WikiText-2, then the CoNLL-2003 BiLSTM-CRF and the SST-2 BiLSTM with its frozen
# features (each reads the biLM trained here), then the docs/RESULTS.md rows. Compare with the same
# models without ELMo: recipes/run_tagging.sh (conll_bilstm_crf_glove), recipes/run_classification.sh
# (sst2_bilstm). Logs end in a `WALL <seconds>` line, as recipes/run_recipes.sh writes them.
#   usage: bash recipes/run_elmo.sh [OUT_DIR]      (default runs/recipes_elmo)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/recipes_elmo}
mkdir -p "$out"
train() {
  local recipe=$1
  shift
  local start
  start=$(date +%s.%N)
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$recipe" train.progress=false "$@" > "$out/$recipe.log" 2>&1
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$recipe.log"
}
train wikitext2_elmo
train conll_bilstm_crf_glove_elmo "data.features_from=$out/wikitext2_elmo"
train sst2_bilstm_elmo "data.features_from=$out/wikitext2_elmo"
python recipes/results_table.py "$out"
