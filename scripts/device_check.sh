#!/usr/bin/env bash
# The CUDA checks in one command, for the few minutes a machine with a GPU is at hand:
#
#     bash scripts/device_check.sh          # figures into $OUT, or outputs/device_check/<date>/
#
# On a CUDA device it runs, each step with its own time limit (under 8 minutes in all, the
# machine's start aside; the test steps need the dev extra's test stack, the rest no optional extra):
#   1. the CUDA tests (pytest -m cuda: tests/test_cuda.py, and a network compiled by inductor on
#      the GPU against eager, tests/test_compile.py), then the fused soft-where kernels against
#      the reference, compiled on the GPU (tests/test_fused.py)
#   2. scripts/bench_pooling.py --device cuda: pool + unpool against native max (un)pooling, the
#      fused soft where beside the reference path it replaces, and each variant's kernels' time
#   3. scripts/bench_training.py --device cuda, in 32-true (with the loss checks, and where each
#      variant's step goes, by kind of kernel) and bf16-mixed (each variant in channels_last too)
#   4. scripts/bench_presets.py --device cuda on the paper's CIFAR-10 preset: 32-true, bf16-mixed,
#      + channels_last (and where its step's time goes, by kind of kernel, and how long the GPU
#      waits for the host), + the job's loader from images on the GPU, + a GPU-sized batch (512):
#      TFLOP/s and the share of the chip's own matrix rate, measured first
#   5. scripts/bench_epoch.py --device cuda: an epoch through train.py trainer=gpu against a
#      hand-written loop with its images on the GPU, and how busy the GPU was, for the default
#      MNIST run and a CIFAR-10-shaped one (synthetic images: no download on the device)
#   6. where the budget still has room (optional: skipped or cut short, they fail nothing), what
#      decides trainer=gpu's defaults: the default MNIST run's epoch in bf16-mixed with
#      channels_last, and with its image panels painted in a thread of their own, its metrics in
#      bf16-mixed against 32-true (a sweep of 3 seeds each, and
#      swwae where-report's paired tests of it, as docs/precision.md has them on the CPU), the
#      CIFAR-10 preset with --compile, and the default MNIST run's epoch with compile=true
# writes every output to one folder, prints a line as each step ends, then a summary (summary.md
# there too, by swwae.bench.device_summary: its tables go into docs/performance.md as they are); it
# exits 1 if a step failed or ran out of time. Without a CUDA device it prints one line and exits 0.
# Stopped from outside (TERM, INT, HUP: the lending tool's time limit, Ctrl-C), it ends the running
# step's processes, notes that step as cut short and the steps not reached as not run, writes the
# summary, and exits 128 + the signal's number, in a second or two. KILL leaves no time for that:
# summary.md is written as each step begins too, with that step marked running (running.txt), so a
# check killed leaves the summary of the steps it finished and the one it was in.
# (``swwae device-check``, from any install, runs the job's 2-epoch GPU runs in both precisions.)
# On a GPU machine without internet, install from carried wheels first: docs/development.md says how.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python}

if ! cuda=$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))' 2>&1); then
    echo "device check: cannot import torch with $PYTHON: ${cuda##*$'\n'}" >&2
    exit 1
fi
if [ "$cuda" != 1 ]; then
    echo "device check: no CUDA device here (torch.cuda.is_available() is False); nothing to check"
    exit 0
fi
# every step needs swwae installed with its requirements: what is missing, in one line, not in every step.
# The test steps need the dev extra's test stack too: the names it lacks are printed (tests_lack), and
# those steps alone are not run, each saying so, while the benchmarks still use the GPU's minutes
tests_lack=$("$PYTHON" - <<'EOF'
import re
import sys
from importlib.metadata import PackageNotFoundError, requires, version

install = "pip install -e '.[dev]'"
offline = "(offline: docs/development.md)"
try:
    wanted = [r for r in requires("swwae") or [] if "extra ==" not in r]
except PackageNotFoundError:
    sys.exit(f"device check: swwae is not installed here: {install} in this folder first {offline}")


def installed(name: str) -> bool:
    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


names = [re.match(r"[A-Za-z0-9_.-]+", requirement).group() for requirement in wanted]
missing = [name for name in names if not installed(name)]
if missing:
    sys.exit(f"device check: swwae needs {', '.join(missing)}, not installed here: {install} {offline}")
# of the dev extra, what the test steps run: pytest, its -n (pytest-xdist), and conftest.py's imports
TEST_STACK = ("pytest", "pytest-xdist", "hypothesis", "sybil")
print(", ".join(name for name in TEST_STACK if not installed(name)))
EOF
) || exit 1

out=${OUT:-outputs/device_check/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
: >"$out/steps.md"  # a row a step, as each ends (noted)
rm -f "$out/running.txt"  # the step running, while it runs (step): none yet
runs=$(mktemp -d)  # the training runs' checkpoints and logs: not figures
trap 'rm -rf "$runs"' EXIT
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS, for the determinism tests
budget=470                              # seconds for all the steps (each has its own limit too)
started=$SECONDS
failed=0
stopped='' code=0 child=''

# stop SIGNAL STATUS: the trap of a signal from outside. The running step (in the background, waited
# for: a trapped signal interrupts the wait) gets TERM at once, which its timeout passes on to the
# step's processes; step ends what is left of them, and every step after notes itself not run (halted)
# shellcheck disable=SC2317  # called by the traps below
stop() {
    stopped=$1 code=$2
    trap '' PIPE  # the output's reader may be gone with the rest (a pipe to tee): the files still get written
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
}
trap 'stop SIGTERM 143' TERM
trap 'stop SIGINT 130' INT
trap 'stop SIGHUP 129' HUP

# summarise: summary.md from the folder as it stands, printed too (swwae.bench.device_summary: the
# standard library alone, no torch, so a fraction of a second)
summarise() {
    "$PYTHON" -m swwae.bench.device_summary "$out" "$((SECONDS - started))"
}

# halted NAME: after a stop, NAME noted as not run, and true (whether or not its line could be printed:
# the output's reader may be gone); false while the check goes on
halted() {
    [ -n "$stopped" ] || return 1
    noted "$1" "not run: the check was stopped ($stopped)" 0
    return 0
}

# noted NAME STATUS SECONDS: a row of steps.md, written as the step ends (a check cut short from outside
# keeps the rows of the steps it finished), and a line of progress
noted() {
    echo "| $1 | $2 | $3 |" >>"$out/steps.md"
    echo "device check, $((SECONDS - started)) s of $budget: $1: $2 ($3 s)"
}

# step NAME LIMIT FILE COMMAND...: run COMMAND, its output appended to FILE, for at most LIMIT
# seconds (less if the whole budget runs short); note its status and time. As it begins, summary.md
# is rewritten with it marked running: what a KILL from outside leaves
step() {
    local name=$1 limit=$2 file=$out/$3 left rc begun
    shift 3
    halted "$name" && return
    left=$((budget - (SECONDS - started)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 5 ]; then
        noted "$name" "skipped: no time left" 0
        failed=1
        return
    fi
    echo "$name" >"$out/running.txt"
    summarise >/dev/null 2>&1
    halted "$name" && { rm -f "$out/running.txt"; return; }  # stopped while it summarised
    begun=$SECONDS
    echo "\$ $*" >>"$file"
    timeout --kill-after=10 "$limit" "$@" >>"$file" 2>&1 &
    child=$!
    [ -n "$stopped" ] && kill -TERM "$child"  # stopped as it started, before stop could know it
    wait "$child"
    rc=$?
    if [ -n "$stopped" ] && [ "$rc" -gt 128 ]; then
        # stopped: TERM is on its way to the step's processes (stop); 3 s to end, then KILL to what is
        # left of the process group timeout leads
        for _ in $(seq 30); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$child" 2>/dev/null
        wait "$child" 2>/dev/null  # its status, unless that wait already had it (stopped as it started)
        rc=$?
    fi
    child=''
    rm -f "$out/running.txt"
    echo >>"$file"
    if [ "$rc" = 0 ]; then
        status=ok
    elif [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ -z "$stopped" ]; }; then
        status="timed out after ${limit} s"
    elif [ -n "$stopped" ]; then
        status="cut short: the check was stopped ($stopped)"
    else
        status="failed (exit status $rc)"
    fi
    [ "$rc" = 0 ] || failed=1
    noted "$name" "$status" $((SECONDS - begun))
}

# pytest_step NAME LIMIT FILE ARGS...: pytest ARGS as a step, or, where the test stack is not all installed,
# the step noted as not run, with what it needs (a failure: the check did not check the tests)
pytest_step() {
    halted "$1" && return
    if [ -n "$tests_lack" ]; then
        noted "$1" "not run: needs $tests_lack (pip install -e '.[dev]')" 0
        failed=1
        return
    fi
    step "$1" "$2" "$3" "$PYTHON" -m pytest "${@:4}"
}

# optional NAME LIMIT FILE COMMAND...: a step run only if the budget still holds LIMIT seconds, and
# whose failure or time-out is reported but fails nothing: figures that help decide the GPU
# defaults, after those the check exists for
optional() {
    local left=$((budget - (SECONDS - started))) before=$failed
    halted "$1" && return
    if [ "$left" -lt "$2" ]; then
        noted "$1" "not run (optional): $left s of the budget left, $2 wanted" 0
        return
    fi
    step "$@"
    failed=$before
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    "$PYTHON" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")'
} >"$out/env.txt" 2>&1

# -n 4: four pytest workers share the GPU. Serially the CUDA tests' six train.py runs (each imports, starts CUDA
# and autotunes cuDNN: perhaps 15 s, not yet timed), inductor's compile and the fused kernels' Triton compiles could outlast their
# steps' limits; each worker has its own process and CUDA context, and counts its own syncs and peak memory.
# -v: a line a test as it ends ("[gw0] [ 5%] PASSED tests/..."), kept if the step runs out of time
tests=(-n 4 -v -p no:cacheprovider --durations=5)
pytest_step "CUDA tests (pytest -m cuda)" 160 cuda_tests.txt -m cuda "${tests[@]}"
# not its slow test, which compiles every kernel for four GPU generations (about 20 s on a fresh machine):
# CI runs it on the CPU, and here the GPU compiles and runs the kernels for itself
pytest_step "fused kernels on the GPU (tests/test_fused.py)" 40 fused_tests.txt tests/test_fused.py -m "not slow" \
    "${tests[@]}"
step "bench_pooling.py --device cuda --profile" 25 bench_pooling.md \
    "$PYTHON" scripts/bench_pooling.py --device cuda --repeats 20 --profile
step "bench_training.py --device cuda --loss-checks --profile" 30 bench_training.md \
    "$PYTHON" scripts/bench_training.py --device cuda --repeats 10 --loss-checks --profile
step "bench_training.py --device cuda --precision bf16-mixed --channels-last" 25 bench_training.md \
    "$PYTHON" scripts/bench_training.py --device cuda --repeats 10 --precision bf16-mixed --channels-last
preset=(scripts/bench_presets.py --device cuda --presets cifar10 --steps 5)
step "bench_presets.py cifar10, 32-true" 20 bench_presets.md "$PYTHON" "${preset[@]}"
step "bench_presets.py cifar10, bf16-mixed" 20 bench_presets.md "$PYTHON" "${preset[@]}" --precision bf16-mixed
step "bench_presets.py cifar10, bf16-mixed --channels-last --profile" 25 bench_presets.md \
    "$PYTHON" "${preset[@]}" --precision bf16-mixed --channels-last --profile
step "bench_presets.py cifar10, bf16-mixed --channels-last --loader" 20 bench_presets.md \
    "$PYTHON" "${preset[@]}" --precision bf16-mixed --channels-last --loader
step "bench_presets.py cifar10, bf16-mixed --channels-last --loader --batch 512" 20 bench_presets.md \
    "$PYTHON" "${preset[@]}" --precision bf16-mixed --channels-last --loader --batch 512
step "bench_epoch.py --device cuda (default MNIST run)" 40 bench_epoch.md \
    "$PYTHON" scripts/bench_epoch.py --device cuda --epochs 12
step "bench_epoch.py --device cuda --synthetic 20000 data=cifar10" 45 bench_epoch.md \
    "$PYTHON" scripts/bench_epoch.py --device cuda --epochs 3 --synthetic 20000 data=cifar10 "data.root=$runs/cifar10"
optional "bench_epoch.py --device cuda trainer.precision=bf16-mixed channels_last=true (default MNIST run)" 35 \
    bench_epoch.md "$PYTHON" scripts/bench_epoch.py --device cuda --epochs 8 trainer.precision=bf16-mixed channels_last=true
optional "bench_epoch.py --device cuda callbacks.reconstruction_images.in_background=true (default MNIST run)" 35 \
    bench_epoch.md "$PYTHON" scripts/bench_epoch.py --device cuda --epochs 12 callbacks.reconstruction_images.in_background=true
optional "train.py -m trainer.precision=32-true,bf16-mixed seed=0,1,2 (the default MNIST run)" 90 precision_sweep.txt \
    "$PYTHON" train.py -m trainer=gpu trainer.precision=32-true,bf16-mixed seed=0,1,2 \
    "paths.log_dir=$runs/logs" "paths.checkpoint_dir=$runs/checkpoints" "hydra.sweep.dir=$out/precision_sweep"
report="swwae where-report --by trainer.precision (the sweep's runs paired by seed)"
if [ -d "$out/precision_sweep" ]; then
    optional "$report" 20 precision_report.txt "$PYTHON" -m swwae where-report "$out/precision_sweep" \
        --by trainer.precision --arms 32-true bf16-mixed --out "$out/precision_report"
else
    halted "$report" || noted "$report" "not run (optional): no sweep to report" 0
fi
optional "bench_presets.py cifar10, bf16-mixed --channels-last --compile" 60 bench_presets.md \
    "$PYTHON" "${preset[@]}" --precision bf16-mixed --channels-last --compile
# a small network's step is its kernel launches: whether inductor's fewer, fused kernels pay for their
# compiles in the default run (the hand-written loop's network compiled alike). Batch 125 divides the
# 4,000 training and 500 validation digits: no smaller last batch, so no graphs compiled for one
optional "bench_epoch.py --device cuda --batch 125 compile=true (default MNIST run)" 90 bench_epoch.md \
    "$PYTHON" scripts/bench_epoch.py --device cuda --epochs 6 --batch 125 compile=true

# the summary: the steps, the tests' tallies and the benchmarks' table rows (swwae.bench.device_summary);
# once more if a stop from outside came as it was written (and ended it too, if sent to the process group)
if ! summarise && ! { [ -n "$stopped" ] && summarise; }; then
    echo "device check: no summary; every output is in $out/" >&2
    failed=1
fi
[ -n "$stopped" ] && exit "$code"
exit $failed
