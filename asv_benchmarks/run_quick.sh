#!/usr/bin/env bash
# One quick pass of every asv benchmark against the CURRENTLY INSTALLED adrules/executors
# (asv's existing environment: --python=same; nothing is built, nothing is saved).
#
#   bash asv_benchmarks/run_quick.sh [extra asv run arguments, e.g. --bench bench_psum]
#
# Exits 0 when every benchmark ran, 2 when any failed (asv's exit code is not trusted
# alone: its output is checked for failed benchmarks and import errors too), and the
# exit code of asv (or 124 for the time guard) when asv itself broke. Needs no stdin.
set -uo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python}"
GUARD_SECONDS="${ASV_QUICK_TIMEOUT:-900}"

# Measurement environment, the same as compare_peers.py and scaling.py use (see
# benchmarks/common.py): BLAS on one thread, glibc malloc left as users have it.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# A smoke pass: benchmarks that time their own rounds (ratios, fresh-process loops) take
# the fewest rounds that run their code (benchmarks/common.py QUICK); not for figures.
export ADRULES_BENCH_QUICK=1

if ! "$PYTHON" -c "import asv" 2>/dev/null; then
    echo "run_quick.sh: asv is not installed for $PYTHON: pip install -e '.[bench]'" >&2
    exit 3
fi
if ! "$PYTHON" -c "import adrules, executors" 2>/dev/null; then
    echo "run_quick.sh: adrules is not importable by $PYTHON: pip install -e ." >&2
    exit 3
fi

log="$(mktemp -d)/asv_quick.log"
start=$(date +%s)

# Machine info without a prompt (CI has no stdin); idempotent.
"$PYTHON" -m asv machine --yes </dev/null >"$log" 2>&1 || {
    cat "$log"; echo "run_quick.sh: 'asv machine --yes' failed" >&2; exit 3; }

# --launch-method forkserver: asv forks each benchmark (one per parameter combination,
# ~230) from one process that imported the suite once, instead of starting a fresh
# interpreter that imports it again (Python, NumPy, adrules, SciPy and autograd: seconds a
# benchmark on a busy machine, most of this pass's time). Full runs keep asv's default.
timeout --kill-after=30 "$GUARD_SECONDS" \
    "$PYTHON" -m asv run --python=same --quick --show-stderr --dry-run --launch-method forkserver "$@" \
    </dev/null 2>&1 \
    | tee -a "$log"
asv_rc=${PIPESTATUS[0]}
elapsed=$(( $(date +%s) - start ))

# asv marks a failed benchmark "failed" on its progress line, and says so when the
# suite cannot even be imported; skipped parameter combinations show "n/a" (not failures).
failures=$(grep -E "^\[ *[0-9.]+%\] .*(failed|asv: benchmark failed)|Importing benchmark suite failed|Failed to build the project and import the benchmark suite|asv: setup_cache failed|asv: benchmark timed out" "$log" | grep -v " n/a$" || true)
n_ran=$(grep -cE "^\[ *[0-9.]+%\] ··· " "$log" || true)

echo
echo "run_quick.sh: asv exit code $asv_rc, ${n_ran} benchmark lines, ${elapsed}s"
if [ "$asv_rc" -eq 124 ] || [ "$asv_rc" -eq 137 ]; then
    echo "run_quick.sh: asv did not finish within ${GUARD_SECONDS}s" >&2
    exit 124
fi
if [ -n "$failures" ]; then
    echo "run_quick.sh: FAILED benchmarks:" >&2
    echo "$failures" >&2
    exit 2
fi
if [ "$asv_rc" -ne 0 ]; then
    echo "run_quick.sh: asv exited with $asv_rc" >&2
    exit "$asv_rc"
fi
if [ "$n_ran" -eq 0 ]; then
    echo "run_quick.sh: no benchmark ran" >&2
    exit 2
fi
echo "run_quick.sh: all benchmarks ran"
