#!/usr/bin/env bash
# What an AVX2-only machine of the cluster (Zen 3, older Xeons) runs, measured on one with
# AVX-512: a copy of this checkout whose manifests drop gemm's AVX-512 kernels (its `x86-v4`
# feature, which cargo cannot switch off from the command line), built in its own target
# folder, and run with WORKBENCH_KERNELS_ISA=avx2 for the fused kernels. With `--reference`
# the workbench caps PyTorch alike (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS,
# DNNL_MAX_CPU_ISA). The caches stay the machine's own: an emulation of the instructions,
# not of the processor.
#
#   workbench/bench/avx2-emulation.sh build                  # copy and build (release)
#   workbench/bench/avx2-emulation.sh bench ARGS...          # `workbench bench ARGS` there
#   workbench/bench/avx2-emulation.sh every-family [REPEATS] # every-family.sh there
#   workbench/bench/avx2-emulation.sh compare REPEATS CONFIG... # bench-compare.sh there
#   workbench/bench/avx2-emulation.sh profile STEPS ARGS...  # profile-step.sh there
#
# The copy lives in target/avx2-emulation (AVX2_COPY sets another folder); `build` refreshes
# it from the working tree (tracked and untracked, not ignored, files).
set -euo pipefail
cd "$(dirname "$0")/../.."
copy="${AVX2_COPY:-$PWD/target/avx2-emulation}"
command="${1:-}"
[[ $# -gt 0 ]] && shift

build() {
    mkdir -p "$copy"
    # Tracked and untracked files, less those deleted in the working tree.
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' file; do if [[ -e "$file" ]]; then printf '%s\0' "$file"; fi; done |
        tar --null -T - -cf - | tar -xf - -C "$copy"
    sed -i 's/gemm = { version = "0.19", features = \["x86-v4"\] }/gemm = "0.19"/' \
        "$copy/plugin-api/Cargo.toml" "$copy/plugin-api/kernels/Cargo.toml"
    if grep -rn --include=Cargo.toml --exclude-dir=target '^[^#]*x86-v4' "$copy"; then
        echo "error: a manifest above still asks for gemm's x86-v4 feature; drop it there too" >&2
        exit 1
    fi
    (cd "$copy" && cargo build --release --workspace)
}

in_copy() {
    if [[ ! -x "$copy/target/release/workbench" ]]; then
        echo "error: no AVX2 build in $copy: run \`$0 build\` first" >&2
        exit 1
    fi
    cd "$copy"
    export WORKBENCH_KERNELS_ISA=avx2 WORKBENCH_NO_BUILD=1
    "$@"
}

case "$command" in
    build) build ;;
    bench) in_copy ./target/release/workbench bench "$@" ;;
    every-family) in_copy workbench/bench/every-family.sh "$@" ;;
    compare) in_copy plugin-api/kernels/bench-compare.sh "$@" ;;
    profile) in_copy plugin-api/kernels/profile-step.sh "$@" ;;
    *)
        echo "usage: $0 build | bench ARGS... | every-family [REPEATS] | compare REPEATS CONFIG... | profile STEPS ARGS..." >&2
        exit 2
        ;;
esac
