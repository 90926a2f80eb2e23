#!/usr/bin/env bash
# Runs every test of dfkv: formatting and vet, the Go suites with the race
# detector (fuzz seed corpora included: `go test` replays testdata/fuzz),
# the multi-process tests of roles/e2e that build and start real dfkv
# binaries (and a real etcd), and the C ABI and Python connector tests
# against real nodes.
# This is the README's test command and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go version: $(go version)"
go mod download

# The object-store tier's tests run against a real S3 server, versitygw,
# built from the Go module proxy into $(go env GOPATH)/bin (where the
# tests look for it). It builds in the background while vet and
# staticcheck run; the Go tests wait for it.
versitygw_version=v1.8.0
versitygw_pid=
# The Kubernetes check's module (its own go.mod, about 200 MB of
# dependencies) downloads meanwhile too, so a fresh machine does not wait
# for it after the Go tests.
(cd contrib/kubernetes/validate && go mod download) >"${TMPDIR:-/tmp}/k8s-modules.log" 2>&1 &
k8s_modules_pid=$!
if ! command -v versitygw >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/versitygw" ]; then
	echo "== installing versitygw $versitygw_version (S3 server for the tests), in the background"
	go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version" >"${TMPDIR:-/tmp}/versitygw-install.log" 2>&1 &
	versitygw_pid=$!
fi

# The tests use a real etcd and Debian's torch. As root (CI, a fresh VM)
# they are installed when missing; otherwise the tests that need them say
# that they are skipped and why.
if [ "$(id -u)" = 0 ]; then
	bash scripts/ci-deps.sh
else
	command -v etcd >/dev/null 2>&1 || echo "NOTE: no etcd installed (apt-get install etcd-server): the etcd tests will be skipped"
	/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || echo "NOTE: no python3-torch for /usr/bin/python3: the tensor tests will be skipped"
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

# The RDMA transport's libibverbs provider is built only with the
# "ibverbs" tag (cgo, libibverbs-dev); the tests run the transport over
# its fake, so this step is what keeps the tag build compiling. (Not
# "rdma": minio-go claims that tag for an RDMA build of its own, which
# needs a C++ library nobody here has.)
echo "== ibverbs tag (the RDMA transport)"
go vet -tags ibverbs ./rdma/...
go build -tags ibverbs -o /dev/null .

# staticcheck, pinned, fetched through the Go module proxy like any
# dependency (the first run on a machine downloads and builds it).
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Logs stay where this line says, for reading a failure afterwards.
out=${DFKV_TEST_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dfkv-test.XXXXXX")}
mkdir -p "$out"
echo "== logs in $out"

if [ -n "$versitygw_pid" ]; then
	if ! wait "$versitygw_pid"; then
		echo "installing versitygw failed:"; cat "${TMPDIR:-/tmp}/versitygw-install.log"; exit 1
	fi
	echo "== versitygw installed: $("$(go env GOPATH)/bin/versitygw" --version 2>&1 | head -1)"
fi

# roles/e2e (real processes, etcd, TLS clusters, restarts) spends most of
# its five minutes waiting on the processes it starts, using about a
# third of the machine. It runs in the background from when the engine
# packages are done (slab, the heaviest, among them), beside the other
# packages, the contrib tests, the peer comparison's smoke run and the
# simulation, which would otherwise each wait for it in turn. Its child
# processes listen on ports of their own band (roles/e2e/harness_test.go),
# so the others' port-0 listeners cannot take them.
e2e_pkg=github.com/dfkv/dfkv/roles/e2e
all_pkgs=$(go list ./... | grep -vxF "$e2e_pkg")
early_pkgs=$(echo "$all_pkgs" | grep -vE '^github.com/dfkv/dfkv/(rdma|roles|wire)(/|$)')
late_pkgs=$(echo "$all_pkgs" | grep -E '^github.com/dfkv/dfkv/(rdma|roles|wire)(/|$)')

# Prints what a failed go test log says went wrong: each failing test and
# panic with its context, or the log's end when it names none (a process
# killed from outside, a timeout's goroutine dump cut short).
show_failures() { # log
	echo "== failures:"
	if ! grep -B3 -A40 -E -- '--- FAIL|^panic:|^# |\[build failed\]|\[setup failed\]' "$1" | head -400; then
		echo "(no failing test named; the log ends:)"
		tail -60 "$1"
	fi
}

echo "== go test -race (one line per package as it finishes; the full -v output is in $out/go-test.log)"
# -p 1 keeps the 2-core CI machine from running several heavy packages
# (each starting servers) at once; each package still runs its own tests
# in parallel where they say so.
start=$SECONDS
: >"$out/go-test.log"
go_test() { # packages...; stops the script on a failure
	local status
	set +e
	go test -race -count=1 -p 1 -timeout 15m -v "$@" 2>&1 | tee -a "$out/go-test.log" |
		grep --line-buffered -E '^(ok|FAIL|\?)[[:space:]]' | while IFS= read -r line; do
			printf '%4ds  %s\n' $((SECONDS - start)) "$line"
		done
	status=${PIPESTATUS[0]}
	set -e
	if [ "$status" != 0 ]; then
		show_failures "$out/go-test.log"
		exit 1
	fi
}
# shellcheck disable=SC2086 # package lists split on purpose
go_test $early_pkgs

echo "== $e2e_pkg starts in the background (go test -race; log in $out/e2e.log)"
e2e_start=$SECONDS
setsid go test -race -count=1 -timeout 15m -v "$e2e_pkg" > "$out/e2e.log" 2>&1 &
e2e_pid=$!
# A check below that fails stops this script; the e2e tests (go test, the
# test binary and the nodes it started, one process group) go with it.
# CONT too: a test may have stopped a process (a paused etcd), which
# would otherwise hold the TERM and stay behind.
stop_group() { kill -- "-$1" 2>/dev/null || true; kill -CONT -- "-$1" 2>/dev/null || true; }
trap 'stop_group "$e2e_pid"' EXIT

# shellcheck disable=SC2086
go_test $late_pkgs
go_passed=$(grep -cE '^--- PASS' "$out/go-test.log" || true)
go_skipped=$(grep -cE '^--- SKIP' "$out/go-test.log" || true)

# The Kubernetes manifests of contrib/kubernetes, rendered and checked
# against dfkv's own settings without a cluster. A Go module of its own, so
# the main module takes no Kubernetes dependency; kustomize runs in process
# from its Go API at the version contrib/kubernetes/validate/go.mod pins
# (sigs.k8s.io/kustomize/api v0.21.2), fetched through the module proxy
# like any dependency: nothing to install.
echo "== kubernetes manifests: contrib/kubernetes/validate"
if ! wait "$k8s_modules_pid"; then
	echo "downloading the Kubernetes check's modules failed:"; cat "${TMPDIR:-/tmp}/k8s-modules.log"; exit 1
fi
(cd contrib/kubernetes/validate && go test -count=1 ./...)

# The hot paths' allocation checks mean nothing under the race detector
# (it allocates for its own bookkeeping), so they skip there and run here.
echo "== allocation checks without -race"
go test -count=1 -run 'AllocatesNothing' ./roles/server/

echo "== contrib: libdfkv.so, the C test program, the Python package and connectors"
bash scripts/test-contrib.sh 2>&1 | tee "$out/contrib.log"

# The deterministic simulation's CI seed set: over 10,000 simulated
# seconds of a three-node cluster under faults, and its replay check.
# Without the race detector (the run above covered one short seed with
# it), which would make it ten times slower. It runs on one core (it sets
# GOMAXPROCS 1 itself), so it goes in the background while the peer
# comparison's smoke run (which asserts no figure) runs, and is waited for
# at the end. A failing seed prints the command that replays it.
echo "== simulation: the CI seed set starts in the background (go test ./roles/internal/sim -run TestSim)"
setsid go test -count=1 -run 'TestSim' -v ./roles/internal/sim > "$out/sim.log" 2>&1 &
sim_pid=$!
# A check below that fails stops this script; the simulation (go test and
# the test binary it runs, one process group) goes with it.
trap 'stop_group "$sim_pid"; stop_group "$e2e_pid"' EXIT

echo "== scripts/bench-vs-peers.sh --quick: the comparison script end to end against real redis and memcached"
# A smoke run (1 s per cell, small key spaces, no figure asserted): the
# script, the three protocols of dfkv bench and the servers must all work.
if command -v redis-server >/dev/null && command -v memcached >/dev/null && command -v iperf3 >/dev/null && command -v curl >/dev/null && command -v fio >/dev/null; then
	bash scripts/bench-vs-peers.sh --quick --out "$out/peers" --server-args "--disk-capacity-bytes 2GiB" 2>&1 | tail -15
else
	echo "NOTE: redis-server, memcached, iperf3, curl or fio missing (scripts/ci-deps.sh installs them as root): the comparison smoke run is skipped"
fi

echo "== scripts/bench-small-values.sh --quick: small values from disk against fio and the RAM tier, end to end"
# A smoke run as above (1 s cells, no figure asserted).
if command -v fio >/dev/null && command -v curl >/dev/null; then
	bash scripts/bench-small-values.sh --quick 2>&1 | tail -6
else
	echo "NOTE: fio or curl missing (scripts/ci-deps.sh installs them as root): the small-values smoke run is skipped"
fi

echo "== simulation: the CI seed set (log in $out/sim.log)"
wait "$sim_pid" || true
grep -E '^(ok|FAIL|--- )|simulated seconds in|replay:|seed [0-9]+ broke' "$out/sim.log" || true
if ! grep -q '^ok' "$out/sim.log"; then
	show_failures "$out/sim.log"
	exit 1
fi
go_passed=$((go_passed + $(grep -cE '^--- PASS' "$out/sim.log")))

echo "== $e2e_pkg (log in $out/e2e.log)"
e2e_status=0
wait "$e2e_pid" || e2e_status=$?
# go test ends its report with "ok  <tab>pkg" or "FAIL<tab>pkg"; a run that
# was killed has neither, and the failures below must still be shown.
grep -E '^(ok|FAIL)[[:space:]]' "$out/e2e.log" | sed "s/^/$((SECONDS - e2e_start))s after its start: /" || true
if [ "$e2e_status" != 0 ]; then
	show_failures "$out/e2e.log"
	exit 1
fi
go_passed=$((go_passed + $(grep -cE '^--- PASS' "$out/e2e.log")))
go_skipped=$((go_skipped + $(grep -cE '^--- SKIP' "$out/e2e.log" || true)))

# One closing line for CI: Go test functions and Python tests that passed
# and that were skipped (a failure has already stopped this script with a
# non-zero status). Skipped tests say why in the logs ("--- SKIP", and
# unittest's "skipped" lines).
py_passed=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in.*/\1/p' "$out/contrib.log" | tail -1)
py_skipped=$(sed -n 's/^OK (skipped=\([0-9]*\)[,)].*/\1/p' "$out/contrib.log" | tail -1)
py_passed=$(( ${py_passed:-0} - ${py_skipped:-0} ))
echo "summary: $((go_passed + py_passed)) passed, 0 failed, $((go_skipped + ${py_skipped:-0})) skipped (logs in $out)"
