package server

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/dfkv/dfkv/wire/client"
)

// TestShmOnClientFollowsANodeRestartConcurrently: TestShmClientFollows-
// ANodeRestart with the client's calls concurrent, as an engine's are:
// with shm = on every call whose connect fails after the restart looks the
// socket up again itself (there is no TCP to fall back to), and none fails
// with "shared memory is required ... cannot be used".
func TestShmOnClientFollowsANodeRestartConcurrently(t *testing.T) {
	flags, _ := shmNodeFlags(t, nil)
	addr := freeAddr(t)
	_, _, stop := runNodeAt(t, flags, addr)
	ctx := context.Background()
	on := shmClient(t, addr, client.ShmOn)
	val := bytes.Repeat([]byte("r"), 64<<10)
	if err := on.Put(ctx, []byte("k"), val); err != nil {
		t.Fatal(err)
	}
	const callers = 16
	run := func() []error {
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dst := make([]byte, len(val))
				_, _, errs[i] = on.Get(ctx, []byte("k"), dst)
			}()
		}
		wg.Wait()
		return errs
	}
	for i, err := range run() { // several shared-memory connections in the pool
		if err != nil {
			t.Fatalf("before the restart, call %d: %v", i, err)
		}
	}
	// Each round restarts the node and reads with every caller at once;
	// one failed call in any round is the fault (the race is won or lost
	// by scheduling, so a few rounds make it show every time).
	for round := range 4 {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		_, _, stop = runNodeAt(t, flags, addr)
		if err := shmClient(t, addr, client.ShmOff).Put(ctx, []byte("k"), val); err != nil {
			t.Fatal(err)
		}
		failed := 0
		var first error
		for _, err := range run() {
			if err != nil {
				if failed++; first == nil {
					first = err
				}
			}
		}
		if failed > 0 {
			t.Fatalf("restart %d, shm = on: %d of %d concurrent GETs failed after the node restarted (it offers shared memory): %v", round+1, failed, callers, first)
		}
	}
}
