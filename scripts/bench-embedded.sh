#!/usr/bin/env bash
# bench-embedded.sh: a 1 MiB RAM-resident GET from Python, embedded store
# against a node over loopback TCP, alternating rounds in one run
# (contrib/python/bench_embedded.py).
#
#   scripts/bench-embedded.sh [ROUNDS]     # default 3 rounds of 2 s
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
work=$(mktemp -d -p /var/tmp dfkv-bench-embedded-XXXXXX)
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
	--disk-capacity-bytes 1GiB --ram-tier 1 --ram-tier-bytes 256MiB >"$work/node.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { echo "bench-embedded.sh: the node exited; its log:" >&2; cat "$work/node.log" >&2; exit 1; }
	sleep 0.05
done
echo "== 1 MiB GET from Python: embedded store vs loopback TCP ($rounds rounds)"
PYTHONPATH=contrib/python DFKV_LIBRARY="$work/lib/libdfkv.so" python3 contrib/python/bench_embedded.py \
	--members "127.0.0.1:$port" --rounds "$rounds"
