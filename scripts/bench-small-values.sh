#!/usr/bin/env bash
# bench-small-values.sh: GET and PUT of small values (4 KiB, 64 KiB) from
# disk at 16 connections, against the two ceilings that bound them, all
# measured in one run on one filesystem:
#   - fio with io_uring, O_DIRECT, queue depth 16, the same block size
#     (random reads for GET, random writes for PUT): what the disk does;
#   - the same node with a RAM tier holding every value: what the network
#     path and the node do without the disk.
# It prints each figure and disk / min(fio, RAM) per operation and size.
#
#   scripts/bench-small-values.sh [DIR]   # DIR on the filesystem to measure (default /var/tmp)
#   SECONDS_PER_CELL=8 scripts/bench-small-values.sh   # longer cells (default 5)
#   scripts/bench-small-values.sh --quick [DIR]        # 1 s cells, small files: the script works (CI)
#
# The node and the load generator share the machine, as do fio and the
# node in turn (never at once). Installs fio from Debian when missing (as
# root). Ports come from 10000-19999, below the kernel's ephemeral range
# (the Go and Python tests that run beside it in CI take 20000-32767).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${SECONDS_PER_CELL:-5}"
keys=20000
fio_size=1G
if [ "${1:-}" = --quick ]; then
	shift
	secs=1 keys=2000 fio_size=128M
fi
dir="${1:-/var/tmp}"
if ! command -v fio >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "fio is not installed (apt-get install fio)"; exit 1; }
	apt-get update -qq && apt-get install -y -qq fio >/dev/null
fi
work=$(mktemp -d -p "$dir" dfkv-bench-small-XXXXXX)
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((10000 + RANDOM % 10000))
		port_in_use "$p" || { echo "$p"; return; }
	done
	echo "bench-small-values.sh: no free port found" >&2
	exit 1
}

echo "== building dfkv"
go build -o "$work/dfkv" .
dfkv="$work/dfkv"

# fio_iops RW BS: IOPS of fio io_uring at queue depth 16 on $dir.
fio_iops() {
	fio --name=c --filename="$work/fio.dat" --size="$fio_size" --direct=1 --rw="$1" --bs="$2" \
		--ioengine=io_uring --iodepth=16 --time_based --runtime="$secs" --ramp_time=1 \
		--output-format=terse 2>/dev/null |
		awk -F';' -v rw="$1" '{ print (rw == "randread") ? $8 : $49 }'
}

# start_node ARGS...: a dfkv server on free ports with a 4 GiB disk in
# $work, ready; sets addr and server_pid.
start_node() {
	local port http
	port=$(free_port)
	http=$(free_port)
	rm -rf "$work/disk"
	"$dfkv" server --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" \
		--disks "$work/disk" --disk-capacity-bytes 4GiB "$@" >"$work/node.log" 2>&1 &
	server_pid=$!
	addr="127.0.0.1:$port"
	for _ in $(seq 1 2400); do
		curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$server_pid" 2>/dev/null || { echo "dfkv server exited:"; cat "$work/node.log"; exit 1; }
		sleep 0.05
	done
	echo "dfkv server not ready after 120 s:"; cat "$work/node.log"; exit 1
}

stop_node() { kill "$server_pid"; wait "$server_pid" || true; server_pid=; }

# ops OP SIZE: operations per second of dfkv bench against $addr. GET
# fills every key first (unmeasured); PUT then overwrites them, as a cache
# in service does, rather than measuring a fresh file's first writes.
ops() {
	local out figure
	if ! out=$("$dfkv" bench --members "$addr" --workload "$1" --value-size "$2" --keys "$keys" -c 16 \
		--duration "${secs}s" 2>&1); then
		echo "bench-small-values.sh: dfkv bench $1 $2 failed:" >&2
		echo "$out" >&2
		return 1
	fi
	figure=$(echo "$out" | awk -v op="$1" '$1 == op { print $3 }')
	[ -n "$figure" ] || { echo "bench-small-values.sh: no $1 figure in dfkv bench's output:" >&2; echo "$out" >&2; return 1; }
	echo "$figure"
}

declare -A r
echo "== fio io_uring, O_DIRECT, iodepth 16, on $dir"
for bs in 4k 64k; do
	r[fio_get_$bs]=$(fio_iops randread "$bs")
	r[fio_put_$bs]=$(fio_iops randwrite "$bs")
done
rm -f "$work/fio.dat"

# node_cells WHERE SERVER-ARGS...: GET then PUT of each size against a
# node started with the arguments, into r[WHERE_op_bs].
node_cells() {
	local where=$1 bs size
	shift
	start_node "$@"
	for bs in 4k 64k; do
		size=${bs%k}KiB
		r[${where}_get_$bs]=$(ops get "$size")
		r[${where}_put_$bs]=$(ops put "$size")
	done
	stop_node
}
echo "== dfkv from disk (io_uring as configured; DFKV_SERVER_URING to change)"
node_cells disk
echo "== dfkv from a RAM tier that holds every value"
node_cells ram --ram-tier 1 --ram-tier-bytes 2GiB

printf '\n%-12s %10s %10s %10s %8s\n' "op/s" "disk" "fio" "RAM" "ratio"
for bs in 4k 64k; do
	for op in get put; do
		d=${r[disk_${op}_$bs]} f=${r[fio_${op}_$bs]} m=${r[ram_${op}_$bs]}
		awk -v n="$op $bs" -v d="$d" -v f="$f" -v m="$m" \
			'BEGIN { c = (f < m) ? f : m; printf "%-12s %10.0f %10.0f %10.0f %7.0f%%\n", n, d, f, m, 100 * d / c }'
	done
done
echo "(ratio: dfkv from disk against the lower of fio and the RAM tier)"
