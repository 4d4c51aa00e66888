#!/usr/bin/env bash
# Train every classification recipe on the real data, one after another (never in parallel: two
# trainings on the same few cores slow each other down many times over), then print the
# docs/RESULTS.md table from the run directories.
#   usage: bash recipes/run_classification.sh [OUT_DIR]      (default runs/recipes)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/recipes}
mkdir -p "$out"
recipes=(sst2_bow sst2_cbow sst2_deep_cbow sst2_cnn_rand sst2_cnn_static sst2_dan sst2_cnn_nonstatic
         sst2_cnn_multichannel sst2_bilstm mrpc_bilstm)
for recipe in "${recipes[@]}"; do
  start=$(date +%s.%N)
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$recipe" train.progress=false > "$out/$recipe.log" 2>&1
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$recipe.log"
done
python recipes/results_table.py "$out"
