#!/usr/bin/env bash
# Score finished translation runs on the Multi30k val set twice, greedy and with beam search (5 live
# hypotheses, GNMT length penalty 0.6), into OUT_DIR/<recipe>.greedy.json and OUT_DIR/<recipe>.beam5.json
# (sacreBLEU BLEU and chrF of the detokenised output against the raw references, with signatures);
# results_table.py puts both in the translation rows of docs/RESULTS.md.
#   usage: bash recipes/evaluate_translation.sh OUT_DIR RECIPE [RECIPE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
val=../shared/data/multi30k/val
for recipe in "$@"; do
  textnn evaluate "$out/$recipe" --data "$val" --json > "$out/$recipe.greedy.json"
  textnn evaluate "$out/$recipe" --data "$val" --beam 5 --json > "$out/$recipe.beam5.json"
done
