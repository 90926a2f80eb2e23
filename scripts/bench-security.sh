#!/usr/bin/env bash
# bench-security.sh: what tenant credentials and TLS cost. Three nodes
# alike but for server.credentials_file (auth) and server.tls_cert (tls),
# RAM tier on so reads are not disk-bound, measured with dfkv bench at 16
# connections in alternating rounds (the order flips each round, so drift
# on a shared machine falls on both sides of each ratio):
#   auth vs open: GET 4 KiB, EXIST
#   tls  vs open: GET 1 MiB, EXIST
#
#   scripts/bench-security.sh [ROUNDS] [DURATION]    # default 3 rounds of 3s
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
duration="${2:-3s}"
work=$(mktemp -d -p /var/tmp dfkv-bench-security-XXXXXX)
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
# A throwaway CA and a certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca \
	-keyout "$work/ca-key.pem" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-keyout "$work/node-key.pem" -out "$work/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/ext.cnf"
openssl x509 -req -in "$work/node.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" -CAcreateserial -days 1 \
	-extfile "$work/ext.cnf" -out "$work/node.pem" 2>/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A addr flags
# start runs a node in this shell (not a $(...) subshell: its PID must
# reach pids, or the trap could not stop it) and records its address.
start() { # name, extra args...
	local name=$1 port http
	shift
	port=$(free_port)
	http=$(free_port)
	"$work/dfkv" server --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --disks "$work/$name" \
		--disk-capacity-bytes 1GiB --ram-tier 1 --ram-tier-bytes 512MiB "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1; do
		kill -0 "${pids[-1]}" 2>/dev/null || { echo "bench-security.sh: node $name exited; its log:" >&2; cat "$work/$name.log" >&2; exit 1; }
		sleep 0.05
	done
	addr[$name]="127.0.0.1:$port"
}
start open
start auth --credentials-file "$work/credentials.toml"
start tls --tls-cert "$work/node.pem" --tls-key "$work/node-key.pem"
flags[open]=""
flags[auth]="--token $token"
flags[tls]="--tls --tls-ca $work/ca.pem"
bench() { # which, workload, size, keys, json
	# shellcheck disable=SC2086
	"$work/dfkv" bench --members "${addr[$1]}" ${flags[$1]} --workload "$2" --value-size "$3" --keys "$4" -c 16 \
		--duration "$duration" --warmup 1s --json "$5" >/dev/null 2>&1
}
fill() { # which, size, keys
	# shellcheck disable=SC2086
	"$work/dfkv" bench --members "${addr[$1]}" ${flags[$1]} --workload put --value-size "$2" --keys "$3" --ops "$3" -c 16 >/dev/null 2>&1
}
fill open 4KiB 4096
fill auth 4KiB 4096
fill open 1MiB 256
fill tls 1MiB 256
cases=("auth get 4KiB 4096" "auth exist 4KiB 4096" "tls get 1MiB 256" "tls exist 1MiB 256")
for r in $(seq 1 "$rounds"); do
	for c in "${cases[@]}"; do
		read -r which w size keys <<<"$c"
		if [ $((r % 2)) -eq 1 ]; then order="open $which"; else order="$which open"; fi
		for side in $order; do
			bench "$side" "$w" "$size" "$keys" "$work/$which-$w-$side-$r.json"
		done
	done
done
python3 - "$work" "$rounds" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def rate(name, r):
    with open(f"{work}/{name}-{r}.json") as f:
        t = json.load(f)["totals"]
    return t["ops_per_s"], t["gb_per_s"]
print(f"{'case':22} {'open':>14} {'secured':>14} {'ratio':>7}   per round")
for which, w, unit in (("auth", "get", "4KiB"), ("auth", "exist", ""), ("tls", "get", "1MiB"), ("tls", "exist", "")):
    o = [rate(f"{which}-{w}-open", r) for r in range(1, rounds + 1)]
    s = [rate(f"{which}-{w}-{which}", r) for r in range(1, rounds + 1)]
    k = 1 if (w == "get" and unit == "1MiB") else 0  # GB/s for 1 MiB GETs, ops/s otherwise
    fmt = (lambda v: f"{v:.2f} GB/s") if k else (lambda v: f"{v:.0f} ops/s")
    so, ss = sum(x[k] for x in o), sum(x[k] for x in s)
    per = " ".join(f"{b[k] / a[k]:.2f}" for a, b in zip(o, s))
    print(f"{which + ' ' + w + ' ' + unit:22} {fmt(so / rounds):>14} {fmt(ss / rounds):>14} {ss / so:7.2f}   {per}")
PY
