#!/usr/bin/env bash
# Train every CoNLL-2003 NER recipe on the real data, one after another (never in parallel: two
# trainings on the same few cores slow each other down many times over), then print a results table
# (dev span F1 with its bootstrap 95% CI, wall time, steps) from the run directories.
#   usage: bash recipes/run_tagging.sh [OUT_DIR]      (default runs/recipes_tagging)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/recipes_tagging}
mkdir -p "$out"
recipes=(conll_window_cnn conll_window_cnn_crf conll_bilstm_softmax_rand conll_bilstm_softmax_glove
         conll_bilstm_crf_glove conll_bilstm_crf_glove_charcnn conll_bilstm_crf_glove_charlstm)
for recipe in "${recipes[@]}"; do
  start=$(date +%s.%N)
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$recipe" train.progress=false > "$out/$recipe.log" 2>&1
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$recipe.log"
done
python recipes/results_table.py "$out"
