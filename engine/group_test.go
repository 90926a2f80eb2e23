package engine_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/file"
	"github.com/dfkv/dfkv/wire"
)

func openFile(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
	t.Helper()
	s, err := file.Open(file.Options{Dir: dir, CapacityBytes: capacity, DirectIO: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openGroup opens a file engine on each dir and groups them; the group is
// closed at cleanup.
func openGroup(t *testing.T, dirs []string) *engine.Group {
	t.Helper()
	engines := make([]engine.StoreEngine, len(dirs))
	for i, d := range dirs {
		engines[i] = openFile(t, d, 1<<30)
	}
	g, err := engine.NewGroup(engines, dirs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func threeDirs(t *testing.T) []string {
	root := t.TempDir()
	return []string{filepath.Join(root, "d0"), filepath.Join(root, "d1"), filepath.Join(root, "d2")}
}

// TestGroupConformance runs the engine suite through a one-disk group, so
// every call is delegated faithfully. (The capacity tests assume one pool,
// which several disks with uneven key counts are not.)
func TestGroupConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
		g, err := engine.NewGroup([]engine.StoreEngine{openFile(t, dir, capacity)}, []string{dir})
		if err != nil {
			t.Fatal(err)
		}
		return g
	})
}

// TestGroupSpreadAndReopen: keys spread over three disks, each key lives on
// exactly the disk DiskOf names, and a group reopened on the same
// directories (listed in another order) finds every value byte-exact.
func TestGroupSpreadAndReopen(t *testing.T) {
	dirs := threeDirs(t)
	g := openGroup(t, dirs)
	const n = 300
	perDisk := make([]int, len(dirs))
	for i := range n {
		k := enginetest.Key(i)
		if err := g.Put(k, enginetest.Value(uint64(i), 1+i*37)); err != nil {
			t.Fatal(err)
		}
		d := g.DiskOf(k)
		perDisk[d]++
		for j := range dirs {
			_, err := g.Engine(j).Exist(k)
			if (j == d) != (err == nil) {
				t.Fatalf("key %d routed to disk %d, but disk %d Exist says %v", i, d, j, err)
			}
		}
	}
	for d, c := range perDisk {
		if c < n/6 {
			t.Errorf("disk %d holds %d of %d keys; the ring does not spread (%v)", d, c, n, perDisk)
		}
	}
	st := g.Stats()
	disks := g.Disks()
	var objects uint64
	for i, ds := range disks {
		if ds.Objects != uint64(perDisk[i]) || ds.Path != dirs[i] {
			t.Errorf("disk %d stats %+v, want %d objects on %s", i, ds, perDisk[i], dirs[i])
		}
		objects += ds.Objects
	}
	if st.Objects != n || objects != n || st.Engine != file.Name || st.CapacityBytes != 3<<30 || !st.DirectIO || !st.Healthy {
		t.Fatalf("group stats %+v", st)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	enginetest.WantStatus(t, g.Put(enginetest.Key(0), []byte{1}), wire.StatusUnavailable, "Put after group Close")

	reordered := []string{dirs[2], dirs[0], dirs[1]}
	g2 := openGroup(t, reordered)
	for i := range n {
		k := enginetest.Key(i)
		if got, want := reordered[g2.DiskOf(k)], dirs[g.DiskOf(k)]; got != want {
			t.Fatalf("key %d: reordered group routes to %s, original to %s", i, got, want)
		}
		enginetest.MustEqual(t, g2, k, enginetest.Value(uint64(i), 1+i*37))
	}
}

// TestGroupOrderIndependence: the ring depends on the set of disk names
// only, and a trailing slash is the same disk.
func TestGroupOrderIndependence(t *testing.T) {
	dirs := []string{"/data/nvme0", "/data/nvme1", "/data/nvme2", "/data/nvme3"}
	fakes := func() []engine.StoreEngine {
		es := make([]engine.StoreEngine, len(dirs))
		for i := range es {
			es[i] = nopEngine{}
		}
		return es
	}
	g, err := engine.NewGroup(fakes(), dirs)
	if err != nil {
		t.Fatal(err)
	}
	perm := []string{"/data/nvme3/", "/data/nvme1", "/data/nvme0", "/data/nvme2"}
	h, err := engine.NewGroup(fakes(), perm)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		k := enginetest.Key(i)
		if a, b := g.Names()[g.DiskOf(k)], h.Names()[h.DiskOf(k)]; a != b {
			t.Fatalf("key %d: %s vs %s", i, a, b)
		}
	}
}

func TestNewGroupErrors(t *testing.T) {
	one := []engine.StoreEngine{nopEngine{}}
	two := []engine.StoreEngine{nopEngine{}, nopEngine{}}
	cases := []struct {
		name    string
		engines []engine.StoreEngine
		names   []string
	}{
		{"empty", nil, nil},
		{"length mismatch", two, []string{"/a"}},
		{"duplicate", two, []string{"/a", "/a/"}},
		{"empty name", one, []string{""}},
		{"nil engine", []engine.StoreEngine{nil}, []string{"/a"}},
	}
	for _, tc := range cases {
		if _, err := engine.NewGroup(tc.engines, tc.names); wire.StatusOf(err) != wire.StatusInvalid {
			t.Errorf("%s: err %v, want INVALID", tc.name, err)
		}
	}
}

// TestGroupPutBatch: a batch spanning all disks gets each item's own
// result in its own slot, and a key repeated in the batch keeps its last
// value.
func TestGroupPutBatch(t *testing.T) {
	g := openGroup(t, threeDirs(t))
	const n = 60
	keys := make([]wire.BlockKey, 0, n+1)
	values := make([][]byte, 0, n+1)
	for i := range n {
		keys = append(keys, enginetest.Key(i))
		if i%10 == 3 {
			values = append(values, nil) // INVALID
		} else {
			values = append(values, enginetest.Value(uint64(i), 100+i))
		}
	}
	keys = append(keys, enginetest.Key(0))
	values = append(values, enginetest.Value(999, 5))
	errs := make([]error, len(keys))
	g.PutBatch(keys, values, errs)
	seen := map[int]bool{}
	for i, err := range errs {
		want := wire.StatusOK
		if len(values[i]) == 0 {
			want = wire.StatusInvalid
		}
		enginetest.WantStatus(t, err, want, "batch item")
		if i < n {
			seen[g.DiskOf(keys[i])] = true
		}
	}
	if len(seen) != 3 {
		t.Fatalf("batch touched %d disks, want 3", len(seen))
	}
	enginetest.MustEqual(t, g, enginetest.Key(0), enginetest.Value(999, 5))
	for i := 1; i < n; i++ {
		if len(values[i]) > 0 {
			enginetest.MustEqual(t, g, keys[i], values[i])
		}
	}
}

// nopEngine is a StoreEngine that stores nothing, for routing-only tests.
type nopEngine struct{}

func (nopEngine) Put(wire.BlockKey, []byte) error { return nil }
func (nopEngine) PutBatch(_ []wire.BlockKey, _ [][]byte, errs []error) {
	clear(errs)
}
func (nopEngine) Get(wire.BlockKey, uint64, uint64, engine.Allocator) ([]byte, uint64, error) {
	return nil, 0, wire.StatusNotFound
}
func (nopEngine) Exist(wire.BlockKey) (uint64, error) { return 0, wire.StatusNotFound }
func (nopEngine) Remove(wire.BlockKey) error          { return wire.StatusNotFound }
func (nopEngine) Stats() engine.Stats                 { return engine.Stats{Engine: "nop"} }
func (nopEngine) Close() error                        { return nil }
