#!/usr/bin/env bash
# GPU check: the `large` config (1.3B-shaped DiT, 480x832) for 200 N chunks on one CUDA
# device; prints fps, first-frame time and peak GPU memory after 10 and 200 chunks; then
# concurrent sessions through one worker (tiny at 1-64, large at 1-4), batched and not.
# Finishes well inside 8 minutes on an H100/H200-class GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ ! -x "$PY" ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q torch numpy transformers safetensors av tqdm
    .venv/bin/pip install -q --no-deps -e .
fi
"$PY" - <<'PY'
import torch
if not torch.cuda.is_available():
    raise SystemExit("bench/gpu.sh: no CUDA device")
print(torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
"$PY" -m engine.cli bench --config large --device cuda --chunks 200 --checkpoints 10,200 \
    --json "${OUT:-/tmp}/gpu-large.json"
"$PY" -m engine.cli bench --config large --device cuda --chunks 30 --checkpoints 10,30 --no-interp \
    --json "${OUT:-/tmp}/gpu-large-nointerp.json"
"$PY" -m engine.cli bench --config tiny --device cuda --chunks 200 --checkpoints 10,200 \
    --json "${OUT:-/tmp}/gpu-tiny.json"
# Many sessions through one worker's scheduler, batched and not: sessions per GPU at real time.
"$PY" -m engine.cli bench --config tiny --device cuda --sessions 1,4,16,64 --seconds 8 \
    --json "${OUT:-/tmp}/gpu-tiny-sessions.json"
"$PY" -m engine.cli bench --config tiny --device cuda --sessions 1,4,16 --seconds 8 --no-batch \
    --json "${OUT:-/tmp}/gpu-tiny-sessions-nobatch.json"
"$PY" -m engine.cli bench --config large --device cuda --sessions 1,4 --seconds 4 \
    --json "${OUT:-/tmp}/gpu-large-sessions.json"
