#!/usr/bin/env bash
# The GPU checks in one go, from the repository root on a machine with a CUDA GPU:
#   1. the CUDA paths (tests/e2e/test_cuda.py) and the precision tests;
#   2. the model-level benchmarks on the GPU: BERT-base against BertModel and GPT-2 small against
#      GPT2LMHeadModel, bf16 autocast on both sides, then float32 on both sides;
#   3. the whole test suite with the GPU visible (runs whose config says train.device=auto train on it),
#      cut off after SUITE_SECONDS (default 240).
# Every log goes to OUT_DIR (first argument, default gpu-logs/); the exit status is that of step 1.
#
#   bash benchmarks/on_gpu.sh gpu-logs
set -u
out=${1:-gpu-logs}
suite_seconds=${SUITE_SECONDS:-240}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c \
  "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'bf16', torch.cuda.is_bf16_supported())"; } \
  2>&1 | tee "$out/machine.txt"

python3 -m pytest -p no:xdist -q -rA tests/e2e/test_cuda.py tests/unit/test_precision.py 2>&1 | tee "$out/cuda_tests.txt"
status=${PIPESTATUS[0]}

{
  python3 benchmarks/bert_vs_hf.py --preset base --device cuda --threads 4 --batch-size 64 --batches 20
  python3 benchmarks/gpt_vs_hf.py --preset gpt2 --device cuda --threads 4 --precision bf16 --batch-size 16 \
      --context 512 --batches 10
  python3 benchmarks/gpt_vs_hf.py --preset gpt2 --device cuda --threads 4 --precision fp32 --batch-size 16 \
      --context 512 --batches 10
} 2>&1 | tee "$out/benchmarks.txt"

# -o addopts= -v: one line per test with its name as it ends, so a log cut off by the timeout still
# names each failure (the summary at the end would be lost with it).
timeout "$suite_seconds" python3 -m pytest -n 12 --dist loadfile -o addopts= -v --tb=short -p no:benchmark tests \
  --ignore=tests/e2e/test_cuda.py > "$out/suite.txt" 2>&1
echo "suite exit status: $? (124: cut off after ${suite_seconds}s)" | tee -a "$out/suite.txt"
grep -E "(FAILED|ERROR) tests/" "$out/suite.txt" | sort -u | tail -n 40
exit "$status"
