#!/usr/bin/env bash
# Train the named recipes on the real data, one after another, each into OUT_DIR/<recipe> with its
# log in OUT_DIR/<recipe>.log (ending in a `WALL <seconds>` line: the whole process, data loading and
# final evaluation included), then print the docs/RESULTS.md rows with results_table.py.
# One at a time on purpose: two trainings that each use every core slow each other down many times
# over (the recipes of the tagging and language-modelling tasks use one thread, train.threads: 1).
#   usage: bash recipes/run_recipes.sh OUT_DIR RECIPE [RECIPE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
mkdir -p "$out"
for recipe in "$@"; do
  start=$(date +%s.%N)
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$recipe" train.progress=false > "$out/$recipe.log" 2>&1
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$recipe.log"
done
python recipes/results_table.py "$out"
