#!/usr/bin/env bash
# The README's table of every layer family on its main task against its PyTorch reference:
# medians of REPEATS interleaved runs (default 5) of `workbench bench --reference` with each
# family's default configuration, through plugin-api/kernels/bench-compare.sh.
#
#   cargo build --release --workspace
#   WORKBENCH_PYTHON=/path/to/python-with-torch workbench/bench/every-family.sh 5
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${STEPS:-10}"
exec plugin-api/kernels/bench-compare.sh "${1:-5}" \
    "--layer hyperset --task sudoku --steps $steps --reference" \
    "--layer hyperset --task image --steps $steps --reference" \
    "--layer transformer --task sudoku --steps $steps --reference" \
    "--layer transformer --task image --steps $steps --reference" \
    "--layer crate --task image --steps $steps --reference" \
    "--layer energy-transformer --task image --steps $steps --reference" \
    "--layer intrinsic --task language --steps $steps --reference" \
    "--layer intrinsic --task language --steps $steps --reference attention=momentum" \
    "--layer intrinsic --task language --steps $steps --reference attention=newton" \
    "--layer cem --task language --steps $steps --reference"
