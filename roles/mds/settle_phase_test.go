package mds

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// stallDir is a directory whose backend can stall (etcd SIGSTOPped, a
// long fsync): every call waits until the stall ends.
type stallDir struct {
	Directory
	mu      sync.Mutex
	stall   chan struct{} // closed when the stall ends; nil: no stall
	epoch   uint64
	members []wire.MemberInfo
}

func (d *stallDir) wait(ctx context.Context) error {
	d.mu.Lock()
	ch := d.stall
	d.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *stallDir) Probe(ctx context.Context) error { return d.wait(ctx) }

func (d *stallDir) Epoch(ctx context.Context, _ string) (uint64, error) {
	if err := d.wait(ctx); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epoch, nil
}

func (d *stallDir) Members(ctx context.Context, _ string) (uint64, []wire.MemberInfo, error) {
	if err := d.wait(ctx); err != nil {
		return 0, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epoch, d.members, nil
}

// TestShortStallSettlesWhateverTheProbePhase: with a 2 s heartbeat TTL an
// etcd stall of 2.2 s runs out every lease but fails no probe (a probe
// waits 4 s), so settling relies on the probe that waited it out lasting
// a quarter of the TTL (500 ms). The watcher probes every TTL/2 (1 s), so
// the probe in flight across the stall starts within its first second,
// early or late, and lasts long enough either way.
func TestShortStallSettlesWhateverTheProbePhase(t *testing.T) {
	if every := checkEvery(2 * time.Second); every != time.Second {
		t.Fatalf("probe period for a 2 s TTL: %v, want 1s", every)
	}
	for _, probeAt := range []time.Duration{100 * time.Millisecond, 950 * time.Millisecond} {
		t.Run(probeAt.String(), func(t *testing.T) {
			const ttl, stall = 2 * time.Second, 2200 * time.Millisecond
			d := &stallDir{epoch: 7, members: []wire.MemberInfo{member(1), member(2), member(3)}}
			probe := &probeCache{dir: d, slow: ttl / 4} // as Run sets it for etcd
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: ttl, backendDown: probe.down}
			probe.recovered = cs.backendReturned
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go cs.serve(ctx)
			c := mdsClient(t, "default", ln.Addr().String())
			if epoch, ms, _, err := c.Members(ctx, 0); err != nil || epoch != 7 || len(ms) != 3 {
				t.Fatalf("before: %d %v %v", epoch, ms, err)
			}
			// The stall begins; the watcher's probe starts probeAt into it.
			end := make(chan struct{})
			d.mu.Lock()
			d.stall = end
			d.mu.Unlock()
			time.Sleep(probeAt)
			probed := make(chan error, 1)
			go func() { probed <- probe.checkNow(ctx) }()
			time.Sleep(stall - probeAt)
			// etcd resumes: every lease ran out, node-1 registered again.
			d.mu.Lock()
			d.stall, d.epoch, d.members = nil, 12, []wire.MemberInfo{member(1)}
			d.mu.Unlock()
			close(end)
			if err := <-probed; err != nil {
				t.Fatal(err)
			}
			epoch, ms, changed, err := c.Members(ctx, 7)
			if err != nil {
				t.Fatal(err)
			}
			if changed && len(ms) < 3 {
				t.Fatalf("stall of %v (heartbeat TTL %v), the watcher's probe started %v into it: no settle window; "+
					"a client holding 3 members at epoch 7 was handed %d (%v) at epoch %d", stall, ttl, probeAt, len(ms), ids(ms), epoch)
			}
		})
	}
}
