#!/usr/bin/env bash
# Every text-classification recipe (SST-2, MRPC), then the docs/RESULTS.md table.
#   usage: bash recipes/run_classification.sh [OUT_DIR]      (default runs/recipes)
exec bash "$(dirname "$0")/run_recipes.sh" "${1:-runs/recipes}" \
  sst2_bow sst2_cbow sst2_deep_cbow sst2_cnn_rand sst2_cnn_static sst2_dan sst2_cnn_nonstatic \
  sst2_cnn_multichannel sst2_bilstm mrpc_bilstm
