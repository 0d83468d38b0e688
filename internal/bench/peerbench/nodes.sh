#!/usr/bin/env bash
# Several keep nodes on one PostgreSQL database, each held to the same CPU
# quota (issue 25 #3; docs/performance.md, "Nodes under a CPU quota each").
#
# On a machine whose cores one node already fills, a second node only takes
# CPU from the first and from PostgreSQL, so more nodes cannot show whether
# they scale. A quota per node (a cgroup v1 cpu.cfs_quota_us, inherited by
# the node's sandbox workers) leaves cores free: if nothing serializes the
# writes of different workflows, runs/s grows with the nodes until
# PostgreSQL or the machine is full.
#
# The peerbench keep driver (built by run.sh into $BIN) measures on node 1
# as usual (N inputs over W workflows, fresh database each time); nodes 2..k
# are plain `keep serve` processes on the same database that step whatever
# workflows they lease. Rounds interleave 1, 2 and 3 nodes.
#
#   BIN=/tmp/pb/peerbench/bin QUOTA=25 ROUNDS=3 NS=2000 internal/bench/peerbench/nodes.sh
#
# Needs root (cgroups), PostgreSQL at 127.0.0.1:5432 (trust), and the sink
# the driver posts to ($BIN/sink is started here).
set -euo pipefail
BIN=${BIN:?set BIN to a directory with keep, keepbench and sink (run.sh builds them under TMPDIR/peerbench/bin)}
QUOTA=${QUOTA:-25} # percent of one core per node
ROUNDS=${ROUNDS:-3}
NS=${NS:-2000}
W=${W:-32}
NODES=${NODES:-"1 2 3"}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keep-nodes.XXXXXX")
CG=/sys/fs/cgroup/cpu
PG=postgres://postgres@127.0.0.1:5432
[ -w "$CG" ] || { echo "nodes.sh: $CG is not writable (cgroup v1 cpu controller, as root)" >&2; exit 1; }

printf '[connectors.http]\nallow = ["127.0.0.1:18080"]\n' >"$WORK/keep.toml"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for k in 1 2 3 4 5 6; do rmdir "$CG/keepnode$k" 2>/dev/null || true; done
}
trap cleanup EXIT

"$BIN/sink" -addr 127.0.0.1:18080 >"$WORK/sink.log" 2>&1 &
pids+=($!)
sleep 0.5

# quota K: the cgroup of node K, holding QUOTA % of one core.
quota() {
  mkdir -p "$CG/keepnode$1"
  echo 100000 >"$CG/keepnode$1/cpu.cfs_period_us"
  echo $((QUOTA * 1000)) >"$CG/keepnode$1/cpu.cfs_quota_us"
}

for r in $(seq 1 "$ROUNDS"); do
  for k in $NODES; do
    psql -q -h 127.0.0.1 -U postgres -d test -c "drop database if exists pbnodes" -c "create database pbnodes" >/dev/null
    extra=()
    for j in $(seq 2 "$k"); do
      quota "$j"
      rm -rf "$WORK/node$j" && mkdir -p "$WORK/node$j"
      # The node (and its workers, its children) enters its cgroup before exec.
      sh -c "echo \$\$ >$CG/keepnode$j/cgroup.procs; exec \"$BIN/keep\" serve --data \"$WORK/node$j\" --addr 127.0.0.1:$((18400 + j)) --store \"$PG/pbnodes?sslmode=disable\" --config \"$WORK/keep.toml\"" \
        >"$WORK/node$j.log" 2>&1 &
      extra+=($!)
      pids+=($!)
    done
    sleep 1
    quota 1
    line=$(sh -c "echo \$\$ >$CG/keepnode1/cgroup.procs; exec \"$BIN/keepbench\" -keep \"$BIN/keep\" -data \"$WORK/node1\" -config \"$WORK/keep.toml\" -round $r -store \"$PG/pbnodes?sslmode=disable\" -pgdb pbnodes -n $NS -w $W -label keep-pg-nodes$k" | tail -1)
    # (a bare `wait` would wait for the sink too)
    for p in "${extra[@]:-}"; do [ -n "$p" ] && { kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; } || true; done
    echo "{\"nodes\":$k,\"quotaPercent\":$QUOTA,\"result\":$line}"
  done
done
