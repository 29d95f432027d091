#!/usr/bin/env bash
# GPU benchmark: every engine mode the CUDA devices of this machine allow, in at most 8 minutes,
# printed as one table at the end (JSON and logs of every run under $OUT/gpu-bench).
# One GPU: `large` (1.3B-shaped DiT, 480x832) as it is, with the GPU hygiene (latents kept on the
# device, fused attention only, torch.compile, CUDA graphs), with pinned offload and block prefetch
# (model-switch times), `tiny`, and concurrent sessions through one worker (batched and not).
# Then the node as served: N web processes (one per four cores) behind one front, sharing one
# `tiny` worker on the GPU, with aiortc sessions from this machine (bench/web_side.py).
# Two or more GPUs, also (before compile and sessions): sequence parallelism, pipeline stages,
# FSDP2 sharding (`large`, and the 14B-shaped `xl`), SR and the decoder on a second device. Each
# run gets at most its own cap and what is left of the budget; one that runs out is reported as
# such, the rest still run.
# Without a CUDA device it says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp}/gpu-bench
BUDGET_S=${BUDGET_S:-450}  # for the runs; setup and the table fit in what is left of 8 minutes
if [ ! -x "$PY" ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q torch numpy transformers safetensors av tqdm pillow
    .venv/bin/pip install -q --no-deps -e .
fi
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "${GPUS:-0}" -eq 0 ]; then
    echo "bench/gpu.sh: no CUDA device on this machine: nothing measured"
    exit 0
fi
"$PY" -c "import torch; print(torch.cuda.get_device_name(0), 'x', torch.cuda.device_count(), 'torch', torch.__version__)"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.status "$OUT"/*.log
START=$SECONDS
RUNS=()

run() {  # NAME CAP_S BENCH_ARGS...: `avatar bench BENCH_ARGS --json $OUT/NAME.json` within CAP_S and the budget
    local name=$1 cap=$2
    shift 2
    timed "$name" "$cap" "$PY" -m engine.cli bench "$@" --json "$OUT/$name.json"
}

run_web() {  # NAME CAP_S WEB_SIDE_ARGS...: `bench/web_side.py WEB_SIDE_ARGS --json $OUT/NAME.json`
    local name=$1 cap=$2
    shift 2
    timed "$name" "$cap" "$PY" bench/web_side.py "$@" --json "$OUT/$name.json"
}

timed() {  # NAME CAP_S COMMAND...: the command within CAP_S and what is left of the budget
    local name=$1 cap=$2
    shift 2
    RUNS+=("$name")
    local left=$((BUDGET_S - (SECONDS - START)))
    if [ "$left" -lt 20 ]; then
        echo "skipped: out of time" > "$OUT/$name.status"
        return
    fi
    [ "$cap" -gt "$left" ] && cap=$left
    echo "== $name (at most ${cap} s): $*" >&2
    timeout --kill-after=10 "$cap" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    case $rc in
        0) echo ok ;;
        124 | 137) echo "timed out after ${cap} s" ;;
        *) echo "failed ($rc): $(tail -n 1 "$OUT/$name.log")" ;;
    esac > "$OUT/$name.status"
}

LARGE=(--config large --device cuda)
run large 60 "${LARGE[@]}" --chunks 40 --checkpoints 10,40
run large-resident-fused 40 "${LARGE[@]}" --chunks 30 --hygiene resident,fused
run large-offload 40 "${LARGE[@]}" --chunks 8 --offload
if [ "$GPUS" -ge 2 ]; then
    N=2
    for n in 4 8; do [ "$GPUS" -ge "$n" ] && N=$n; done
    SP=$N; [ "$SP" -eq 8 ] && SP=4  # large's 12 heads split over 2 or 4 ranks
    run large-sequence-parallel 50 "${LARGE[@]}" --chunks 20 --sequence-parallel "$SP"
    run large-pipeline-parallel 50 "${LARGE[@]}" --chunks 20 --pipeline-parallel "$N"
    run large-shard 50 "${LARGE[@]}" --chunks 20 --shard "$N"
    run large-decoder-device 40 "${LARGE[@]}" --chunks 20 --decoder-device cuda:1
    run xl-shard 90 --config xl --device cuda --chunks 4 --shard "$N"
fi
run large-compile 70 "${LARGE[@]}" --chunks 30 --hygiene resident,fused,compile
run large-graphs 70 "${LARGE[@]}" --chunks 30 --hygiene all
run tiny 30 --config tiny --device cuda --chunks 200 --checkpoints 10,200
run tiny-sessions 40 --config tiny --device cuda --sessions 1,4,16,64 --seconds 6
run tiny-sessions-nobatch 25 --config tiny --device cuda --sessions 1,4,16 --seconds 4 --no-batch
run large-sessions 30 "${LARGE[@]}" --sessions 1,4 --seconds 3
WEB=$(( $(nproc) / 4 )); [ "$WEB" -lt 1 ] && WEB=1
run_web tiny-node 60 --config tiny --device cuda --threads 1 --web-processes "$WEB" --sessions 8,16 --warmup 5 \
    --window 8

OUT="$OUT" "$PY" - "${RUNS[@]}" <<'PY'
import json, os, sys
from pathlib import Path

out = Path(os.environ["OUT"])
rows = [("run", "ranks", "fps", "first frame s", "max |diff|", "peak GiB", "switch ms", "status")]
for name in sys.argv[1:]:
    status = (out / f"{name}.status").read_text().strip() if (out / f"{name}.status").exists() else "not run"
    path = out / f"{name}.json"
    r = json.loads(path.read_text()) if path.exists() and status == "ok" else None
    if isinstance(r, list) and r and "loop_cores" in r[0]:  # bench/web_side.py: sessions through the node
        held = [x["sessions"] for x in r if x["miss_ratio"] <= 0.005]
        last = r[-1]
        fps = f"{25 * last['sessions']} @ {last['sessions']}"
        status = (f"ok: {max(held, default=0)} sessions at <= 0.5% misses; web {last['process_cores'] / last['sessions']:.3f}"
                  f" core/session, loop {last['loop_cores'] / last['sessions']:.3f}")
        rows.append((name, "1", fps, "-", "-", "-", "-", status))
    elif isinstance(r, list):  # --sessions: one result per session count
        best = max((x for x in r if x["min_session_rtf"] >= 1.0), key=lambda x: x["sessions"], default=None)
        fps = f"{r[-1]['aggregate_fps']:.0f} @ {r[-1]['sessions']}"
        status = f"ok: {best['sessions'] if best else 0} sessions at real time"
        rows.append((name, "1", fps, "-", "-", "-", "-", status))
    elif r is not None:
        peaks = r.get("peak_memory_bytes") or {}
        gpu_peaks = [p.get("gpu_peak_bytes") for p in r.get("checkpoints", []) if p.get("gpu_peak_bytes")]
        peak = max([*peaks.values(), *gpu_peaks], default=None)
        diff = r.get("max_abs_diff")
        switch = r.get("switch_ms") or {}
        rows.append((name, str(r.get("world_size", 1)), f"{r['fps']:.1f}", f"{r['first_frame_s']:.3f}",
                     "-" if diff is None else f"{diff:.1e}", "-" if peak is None else f"{peak / 2**30:.1f}",
                     f"{max(switch.values()):.2f}" if switch else "-", status))
    else:
        rows.append((name, "-", "-", "-", "-", "-", "-", status))
widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
for i, row in enumerate(rows):
    print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if i == 0:
        print("  ".join("-" * w for w in widths))
PY
