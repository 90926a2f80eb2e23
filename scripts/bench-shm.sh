#!/usr/bin/env bash
# bench-shm.sh: one client on the node's host, shared memory against
# loopback TCP, in one run against one node (RAM tier on, server.shm_socket
# set):
#   - GET and PUT of 1 MiB, one connection, `dfkv bench` with --shm on and
#     --shm off, alternating rounds;
#   - one thread's memory copy, 1 MiB chunks over 1 GiB (the ceiling a
#     shared-memory GET copies against);
#   - batch GET of 64 x 1 MiB into one torch tensor from Python
#     (contrib/python/bench_shm.py), both paths alternating.
#
#   scripts/bench-shm.sh [ROUNDS]     # default 3 rounds of 4 s
#
# Needs python3-torch for the Python part (skipped with a note without it).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
work=$(mktemp -d -p /var/tmp dfkv-bench-shm-XXXXXX)
pid=
cleanup() {
	[ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
echo "== building dfkv and libdfkv.so"
go build -o "$work/dfkv" .
scripts/build-lib.sh "$work/lib" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
http=$(free_port)
"$work/dfkv" server --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --disks "$work/d0" \
	--disk-capacity-bytes 4GiB --ram-tier 1 --ram-tier-bytes 2GiB --shm-socket "$work/dfkv.sock" >"$work/node.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { echo "bench-shm.sh: the node exited; its log:" >&2; cat "$work/node.log" >&2; exit 1; }
	sleep 0.05
done
bench() { # OP SHM: GB/s of one 4 s run; fails (with its log) when the run does
	rm -f "$work/b.json"
	"$work/dfkv" bench --members "127.0.0.1:$port" --shm "$2" --workload "$1" --value-size 1MiB --keys 64 -c 1 \
		--duration 4s --warmup 1s --key-prefix shm/ --json "$work/b.json" >"$work/bench.log" 2>&1 ||
		{ echo "bench-shm.sh: dfkv bench $1 (shm $2) failed:" >&2; cat "$work/bench.log" >&2; return 1; }
	awk '/"totals": \{/ {f = 1} f && /"gb_per_s":/ {gsub(/[ ,]/, ""); split($0, a, ":"); printf "%.2f\n", a[2]; exit}' "$work/b.json"
}
"$work/dfkv" bench --members "127.0.0.1:$port" --workload get --fill --ops 1 --warmup 0s --value-size 1MiB --keys 64 --key-prefix shm/ >/dev/null 2>&1
printf '%-6s %-5s %10s %10s %7s\n' op round "shm GB/s" "tcp GB/s" ratio
for op in get put; do
	for r in $(seq 1 "$rounds"); do
		s=$(bench "$op" on)
		t=$(bench "$op" off)
		printf '%-6s %-5s %10s %10s %7s\n' "$op" "$r" "$s" "$t" "$(awk -v a="$s" -v b="$t" 'BEGIN{printf "%.2f", a/b}')"
	done
done
echo "== memory copy, one thread (go test -bench Shm/memcpy)"
go test -run XXX -bench 'Shm/memcpy' -benchtime 2s ./roles/server/ | awk '/memcpy/ {printf "memcpy-1MiB %.2f GB/s\n", $(NF-1)/1000}'
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	echo "== Python: batch GET 64 x 1 MiB into one torch tensor"
	PYTHONPATH=contrib/python DFKV_LIBRARY="$work/lib/libdfkv.so" /usr/bin/python3 contrib/python/bench_shm.py \
		--members "127.0.0.1:$port" --rounds "$rounds"
else
	echo "NOTE: torch is not importable by /usr/bin/python3: the Python part is skipped (apt-get install python3-torch)"
fi
