#!/usr/bin/env bash
# The tool's own runtime objective and validation on a GPU: one prepared script for a session that is
# lent a GPU machine (never CI: it needs the device, and CI has none). Usage, from the repository root:
#
#   python bench/gpu_wheelhouse.py          # here, with network: .whl/py312 (git-ignored), <= 16 MiB
#   bash bench/gpu_check.sh                 # there: carry .whl; writes its logs and JSON under $OUT
#   bash bench/gpu_check.sh --cpu           # the dry run on this machine: jax's CPU device stands in
#                                           # (AUTOTUNE_EXECUTION_PLATFORM=cpu), small modules, small budgets
#
# On the GPU it installs the wheelhouse next to the machine's own jax and torch (--no-deps, into a
# folder on PYTHONPATH), checks that autotune chooses the CUDA device, then
#   1. autotune run --target h200 --objective runtime --space options --budget 12 on LLaMA-3's decode step:
#      XLA's GPU options (Triton GEMMs, autotune level, command buffers, the latency-hiding scheduler,
#      cuBLASLt, ...) searched by measured time, an answer offered only when executed on the device,
#   2. the same on a training step (DLRM's: it donates its weights, so the timing feeds them back),
#   3. autotune run --target h200 --require executed on the bundled decode step (validation on the device),
# each with its own time limit, so that one that hangs leaves the others their time. Python runs with -P:
# autotune is the installed wheel's, never the checkout's autotune/ folder. Every command's
# JSON and stderr go to $OUT (default ./gpu-check-out); summary.txt says what each returned.
# CHECKS picks which run (default: the three above); runtime-gptoss adds gpt-oss's prefill step, the
# second real LLM step, and runtime-llama / runtime-train the pass order alone (--space passes) on the
# first two, for a second call on the same machine: CHECKS="runtime-llama runtime-gptoss" bash bench/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
MODE=gpu
[ "${1:-}" = "--cpu" ] && MODE=cpu
KNOWN="options-llama options-train validate-decode runtime-llama runtime-train runtime-gptoss"   # the loop's cases
CHECKS=${CHECKS:-options-llama options-train validate-decode}
for check in $CHECKS; do
    case " $KNOWN " in
        *" $check "*) ;;
        *) echo "gpu_check: error: unknown check '$check' (${KNOWN// /, })" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$SUMMARY"; }

if [ "$MODE" = gpu ]; then
    WHL=${WHEELHOUSE:-.whl/py$($PY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')}
    if ! ls "$WHL"/*.whl >/dev/null 2>&1; then
        echo "gpu_check: error: no wheels in $WHL (make them with python bench/gpu_wheelhouse.py and carry .whl)" >&2
        exit 2
    fi
    SITE=${SITE:-/tmp/autotune-site}
    $PY -m pip install --no-index --no-deps --quiet --target "$SITE" "$WHL"/*.whl >"$OUT/install.log" 2>&1 \
        || { echo "gpu_check: error: installing $WHL failed (see $OUT/install.log)" >&2; exit 2; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    export AUTOTUNE_EXECUTION_PLATFORM=cuda   # refuse, in one line, rather than time the host
    TARGET=h200
    LLAMA=tests/data/real-llm/rocm_llama3_8b_generate.hlo
    GPTOSS=tests/data/real-llm/rocm_gpt_oss_20b_prefill.hlo
    TRAIN=tests/data/real/xla_dlrm_train_step.hlo
    BUDGET=12
else
    export AUTOTUNE_EXECUTION_PLATFORM=cpu
    TARGET=h100   # any GPU target: its steps compile deviceless here
    LLAMA=examples/llm_decode_step.hlo       # a decode step small enough for this CPU, whose orderings move it
    GPTOSS=$LLAMA                            # the LLM steps are too large to execute on this CPU
    TRAIN=tests/data/real/xla_dlrm_train_step.hlo  # the same training step (donates: timing feeds it back)
    BUDGET=${BUDGET:-3}
fi
DECODE=examples/llm_decode_step.hlo
export AUTOTUNE_DB="$OUT/cache.db"

$PY -P - <<'EOF' 2>>"$OUT/device.log" | tee -a "$SUMMARY"
import autotune, jax
from autotune.pipelines.xla import device
print(f"autotune from {autotune.__file__}; jax {jax.__version__}; devices {jax.devices()}")
print(f"execution platform requested: {device.requested()}; CUDA devices jax sees: {device.cuda_devices()}")
EOF

run() {  # name, seconds it may take, then autotune's arguments
    local name=$1 limit=$2; shift 2
    say "$name: autotune $* (at most ${limit} s)"
    timeout "$limit" $PY -P -m autotune.cli "$@" --json >"$OUT/$name.json" 2>"$OUT/$name.err"
    local rc=$?
    say "$name: exit $rc; $(tail -n 1 "$OUT/$name.err" | cut -c1-300)"
    $PY - "$OUT/$name.json" <<'EOF' 2>/dev/null | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
claim, best, validity = r.get("claim") or {}, r.get("best") or {}, r.get("validity") or {}
print(f"  best {best.get('sequence')} options {best.get('compiler_options')} cost {best.get('cost')} default "
      f"{r.get('default_cost')} validation {r.get('validation_level')}: {str(validity.get('reason'))[:300]}")
for wrong in r.get("faster_but_wrong") or []:
    print(f"  faster but wrong: {wrong}")
if claim:
    print(f"  claim: {str(claim.get('message'))[:300]}")
EOF
}

# A lent machine runs one command for at most 10 minutes: the three share 9 (the searches stop early,
# --time-limit, to leave the confirmation and validation their time).
for check in $CHECKS; do
    case $check in
        options-llama) run options-llama 270 run "$LLAMA" --target "$TARGET" --objective runtime --space options --budget "$BUDGET" --time-limit 150 ;;
        options-train) run options-train 150 run "$TRAIN" --target "$TARGET" --objective runtime --space options --budget "$BUDGET" --time-limit 80 ;;
        runtime-llama) run runtime-llama 270 run "$LLAMA" --target "$TARGET" --objective runtime --space passes --budget "$BUDGET" --time-limit 150 ;;
        runtime-train) run runtime-train 150 run "$TRAIN" --target "$TARGET" --objective runtime --space passes --budget "$BUDGET" --time-limit 80 ;;
        validate-decode) run validate-decode 120 run "$DECODE" --target "$TARGET" --budget "$BUDGET" --require executed ;;
        runtime-gptoss) run runtime-gptoss 300 run "$GPTOSS" --target "$TARGET" --objective runtime --space passes --budget "$BUDGET" --time-limit 170 ;;
    esac
done
say "done ($MODE); outputs in $OUT"
