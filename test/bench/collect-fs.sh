#!/usr/bin/env bash
# The cost of one per-repository dry-run collect on the filesystem driver,
# server side, next to upstream's `garbage-collect --dry-run` on the same data.
#
#   bash test/bench/collect-fs.sh 10 1000 3000
#
# For each R: generates R repositories x 10 untagged manifests x 3 layers (2
# of them from a pool shared by every repository, reverse links written),
# marks the link database complete, starts `registry serve` on its own
# redis-server, waits out the window, then collects repo00000 (dry run: 10
# manifests, their layer links and blobs, and the two shared layers whose
# other links decide) and prints:
#   - the server's own time per collect (the report's started_at..finished_at),
#   - the server's CPU per collect (perf stat task-clock over 20 collects),
#   - the server's file syscalls during one collect (strace -f -c),
#   - upstream's garbage-collect --dry-run on the same storage (the whole
#     process, without the reclaim middleware): wall time and file syscalls.
# Needs redis-server, redis-cli, curl, strace, perf (linux-perf), python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$(mktemp -d /tmp/reclaim-bench.XXXXXX)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/registry" ./cmd/registry
go build -o "$BIN/linkdbgen" ./storage/linkdb/internal/gen/linkdbgen
reg=$BIN/registry

file_syscalls() { # strace -c summary -> "openat=.. getdents64=.. ... total=.."
	awk '$NF ~ /^(openat|getdents64|newfstatat|statx|read|close|write|unlinkat|renameat)$/ {printf "%s=%s ", $NF, $4; n += $4} END {printf "file-total=%d", n}' "$1"
}

one() {
	local R=$1 D=$BIN/r$1 PORT=$((21000 + RANDOM % 9000)) RPORT=$((31000 + RANDOM % 9000))
	mkdir -p "$D/data"
	redis-server --port $RPORT --save "" --appendonly no --daemonize yes --logfile "$D/redis.log"
	cat >"$D/config.yml" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $D/data}
  delete: {enabled: true}
  cache: {blobdescriptor: inmemory}
http: {addr: 127.0.0.1:$PORT, secret: x}
middleware:
  storage:
    - name: reclaim
      options:
        window: 10s
        gc: {enabled: true, untagged: delete}
        reclaimer: {enabled: false}
        redis: {addrs: [127.0.0.1:$RPORT]}
YML
	sed '/^middleware:/,$d' "$D/config.yml" >"$D/upstream.yml"
	"$BIN/linkdbgen" -config "$D/config.yml" -repos "$R" -images 10 -layers 3 -shared 2 -referrer-every 0 -reverse >"$D/gen.log" 2>&1
	"$reg" linkdb rebuild "$D/config.yml" >"$D/rebuild.log" 2>&1
	"$reg" serve "$D/config.yml" >"$D/serve.log" 2>&1 &
	local SP=$!
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done
	sleep 11 # the tracker must have recorded for a window
	local url=http://127.0.0.1:$PORT
	for i in 1 2 3 4 5 6 7 8 9; do "$reg" gc collect repo00000 --dry-run --json --url "$url" >"$D/run$i.json"; done
	local server_ms
	server_ms=$(python3 - "$D" <<'PY'
import json, sys, datetime
def t(s): return datetime.datetime.fromisoformat(s[:26].rstrip("Z"))
ms = sorted((t(j["finished_at"]) - t(j["started_at"])).total_seconds() * 1000
            for j in (json.load(open(f"{sys.argv[1]}/run{i}.json")) for i in range(1, 10)))
print("median %.1f ms (min %.1f, max %.1f, 9 runs)" % (ms[4], ms[0], ms[-1]))
PY
)
	perf stat -e task-clock -p $SP -o "$D/perf.txt" &
	local PF=$!
	sleep 0.5
	for _ in $(seq 20); do "$reg" gc collect repo00000 --dry-run --url "$url" >/dev/null; done
	kill -INT $PF; wait $PF || true
	strace -f -c -p $SP -o "$D/strace.txt" &
	local ST=$!
	sleep 1
	"$reg" gc collect repo00000 --dry-run --url "$url" >/dev/null
	sleep 0.5; kill -INT $ST; wait $ST || true
	kill $SP; wait $SP 2>/dev/null || true
	redis-cli -p $RPORT shutdown nosave >/dev/null 2>&1 || true
	local t0 t1
	t0=$(date +%s%N)
	strace -f -c -o "$D/upstream.strace" "$reg" garbage-collect --dry-run "$D/upstream.yml" >"$D/upstream.log" 2>&1
	t1=$(date +%s%N)
	echo "R=$R"
	echo "  reclaim collect, server time:  $server_ms"
	echo "  reclaim collect, server CPU:   $(awk '/task-clock/{printf "%.1f ms per collect (20 collects)", $1/20}' "$D/perf.txt")"
	echo "  reclaim collect, file syscalls: $(file_syscalls "$D/strace.txt")"
	echo "  upstream garbage-collect --dry-run: $(( (t1 - t0) / 1000000 )) ms wall under strace; file syscalls: $(file_syscalls "$D/upstream.strace")"
	rm -rf "$D"
}

(($#)) || set -- 10 1000
for R in "$@"; do one "$R"; done
