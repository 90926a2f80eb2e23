package ramtier

import (
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// batchCounting is a backing that answers ExistBatch itself and records
// which keys reached it.
type batchCounting struct {
	engine.StoreEngine
	asked [][]wire.BlockKey
}

func (b *batchCounting) ExistBatch(keys []wire.BlockKey, stored []uint64, errs []error) {
	b.asked = append(b.asked, append([]wire.BlockKey(nil), keys...))
	for i, k := range keys {
		stored[i], errs[i] = b.StoreEngine.Exist(k)
	}
}

// ExistBatch answers what RAM holds itself and passes the rest to the
// backing as one batch, with Exist's answers.
func TestExistBatchPassesRAMMissesOnTogether(t *testing.T) {
	disk := openSlab(t, t.TempDir(), 64<<20)
	backing := &batchCounting{StoreEngine: disk}
	tr := openTier(t, Options{Backing: backing, Bytes: 4 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve})
	defer tr.Close()
	inRAM, onDisk, nowhere := enginetest.Key(1), enginetest.Key(2), enginetest.Key(3)
	if err := tr.Put(inRAM, enginetest.Value(1, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := disk.Put(onDisk, enginetest.Value(2, 2000)); err != nil { // behind the tier's back
		t.Fatal(err)
	}
	keys := []wire.BlockKey{inRAM, onDisk, nowhere}
	stored, errs := make([]uint64, 3), make([]error, 3)
	tr.ExistBatch(keys, stored, errs)
	if errs[0] != nil || stored[0] != 1000 || errs[1] != nil || stored[1] != 2000 || wire.StatusOf(errs[2]) != wire.StatusNotFound {
		t.Fatalf("answers: %v %v", stored, errs)
	}
	for i, k := range keys {
		n, err := tr.Exist(k)
		if n != stored[i] || wire.StatusOf(err) != wire.StatusOf(errs[i]) {
			t.Errorf("key %d: ExistBatch said %d %v, Exist says %d %v", i, stored[i], errs[i], n, err)
		}
	}
	if len(backing.asked) != 1 || len(backing.asked[0]) != 2 || backing.asked[0][0] != onDisk || backing.asked[0][1] != nowhere {
		t.Fatalf("the backing was asked %v; want one batch of the two keys RAM lacks", backing.asked)
	}
}
