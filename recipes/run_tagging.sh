#!/usr/bin/env bash
# Every CoNLL-2003 NER recipe (train eng.train, dev eng.testa), then the docs/RESULTS.md table.
#   usage: bash recipes/run_tagging.sh [OUT_DIR]      (default runs/recipes_tagging)
exec bash "$(dirname "$0")/run_recipes.sh" "${1:-runs/recipes_tagging}" \
  conll_window_cnn conll_window_cnn_crf conll_bilstm_softmax_rand conll_bilstm_softmax_glove \
  conll_bilstm_crf_glove conll_bilstm_crf_glove_charcnn conll_bilstm_crf_glove_charlstm
