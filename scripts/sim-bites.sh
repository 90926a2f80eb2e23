#!/usr/bin/env bash
# Shows that the cluster simulation finds real bugs: each patch under
# roles/internal/sim/testdata/bugs puts back an interleaving bug this
# project once fixed, in a throwaway copy of the tree; the simulation's CI
# seed set must then fail, and its first failing seed must replay to the
# same event log, byte for byte, three times.
#
#   bash scripts/sim-bites.sh            # all three bugs, about 2 minutes
#
# Not part of scripts/test.sh (it builds the simulation four times); run it
# after changing the simulation or the code those patches touch. A patch
# that no longer applies means that code moved: update the patch.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d "${TMPDIR:-/tmp}/dfkv-sim-bites.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=0
for patch in roles/internal/sim/testdata/bugs/*.patch; do
	name=$(basename "$patch" .patch)
	tree="$work/$name"
	mkdir -p "$tree"
	git ls-files -z | xargs -0 cp --parents -t "$tree"
	if ! (cd "$tree" && git apply "$OLDPWD/$patch" 2>/dev/null); then
		echo "$name: the patch no longer applies; the code it reverts has moved (update $patch)"
		failed=1
		continue
	fi
	(cd "$tree/roles/internal/sim" && go test -c -o "$work/$name.test" .)
	start=$SECONDS
	out=$("$work/$name.test" -test.run 'TestSim$' -test.v 2>&1 || true)
	took=$((SECONDS - start))
	first=$(grep -oE 'seed [0-9]+ broke an invariant' <<<"$out" | head -1 | grep -oE '[0-9]+' || true)
	if [ -z "$first" ]; then
		echo "$name: NOT FOUND by the CI seed set (${took}s)"
		failed=1
		continue
	fi
	what=$(grep -A1 "seed $first broke" <<<"$out" | tail -1 | sed 's/^ *//')
	found=$(grep -c 'broke an invariant' <<<"$out")
	digests=$(for _ in 1 2 3; do
		{ "$work/$name.test" -test.run 'TestSim$' -sim.seed "$first" -sim.log -test.v 2>&1 || true; } |
			grep -vE 'wall time|^---|^===|^PASS|^FAIL|^ok|digest' | sha256sum | cut -c1-16
	done | sort -u | wc -l)
	replay="replays identically"
	if [ "$digests" != 1 ]; then
		replay="REPLAYS DIFFERENTLY"
		failed=1
	fi
	echo "$name: found by $found of 24 seeds, first seed $first ($what); set ran ${took}s; seed $first $replay 3 times"
done
exit $failed
