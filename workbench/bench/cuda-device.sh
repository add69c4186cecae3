#!/usr/bin/env bash
# On a GPU machine without Rust, in a copy of the repository: unpacks an archive made by
# `cuda-bundle.sh` where it was built, shows the GPU and the CUDA libraries the build will
# open, and runs `cuda-check.sh` under TIME_LIMIT (seconds, default 460):
#
#   TIME_LIMIT=460 workbench/bench/cuda-device.sh cuda-bundle.tar.xz [ROUNDS] 2>&1 | tee check.log
#
# The test programs name the workbench by the absolute path cargo gave it, so the archive is
# unpacked into the release folder it was built in (its file RELEASE_DIR says which), and
# target/release here is linked to it (an existing target/release is left as it is unless it
# is such a link). The driver, cuBLAS, cuRAND and NVRTC are opened at run time: where
# `ldconfig` does not know one, the library folders of PyTorch's NVIDIA wheels (python3's) are
# searched after the machine's own, and the CUDA runtime the archive carries comes last.
set -uo pipefail
cd "$(dirname "$0")/../.."
archive="$(realpath "${1:?usage: cuda-device.sh ARCHIVE.tar.xz [ROUNDS]}")"
start=$(date +%s)
release="$(tar -xJf "$archive" -O ./RELEASE_DIR)" || {
    echo "$archive has no RELEASE_DIR: make it again with workbench/bench/cuda-bundle.sh" >&2
    exit 1
}
mkdir -p "$release" target
tar -xJf "$archive" -C "$release" || exit 1
if [[ -e target/release && ! -L target/release ]]; then
    echo "target/release is a build of this machine's own; move it away to run the archive's" >&2
    exit 1
fi
ln -sfn "$release" target/release
echo "unpacked into $release in $(($(date +%s) - start)) s"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
    echo "nvidia-smi found no GPU: the checks below will say what is missing"
echo "host: $(nproc) cores; $(python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
for library in libcuda.so libnvrtc.so libcublas.so libcurand.so; do
    echo "$library: $(ldconfig -p | grep -m1 -o "$library[^ ]* => .*" || echo 'not known to ldconfig')"
done
wheels="$(python3 - 2>/dev/null <<'PY'
import glob, os
import nvidia
folders = {os.path.dirname(p) for base in nvidia.__path__ for p in glob.glob(base + "/**/lib*.so*", recursive=True)}
print(":".join(sorted(folders)))
PY
)"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${wheels:+$wheels:}$release/lib"
export WORKBENCH_PYTHON="${WORKBENCH_PYTHON:-python3}"
TIME_LIMIT="${TIME_LIMIT:-460}" workbench/bench/cuda-check.sh "${2:-2}"
status=$?
echo "cuda-check.sh ended with status $status after $(($(date +%s) - start)) s in all"
exit "$status"
