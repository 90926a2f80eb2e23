#!/usr/bin/env bash
# bench-ready.sh: how long a node with a large RAM tier takes from exec to
# answering /readyz and its first GET, and how long its arena then takes to
# become resident in the background (from the node's own log line).
#
#   scripts/bench-ready.sh [RAM_TIER_BYTES]     # default 6GiB
#
# The first start on a freshly booted VM is the slow case (the hypervisor
# backs the memory as it is first touched); run it twice to see both.
set -euo pipefail
cd "$(dirname "$0")/.."
bytes="${1:-6GiB}"
work=$(mktemp -d -p /var/tmp dfkv-bench-ready-XXXXXX)
pid=
cleanup() {
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	[ -z "$pid" ] || wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/dfkv" .
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
http=$(free_port)
now() { date +%s.%N; }
t0=$(now)
"$work/dfkv" server --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --disks "$work/d0" \
	--disk-capacity-bytes 2GiB --ram-tier 1 --ram-tier-bytes "$bytes" >"$work/log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1; do
	kill -0 "$pid" 2>/dev/null || { echo "bench-ready.sh: the node exited; its log:" >&2; cat "$work/log" >&2; exit 1; }
	sleep 0.01
done
t1=$(now)
"$work/dfkv" ctl --members "127.0.0.1:$port" put ready-probe - <<<"x" >/dev/null
"$work/dfkv" ctl --members "127.0.0.1:$port" get ready-probe - >/dev/null
t2=$(now)
echo "RAM tier $bytes: /readyz after $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}') s, first PUT+GET done after $(awk -v a="$t0" -v b="$t2" 'BEGIN{printf "%.3f", b-a}') s"
for _ in $(seq 1 1200); do
	if grep -q 'arena resident' "$work/log"; then
		grep -o 'took=[^ ]*' <(grep 'arena resident' "$work/log") | sed 's/^/arena resident in the background: /'
		exit 0
	fi
	sleep 0.1
done
echo "bench-ready.sh: the arena was not resident after 120 s" >&2
exit 1
