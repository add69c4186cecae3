#!/usr/bin/env bash
# The README's table of every layer family on its main task against its PyTorch reference:
# medians of REPEATS interleaved runs (default 5) of `workbench bench --reference` with each
# family's default configuration, through plugin-api/kernels/bench-compare.sh.
#
#   cargo build --release --workspace
#   WORKBENCH_PYTHON=/path/to/python-with-torch workbench/bench/every-family.sh 5
#
# Each run alternates ROUNDS blocks (default 3) of STEPS timed steps (default 4) with PyTorch's
# (`--rounds`), so a run's ratio compares the two sides over the same minutes; EXTRA adds
# options to every configuration, e.g. EXTRA=device=cuda:0 (a build with --features cuda;
# PyTorch then runs on the same device).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${STEPS:-4} --rounds ${ROUNDS:-3}"
extra="${EXTRA:-}"
exec plugin-api/kernels/bench-compare.sh "${1:-5}" \
    "--layer hyperset --task sudoku --steps $steps --reference $extra" \
    "--layer hyperset --task image --steps $steps --reference $extra" \
    "--layer transformer --task sudoku --steps $steps --reference $extra" \
    "--layer transformer --task image --steps $steps --reference $extra" \
    "--layer crate --task image --steps $steps --reference $extra" \
    "--layer energy-transformer --task image --steps $steps --reference $extra" \
    "--layer intrinsic --task language --steps $steps --reference $extra" \
    "--layer intrinsic --task language --steps $steps --reference attention=momentum $extra" \
    "--layer intrinsic --task language --steps $steps --reference attention=newton $extra" \
    "--layer cem --task language --steps $steps --reference $extra"
