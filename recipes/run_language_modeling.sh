#!/usr/bin/env bash
# Every language-modelling recipe (Tiny Shakespeare char GPT; WikiText-2 NPLM, LSTM, AWD-LSTM, GPT,
# Transformer-XL), then the docs/RESULTS.md table.
#   usage: bash recipes/run_language_modeling.sh [OUT_DIR]      (default runs/recipes_lm)
exec bash "$(dirname "$0")/run_recipes.sh" "${1:-runs/recipes_lm}" \
  tinyshakespeare_gpt wikitext2_lstm wikitext2_gpt wikitext2_transformer_xl wikitext2_awd_lstm wikitext2_nplm
