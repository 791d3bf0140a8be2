#!/usr/bin/env bash
# The CUDA checks in one command, for the few minutes a machine with a GPU is at hand:
#
#     bash scripts/device_check.sh          # figures into $OUT, or outputs/device_check/<date>/
#
# On a CUDA device it runs, each step with its own time limit (under 8 minutes in all):
#   1. the CUDA tests (pytest -m cuda: tests/test_cuda.py)
#   2. scripts/bench_pooling.py --device cuda (pool + unpool against native max (un)pooling)
#   3. scripts/bench_training.py --device cuda, in 32-true (with the loss checks) and bf16-mixed
#   4. a 2-epoch trainer=gpu run of train.py, in 32-true and bf16-mixed
#   5. scripts/bench_presets.py --device cuda, in 32-true and bf16-mixed: the paper presets'
#      seconds per epoch measured, instead of estimated from their FLOPs
# writes every output to one folder and prints a summary (summary.md there too); it exits 1 if
# a step failed or ran out of time. Without a CUDA device it prints one line and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}

if ! cuda=$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))' 2>&1); then
    echo "device check: cannot import torch with $PYTHON: ${cuda##*$'\n'}" >&2
    exit 1
fi
if [ "$cuda" != 1 ]; then
    echo "device check: no CUDA device here (torch.cuda.is_available() is False); nothing to check"
    exit 0
fi

out=${OUT:-outputs/device_check/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
runs=$(mktemp -d)  # the training runs' checkpoints and logs: not figures
trap 'rm -rf "$runs"' EXIT
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS, for the determinism tests
budget=470                              # seconds for all the steps (each has its own limit too)
started=$SECONDS
failed=0
steps=()

# step NAME LIMIT FILE COMMAND...: run COMMAND, its output appended to FILE, for at most LIMIT
# seconds (less if the whole budget runs short); note its status and time
step() {
    local name=$1 limit=$2 file=$out/$3 left rc begun=$SECONDS
    shift 3
    left=$((budget - (SECONDS - started)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 5 ]; then
        steps+=("| $name | skipped: no time left | 0 |")
        failed=1
        return
    fi
    echo "\$ $*" >>"$file"
    timeout --kill-after=10 "$limit" "$@" >>"$file" 2>&1
    rc=$?
    echo >>"$file"
    case $rc in
        0) status=ok ;;
        124|137) status="timed out after ${limit} s"; failed=1 ;;
        *) status="failed (exit status $rc)"; failed=1 ;;
    esac
    steps+=("| $name | $status | $((SECONDS - begun)) |")
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    "$PYTHON" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")'
} >"$out/env.txt" 2>&1

step "CUDA tests (pytest -m cuda)" 180 cuda_tests.txt "$PYTHON" -m pytest -m cuda -n 0 -q -p no:cacheprovider --durations=10
step "bench_pooling.py --device cuda" 30 bench_pooling.md "$PYTHON" scripts/bench_pooling.py --device cuda --repeats 20
step "bench_training.py --device cuda --loss-checks" 40 bench_training.md \
    "$PYTHON" scripts/bench_training.py --device cuda --repeats 20 --loss-checks
step "bench_training.py --device cuda --precision bf16-mixed" 30 bench_training.md \
    "$PYTHON" scripts/bench_training.py --device cuda --repeats 20 --precision bf16-mixed
for precision in 32-true bf16-mixed; do
    step "train.py trainer=gpu trainer.max_epochs=2 trainer.precision=$precision" 50 train_gpu.txt \
        "$PYTHON" train.py trainer=gpu trainer.max_epochs=2 "trainer.precision=$precision" \
        "hydra.run.dir=$runs/$precision" "paths.log_dir=$runs/logs" "paths.checkpoint_dir=$runs/$precision/checkpoints"
    [ -f "$runs/$precision/metrics.json" ] && { cat "$runs/$precision/metrics.json"; echo; } >>"$out/train_gpu.txt"
done
step "bench_presets.py --device cuda" 45 bench_presets.md "$PYTHON" scripts/bench_presets.py --device cuda
step "bench_presets.py --device cuda --precision bf16-mixed" 35 bench_presets.md \
    "$PYTHON" scripts/bench_presets.py --device cuda --precision bf16-mixed

show() { grep -E "$1" "$out/$2" 2>/dev/null; }  # the lines of a step's output the summary quotes
{
    echo "# device check, $(date '+%Y-%m-%d %H:%M'), $(tail -n 1 "$out/env.txt")"
    echo
    echo "| step | status | seconds |"
    echo "|---|---|---:|"
    printf '%s\n' "${steps[@]}"
    echo
    echo "CUDA tests: $(show '(passed|failed|error|skipped)' cuda_tests.txt | tail -n 1)"
    show '^(FAILED|ERROR) ' cuda_tests.txt | head -n 20
    echo
    echo "pool + unpool, forward + backward, against native max (un)pooling (bench_pooling.md):"
    show '^\| (case|[0-9]+x[0-9]+ stride [0-9]+ \| (hard|soft))' bench_pooling.md
    echo
    echo "training step against the native twin (bench_training.md; 32-true, then bf16-mixed):"
    show '^\| (shapes|[a-z0-9]+ [0-9x]+ \| (hard|soft)) ' bench_training.md
    show '^\| (loss check|watched|read every step) \|' bench_training.md
    echo
    echo "2-epoch trainer=gpu runs (train_gpu.txt; 32-true, then bf16-mixed):"
    show '^(epoch [0-9]+/2|done:)' train_gpu.txt
    echo
    echo "paper presets on the GPU, measured (bench_presets.md; 32-true, then bf16-mixed):"
    show '^(measured on|\| )' bench_presets.md
    echo
    echo "$((SECONDS - started)) s in all; every output in $out/"
} >"$out/summary.md" 2>&1
cat "$out/summary.md"
exit $failed
