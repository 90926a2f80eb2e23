package mds

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"

	"github.com/dfkv/dfkv/wire"
)

func deregisterAt(cs *controlServer, id, addr string) (wire.Status, []byte) {
	st, _, out := cs.do(context.Background(), wire.OpMDSDeregister, 0,
		[]byte(fmt.Sprintf(`{"group":"default","id":%q,"addr":%q}`, id, addr)))
	return st, out
}

// A DEREGISTER that names the node's address checks it against the
// member list; one member record the MDS cannot decode (another node's)
// must not fail that DEREGISTER and keep a stopping node listed until its
// TTL: the removal goes on unchecked.
func TestDeregisterAtNotBlockedByAnotherMembersUnreadableRecord(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "m.db"), time.Hour, clock)
	defer d.Close()
	if _, err := d.Register(context.Background(), "default", wire.MemberInfo{ID: "a", Addr: "10.0.0.1:7600", Weight: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketName("default")).Put([]byte("m/zz"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, log: slog.New(slog.DiscardHandler), ttl: time.Hour}
	if st, out := deregisterAt(cs, "a", "10.0.0.1:7600"); st != wire.StatusOK {
		t.Fatalf("DEREGISTER of node a at its own address: %v %s (another member's unreadable record blocks every node's DEREGISTER)", st, out)
	}
}

// The bbolt epochs start from the clock, and dfkv_mds_epoch, a float64
// gauge, still moves with every epoch (exact below 2^53): the dashboard's
// epoch series and alerts on changes() of it see each change.
func TestEpochGaugeMovesWithTheEpoch(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC)}
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "m.db"), time.Hour, clock)
	defer d.Close()
	ctx := context.Background()
	cs := &controlServer{dir: d, log: slog.New(slog.DiscardHandler), ttl: time.Hour}
	var expiries atomic.Uint64
	col := &mdsCollector{cs: cs, dir: d, group: "default", probe: &probeCache{dir: d, ttl: time.Hour}, expiries: &expiries, backend: "bbolt"}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "dfkv_mds_epoch" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no dfkv_mds_epoch")
		return 0
	}
	e1, err := d.Register(ctx, "default", wire.MemberInfo{ID: "a", Addr: "10.0.0.1:7600", Weight: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g1 := gauge()
	e2, err := d.Register(ctx, "default", wire.MemberInfo{ID: "b", Addr: "10.0.0.2:7600", Weight: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g2 := gauge()
	if e2 != e1 && g1 == g2 {
		t.Fatalf("the epoch moved from %d to %d, dfkv_mds_epoch stayed %.0f: a float64 cannot tell epochs past 2^53 apart", e1, e2, g2)
	}
}
