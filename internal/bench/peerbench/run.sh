#!/usr/bin/env bash
# Runs the peer benchmark (docs/performance.md, "Against its peers") on this
# keep: copies the peerbench directory (../shared/peerbench from keep's root,
# or PEERBENCH_SRC) into a temporary directory, applies keep-driver.patch
# there (what keep's API and CLI require of the driver and of run-all.sh;
# the job and the measurement are unchanged) and keep-driver-pages.patch,
# runs that copy's run-all.sh from keep's root with the caller's
# environment (ROUNDS, NS, THROUGHPUT, SERIALS, SERIAL, SKIPBENCH, MODE,
# TMPDIR, OUT…), then prints summarize.py's summary of the results.
#
#   ROUNDS=3 NS=2000 THROUGHPUT="keep-sqlite-w32 dbos-sqlitefull" \
#     SERIALS="keep-sqlite-serial dbos-sqlitefull-serial" TMPDIR=/tmp/pb internal/bench/peerbench/run.sh
#
# Only the serial mode: THROUGHPUT=" " (a space: run-all.sh takes an empty
# THROUGHPUT for all of them), SERIAL=300 samples, MODE=rounds SKIPBENCH=1.
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

COPY=$(mktemp -d "${TMPDIR:-/tmp}/peerbench-src.XXXXXX")
trap 'rm -rf "$COPY"' EXIT
cp -R "$SRC/." "$COPY/"
# keep-driver-pages.patch: keep pages its lists (a runs?limit=0 is refused),
# and KEEP_SANDBOX reaches keep serve (to measure it without the hop). A
# copy that holds a patch already (patched in place) is left as it is.
for p in keep-driver.patch keep-driver-pages.patch; do
  if ! patch --quiet --dry-run -R -p1 -d "$COPY" <"$HERE/$p" >/dev/null 2>&1; then
    patch --quiet --forward -p1 -d "$COPY" <"$HERE/$p"
  fi
done

cd "$ROOT"
"$COPY/run-all.sh"
python3 "$COPY/summarize.py" "$RESULTS"
