#!/usr/bin/env bash
# The pre-training behind the transfer results of docs/RESULTS.md ("Pre-training on a GPU"), in one call:
#   (a) the ULMFiT language model, an AWD-LSTM on WikiText-2 (recipes/wikitext2_ulmfit_lm.yaml, batch 80 x
#       bptt 70), beside BERT-Mini's masked LM on WikiText-2 (recipes/wikitext2_bert_mini_pretrain.yaml,
#       batch 128, lr 1e-3), the two sharing the GPU;
#   (b) each trained further on SST-2's training sentences, side by side again: ULMFiT's stage (b)
#       (recipes/sst2_ulmfit_lm.yaml) from the first, BERT-Mini's task-adaptive MLM (batch 128, lr 3e-4)
#       from the second. Both read the text recipes/tsv_to_text.py writes: SST-2's training rows less
#       1,000 held-out sentences and the phrases inside them; those sentences are both runs' dev set, so
#       SST-2's own dev set stays unread.
# Into OUT: the four run directories (wikitext2_ulmfit_lm, wikitext2_bert_mini_pretrain, sst2_ulmfit_lm,
# sst2_bert_mini_tapt), sst2_text/, logs/ (one log a stage), stages.tsv, and OUT/manifest.json
# (recipes/gpu/manifest.py): every file's sha256 and size, each run's dev metrics, each stage's command and
# seconds, the machine, torch, the code's commit and the data's sha256. Check a copy of OUT with
#   python recipes/gpu/manifest.py --verify OUT
# The classifiers then start from the (b) runs: ULMFIT_LM=OUT/sst2_ulmfit_lm BERT_RUN=OUT/sst2_bert_mini_tapt
# bash recipes/run_transfer_curves.sh.
#
# On a GPU (the default; it stops at once if torch sees no CUDA device): each run is sized to a time
# budget. A probe of each model trains for PROBE_SECONDS (default 45) beside the model that will share the
# GPU with it, after a one-step run of each that tokenizes and caches the data (so both probes start
# together), and makes a dev evaluation every few hundred steps; recipes/gpu/sizing.py reads the speed of
# training alone over the probe's last third and the seconds one evaluation takes, and the run gets the
# steps that, with its evaluations, fill 90% of its budget, so its learning-rate schedule ends in time,
# with train.max_minutes at 110% as a stop. Budgets: A_SECONDS (default 200) for each (a) run, B_SECONDS
# (60) for each (b) run. Both models in bf16 autocast (train.precision=auto), as the earlier H100 run;
# LSTM_PRECISION=fp32 pins the language models to float32. THREADS (default 4) CPU threads a run.
# Planned time on one H100: about 8 minutes (200 + 60 s of training, two rounds of 45-second probes and
# their last evaluations, the first tokenization, start-ups), inside one 10-minute call. Its first run on
# an H100 (docs/RESULTS.md, "Pre-training in one call") took 7.4 minutes with 20-second probes that did
# not evaluate; its sizing was too short for BERT-Mini and too long for the AWD-LSTM, which is what the
# probes' length and evaluations now measure. DEVICE=cpu runs this time-sized path on the CPU instead, as
# a check of every stage on the real data (there with larger budgets and one thread: A_SECONDS=120
# B_SECONDS=60 PROBE_SECONDS=100 THREADS=1; at a CPU's speed the probes reach no evaluation, and sizing.py
# says that it counts them as free).
#
# --cpu: the CPU path. No probes: each run trains the steps of the earlier H100 run (docs/RESULTS.md):
# 19,051 (AWD-LSTM, its schedule spanning them), 6,194 (BERT-Mini), 1,087 (stage (b), as many as the
# CPU run of stage (b) there) and 1,920 (task-adaptive MLM), each with its schedule and evaluations at
# the same fractions. BERT-Mini in bf16 where the CPU multiplies bf16 natively (train.precision=auto);
# the AWD-LSTM pinned to float32 (LSTM_PRECISION, default fp32 here), where it is measurably better
# (docs/RESULTS.md, "Machines and precision"). THREADS (default 1) a run, two runs at a time.
# Expected time on a 2-core AMD EPYC with AVX512-BF16 and nothing else running: about 34 hours, most of
# it the AWD-LSTM's 19,051 steps of 6.0 CPU seconds each. That is an extrapolation from 16 steps of each
# run and one evaluation (docs/RESULTS.md, "Pre-training in one call", has the commands). STAGE_MINUTES=N
# stops each run after N minutes of training.
#
# --smoke: every stage of the GPU path (probes and sizing included, the one-step runs before the probes
# left out) on the CPU, on the first lines of each data file (copied into OUT/smoke_data) with tiny
# batches and 2-3 steps a run: a check of the whole script and its manifest, about 45 seconds of CPU
# (tests/e2e/test_gpu_pretrain.py).
#
#   usage: bash recipes/gpu/pretrain.sh [--cpu | --smoke] OUT [section.key=value ...]
#   (the overrides go to every textnn run, the probes' too, after the script's own: train.seed=2, say)
#   environment: PYTHON (default python3), DATA (default ../shared/data, from the repository root),
#                THREADS, LSTM_PRECISION, A_SECONDS, B_SECONDS, PROBE_SECONDS, DEVICE (GPU), STAGE_MINUTES (CPU)
set -euo pipefail
usage="usage: bash recipes/gpu/pretrain.sh [--cpu | --smoke] OUT [section.key=value ...]"
now_ms() { date +%s%3N; }
script_started=$(now_ms)
seconds_since() { local ms=$(($(now_ms) - $1)); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
fail() { echo "pretrain.sh: $*" >&2; exit 2; }

mode=gpu
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  --cpu) mode=cpu; shift ;;
  --smoke) mode=smoke; shift ;;
  -*) fail "unknown option '$1'; $usage" ;;
esac
[[ $# -ge 1 && $1 != *=* ]] || fail "give one OUT folder; $usage"
for override in "${@:2}"; do
  [[ $override == *=* ]] || fail "'$override' is not a section.key=value override; $usage"
done
extra=("${@:2}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m --relative-base="$repo" "$1")  # relative to the repository root where it lies inside it
data=$(realpath -m --relative-base="$repo" "${DATA:-$repo/../shared/data}")
cd "$repo"
python=${PYTHON:-python3}

[[ -e $out && -n $(ls -A "$out") ]] && fail "$out exists and is not empty; give a new folder"
for file in wikitext2/train.txt wikitext2/valid.txt sst2/train.tsv; do
  [[ -f $data/$file ]] || fail "no data file $data/$file (set DATA to the folder holding wikitext2/ and sst2/)"
done
"$python" -c "import textnn.cli" || fail "$python cannot import textnn and its dependencies (set PYTHON)"
device=cpu
[[ $mode == gpu ]] && device=${DEVICE:-cuda}
if [[ $device == cuda* ]]; then
  "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || fail "torch sees no CUDA device here ($("$python" -c "import torch; print('torch', torch.__version__)")); \
run on a machine with a GPU, or take the CPU path: bash recipes/gpu/pretrain.sh --cpu OUT (about 34 hours \
of a 2-core CPU)"
fi

case $mode in
  gpu) threads=${THREADS:-4} lstm_precision=${LSTM_PRECISION:-auto} heldout=1000 ;;
  cpu) threads=${THREADS:-1} lstm_precision=${LSTM_PRECISION:-fp32} heldout=1000 ;;
  smoke) threads=1 lstm_precision=fp32 heldout=40 ;;
esac
minutes=0 a_seconds=${A_SECONDS:-200} b_seconds=${B_SECONDS:-60} probe_seconds=${PROBE_SECONDS:-45}
mkdir -p "$out/logs"
if [[ $mode == smoke ]]; then  # the first lines of each file: enough text for every stage to run
  mkdir -p "$out/smoke_data/wikitext2" "$out/smoke_data/sst2"
  head -n 300 "$data/wikitext2/train.txt" > "$out/smoke_data/wikitext2/train.txt"
  head -n 60 "$data/wikitext2/valid.txt" > "$out/smoke_data/wikitext2/valid.txt"
  head -n 801 "$data/sst2/train.tsv" > "$out/smoke_data/sst2/train.tsv"
  data=$out/smoke_data
fi

TIMEFORMAT='%3R %3U %3S'  # what bash's `time` prints: seconds of wall clock, of user CPU and of system CPU
record() {  # record NAME COMMAND...: run it into OUT/logs/NAME.log; its wall and CPU seconds, exit status and
            # command go to OUT/stages.tsv (one line a stage, read by manifest.py)
  local name=$1 status=0 timing quoted wall user system
  shift
  timing=$(mktemp)
  { time "$@" > "$out/logs/$name.log" 2>&1; } 2> "$timing" || status=$?
  read -r wall user system < "$timing"
  rm -f "$timing"
  printf -v quoted '%q ' "$@"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$wall" "$(awk -v u="$user" -v s="$system" 'BEGIN { printf "%.3f", u + s }')" \
    "$status" "${quoted% }" >> "$out/stages.tsv"
  return "$status"
}

common=(train.device="$device" train.threads="$threads" train.progress=false train.tensorboard=false)
lstm=(train.precision="$lstm_precision")
small_lstm=() small_bert=()
if [[ $mode == smoke ]]; then
  small_lstm=(train.batch_size=4 data.bptt=10)
  small_bert=(train.batch_size=4 data.max_length=32)
fi
text=$out/sst2_text
# each run: its recipe and the overrides that make it this run (data, batch, rate), before its schedule
lm_a=(wikitext2_ulmfit_lm data.train="$data/wikitext2/train.txt" data.dev="$data/wikitext2/valid.txt"
      train.batch_size=80 data.bptt=70 train.epochs=1000 "${lstm[@]}" "${small_lstm[@]}")
bert_a=(wikitext2_bert_mini_pretrain data.train="$data/wikitext2/train.txt" data.dev="$data/wikitext2/valid.txt"
        train.batch_size=128 train.lr=1e-3 train.epochs=1000 "${small_bert[@]}")
lm_b=(sst2_ulmfit_lm data.format=text data.train="$text/train.txt" data.dev="$text/dev.txt" train.epochs=1000
      "${lstm[@]}" "${small_lstm[@]}")
bert_b=(wikitext2_bert_mini_pretrain data.train="$text/train.txt" data.dev="$text/dev.txt" train.batch_size=128
        train.lr=3e-4 train.epochs=1000 "${small_bert[@]}")

train() {  # train NAME RUN_DIR RECIPE [section.key=value ...]
  local name=$1 run=$2 recipe=$3
  shift 3
  record "$name" "$python" -m textnn train "recipes/$recipe.yaml" --run-dir "$run" "${common[@]}" "$@" "${extra[@]}"
}

jobs_started=() names_started=()
start() {  # start NAME ...: `train NAME ...` in the background, beside the others started since the last `finish`
  train "$@" &
  jobs_started+=($!)
  names_started+=("$1")
}
finish() {  # wait for the runs `start` began; stop the script, with the end of each failed run's log, if any failed
  local i failed=0
  for i in "${!jobs_started[@]}"; do
    if ! wait "${jobs_started[$i]}"; then
      failed=1
      echo "pretrain.sh: ${names_started[$i]} failed; the end of $out/logs/${names_started[$i]}.log:" >&2
      tail -n 15 "$out/logs/${names_started[$i]}.log" >&2
    fi
  done
  jobs_started=() names_started=()
  ((failed == 0)) || exit 1
}

# each run's dev evaluations (BERT-Mini 8, the MLM on SST-2's text 6, stage (b) 4, at the fractions of the
# earlier H100 run; the AWD-LSTM 2, as it reads WikiText-2's dev set as one stream, 19 s an evaluation on an
# H100), and the steps between its probe's evaluations, which time one of them
declare -A evaluations=([lm_a]=2 [bert_a]=8 [lm_b]=4 [bert_b]=6)
declare -A probe_every=([lm_a]=400 [bert_a]=200 [lm_b]=400 [bert_b]=200)
schedule() {  # schedule KIND STEPS MINUTES: the overrides of a run's length, its warm-up (BERT-Mini: 1/16; the
              # AWD-LSTM's slanted triangular rise at the recipe's fraction) and its evaluations
  local kind=$1 steps=$2 minutes=$3
  local count=${evaluations[$kind]}
  schedule_overrides=(train.max_steps="$steps" train.eval_every=$((steps >= count ? steps / count : steps))
                      train.max_minutes="$minutes")
  [[ $kind == bert_* ]] && schedule_overrides+=(train.warmup_steps=$((steps / 16 > 0 ? steps / 16 : 1)))
  return 0
}

record sst2_text "$python" recipes/tsv_to_text.py "$data/sst2/train.tsv" "$text" --heldout "$heldout" --seed 0 \
  || { tail -n 5 "$out/logs/sst2_text.log" >&2; exit 1; }

if [[ $mode == cpu ]]; then
  minutes=${STAGE_MINUTES:-0}
  declare -A steps=([lm_a]=19051 [bert_a]=6194 [lm_b]=1087 [bert_b]=1920)
else
  # probes: a training record every step, and a dev evaluation every probe_every steps (sizing.py reads the
  # speed of training alone, and the seconds an evaluation takes)
  probes=$out/probes
  if [[ $mode == smoke ]]; then
    probe=(train.max_steps=4 train.log_every=1)
    probe_every=([lm_a]=2 [bert_a]=2 [lm_b]=2 [bert_b]=2)
    a_seconds=600 b_seconds=600 at_most=(--at-most 3)  # a few steps, whatever the evaluations cost
  else
    probe=(train.max_steps=0 train.max_minutes="$(awk -v s="$probe_seconds" 'BEGIN { print s / 60 }')"
           train.log_every=1)
    at_most=()
  fi
  if [[ $mode == gpu ]]; then  # tokenize and cache the data first, so that both probes start training together
    start prepare_lm_a "$probes/prepare_lm_a" "${lm_a[@]}" data.dev= train.max_steps=1
    start prepare_bert_a "$probes/prepare_bert_a" "${bert_a[@]}" data.dev= train.max_steps=1
    finish
  fi
  start probe_lm_a "$probes/lm_a" "${lm_a[@]}" "${probe[@]}" train.eval_every=${probe_every[lm_a]}
  start probe_bert_a "$probes/bert_a" "${bert_a[@]}" "${probe[@]}" train.eval_every=${probe_every[bert_a]}
  finish
  start probe_lm_b "$probes/lm_b" "${lm_b[@]}" model.init_from="$probes/lm_a" "${probe[@]}" \
    train.eval_every=${probe_every[lm_b]}
  start probe_bert_b "$probes/bert_b" "${bert_b[@]}" model.init_from="$probes/bert_a" "${probe[@]}" \
    train.eval_every=${probe_every[bert_b]}
  finish
  declare -A steps
  for kind in lm_a bert_a lm_b bert_b; do
    budget=$a_seconds
    [[ $kind == *_b ]] && budget=$b_seconds
    # the run evaluates at every eval_every steps and once more at its end
    steps[$kind]=$("$python" recipes/gpu/sizing.py "$probes/$kind" $((budget * 9 / 10)) --stage "$kind" \
                   --evaluations $((evaluations[$kind] + 1)) --record "$out/sizing.jsonl" "${at_most[@]}")
  done
  if [[ $mode == gpu ]]; then
    minutes_a=$(awk -v s="$a_seconds" 'BEGIN { printf "%.2f", s * 1.1 / 60 }')
    minutes_b=$(awk -v s="$b_seconds" 'BEGIN { printf "%.2f", s * 1.1 / 60 }')
  fi
  rm -rf "$probes"  # their speeds are in sizing.jsonl, their output in logs/
fi

run_a() {  # the (a) runs, side by side
  schedule lm_a "${steps[lm_a]}" "${minutes_a:-$minutes}"
  start wikitext2_ulmfit_lm "$out/wikitext2_ulmfit_lm" "${lm_a[@]}" "${schedule_overrides[@]}"
  schedule bert_a "${steps[bert_a]}" "${minutes_a:-$minutes}"
  start wikitext2_bert_mini_pretrain "$out/wikitext2_bert_mini_pretrain" "${bert_a[@]}" "${schedule_overrides[@]}"
  finish
}
run_b() {  # the (b) runs, side by side, each from its (a) run
  schedule lm_b "${steps[lm_b]}" "${minutes_b:-$minutes}"
  start sst2_ulmfit_lm "$out/sst2_ulmfit_lm" "${lm_b[@]}" model.init_from="$out/wikitext2_ulmfit_lm" \
    "${schedule_overrides[@]}"
  schedule bert_b "${steps[bert_b]}" "${minutes_b:-$minutes}"
  start sst2_bert_mini_tapt "$out/sst2_bert_mini_tapt" "${bert_b[@]}" \
    model.init_from="$out/wikitext2_bert_mini_pretrain" "${schedule_overrides[@]}"
  finish
}
run_a
run_b

"$python" recipes/gpu/manifest.py "$out" --mode "$mode" --seconds "$(seconds_since "$script_started")" --data "$data"
echo "check a copy of it with: python recipes/gpu/manifest.py --verify $out"
