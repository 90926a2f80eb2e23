#!/usr/bin/env bash
# Runs every test of dfkv: formatting and vet, the Go suites with the race
# detector (fuzz seed corpora included: `go test` replays testdata/fuzz),
# the multi-process tests that build and start real dfkv binaries (and a
# real etcd), and the C ABI and Python connector tests against real nodes.
# This is the README's test command and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go version: $(go version)"
go mod download

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
# -p 1 keeps the 2-core CI machine from running several heavy packages
# (each starting servers) at once; each package still runs its own tests
# in parallel where they say so.
go test -race -count=1 -p 1 -timeout 15m ./...

echo "== contrib: libdfkv.so, the C test program, the Python package and connectors"
bash scripts/test-contrib.sh
