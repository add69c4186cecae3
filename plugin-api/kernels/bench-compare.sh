#!/usr/bin/env bash
# Medians of `workbench bench` over repeated, interleaved runs of several configurations, for
# a shared machine where one run says little. Each configuration is one quoted argument list
# for `workbench bench`, with optional leading VAR=value environment settings:
#
#   plugin-api/kernels/bench-compare.sh 5 \
#       "--layer hyperset --steps 5 kernels=composed" \
#       "--layer hyperset --steps 5" \
#       "RAYON_NUM_THREADS=2 --layer hyperset --steps 5"
#
# Prints the processor, then per configuration the instruction sets its runs used
# (`WORKBENCH_KERNELS_ISA`) and the median (and min, max) of the wall time per step, the CPU time
# per step, samples/s and GFLOP/s, and the load average seen; with `--reference` in a
# configuration, also the PyTorch figure and the ratio of each run (set WORKBENCH_PYTHON to a
# Python with torch if python3 has none); with `--peak`, the step's share of the gemm peak
# measured in the same minutes, per run and its median. With several configurations, each one
# after the first also gets its samples/s over the first's, run by run (runs of the same round
# are minutes apart, not hours): the ratios, their median and how many runs it was faster.
# Each run's figures are also printed on stderr as it ends. Needs the release build
# (cargo build --release -p workbench -p hyperset -p transformer -p sudoku).
#
# A leading BUILD=DIR runs that configuration with the release build of another checkout of
# the workspace, its own plugins included (bench-builds.sh makes one of any commit), to set a
# change beside the code before it.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats="$1"
shift
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for ((r = 0; r < repeats; r++)); do
    i=0
    for config in "$@"; do
        env_args=()
        bench_args=()
        build=.
        for word in $config; do
            if [[ ${#bench_args[@]} -eq 0 && "$word" == BUILD=* ]]; then
                build="${word#BUILD=}"
            elif [[ ${#bench_args[@]} -eq 0 && "$word" == *=* && "$word" != -* && "$word" =~ ^[A-Z_]+= ]]; then
                env_args+=("$word")
            else
                bench_args+=("$word")
            fi
        done
        [[ -x "$build/target/release/workbench" ]] || { echo "no release build of the workbench in $build (cargo build --release --workspace there)" >&2; exit 1; }
        (cd "$build" && env RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-1}" WORKBENCH_NO_BUILD=1 "${env_args[@]}" \
            ./target/release/workbench bench "${bench_args[@]}") >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
        awk -v c="$i" '
            /^reference PyTorch/ { in_ref = 1 }
            /^  step / && !in_ref { step = $2 }
            /throughput/ && !in_ref { sps = $2 }
            /throughput/ && in_ref { ref = $2 }
            /^  ratio / { ratio = $2; sub(/x/, "", ratio) }
            /^  cpu / { cpu = $2; load = $NF; sub(/\)/, "", load) }
            /achieved/ { gf = $2 }
            /% of the gemm peak/ { share = $1 }
            END { print c, step, cpu, sps, (gf == "" ? "-" : gf), load, (ref == "" ? "-" : ref), (ratio == "" ? "-" : ratio), (share == "" ? "-" : share) }' "$tmp/out" >>"$tmp/results"
        # samples/s by configuration and round, for the ratios against the first configuration.
        tail -1 "$tmp/results" | awk -v r="$r" '{ print $1, r, $4 }' >>"$tmp/by_round"
        # Each run as it ends, on stderr: what a run cut short (a time limit) still leaves.
        tail -1 "$tmp/results" | awk -v r="$((r + 1))" -v n="$repeats" '
            { printf "  run %d/%d of configuration %d: step %s s, %s samples/s", r, n, $1 + 1, $2, $4
              if ($8 != "-") printf ", PyTorch %s samples/s, ratio %sx", $7, $8
              print "" }' >&2
        # The configuration's instruction sets (the kernels', and PyTorch's cap if any).
        [[ -e "$tmp/instructions.$i" ]] || sed -n 's/^  instructions //p' "$tmp/out" | awk 'NR > 1 { printf "; " } { printf "%s", $0 } END { print "" }' >"$tmp/instructions.$i"
        i=$((i + 1))
    done
done
# The median of a[1..n], for the awk programs of the summary below.
median_awk='
    function median(a, n,   b, k, j, t) {
        for (k = 1; k <= n; k++) b[k] = a[k]
        for (k = 1; k <= n; k++) for (j = k + 1; j <= n; j++) if (b[j] < b[k]) { t = b[k]; b[k] = b[j]; b[j] = t }
        return (n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
    }'
model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
echo "machine: ${model:-unknown processor}, $(nproc) cores"
i=0
for config in "$@"; do
    echo "$config"
    [[ -s "$tmp/instructions.$i" ]] && echo "  instructions $(cat "$tmp/instructions.$i")"
    awk -v c="$i" '$1 == c' "$tmp/results" | sort -k2 -g | awk "$median_awk"'
        { step[NR] = $2; cpu[NR] = $3; sps[NR] = $4; gf[NR] = $5; load = load " " $6; ref[NR] = $7; ratio[NR] = $8; share[NR] = $9 }
        END {
            printf "  step %.3f s (min %.3f, max %.3f)  cpu %.3f s/step  %.1f samples/s  %s GFLOP/s  [%d runs; load%s]\n",
                median(step, NR), step[1], step[NR], median(cpu, NR), median(sps, NR),
                (gf[1] == "-" ? "-" : sprintf("%.1f", median(gf, NR))), NR, load
            if (ref[1] != "-")
                printf "  PyTorch %.1f samples/s, ratio %.2fx (medians; ratios per run:%s)\n", median(ref, NR), median(ratio, NR), each(ratio)
            if (share[1] != "-")
                printf "  %.0f %% of the gemm peak (median; per run:%s)\n", median(share, NR), each(share)
        }
        function each(a,   k, s) { for (k = 1; k <= NR; k++) s = s " " a[k]; return s }'
    i=$((i + 1))
done
# Each configuration after the first against the first, round by round.
for ((i = 1; i < $#; i++)); do
    awk -v c="$i" "$median_awk"'
        $1 == 0 { first[$2] = $3 }
        $1 == c { this[$2] = $3; if ($2 > last) last = $2 }
        END {
            for (k = 0; k <= last; k++) if ((k in this) && (k in first) && first[k] > 0) { n++; q[n] = this[k] / first[k]; each = each sprintf(" %.3f", q[n]); won += (q[n] > 1) }
            if (n == 0) exit
            printf "configuration %d against configuration 1: samples/s ratio %.3f (median of the %d runs;%s), faster in %d of %d\n", c + 1, median(q, n), n, each, won, n
        }' "$tmp/by_round"
done
