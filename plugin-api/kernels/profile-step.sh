#!/usr/bin/env bash
# Per-op profile of training steps: where a step's time goes (forward / backward / optimizer,
# per line of model code or per backward arm of candle, per kernel), from `perf` call stacks.
#
#   plugin-api/kernels/profile-step.sh [STEPS] [workbench bench arguments...]
#   e.g. plugin-api/kernels/profile-step.sh 4 --layer hyperset kernels=composed
#
# Needs `perf` (Debian: linux-perf) and the release build of the workbench and the plugins
# (cargo build --release -p workbench -p hyperset -p transformer -p sudoku -p kernels).
# Runs one shard on one thread (threads=1, RAYON_NUM_THREADS=1; PROFILE_THREADS=2 for two
# threads per op) so every sample carries its model frames (samples of pool threads are
# reported apart).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-4}"
shift || true
freq=999
out="${PROFILE_DIR:-target/profile}"
mkdir -p "$out"
cargo build --release -p kernels --example perf_ops -q
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
# A training process that starts itself again to have its heap on huge pages (workbench's
# `huge_pages`) loses its frames above the restart in perf's DWARF call stacks, so the tunable
# is given here instead. glibc 2.36 takes it in about half of the starts; a profile whose heap
# it did not put on huge pages (the bench's `memory` line) is taken again, up to four times.
if [ -z "${GLIBC_TUNABLES+set}" ]; then
    export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
    tries=4
else
    tries=1
fi
for try in $(seq 1 "$tries"); do
    RAYON_NUM_THREADS="${PROFILE_THREADS:-1}" WORKBENCH_NO_BUILD=1 perf record -q -F "$freq" --call-graph dwarf,32768 -o "$out/step.data" -- \
        ./target/release/workbench bench --steps "$steps" threads=1 "$@" | tee "$out/bench.txt"
    if ! grep -q "^  memory .* 0 MB of it on 2 MiB pages (GLIBC_TUNABLES sets" "$out/bench.txt" \
        || ! grep -q '\[madvise\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
        break
    fi
    [ "$try" -lt "$tries" ] && echo "(the heap was not on huge pages in this start: profiling again)"
done
perf script -i "$out/step.data" -F tid,ip,sym,srcline --full-source-path 2>/dev/null >"$out/step.txt"
# The bench's recorded forward pass before anything is timed (its first allocations and page
# faults) and its two warm-up steps are reported apart.
./target/release/examples/perf_ops "$out/step.txt" --freq "$freq" --steps "$steps" --top "${TOP:-40}"
