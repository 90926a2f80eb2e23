package sim_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/sim"
	"github.com/dfkv/dfkv/roles/mds"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/roles/server/register"
	"github.com/dfkv/dfkv/wire/client"
)

// The cluster's timing in the simulation: a short TTL so a run of a few
// hundred simulated seconds sees many expiries and re-registrations.
const (
	heartbeatTTL = 4 * time.Second
	mdsPoll      = 500 * time.Millisecond
	opTimeout    = 2 * time.Second
	mdsHost      = "10.0.0.100"
	mdsPort      = 7700
	nodePort     = 7600
)

// tenantQuota is each node's quota for each tenant: about what the
// workload's tenant holds on a node, so PUTs meet it now and then.
const tenantQuota = 128 << 10

// clientPool is how many idle connections a client keeps per node.
const clientPool = 4

func mdsAddr() string { return fmt.Sprintf("%s:%d", mdsHost, mdsPort) }

// world is one seeded run: the network, the disks, the processes on
// them, the clients' workload, the oracle and the event log.
type world struct {
	t     *testing.T
	seed  uint64
	root  string
	start time.Time
	net   *sim.Net
	rng   *rand.Rand // the fault schedule's; used by the scheduler goroutine only

	log evlog

	mds     *mdsProc
	nodes   []*nodeProc
	clients []*clientProc

	// stale is the latest power cut: it may undo writes anywhere, so a
	// value superseded (or removed) before it may come back.
	staleMu sync.Mutex
	stale   time.Duration

	violated atomic.Bool
	stopped  chan struct{} // closed at the first violation
	stopOnce sync.Once
}

func (w *world) now() time.Duration { return time.Since(w.start) }

// violation records a broken invariant and ends the run.
func (w *world) violation(who, format string, args ...any) {
	w.log.add(w.now(), who, "VIOLATION "+fmt.Sprintf(format, args...))
	w.violated.Store(true)
	w.stopOnce.Do(func() { close(w.stopped) })
}

func (w *world) markStale() {
	w.staleMu.Lock()
	w.stale = w.now()
	w.staleMu.Unlock()
}

func (w *world) staleSince(t time.Duration) bool {
	w.staleMu.Lock()
	defer w.staleMu.Unlock()
	return w.stale >= t
}

// seeded returns a source for one actor: the run's seed and the actor's name
// decide it, not the order actors ask.
func (w *world) seeded(name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return rand.New(rand.NewPCG(w.seed, h.Sum64()))
}

// between draws a duration in [lo, hi) to the nanosecond: the harness's
// moments never fall on the round instants the product's own timers keep
// (a sync every 100 ms since start), where which goroutine runs first
// would be the scheduler's choice.
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// jitter is a seeded, goroutine-safe draw in [0, d) for one actor.
func (w *world) jitter(name string) func(time.Duration) time.Duration {
	r := w.seeded(name)
	var mu sync.Mutex
	return func(d time.Duration) time.Duration {
		if d <= 0 {
			return 0
		}
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(r.Int64N(int64(d)))
	}
}

// evlog is the run's event log. Each actor appends its own events in its
// own order; the log is sorted by (time, actor, sequence), so it is the
// same bytes whenever every actor saw the same things at the same times.
type evlog struct {
	mu     sync.Mutex
	events []event
	seq    map[string]int
	// latest is the virtual instant of the latest event, for the
	// watchdog outside the bubble (see watchVirtualTime); nil: none.
	latest *atomic.Int64
}

type event struct {
	at   time.Duration
	who  string
	seq  int
	text string
}

func (l *evlog) add(at time.Duration, who, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seq == nil {
		l.seq = map[string]int{}
	}
	l.seq[who]++
	l.events = append(l.events, event{at: at, who: who, seq: l.seq[who], text: text})
	if l.latest != nil {
		l.latest.Store(int64(at))
	}
}

func (l *evlog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := slices.Clone(l.events)
	sort.Slice(ev, func(i, j int) bool {
		a, b := ev[i], ev[j]
		if a.at != b.at {
			return a.at < b.at
		}
		if a.who != b.who {
			return a.who < b.who
		}
		return a.seq < b.seq
	})
	var b strings.Builder
	for _, e := range ev {
		fmt.Fprintf(&b, "%11.6f %-8s %s\n", e.at.Seconds(), e.who, e.text)
	}
	return b.String()
}

func (l *evlog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		if strings.HasPrefix(e.text, "VIOLATION ") {
			out = append(out, fmt.Sprintf("%.6fs %s: %s", e.at.Seconds(), e.who, strings.TrimPrefix(e.text, "VIOLATION ")))
		}
	}
	return out
}

func noEnv(string) (string, bool) { return "", false }

// mdsProc is the membership directory on its bbolt file.
type mdsProc struct {
	w      *world
	dbPath string
	cancel context.CancelFunc
	done   chan error
	up     atomic.Bool
	since  atomic.Int64 // when it last started (a duration since the world began)
	stalls atomic.Int64
}

func (m *mdsProc) start() {
	w := m.w
	cfg, _, err := config.LoadText("mds", "sim-mds.toml", fmt.Sprintf(`
[mds]
db_path = %q
heartbeat_ttl_ms = %d
http_listen = ""
`, m.dbPath, heartbeatTTL.Milliseconds()), noEnv, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	ln, err := w.net.Listen(mdsHost, mdsPort)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		m.done <- mds.Run(ctx, cfg, mds.Deps{Logger: w.logger("mds"), Listener: ln, Ready: func() { close(ready) }, Stall: m.stall})
	}()
	select {
	case <-ready:
	case err := <-m.done:
		w.t.Fatalf("seed %d: MDS did not start: %v", w.seed, err)
	}
	m.up.Store(true)
	m.since.Store(int64(w.now()))
	w.log.add(w.now(), "mds", "started")
}

// stall holds one step of the directory open for a while, as a slow
// fsync would: how long is a hash of the run's seed, the point and the moment,
// so it does not depend on which goroutine got there first.
func (m *mdsProc) stall(point string) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", m.w.seed, point, m.w.now())
	v := h.Sum64()
	if v%4 != 0 {
		return
	}
	m.stalls.Add(1)
	time.Sleep(time.Duration(v>>8) % (1500 * time.Millisecond))
}

func (m *mdsProc) stop() {
	m.net().Down(mdsHost, true)
	m.net().Reset(mdsHost)
	m.cancel()
	<-m.done
	m.net().Down(mdsHost, false)
	m.up.Store(false)
	m.w.log.add(m.w.now(), "mds", "stopped")
}

func (m *mdsProc) net() *sim.Net { return m.w.net }

// nodeProc is one cache node: a host, its disk and the process on it.
type nodeProc struct {
	w    *world
	id   string
	host string
	dir  string
	ram  bool
	disk *sim.Disk

	cancel context.CancelFunc
	done   chan error
	gen    int
	up     atomic.Bool // read by the observer
	// faulted: its disk failed operations since it started, so the engine
	// may have failed closed (it then serves nothing until a restart and
	// its stop reports the failure).
	faulted bool
	reg     atomic.Pointer[register.Registrar]
}

func (n *nodeProc) addr() string { return fmt.Sprintf("%s:%d", n.host, nodePort) }

func (n *nodeProc) start() {
	w := n.w
	n.gen++
	ram := ""
	if n.ram {
		ram = `ram_tier = 1
ram_tier_bytes = 16777216
ram_tier_shards = 2
ram_tier_large_reserve_bytes = 0
put_ack_mode = "disk"
ram_tier_numa = "off"
ram_flush_threads = 1`
	}
	cfg, _, err := config.LoadText("server", "sim-node.toml", fmt.Sprintf(`
[server]
id = %q
advertise_addr = %q
mds = [%q]
disks = [%q]
disk_capacity_bytes = 67108864
slab_extent_bytes = 1048576
store_engine = "slab"
uring = 0
max_block_bytes = "1MiB"
http_listen = ""
drain_ms = 500
shutdown_timeout_ms = 2000
first_request_ms = 5000
tenant_default_quota_bytes = %d
%s
`, n.id, n.addr(), mdsAddr(), filepath.Join(n.dir, "d0"), tenantQuota, ram), noEnv, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	ln, err := w.net.Listen(n.host, nodePort)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	ready := make(chan struct{})
	deps := server.Deps{
		Logger: w.logger(n.id), Listener: ln, FS: n.disk,
		Dialer: w.net.Dialer(n.host), Jitter: w.jitter(fmt.Sprintf("%s/%d", n.id, n.gen)),
		Ready:     func(*server.Server) { close(ready) },
		Registrar: func(r *register.Registrar) { n.reg.Store(r) },
	}
	go func() { n.done <- server.Run(ctx, cfg, deps) }()
	select {
	case <-ready:
	case err := <-n.done:
		w.violation(n.id, "node did not start: %v", err)
		return
	}
	n.up.Store(true)
	n.faulted = false
	w.log.add(w.now(), n.id, fmt.Sprintf("started (generation %d, ram tier %v)", n.gen, n.ram))
}

// stop ends the node's process: gracefully (drain, deregister, flush,
// sync), or as a crash (its disk fails every operation from this moment,
// its host drops off the network), optionally followed by a power cut
// that undoes its unsynced writes.
func (n *nodeProc) stop(how string, torn bool) {
	w := n.w
	n.up.Store(false)
	if how != "graceful" {
		n.disk.Crash()
		w.net.Down(n.host, true)
		w.net.Reset(n.host)
	}
	n.cancel()
	err := <-n.done
	if how == "graceful" {
		if open := w.net.Open(n.host); open > 0 {
			w.violation(n.id, "stopped gracefully with %d connections still open", open)
		}
	}
	n.reg.Store(nil)
	if how == "graceful" && err != nil && !n.faulted {
		w.violation(n.id, "graceful stop failed: %v", err)
	}
	if how == "power" {
		if perr := n.disk.PowerCut(torn); perr != nil {
			w.t.Fatal(perr)
		}
	}
	if how == "power" {
		w.markStale()
	}
	w.net.Down(n.host, false)
	w.log.add(w.now(), n.id, "stopped: "+how)
}

// clientProc is one client process and the keys it alone writes, so the
// oracle knows exactly what each key may hold.
type clientProc struct {
	w         *world
	name      string
	host      string
	namespace string // "" is the workload's, "sim"
	cl        *client.Client
	rng       *rand.Rand
	keys      []*keyState

	readBufs [][]byte

	ring        string        // the ring's epoch and members at the last look
	ringChanged time.Duration // when the client last saw them change
}

func (c *clientProc) open() {
	w := c.w
	ns := c.namespace
	if ns == "" {
		ns = "sim"
	}
	cl, err := client.Open(client.Options{
		Namespace: []byte(ns), MDS: []string{mdsAddr()}, MDSPoll: mdsPoll,
		Timeout: opTimeout, DialTimeout: time.Second, MaxBatchItems: 1, PoolSize: clientPool,
		Dialer: w.net.Dialer(c.host), Jitter: w.jitter(c.name + "/poll"),
	})
	if err != nil {
		w.t.Fatalf("seed %d: client %s: %v", w.seed, c.name, err)
	}
	c.cl = cl
}

// keyState is what the oracle knows of one key: the version its last
// acknowledged write left (0: removed or never written) and every version
// ever written, with when its write began and whether it was acknowledged.
type keyState struct {
	key     []byte
	cur     int
	written map[int]*version
	next    int
}

type version struct {
	start time.Duration
	size  int
	// unsure: the write failed or timed out, so it may have landed, and
	// may still land, at any later moment.
	unsure bool
}

// legal reports whether a read may return version v of the key.
func (c *clientProc) legal(k *keyState, v int) bool {
	if v == k.cur {
		return true
	}
	wv := k.written[v]
	if wv == nil {
		return false
	}
	return wv.unsure || c.w.staleSince(wv.start) || c.ringChanged >= wv.start
}

// observeRing notes when the client's view of the membership changed: a
// key may then be routed to a node holding an older value of it (or one
// removed elsewhere), which a cache without replication allows.
func (c *clientProc) observeRing() {
	ring := fmt.Sprint(c.cl.Epoch(), memberIDs(c.cl.MemberList()))
	if ring != c.ring {
		if c.ring != "" {
			c.ringChanged = c.w.now()
		}
		c.ring = ring
	}
}

// mayExist reports whether a read may find the key at all.
func (c *clientProc) mayExist(k *keyState) bool {
	if k.cur != 0 {
		return true
	}
	for v := range k.written {
		if c.legal(k, v) {
			return true
		}
	}
	return false
}
