#!/usr/bin/env bash
# The CUDA compiler, headers and runtime that `cuda-bundle.sh` builds with, from NVIDIA's wheels
# on PyPI, for a machine with no CUDA installation: downloads them (pip), unzips them into DIR
# and prints the settings for the build. VERSION is the CUDA release of the GPU machines' driver
# (13.0 for driver 580):
#
#   eval "$(workbench/bench/cuda-toolchain.sh /tmp/cuda-toolchain 13.0)"
#   CUDA_COMPUTE_CAP=90 CARGO_TARGET_DIR=/tmp/tcuda workbench/bench/cuda-bundle.sh .cudabuild/cuda-bundle.tar.xz
#
# PIP names the pip to run (default `python3 -m pip`). What it prints on stdout is only the
# `export` lines; pip's own output goes to stderr.
set -euo pipefail
dir="$(realpath -m "${1:?usage: cuda-toolchain.sh DIR [VERSION]}")"
version="${2:-13.0}"
major="${version%%.*}"
pip="${PIP:-python3 -m pip}"
mkdir -p "$dir/wheels"
$pip download --quiet --no-deps --only-binary=:all: --dest "$dir/wheels" \
    --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2010_x86_64 --platform manylinux_2_12_x86_64 --python-version 3.12 \
    "nvidia-cuda-nvcc==$version.*" "nvidia-cuda-runtime==$version.*" "nvidia-cuda-crt==$version.*" \
    "nvidia-nvvm==$version.*" "nvidia-cuda-cccl==$version.*" >&2
for wheel in "$dir"/wheels/*.whl; do
    unzip -q -o "$wheel" -d "$dir" >&2
done
root="$dir/nvidia/cu$major"
# Zip files need not keep the programs' executable bits.
chmod +x "$root"/bin/* "$root"/nvvm/bin/* 2>/dev/null || true
[[ -x "$root/bin/nvcc" ]] || { echo "no nvcc in $root/bin after unzipping the wheels of CUDA $version" >&2; exit 1; }
# The wheels keep the runtime as libcudart.so.N only; the linker looks for libcudart.so.
ln -sfn "libcudart.so.$major" "$root/lib/libcudart.so"
"$root/bin/nvcc" --version | tail -1 >&2
echo "export CUDA_ROOT=$root PATH=$root/bin:\$PATH LIBRARY_PATH=$root/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
