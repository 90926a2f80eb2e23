#!/usr/bin/env bash
# bench-auth.sh: what tenant credentials cost. Two nodes alike but for
# server.credentials_file (RAM tier on, so reads are not disk-bound and
# any per-request cost shows), measured with dfkv bench in alternating
# rounds (open, auth, auth, open, ...) so drift on a shared machine falls
# on both: GET 4 KiB and EXIST at 16 connections.
#
#   scripts/bench-auth.sh [ROUNDS] [DURATION]    # default 4 rounds of 3s
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-4}"
duration="${2:-3s}"
work=$(mktemp -d -p /var/tmp dfkv-bench-auth-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/dfkv" .
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sum=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
cat >"$work/credentials.toml" <<TOML
[[credential]]
name = "bench"
token_sha256 = "$sum"
tenants = ["dfkv-tools"]
allow = ["read", "write"]
TOML
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # name, extra args...
	local name=$1 port http
	shift
	port=$(free_port)
	http=$(free_port)
	"$work/dfkv" server --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --disks "$work/$name" \
		--disk-capacity-bytes 1GiB --ram-tier 1 --ram-tier-bytes 512MiB "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1; do
		kill -0 "${pids[-1]}" 2>/dev/null || { echo "bench-auth.sh: node $name exited; its log:" >&2; cat "$work/$name.log" >&2; exit 1; }
		sleep 0.05
	done
	echo "127.0.0.1:$port"
}
open_addr=$(start open)
auth_addr=$(start auth --credentials-file "$work/credentials.toml")
bench() { # addr, token, workload, json
	local tok=()
	[ -z "$2" ] || tok=(--token "$2")
	"$work/dfkv" bench --members "$1" "${tok[@]}" --workload "$3" --value-size 4KiB --keys 4096 -c 16 \
		--duration "$duration" --warmup 1s --json "$4" >/dev/null 2>&1
}
# Fill both once; the measured rounds then read only.
"$work/dfkv" bench --members "$open_addr" --workload put --value-size 4KiB --keys 4096 --ops 4096 -c 16 >/dev/null 2>&1
"$work/dfkv" bench --members "$auth_addr" --token "$token" --workload put --value-size 4KiB --keys 4096 --ops 4096 -c 16 >/dev/null 2>&1
for r in $(seq 1 "$rounds"); do
	for w in get exist; do
		if [ $((r % 2)) -eq 1 ]; then order="open auth"; else order="auth open"; fi
		for which in $order; do
			if [ "$which" = open ]; then bench "$open_addr" "" "$w" "$work/$w-open-$r.json"
			else bench "$auth_addr" "$token" "$w" "$work/$w-auth-$r.json"; fi
		done
	done
done
python3 - "$work" "$rounds" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def ops(w, which, r):
    with open(f"{work}/{w}-{which}-{r}.json") as f:
        return json.load(f)["totals"]["ops_per_s"]
print(f"{'workload':8} {'open ops/s':>12} {'auth ops/s':>12} {'auth/open':>10}   (sums over {rounds} alternating rounds)")
for w in ("get", "exist"):
    o = sum(ops(w, "open", r) for r in range(1, rounds + 1))
    a = sum(ops(w, "auth", r) for r in range(1, rounds + 1))
    per = " ".join(f"{ops(w, 'auth', r) / ops(w, 'open', r):.3f}" for r in range(1, rounds + 1))
    print(f"{w:8} {o / rounds:12.0f} {a / rounds:12.0f} {a / o:10.3f}   per round: {per}")
PY
