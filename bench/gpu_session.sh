#!/usr/bin/env bash
# The GPU speed checks as one prepared command, for a session lent an H200: the device
# tool's `run` with command `bash bench/gpu_session.sh` and timeout_s 590 (one 10-minute call).
#
# 1. the environment (nvidia-smi, torch and transformers versions);
# 2. the CUDA tests (bf16, pinned copies, CUDA graphs) and the compile-equals-eager test;
# 3. bench/gpu_train.py --matrix --profile: every train.speed setting on BERT-S, batch 256,
#    8 views, with step time, GPU busy share, host syncs and the projected 200-epoch arm
#    (checkpoints included); the padding-free (packed) path comes first, eager, compiled and
#    with CUDA graphs, then the padded ones it is compared with.
# Writes $OUT/{env.txt,cuda_tests.txt,gpu_matrix.txt,gpu_matrix.json}. It runs under the
# machine's own python3 (its torch and transformers, not our pins), so prh comes from
# PYTHONPATH. Extra arguments go to gpu_train.py (a CPU smoke run: --preset tiny --batch 8
# --steps 2 --warmup 1 --device cpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{ nvidia-smi; "$PY" -c "import sys, torch, transformers; print(sys.version); \
print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
    > "$OUT/env.txt" 2>&1
# -o addopts=: the machine's python has no pytest-xdist for pyproject's `-n 2`, and the
# compile test is marked slow, which the addopts' `-m 'not slow'` would leave out
timeout 150 "$PY" -m pytest -q -o addopts= -p no:cacheprovider tests/test_train.py \
    -k "cuda or compiled" > "$OUT/cuda_tests.txt" 2>&1
echo "cuda tests: exit $?" | tee -a "$OUT/cuda_tests.txt"
timeout 420 "$PY" bench/gpu_train.py --matrix --profile --budget-s "${BUDGET_S:-300}" \
    --out "$OUT/gpu_matrix.json" "$@" 2>&1 | tee "$OUT/gpu_matrix.txt"
echo "results in $OUT"
