#!/usr/bin/env bash
# The CUDA checks, on a machine with a GPU, in the order that matters if time runs out: the
# CUDA kernel tests, the CUDA training tests, then the benches on cuda:0 against PyTorch on the
# same device, with the CUDA normalisations and softmaxes switched on (WORKBENCH_CUDA_KERNELS=1)
# and off (candle's composition alone): Hyper-SET and the Transformer on Sudoku, the paper size
# at batch 16 and 128, then every family with them on.
#
#   cargo build --workspace --release --features workbench/cuda
#   cargo test --release -p workbench --features cuda --test cuda --no-run
#   cargo test --release -p kernels -p workbench --features workbench/cuda --lib --no-run
#   TIME_LIMIT=480 workbench/bench/cuda-check.sh [ROUNDS]
#
# (The last build names the workbench too so that candle is built with the features of the
# first, not again.) ROUNDS (default 3) interleaved rounds of the Sudoku benches, PAPER_ROUNDS
# (default 1) of the paper size, 1 of every family. The test programs are run as cargo built
# them (the newest of each in target/release/deps), so a machine with the build but without
# cargo runs them too. GPU time is scarce, so a section that fails or runs out of time does not
# stop the next, and TIME_LIMIT (seconds, default none) bounds the whole script: a section gets
# what is left, and one that would start with under 20 s left is skipped. The script exits
# with status 1 at the end if any section failed or was cut short.
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
deadline=$(($(date +%s) + ${TIME_LIMIT:-1000000}))
newest() { find target/release/deps -maxdepth 1 -type f -executable -name "$1-*" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2; }
# The newest test program `$1`, or a line saying it is missing and how to build it.
test_program() {
    local program
    program="$(newest "$1")"
    if [[ -z "$program" ]]; then
        echo "no test program $1-* in target/release/deps: build it with the commands at the top of $0" >&2
        return 1
    fi
    echo "$program"
}

failed=0
# Runs one section under the time that is left, and reports its time and how it ended.
section() {
    local name="$1" start left status
    shift
    start=$(date +%s)
    left=$((deadline - start))
    if ((left < 20)); then
        echo "== $name: skipped, ${left}s left of TIME_LIMIT"
        failed=1
        return
    fi
    echo "== $name"
    timeout "$left" "$@"
    status=$?
    case $status in
        0) echo "== $name: passed in $(($(date +%s) - start)) s" ;;
        124) echo "== $name: cut short by TIME_LIMIT after $(($(date +%s) - start)) s"; failed=1 ;;
        *) echo "== $name: FAILED (status $status) after $(($(date +%s) - start)) s"; failed=1 ;;
    esac
}

on=WORKBENCH_CUDA_KERNELS=1
if kernel_tests="$(test_program kernels)"; then
    section "CUDA kernel tests" env $on "$kernel_tests" tests_cuda
else
    failed=1
fi
if training_tests="$(test_program cuda)"; then
    section "CUDA training tests, with the CUDA kernels" env $on "$training_tests" --nocapture --test-threads 1
else
    failed=1
fi

compare=plugin-api/kernels/bench-compare.sh
section "Hyper-SET and the Transformer on Sudoku, the CUDA kernels on and off" $compare "$rounds" \
    "$on --layer hyperset --task sudoku --steps 20 --reference device=cuda:0" \
    "--layer hyperset --task sudoku --steps 20 device=cuda:0" \
    "$on --layer transformer --task sudoku --steps 20 --reference device=cuda:0" \
    "--layer transformer --task sudoku --steps 20 device=cuda:0"
paper="d=768 heads=12 iterations=24 device=cuda:0"
section "Hyper-SET, paper size (d = 768, 12 heads, 24 iterations), batch 16 and 128" $compare "${PAPER_ROUNDS:-1}" \
    "$on --layer hyperset --task sudoku --steps 5 --reference $paper" \
    "--layer hyperset --task sudoku --steps 5 $paper" \
    "$on --layer hyperset --task sudoku --steps 5 --reference $paper batch_size=128" \
    "--layer hyperset --task sudoku --steps 5 $paper batch_size=128"
section "Every family, the CUDA kernels on" env $on STEPS=20 EXTRA=device=cuda:0 workbench/bench/every-family.sh 1
exit "$failed"
