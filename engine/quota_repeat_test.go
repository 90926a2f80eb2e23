package engine_test

import (
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/engine"

	"github.com/dfkv/dfkv/wire"
)

// TestQuotaBatchRepeatedKeyShrinkThenGrow: a batch that writes one key
// twice, first smaller then larger, is charged the second item's growth
// above the larger of the key's stored size and the first item's, not
// above the size the first leaves while the committed bytes still hold
// the old size. Whichever way the first item ends, the tenant ends at
// 9000 bytes of its 10000, as the same two PUTs one at a time do.
func TestQuotaBatchRepeatedKeyShrinkThenGrow(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		q := newQuotasFor(10000)
		g := quotaGroup(t, t.TempDir(), 1<<30, q)
		defer g.Close()
		k := tkey(tenantA, 1)
		wantStatus(t, g.Put(k, make([]byte, 8000)), wire.StatusOK, "first 8000")

		errs := make([]error, 2)
		g.PutBatch([]wire.BlockKey{k, k}, [][]byte{make([]byte, 1000), make([]byte, 9000)}, errs)
		for i, err := range errs {
			wantStatus(t, err, wire.StatusOK, fmt.Sprintf("batch item %d (shrink to 1000, then 9000 of a 10000 quota)", i))
		}
		if got := q.Used(tenantA); got != 9000 {
			t.Fatalf("tenant A uses %d, want 9000", got)
		}
	})
}

// TestQuotaScalarRepeatedKeyShrinkThenGrow is the same two PUTs one at a
// time: both admitted (the control for the batch test above).
func TestQuotaScalarRepeatedKeyShrinkThenGrow(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		q := newQuotasFor(10000)
		g := quotaGroup(t, t.TempDir(), 1<<30, q)
		defer g.Close()
		k := tkey(tenantA, 1)
		wantStatus(t, g.Put(k, make([]byte, 8000)), wire.StatusOK, "first 8000")
		wantStatus(t, g.Put(k, make([]byte, 1000)), wire.StatusOK, "shrink to 1000")
		wantStatus(t, g.Put(k, make([]byte, 9000)), wire.StatusOK, "grow to 9000")
	})
}

func newQuotasFor(limit uint64) *engine.Quotas {
	return engine.NewQuotas(0, map[uint64]uint64{tenantA: limit})
}
