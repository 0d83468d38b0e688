#!/usr/bin/env bash
# Runs the peer benchmark (docs/performance.md, "Against its peers") on this
# keep: the peerbench directory's run-all.sh (../shared/peerbench from
# keep's root, or PEERBENCH_SRC), as it is, from keep's root with the
# caller's environment (ROUNDS, NS, THROUGHPUT, SERIALS, SERIAL, SKIPBENCH,
# MODE, TMPDIR, OUT…), then summarize.py's summary of the results. Its
# binaries are built under TMPDIR; the peerbench directory is not written.
#
#   ROUNDS=3 NS=2000 THROUGHPUT="keep-sqlite-w32 dbos-sqlitefull" \
#     SERIALS="keep-sqlite-serial dbos-sqlitefull-serial" TMPDIR=/tmp/pb internal/bench/peerbench/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
SRC=${PEERBENCH_SRC:-$ROOT/../shared/peerbench}
[ -x "$SRC/run-all.sh" ] || { echo "run.sh: no peerbench at $SRC (set PEERBENCH_SRC to its directory)" >&2; exit 1; }

mkdir -p "${TMPDIR:-/tmp}"
RESULTS=${OUT:-${TMPDIR:-/tmp}/peerbench/out}/results.jsonl
# run-all.sh appends to results.jsonl: an earlier run's lines would be summarized with this one's
if [ -e "$RESULTS" ]; then
  echo "run.sh: $RESULTS holds an earlier run's results: remove it or use another TMPDIR (or OUT)" >&2
  exit 1
fi

cd "$ROOT"
"$SRC/run-all.sh"
python3 "$SRC/summarize.py" "$RESULTS"
