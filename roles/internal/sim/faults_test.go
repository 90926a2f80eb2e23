package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/dfkv/dfkv/roles/internal/sim"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire/client"
)

// faults runs the fault schedule, drawn from the run's seed, for dur:
// one fault at a time, each held for a while and then healed, with quiet
// gaps between.
func (w *world) faults(dur time.Duration) {
	r := w.rng
	end := w.now() + dur
	for w.now() < end && !w.violated.Load() {
		w.sleep(between(r, 500*time.Millisecond, 6500*time.Millisecond))
		n := w.nodes[r.IntN(len(w.nodes))]
		hold := between(r, 500*time.Millisecond, 10*time.Second)
		switch kind := r.IntN(12); kind {
		case 0, 1:
			if !n.up.Load() {
				continue
			}
			w.log.add(w.now(), "faults", fmt.Sprintf("kill %s for %s", n.id, hold))
			n.stop("kill", false)
			w.sleep(hold)
			n.start()
		case 2:
			if !n.up.Load() {
				continue
			}
			torn := r.IntN(2) == 0
			w.log.add(w.now(), "faults", fmt.Sprintf("power cut %s (torn write %v) for %s", n.id, torn, hold))
			n.stop("power", torn)
			w.sleep(hold)
			n.start()
		case 3:
			if !n.up.Load() {
				continue
			}
			w.log.add(w.now(), "faults", fmt.Sprintf("graceful restart of %s after %s", n.id, hold/4))
			n.stop("graceful", false)
			w.sleep(hold / 4)
			n.start()
		case 4:
			w.log.add(w.now(), "faults", fmt.Sprintf("partition %s from the MDS for %s", n.id, hold))
			w.net.Partition(n.host, mdsHost, true)
			w.sleep(hold)
			w.net.Partition(n.host, mdsHost, false)
		case 5:
			c := w.clients[r.IntN(len(w.clients))]
			w.log.add(w.now(), "faults", fmt.Sprintf("partition %s from %s for %s", n.id, c.name, hold))
			w.net.Partition(n.host, c.host, true)
			w.sleep(hold)
			w.net.Partition(n.host, c.host, false)
		case 6:
			f := sim.Faults{ReadEIO: 0.05, WriteEIO: 0.05}
			if r.IntN(3) == 0 {
				f = sim.Faults{WriteENOSPC: 0.2}
			}
			w.log.add(w.now(), "faults", fmt.Sprintf("disk faults on %s for %s: %+v", n.id, hold, f))
			n.disk.SetFaults(f)
			n.faulted = n.faulted || n.up.Load()
			before := n.disk.Injected()
			w.sleep(hold)
			n.disk.SetFaults(sim.Faults{})
			w.log.add(w.now(), "faults", fmt.Sprintf("disk faults on %s over: %d operations failed", n.id, n.disk.Injected()-before))
		case 7:
			d := between(r, time.Millisecond, 20*time.Millisecond)
			w.log.add(w.now(), "faults", fmt.Sprintf("slow disk on %s (+%s per I/O) for %s", n.id, d, hold))
			n.disk.Slow(d)
			w.sleep(hold)
			n.disk.Slow(0)
		case 8:
			if !w.mds.up.Load() {
				continue
			}
			w.log.add(w.now(), "faults", fmt.Sprintf("MDS down for %s", hold/2))
			w.mds.stop()
			w.sleep(hold / 2)
			w.mds.start()
		case 9:
			c := w.clients[r.IntN(len(w.clients))]
			d := between(r, 20*time.Millisecond, 520*time.Millisecond)
			w.log.add(w.now(), "faults", fmt.Sprintf("slow client %s (+%s per write) for %s", c.name, d, hold))
			w.net.Slow(c.host, d)
			w.sleep(hold)
			w.net.Slow(c.host, 0)
		case 10:
			w.log.add(w.now(), "faults", fmt.Sprintf("reset every connection of %s", n.id))
			w.net.Reset(n.host)
		case 11:
			// A flapping link: cut for about a TTL, so the directory drops
			// the node around when its heartbeats get through again.
			w.log.add(w.now(), "faults", fmt.Sprintf("the link between %s and the MDS flaps", n.id))
			for range 3 {
				w.net.Partition(n.host, mdsHost, true)
				w.sleep(between(r, heartbeatTTL-time.Second, heartbeatTTL+2*time.Second))
				w.net.Partition(n.host, mdsHost, false)
				w.sleep(between(r, 200*time.Millisecond, 1500*time.Millisecond))
			}
		}
	}
}

// observer polls the directory as an operator's monitoring would, and
// checks three things about membership continuously:
//   - every listed member has a heartbeat record (the directory expires
//     members by it);
//   - a node that has been down longer than its TTL (plus a sweep and a
//     slow directory's stall) is no longer listed: a member that never
//     expires keeps clients routing to a dead node;
//   - a node whose heartbeats the MDS answers is listed: a directory
//     that drops a live member makes clients route around it for nothing.
type observer struct {
	w     *world
	mc    *client.MDSClient
	nodes *client.Client // asks each node for STATS, for its quotas
	ticks int
	prev  map[string]bool // node → registered and heartbeating at the last poll
	down  map[string]time.Duration
}

func newObserver(w *world) *observer {
	mc, err := client.NewMDSClient([]string{mdsAddr()}, "default", w.net.Dialer("10.0.2.1"), opTimeout)
	if err != nil {
		w.t.Fatal(err)
	}
	var addrs []string
	for _, n := range w.nodes {
		addrs = append(addrs, n.addr())
	}
	nodes, err := client.Open(client.Options{Namespace: []byte("sim-observer"), Members: addrs, Timeout: time.Second,
		DialTimeout: time.Second, Dialer: w.net.Dialer("10.0.2.1")})
	if err != nil {
		w.t.Fatal(err)
	}
	return &observer{w: w, mc: mc, nodes: nodes, prev: map[string]bool{}, down: map[string]time.Duration{}}
}

// quotas asks every running node for its STATS: no tenant may hold more
// than its quota there, whatever the faults.
func (o *observer) quotas() {
	for _, n := range o.w.nodes {
		if !n.up.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		body, err := o.nodes.Stats(ctx, n.addr())
		cancel()
		var st server.StatsReply
		if err != nil || json.Unmarshal(body, &st) != nil {
			continue // a node cut off or stopping; the next round asks again
		}
		o.w.withinQuotas(n.id, &st)
	}
}

const observeEvery = 250 * time.Millisecond

// deadListedAfter is how long a dead node may stay listed: its TTL, a
// sweep period, a stalled sweep and a margin.
const deadListedAfter = heartbeatTTL + heartbeatTTL/4 + 1500*time.Millisecond + time.Second

func (o *observer) run(stop <-chan struct{}) {
	w := o.w
	t := time.NewTicker(observeEvery)
	defer t.Stop()
	defer o.nodes.Close()
	for {
		select {
		case <-stop:
			return
		case <-w.stopped:
			return
		case <-t.C:
		}
		if o.ticks++; o.ticks%8 == 0 {
			o.quotas()
		}
		// What the nodes say before the question is asked: a node that
		// said it was heartbeating before the MDS answered must be in the
		// answer.
		before := map[string]bool{}
		for _, n := range w.nodes {
			if !n.up.Load() {
				if _, ok := o.down[n.id]; !ok {
					o.down[n.id] = w.now()
				}
				continue
			}
			delete(o.down, n.id)
			if r := n.reg.Load(); r != nil && r.Current() {
				before[n.id] = true
			}
		}
		mdsUp, mdsSince := w.mds.up.Load(), time.Duration(w.mds.since.Load())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, ms, _, err := o.mc.Members(ctx, 0)
		cancel()
		if err != nil || !mdsUp || !w.mds.up.Load() {
			o.prev = map[string]bool{}
			continue
		}
		listed := memberIDs(ms)
		for _, m := range ms {
			if m.LastHeartbeatUnixMS <= 0 && !m.LeaseLive {
				w.violation("observer", "the MDS lists %s without a heartbeat record: it would never expire", m.ID)
			}
		}
		for _, n := range w.nodes {
			id := n.id
			// Still down once the answer is in: a node that started while
			// the question was on its way may be listed by its new
			// registration.
			if since, dead := o.down[id]; dead && !n.up.Load() && slices.Contains(listed, id) {
				if w.now()-max(since, mdsSince) > deadListedAfter {
					w.violation("observer", "%s has been down since %.3fs and is still listed at %.3fs (TTL %s)", id, since.Seconds(), w.now().Seconds(), heartbeatTTL)
				}
			}
			if o.prev[id] && before[id] && n.up.Load() && !slices.Contains(listed, id) {
				if r := n.reg.Load(); r != nil && r.Current() {
					w.violation("observer", "%s is heartbeating (its heartbeats are answered) but the MDS does not list it: %v", id, listed)
				}
			}
		}
		o.prev = before
	}
}
