#!/usr/bin/env bash
# Builds the CUDA variant on a machine without a GPU and packs what `cuda-check.sh` runs into
# one archive, for a GPU machine that has the CUDA driver and libraries but no Rust:
#
#   CUDA_COMPUTE_CAP=90 CARGO_TARGET_DIR=/tmp/tcuda workbench/bench/cuda-bundle.sh cuda-bundle.tar.xz
#
# then, on the GPU machine, in a copy of the repository, `cuda-device.sh` unpacks it where it
# was built (the test programs name the workbench by the absolute path cargo gave it; the
# archive's RELEASE_DIR holds it) and runs `cuda-check.sh`:
#
#   TIME_LIMIT=460 workbench/bench/cuda-device.sh cuda-bundle.tar.xz 2>&1 | tee check.log
#
# The build needs `nvcc` (on PATH, or CUDA_ROOT) and the CUDA headers, and links candle's
# kernels against `libcudart.so`; NVIDIA's wheels on PyPI hold them (cuda-toolchain.sh sets them up)
# (nvidia-cuda-nvcc, nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-nvvm and nvidia-cuda-cccl, all
# of the driver's CUDA version, unzipped into one folder: CUDA_ROOT is its nvidia/cu13, and
# LIBRARY_PATH its lib, with a link libcudart.so -> libcudart.so.13). CUDA_COMPUTE_CAP (90 for
# an H100 / H200) is needed where no GPU is visible. The archive holds the workbench, the layer
# and task plugins that the checks load and the two test programs, without debug information,
# and in lib/ the CUDA runtime they were linked with, for a machine whose own is not found
# (last on LD_LIBRARY_PATH, so the machine's own comes first).
set -euo pipefail
cd "$(dirname "$0")/../.."
archive="$(realpath -m "${1:?usage: cuda-bundle.sh ARCHIVE.tar.xz}")"
: "${CUDA_COMPUTE_CAP:?set CUDA_COMPUTE_CAP, e.g. 90 for an H100 / H200}"
target="${CARGO_TARGET_DIR:-target}"
cargo build --workspace --release --features workbench/cuda
cargo test --release -p workbench --features cuda --test cuda --no-run
cargo test --release -p kernels -p workbench --features workbench/cuda --lib --no-run
newest() { find "$target/release/deps" -maxdepth 1 -type f -executable -name "$1-*" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/deps"
realpath -m "$target/release" >"$stage/RELEASE_DIR"
cp "$target/release/workbench" "$stage/"
for plugin in hyperset transformer crate_layer energy_transformer intrinsic cem mlp sudoku image_task language; do
    cp "$target/release/lib$plugin.so" "$stage/"
done
cp "$(newest cuda)" "$(newest kernels)" "$stage/deps/"
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
# The first libcudart.so.N where the linker looked: LIBRARY_PATH, then the toolkit's.
cudart=""
IFS=: read -ra library_dirs <<<"${LIBRARY_PATH:-}"
for dir in "${library_dirs[@]}" "$cuda_root/lib64" "$cuda_root/lib"; do
    for found in "$dir"/libcudart.so.[0-9]*; do
        [[ -z "$cudart" && -f "$found" ]] && cudart="$found"
    done
done
[[ -n "$cudart" ]] || { echo "no libcudart.so.N in LIBRARY_PATH or $cuda_root/lib64" >&2; exit 1; }
mkdir -p "$stage/lib"
cp -L "$cudart" "$stage/lib/"
strip --strip-debug "$stage"/workbench "$stage"/*.so "$stage"/deps/*
# Every binary holds the same CUDA fat binary of candle's kernels (about 33 MB): a dictionary
# larger than one binary stores it once.
tar -cf - -C "$stage" . | xz -T0 -6 --lzma2=dict=256MiB >"$archive"
echo "$archive: $(du -h "$archive" | cut -f1)"
