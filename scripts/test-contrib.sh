#!/usr/bin/env bash
# Tests contrib/: builds dfkv and libdfkv.so, starts three real `dfkv server`
# processes on free loopback ports with temporary disks, then runs
#   1. the C test program (contrib/libdfkv/test/dfkv_test.c, -Wall -Werror),
#   2. the Python suite (contrib/python/tests) against the package as a
#      user installs it: `pip install ./contrib/python` into a virtual
#      environment of Debian's own /usr/bin/python3 (the interpreter
#      python3-torch is built for, seen through --system-site-packages;
#      torch tests skip with a message when torch is absent), run from a
#      copy of the tests with no PYTHONPATH and no DFKV_LIBRARY, so the
#      suite imports the installed dfkv and its bundled libdfkv.so;
#   3. with no arguments, contrib/python/bench_restore.py on a tiny model,
#      so each connector's restore path and the benchmark keep working.
# Every server, including those the Python tests start and SIGKILL
# themselves, is stopped by PID on exit.
#
#   scripts/test-contrib.sh            # PYTHON=/usr/bin/python3 by default
#   scripts/test-contrib.sh -k lmcache # only the Python tests matching a pattern
#                                      # (arguments go to python -m unittest)
#   DFKV_BIN=/path/to/dfkv scripts/test-contrib.sh   # test against a prebuilt server
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
PYTHON="${PYTHON:-/usr/bin/python3}"

work=$(mktemp -d -t dfkv-contrib-XXXXXX)
pidfile="$work/pids"
: >"$pidfile"
cleanup() {
	local rc=$?
	while read -r pid; do
		[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	done <"$pidfile"
	while read -r pid; do
		[ -n "$pid" ] && wait "$pid" 2>/dev/null || true
	done <"$pidfile"
	if [ $rc -ne 0 ]; then
		for log in "$work"/node*.log; do
			[ -f "$log" ] && { echo "== $log"; tail -n 20 "$log"; }
		done
	fi
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT

echo "== build dfkv and libdfkv.so"
if [ -n "${DFKV_BIN:-}" ]; then
	cp "$DFKV_BIN" "$work/dfkv"
else
	go build -o "$work/dfkv" .
fi
scripts/build-lib.sh "$work/lib" >/dev/null
gofmt_out=$(gofmt -l contrib)
if [ -n "$gofmt_out" ]; then echo "gofmt would change: $gofmt_out"; exit 1; fi
go vet ./contrib/...

echo "== compile the C test against dfkv.h (-Wall -Wextra -Werror)"
cc -std=c11 -Wall -Wextra -Werror -I "$work/lib" -o "$work/dfkv_test" \
	contrib/libdfkv/test/dfkv_test.c -L "$work/lib" -ldfkv -Wl,-rpath,"$work/lib"

# free_port: the Python tests' choice (tests/_servers.py): a port below the
# kernel's ephemeral range, which no bind of port 0 by the Go tests running
# beside this script can take before the node listens on it.
free_port() { (cd contrib/python && PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -c 'from tests._servers import free_port; print(free_port())'); }
wait_listening() { # host:port pid log
	for _ in $(seq 1 600); do
		if grep -q "msg=\"dfkv server listening\" .* listen=$1 " "$3"; then return 0; fi
		kill -0 "$2" 2>/dev/null || { echo "node $1 exited before listening:"; cat "$3"; return 1; }
		sleep 0.05
	done
	echo "node $1 not listening after 30s"; return 1
}

members=()
for i in 1 2 3; do
	addr="127.0.0.1:$(free_port)"
	mkdir -p "$work/disk$i"
	# The nodes see no DFKV_* settings of the caller's environment.
	env $(env | sed -n 's/^\(DFKV_[A-Za-z0-9_]*\)=.*/-u \1/p') "$work/dfkv" server --listen "$addr" --http-listen '' \
		--disks "$work/disk$i" --disk-capacity-bytes 1GiB >"$work/node$i.log" 2>&1 &
	echo $! >>"$pidfile"
	wait_listening "$addr" $! "$work/node$i.log"
	members+=("$addr")
done
member_list=$(IFS=,; echo "${members[*]}")
echo "== nodes: $member_list"

echo "== C test"
"$work/dfkv_test" "$member_list"

echo "== Python tests ($PYTHON)"
if "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') found: tensor tests run"
else
	echo "NOTE: torch is not importable by $PYTHON: tensor tests will be skipped (apt-get install python3-torch)"
fi
echo "== pip install ./contrib/python into a virtual environment (offline: --no-index)"
"$PYTHON" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$repo/contrib/python"
mkdir -p "$work/pytests"
cp -r "$repo/contrib/python/tests" "$work/pytests/tests"
cd "$work/pytests"
env -u DFKV_LIBRARY -u PYTHONPATH DFKV_BIN="$work/dfkv" DFKV_TEST_MEMBERS="$member_list" \
	DFKV_TEST_PIDFILE="$pidfile" DFKV_TEST_INSTALLED=1 DFKV_SOURCE="$repo" PYTHONDONTWRITEBYTECODE=1 \
	"$work/venv/bin/python" -m unittest discover -s tests -t . -v "$@"

if [ $# -eq 0 ] && "$work/venv/bin/python" -c 'import torch' 2>/dev/null; then
	echo "== contrib/python/bench_restore.py on a tiny model: each connector's restore path end to end (no figure asserted)"
	(cd "$repo" && go build -o "$work/getbatch" ./contrib/bench/getbatch)
	DFKV_LIBRARY="$work/lib/libdfkv.so" "$work/venv/bin/python" "$repo/contrib/python/bench_restore.py" \
		--members "${members[0]}" --layers 2 --kv-heads 2 --head-dim 8 --page-tokens 4 --pages 4 \
		--connectors sglang,lmcache,vllm,vllm-layers --rounds 1 --seconds 0.2 --go-bench "$work/getbatch" >"$work/restore.json"
	"$work/venv/bin/python" -c 'import json, sys; d = json.load(open(sys.argv[1])); print({n: c["gb_per_s"] for n, c in d["connectors"].items()}, "go", d["go_getbatch_gb_per_s"])' "$work/restore.json"
fi
