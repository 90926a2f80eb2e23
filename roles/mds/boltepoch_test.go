package mds

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestNewDatabaseEpochsDoNotRestartAtOne: an MDS whose bbolt file was
// lost starts a new one; its groups' epochs must not start again at 1,
// or a client holding a list from the old file at some epoch would be
// told "unchanged" once the new file reached that number. A new file's
// epochs start past those the old one gave out before it (clock-based).
func TestNewDatabaseEpochsDoNotRestartAtOne(t *testing.T) {
	ctx := context.Background()
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	member := func(id string) wire.MemberInfo { return wire.MemberInfo{ID: id, Addr: "10.0.0.1:7600", Weight: 1} }
	old := mustOpenBolt(t, filepath.Join(t.TempDir(), "old.db"), time.Hour, clock)
	var last uint64
	for _, id := range []string{"a", "b", "c"} {
		e, err := old.Register(ctx, "default", member(id), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = e
	}
	old.Close()
	clock.advance(time.Minute) // the MDS moves to a new host, its file lost
	fresh := mustOpenBolt(t, filepath.Join(t.TempDir(), "new.db"), time.Hour, clock)
	defer fresh.Close()
	e, err := fresh.Register(ctx, "default", member("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e <= last {
		t.Fatalf("the new file's first epoch is %d, not past the old file's %d: a client at the old epoch could be told \"unchanged\"", e, last)
	}
	if e2, _ := fresh.Register(ctx, "default", member("b"), nil); e2 != e+1 {
		t.Fatalf("epochs after the first: %d then %d, want one step", e, e2)
	}
}
