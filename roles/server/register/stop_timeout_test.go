package register

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestStopAfterTimedOutRegisterLeavesTheMDS: the MDS applied a REGISTER
// but its answer came after the call's timeout (an MDS waiting on a slow
// etcd: slowAckMDS's case). The node cannot know whether it is listed;
// stopped before its retry, it must leave as TestStopDuringRegister's node
// does, or clients route to a stopped node for a heartbeat TTL.
func TestStopAfterTimedOutRegisterLeavesTheMDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &slowAckMDS{ackDelay: 4 * time.Second, listed: map[string]bool{}}
		mc, err := client.NewMDSClient([]string{"mds:7700"}, "g", m, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := New(mc, wire.MemberInfo{ID: "n1", Addr: "10.0.0.1:7600", Weight: 1}, nil, slog.New(slog.DiscardHandler))
		r.SetJitter(func(d time.Duration) time.Duration { return d }) // retry 200 ms after the failure
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		// The REGISTER is applied at once; the call times out at 3 s
		// (ctx still live: "cannot register ... retrying").
		time.Sleep(3*time.Second + 100*time.Millisecond)
		synctest.Wait()
		cancel() // SIGTERM during the 200 ms back-off
		<-done
		time.Sleep(5 * time.Second) // the late answer finds nobody waiting
		synctest.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.listed["n1"] {
			t.Fatalf("Run returned (Left=%v) while the MDS still lists the stopped node n1 (its REGISTER was applied, the answer timed out)", r.Left())
		}
	})
}
