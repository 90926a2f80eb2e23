#!/usr/bin/env bash
# bench-vs-peers.sh: dfkv against redis and memcached on this machine, with
# one load generator for all three (`dfkv bench --protocol dfkv|redis|memcache`),
# so the tool is not the difference.
#
# It installs redis-server, memcached and iperf3 from Debian when missing,
# starts redis (persistence off), memcached (-t 2 -I 8m -m 8192), iperf3 -s
# and a dfkv server (temporary disk directory) on free loopback ports, as
# its own children, and stops them by PID on exit. For each value size
# (64KiB, 1MiB) and each system, it fills the key space once (unmeasured:
# first-touch of fresh memory is far slower than steady state; with
# dfkv's RAM tier on, it then waits until the fill is
# flushed to disk); then for each connection count (1, 16) it measures GET,
# then SET/PUT over the same keys, for a fixed duration. Then EXIST of
# 4KiB-value keys at 16 connections (dfkv EXIST, redis EXISTS, memcached
# `mg KEY` without flags), and the two ceilings: loopback TCP (iperf3
# --len 1M, one stream) and the disk (fio --direct=1 --bs=1M --iodepth=16
# random reads on the filesystem of dfkv's disk directory), with the
# ratio of dfkv's GET 1MiB at 16 connections to the latter (the target
# without the RAM tier: at least 0.85).
#
# With --tier it measures instead the RAM tier's rows: GET of
# 256KiB values at 1 connection (the p99 column is the target there), GET
# and SET of 1MiB at 16, and GET of 4MiB at 32 connections; pass the tier
# through --server-args (e.g. "--ram-tier 1 --ram-tier-bytes 4GiB").
#
# It prints one table: GB/s of values (GB = 1e9 bytes; ops/s for EXIST)
# per system, the dfkv/redis and dfkv/memcached ratios, and each system's
# p99 latency in µs. The JSON result of every run is kept in the results
# directory. With --repeat N each cell is measured N times, the three
# systems taking turns (dfkv, redis, memcached, dfkv, ...), so a slow spell
# of this shared machine does not land on one system only; the table shows
# the medians and the ratios of the medians, and the progress lines every
# round.
#
# With --pin the servers (all three, and iperf3's) run on the first half
# of the CPUs and the load generator on the other half (`taskset`), so the
# load generator never competes with the server under test for a CPU. On
# this 2-core VM, unpinned, the two share both cores and each Go server
# pays the scheduler for it (a 256 KiB GET cost the node about 40 µs more
# CPU unpinned than pinned, memcached the same either way); pinned,
# every system runs on one core of its own. The table says which it was.
#
# Usage: scripts/bench-vs-peers.sh [--quick] [--tier | --exist-only] [--pin] [--repeat N] [--duration SECS] [--out DIR] [--server-args ARGS]
#   --quick            a short smoke run (1 s per measurement, small key spaces)
#   --tier             the RAM tier rows instead of the default ones
#   --exist-only       only the EXIST row (and the iperf3 ceiling)
#   --pin              servers on the first half of the CPUs, the load
#                      generator on the second half (needs 2 or more; with
#                      SMT the halves may share physical cores)
#   --repeat N         rounds per cell, systems alternating; medians reported (default 1)
#   --duration S       seconds per measurement (default 5)
#   --out DIR          keep results in DIR (default: a new directory under /tmp)
#   --server-args ARGS extra flags for `dfkv server`, word-split
#                      (e.g. "--store-engine slab")
# Exit status: 0 when every run was clean; 1 when any run had errors (its
# cell shows ERR) or a server failed to start.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
tier=0
exist_only=0
pin=0
repeat=1
duration=5
out=""
server_args=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 ;;
	--tier) tier=1 ;;
	--exist-only) exist_only=1 ;;
	--pin) pin=1 ;;
	--duration) duration="$2"; shift ;;
	--repeat) repeat="$2"; shift ;;
	--out) out="$2"; shift ;;
	--server-args) server_args="$2"; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-vs-peers.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done

if [ "$tier" = 1 ] && [ "$exist_only" = 1 ]; then
	echo "bench-vs-peers.sh: --tier and --exist-only pick different rows; give one" >&2
	exit 2
fi

case "$repeat" in '' | *[!0-9]* | 0)
	echo "bench-vs-peers.sh: --repeat $repeat: want a whole number of rounds, 1 or more" >&2
	exit 2
	;;
esac

# srv and gen prefix the servers' and the load generator's commands:
# empty, or a taskset to their halves of the CPUs (--pin).
srv=()
gen=()
pinned="unpinned: servers and load generator share all $(nproc) CPUs"
if [ "$pin" = 1 ]; then
	if ! command -v taskset >/dev/null; then
		echo "bench-vs-peers.sh: --pin needs taskset (Debian package util-linux)" >&2
		exit 2
	fi
	# The CPUs this script may use (a cpuset may allow 4-7, not 0-3),
	# expanded from taskset's list form ("0-3,8") to one id per word.
	allowed=()
	IFS=, read -r -a ranges <<<"$(taskset -pc $$ | sed 's/.*: //')"
	for r in "${ranges[@]}"; do
		if [[ $r == *-* ]]; then
			for ((i = ${r%-*}; i <= ${r#*-}; i++)); do allowed+=("$i"); done
		else
			allowed+=("$r")
		fi
	done
	ncpu=${#allowed[@]}
	if [ "$ncpu" -lt 2 ]; then
		echo "bench-vs-peers.sh: --pin needs 2 or more CPUs, this script may use $ncpu" >&2
		exit 2
	fi
	half=$((ncpu / 2))
	srv_cpus=$(IFS=,; echo "${allowed[*]:0:half}")
	gen_cpus=$(IFS=,; echo "${allowed[*]:half}")
	srv=(taskset -c "$srv_cpus")
	gen=(taskset -c "$gen_cpus")
	pinned="pinned: servers on CPU $srv_cpus, load generator on CPU $gen_cpus"
fi
warmup=1s
sizes=(64KiB 1MiB)
conns=(1 16)
# Key spaces of about 1 GiB per size, and 16384 4KiB-value keys for EXIST.
declare -A keys=([64KiB]=16384 [256KiB]=4096 [1MiB]=1024 [4MiB]=256)
exist_keys=16384
iperf_secs=5
if [ "$quick" = 1 ]; then
	duration=1
	warmup=300ms
	keys=([64KiB]=512 [256KiB]=256 [1MiB]=128 [4MiB]=32)
	exist_keys=1024
	iperf_secs=1
fi

# --- tools ---------------------------------------------------------------
missing=()
for pair in redis-server:redis-server memcached:memcached iperf3:iperf3 curl:curl fio:fio; do
	command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "== installing ${missing[*]} from Debian"
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# --- processes, all ours, stopped by PID ------------------------------------
data=$(mktemp -d -t dfkv-vs-peers-data.XXXXXX)
results=${out:-$(mktemp -d -t dfkv-vs-peers.XXXXXX)}
mkdir -p "$results"
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_port picks a port below the kernel's ephemeral range (32768 and up
# by default), so no outgoing connection can take it before the server
# binds it: 10000-19999, since the Go and Python tests that run beside this
# script in CI take 20000-32767.
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((10000 + RANDOM % 10000))
		if ! port_in_use "$p"; then
			echo "$p"
			return
		fi
	done
	echo "bench-vs-peers.sh: no free port found" >&2
	exit 1
}
# wait_port NAME PORT PID LOG: until PORT accepts, or fail naming NAME.
wait_port() {
	for _ in $(seq 1 200); do
		if port_in_use "$2"; then return 0; fi
		if ! kill -0 "$3" 2>/dev/null; then
			echo "bench-vs-peers.sh: $1 exited before listening on $2; its log:" >&2
			cat "$4" >&2
			exit 1
		fi
		sleep 0.05
	done
	echo "bench-vs-peers.sh: $1 does not listen on $2 after 10 s; its log:" >&2
	cat "$4" >&2
	exit 1
}

# wait_ready PID LOG: until dfkv answers /readyz (it binds its ports
# before it opens its disks, so a listening port is not yet a ready node),
# or fail with its log. Two minutes bound a stuck start, not a slow one.
wait_ready() {
	for _ in $(seq 1 2400); do
		if curl -sf "http://127.0.0.1:$dfkv_http/readyz" >/dev/null 2>&1; then return 0; fi
		if ! kill -0 "$1" 2>/dev/null; then
			echo "bench-vs-peers.sh: dfkv server exited before it was ready; its log:" >&2
			cat "$2" >&2
			exit 1
		fi
		sleep 0.05
	done
	echo "bench-vs-peers.sh: dfkv server not ready after 120 s; its log:" >&2
	cat "$2" >&2
	exit 1
}

echo "== building dfkv"
go build -o "$data/dfkv" .
dfkv="$data/dfkv"

redis_port=$(free_port)
"${srv[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
	--protected-mode yes --daemonize no >"$results/redis.log" 2>&1 &
pids+=($!)
wait_port redis "$redis_port" $! "$results/redis.log"

mc_port=$(free_port)
mc_user=()
[ "$(id -u)" = 0 ] && mc_user=(-u root) # memcached refuses root without -u
"${srv[@]}" memcached -l 127.0.0.1 -p "$mc_port" -U 0 -m 8192 -I 8m -t 2 -c 4096 "${mc_user[@]}" \
	>"$results/memcached.log" 2>&1 &
pids+=($!)
wait_port memcached "$mc_port" $! "$results/memcached.log"

iperf_port=$(free_port)
"${srv[@]}" iperf3 -s -B 127.0.0.1 -p "$iperf_port" >"$results/iperf3-server.log" 2>&1 &
pids+=($!)
wait_port iperf3 "$iperf_port" $! "$results/iperf3-server.log"

dfkv_port=$(free_port)
dfkv_http=$(free_port)
"${srv[@]}" "$dfkv" server --listen "127.0.0.1:$dfkv_port" --http-listen "127.0.0.1:$dfkv_http" \
	--disks "$data/disk0" --disk-capacity-bytes 16GiB $server_args >"$results/dfkv-server.log" 2>&1 &
pids+=($!)
wait_ready $! "$results/dfkv-server.log"

echo "== redis :$redis_port, memcached :$mc_port, iperf3 :$iperf_port, dfkv :$dfkv_port; results in $results"

# --- measurements -------------------------------------------------------------
failed=0
# total FILE KEY: a field of the "totals" object of a bench JSON result.
total() {
	awk -v k="\"$2\":" '/"totals": \{/ {f = 1; next} f && /\}/ {f = 0} f && index($0, k) {gsub(/[ ,]/, ""); split($0, a, ":"); print a[2]}' "$1"
}
# bench SYSTEM ARGS...: `dfkv bench` aimed at one of the three servers,
# in the key space every run shares.
bench() {
	local sys=$1
	shift
	local target=(--members "127.0.0.1:$dfkv_port")
	case "$sys" in
	redis) target=(--protocol redis --addr "127.0.0.1:$redis_port") ;;
	memcached) target=(--protocol memcache --addr "127.0.0.1:$mc_port") ;;
	esac
	"${gen[@]}" "$dfkv" bench "${target[@]}" --key-prefix "vs/" "$@"
}
# run SYSTEM NAME ARGS...: one bench run (round $round); prints the GB/s
# (ops/s when unit=ops) of the measured stage and the p99, or ERR. It runs
# in $(...), so it sets nothing: measure_row notes the ERR.
run() {
	local sys=$1 name=$2
	shift 2
	local base="$results/$name-$sys"
	[ "$repeat" = 1 ] || base="$base-r$round"
	local json="$base.json"
	if bench "$sys" --duration "${duration}s" --warmup "$warmup" --json "$json" "$@" >"$base.txt" 2>&1; then
		local v
		if [ "$unit" = ops/s ]; then v=$(total "$json" ops_per_s); else v=$(total "$json" gb_per_s); fi
		echo "$v $(p99 "$json")"
	else
		echo "bench-vs-peers.sh: $sys $name had errors, see $base.txt:" >&2
		grep -E "WARNING|error:|dfkv bench:" "$base.txt" | head -5 >&2 || true
		echo ERR
	fi
}

# p99 FILE: the p99 latency (µs) of the first operation of a bench result.
p99() {
	awk '/"p99":/ {gsub(/[ ,]/, ""); split($0, a, ":"); print a[2]; exit}' "$1"
}

fmt() {
	case "$1" in ERR | "") echo "${1:-?}" ;; *) awk -v v="$1" 'BEGIN { if (v >= 1000) printf "%.0f", v; else printf "%.3g", v }' ;; esac
}
# fill SIZE N: PUT keys 0..N-1 of SIZE into every system (unmeasured: the
# GET rows then find them), then wait until dfkv's RAM tier, if on, has
# flushed them all, so a GET row does not pay for the fill's disk writes.
fill() {
	local sys
	for sys in dfkv redis memcached; do
		if ! bench "$sys" --workload get --fill --ops 1 --warmup 0s -c 4 \
			--value-size "$1" --keys "$2" >"$results/fill-$1-$sys.txt" 2>&1; then
			echo "bench-vs-peers.sh: filling $sys with $1 values failed, see $results/fill-$1-$sys.txt" >&2
			failed=1
		fi
	done
	local dirty
	for _ in $(seq 1 1200); do
		dirty=$(curl -sf "http://127.0.0.1:$dfkv_http/metrics" | awk '$1 == "dfkv_ram_dirty_bytes" {print $2}')
		case "${dirty:-0}" in 0) return ;; esac
		sleep 0.1
	done
	echo "bench-vs-peers.sh: dfkv still has $dirty dirty bytes 120 s after the fill" >&2
}

# median VALUES...: the median of numbers, or ERR when any is ERR or
# missing.
median() {
	case " $* " in *" ERR "* | "  ") echo ERR; return ;; esac
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

rows=()
measure_row() { # OP SIZE CONNS NAME ARGS...: one row of the table
	local op=$1 size=$2 c=$3 name=$4
	shift 4
	local sys v l
	local -A vals=() lats=() last=()
	for ((round = 1; round <= repeat; round++)); do
		for sys in dfkv redis memcached; do
			read -r v l <<<"$(run "$sys" "$name" "$@")"
			last[$sys]=${v:-ERR}
			vals[$sys]+="${v:-ERR} "
			lats[$sys]+="${l:-ERR} "
		done
		[ "$repeat" = 1 ] || printf '   round %d: dfkv %s  redis %s  memcached %s %s\n' "$round" \
			"$(fmt "${last[dfkv]}")" "$(fmt "${last[redis]}")" "$(fmt "${last[memcached]}")" "$unit" >&2
	done
	# shellcheck disable=SC2086 # word-split on purpose: the rounds' values
	local d r m dl rl ml
	d=$(median ${vals[dfkv]}) r=$(median ${vals[redis]}) m=$(median ${vals[memcached]})
	dl=$(median ${lats[dfkv]}) rl=$(median ${lats[redis]}) ml=$(median ${lats[memcached]})
	case "$d$r$m" in *ERR*) failed=1 ;; esac
	rows+=("$op|$size|$c|$unit|$d|$r|$m|$dl|$rl|$ml")
	printf '   %-5s %-6s c=%-3s dfkv %s  redis %s  memcached %s %s%s\n' "$op" "$size" "$c" "$(fmt "$d")" "$(fmt "$r")" "$(fmt "$m")" "$unit" \
		"$([ "$repeat" = 1 ] || echo " (medians of $repeat)")" >&2
}

if [ "$tier" = 1 ]; then
	unit=GB/s
	# OP SIZE CONNS per row; the first row of a size fills its keys.
	filled=""
	for row in "GET 256KiB 1" "GET 1MiB 16" "SET 1MiB 16" "GET 4MiB 32"; do
		read -r op size c <<<"$row"
		n=${keys[$size]}
		case " $filled " in *" $size "*) ;; *)
			echo "== filling $n keys of $size" >&2
			fill "$size" "$n"
			filled="$filled $size"
			;;
		esac
		wl=get
		[ "$op" = SET ] && wl=put
		echo "== $op $size, $c connections, $n keys" >&2
		measure_row "$op" "$size" "$c" "${wl}-$size-c$c" --workload "$wl" --fill=false --value-size "$size" --keys "$n" -c "$c"
	done
else
	[ "$exist_only" = 1 ] && sizes=()
	for size in "${sizes[@]}"; do
		n=${keys[$size]}
		echo "== filling $n keys of $size" >&2
		fill "$size" "$n"
		for c in "${conns[@]}"; do
			unit=GB/s
			# Later connection counts find the keys filled (the SET run
			# rewrote the same keys with values of the same size).
			echo "== $size, $c connections, $n keys: GET" >&2
			measure_row GET "$size" "$c" "get-$size-c$c" --workload get --fill=false --value-size "$size" --keys "$n" -c "$c"
			echo "== $size, $c connections: SET/PUT over the filled keys" >&2
			measure_row SET "$size" "$c" "set-$size-c$c" --workload put --fill=false --value-size "$size" --keys "$n" -c "$c"
		done
	done
	unit=ops/s
	echo "== EXIST, 4KiB values, 16 connections, $exist_keys keys" >&2
	fill 4KiB "$exist_keys"
	measure_row EXIST 4KiB 16 "exist-4KiB-c16" --workload exist --fill=false --value-size 4KiB --keys "$exist_keys" -c 16
fi

echo "== iperf3 --len 1M, 1 stream, ${iperf_secs}s" >&2
iperf_gbs=ERR
if "${gen[@]}" iperf3 -c 127.0.0.1 -p "$iperf_port" --len 1M -t "$iperf_secs" -J >"$results/iperf3.json" 2>&1; then
	iperf_gbs=$(awk '/"sum_received"/ {f = 1} f && /"bits_per_second"/ {gsub(/[ ,]/, ""); split($0, a, ":"); printf "%.3g\n", a[2] / 8e9; exit}' "$results/iperf3.json")
else
	echo "bench-vs-peers.sh: iperf3 failed, see $results/iperf3.json" >&2
	failed=1
fi

# The disk ceiling, on the filesystem of dfkv's disk directory (only in the
# default mode: there GET 1MiB at 16 connections reads that disk).
fio_gbs=""
if [ "$tier" = 0 ] && [ "$exist_only" = 0 ]; then
	fio_size=2G fio_secs=6
	[ "$quick" = 1 ] && fio_size=256M fio_secs=1
	echo "== fio --direct=1 --bs=1M --iodepth=16 randread, ${fio_secs}s, on the disk's filesystem" >&2
	if fio --name=ceiling --filename="$data/fio.dat" --size="$fio_size" --direct=1 --bs=1M \
		--rw=randread --ioengine=libaio --iodepth=16 --time_based --runtime="$fio_secs" \
		--ramp_time=1 --output-format=terse >"$results/fio.txt" 2>&1; then
		# terse v3: field 7 is the read bandwidth in KiB/s.
		fio_gbs=$(awk -F';' 'NF > 7 {printf "%.3g\n", $7 * 1024 / 1e9; exit}' "$results/fio.txt")
	fi
	rm -f "$data/fio.dat"
	if [ -z "$fio_gbs" ]; then
		echo "bench-vs-peers.sh: fio failed, see $results/fio.txt" >&2
		fio_gbs=ERR
		failed=1
	fi
fi

# --- the table ----------------------------------------------------------------
ratio() {
	case "$1$2" in *ERR* | "") echo "-"; return ;; esac
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
}
echo
echo "dfkv vs redis vs memcached, one load generator (dfkv bench), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores$([ "$quick" = 1 ] && echo ', QUICK run')"
echo "measured ${duration}s per cell after an unmeasured fill and ${warmup} warm-up$([ "$repeat" = 1 ] || echo ", median of $repeat alternating rounds"); GB = 1e9 bytes of values"
echo "dfkv server: --disk-capacity-bytes 16GiB ${server_args:-(default engine)}; $pinned"
printf '%-6s %-6s %5s  %-5s %10s %10s %10s  %10s  %14s  %9s %9s %9s\n' op size conns unit dfkv redis memcached dfkv/redis dfkv/memcached \
	"p99us:dfkv" redis memcached
for row in "${rows[@]}"; do
	IFS='|' read -r op size c u d r m dl rl ml <<<"$row"
	printf '%-6s %-6s %5s  %-5s %10s %10s %10s  %10s  %14s  %9s %9s %9s\n' "$op" "$size" "$c" "$u" "$(fmt "$d")" "$(fmt "$r")" "$(fmt "$m")" \
		"$(ratio "$d" "$r")" "$(ratio "$d" "$m")" "$(fmt "$dl")" "$(fmt "$rl")" "$(fmt "$ml")"
done
echo "loopback ceiling: iperf3 --len 1M, 1 stream, ${iperf_secs}s: $iperf_gbs GB/s"
if [ -n "$fio_gbs" ]; then
	get1m=ERR
	for row in "${rows[@]}"; do
		IFS='|' read -r op size c u d _ <<<"$row"
		[ "$op $size $c" = "GET 1MiB 16" ] && get1m=$d
	done
	echo "disk ceiling: fio --direct=1 --bs=1M --iodepth=16 randread on dfkv's filesystem: $fio_gbs GB/s; dfkv GET 1MiB c=16 / fio: $(ratio "$get1m" "$fio_gbs")"
fi
echo "results: $results"
if [ "$failed" != 0 ]; then
	echo "WARNING: some runs had errors (ERR cells): they are not results" >&2
	exit 1
fi
