#!/usr/bin/env bash
# bench-disk.sh: the slab engine's GET of 1 MiB blocks from disk at 16
# concurrent readers against what fio reads from the same filesystem, in
# one run (the target: at least 85 % of fio).
#
#   scripts/bench-disk.sh [DIR]     # DIR on the filesystem to measure (default /var/tmp)
#
# fio: --direct=1 --bs=1M --iodepth=16 --rw=randread with libaio (queue
# depth 16 from one thread), and the same with 16 psync jobs (16 blocking
# readers, which is what 16 server connections are). Installs fio from
# Debian when missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-/var/tmp}"
if ! command -v fio >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "fio is not installed (apt-get install fio)"; exit 1; }
	apt-get update -qq && apt-get install -y -qq fio >/dev/null
fi
work=$(mktemp -d -p "$dir" dfkv-bench-disk-XXXXXX)
trap 'rm -rf "$work"' EXIT
gbps() { awk -F';' '{printf "%.3f", $7*1024/1e9}'; }
fio_run() {
	fio --name=r --filename="$work/fio.dat" --size=2G --direct=1 --bs=1M --rw=randread \
		--time_based --runtime=6 --ramp_time=1 --output-format=terse "$@" 2>/dev/null | gbps
}
echo "== fio on $dir"
aio=$(fio_run --ioengine=libaio --iodepth=16 --numjobs=1)
psync=$(fio_run --ioengine=psync --numjobs=16 --group_reporting)
rm -f "$work/fio.dat"
echo "== slab engine: BenchmarkGetParallel16 (1 MiB GETs, 16 readers, O_DIRECT)"
slab=$(TMPDIR="$work" go test -run XXX -bench 'GetParallel16$' -benchtime 5s ./engine/slab/ |
	awk '/^BenchmarkGetParallel16/ {for (i=1;i<=NF;i++) if ($(i+1)=="MB/s") printf "%.3f", $i/1000}')
printf '%-44s %8s GB/s\n' "fio randread 1M, libaio, iodepth 16" "$aio" "fio randread 1M, psync, 16 jobs" "$psync" "slab GET 1M, 16 readers" "$slab"
awk -v s="$slab" -v a="$aio" -v p="$psync" 'BEGIN { printf "slab / fio libaio qd16: %.2f   slab / fio psync x16: %.2f\n", s/a, s/p }'
