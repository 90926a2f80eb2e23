#!/usr/bin/env bash
# Builds libdfkv.so (the C ABI, contrib/libdfkv) and installs its
# hand-written header next to it:
#
#   scripts/build-lib.sh [OUTDIR]     # default OUTDIR: build/
#
# Produces OUTDIR/libdfkv.so and OUTDIR/dfkv.h. The Python package finds the
# library through DFKV_LIBRARY=OUTDIR/libdfkv.so, next to itself, or in
# build/ at the repository root.
set -euo pipefail
case "${1:-}" in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
-*) echo "build-lib.sh: unknown option $1 (usage: scripts/build-lib.sh [OUTDIR])" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
out="${1:-build}"
mkdir -p "$out"
CGO_ENABLED=1 go build -trimpath -buildmode=c-shared -o "$out/libdfkv.so" ./contrib/libdfkv
# go writes its own generated header (Go types, no docs); the contract is
# the hand-written one.
rm -f "$out/libdfkv.h"
cp contrib/libdfkv/dfkv.h "$out/dfkv.h"
echo "built $out/libdfkv.so and $out/dfkv.h"
