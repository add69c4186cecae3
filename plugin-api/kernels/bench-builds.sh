#!/usr/bin/env bash
# A change beside the code before it: `workbench bench` of one configuration on the release
# build of commit REV and on this checkout (its working tree, uncommitted changes included),
# REPEATS interleaved runs each, through bench-compare.sh, which ends with this checkout's
# samples/s over REV's, run by run, their median and how many runs it was faster.
#
#   plugin-api/kernels/bench-builds.sh REV REPEATS "<bench arguments>"
#   e.g. plugin-api/kernels/bench-builds.sh HEAD 8 "--layer hyperset --task sudoku --steps 30"
#
# REV's checkout is a git worktree under target/bench-builds/, kept for the next comparison
# (`git worktree remove target/bench-builds/<commit>` drops it) and built there with its own
# target folder: a cold release build the first time (6–11 minutes on two cores, about 3 GB of
# disk). On a shared machine compare medians of 8 or more runs, and repeat the comparison:
# sets of runs minutes apart can differ by a few percent.
set -euo pipefail
cd "$(dirname "$0")/../.."
usage='usage: bench-builds.sh REV REPEATS "<bench arguments>"'
rev="${1:?$usage}"
repeats="${2:?$usage}"
args="${3:-}"
commit="$(git rev-parse --verify --quiet "$rev^{commit}")" || {
    echo "bench-builds.sh: $rev names no commit of this repository ($usage)" >&2
    exit 2
}
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "bench-builds.sh: REPEATS must be a positive count, not '$repeats' ($usage)" >&2; exit 2; }
dir="target/bench-builds/${commit:0:12}"
if [[ ! -e "$dir/.git" ]]; then
    git worktree prune
    git worktree add --detach --quiet "$dir" "$commit"
fi
echo "building $rev (${commit:0:12}) in $dir, then this checkout" >&2
(cd "$dir" && cargo build --release --workspace --quiet)
cargo build --release --workspace --quiet
exec plugin-api/kernels/bench-compare.sh "$repeats" "BUILD=$dir $args" "$args"
