package sim_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/roles/internal/sim"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

var (
	seedFlag = flag.Uint64("sim.seed", 0, "run only this seed (0: the CI seed set)")
	runsFlag = flag.Int("sim.runs", 0, "run this many seeds, from -sim.first on, instead of the CI set (a soak)")
	firstFlg = flag.Uint64("sim.first", 1000, "the first seed of a -sim.runs soak")
	durFlag  = flag.Duration("sim.duration", 0, "simulated time of faults and workload per seed (0: the CI length)")
	logFlag  = flag.Bool("sim.log", false, "print every run's event log")
	infoFlag = flag.Bool("sim.info", false, "put the processes' INFO logs in the event log too (warnings and errors always are)")
	traceFlg = flag.String("sim.trace", "", "write every dial and write on the simulated network to this file")
)

// The CI seed set: ciSeeds seeds of ciDuration simulated seconds each
// (and the settling and restarts after), over 10,000 simulated seconds.
// Under the race detector: one seed of raceDuration.
const (
	ciSeeds      = 24
	ciDuration   = 420 * time.Second
	raceDuration = 90 * time.Second
)

// settle is how long after the last fault the cluster must agree on its
// membership again: a lapsed member's TTL, a sweep, a slow directory's
// stall, two client polls and some slack.
const settle = heartbeatTTL + heartbeatTTL/4 + 1500*time.Millisecond + 2*mdsPoll + 2*time.Second

// outcome is one run's result.
type outcome struct {
	log        string
	violations []string
	simulated  time.Duration
	ops, stall int
}

// TestSim runs the cluster under each seed of the CI set (or those the
// flags name) and fails on any broken invariant, printing the run's seed
// and the command that replays it.
func TestSim(t *testing.T) {
	seeds := make([]uint64, 0, ciSeeds)
	switch {
	case *seedFlag != 0:
		seeds = append(seeds, *seedFlag)
	case *runsFlag > 0:
		for i := 0; i < *runsFlag; i++ {
			seeds = append(seeds, *firstFlg+uint64(i))
		}
	case raceEnabled:
		seeds = append(seeds, 1)
	default:
		for i := uint64(1); i <= ciSeeds; i++ {
			seeds = append(seeds, i)
		}
	}
	dur := ciDuration
	if raceEnabled {
		dur = raceDuration
	}
	if *durFlag > 0 {
		dur = *durFlag
	}
	began := time.Now()
	var simulated time.Duration
	for _, seed := range seeds {
		o := runSeed(t, seed, dur)
		simulated += o.simulated
		if testing.Verbose() {
			t.Logf("seed %d: %.0f simulated seconds, %d events, log digest %x", seed, o.simulated.Seconds(), o.ops, sha256.Sum256([]byte(o.log)))
		}
		if *logFlag {
			t.Logf("seed %d event log:\n%s", seed, o.log)
		}
		if len(o.violations) > 0 {
			t.Errorf("seed %d broke an invariant:\n  %s\nreplay: go test ./roles/internal/sim -run 'TestSim$' -sim.seed %d -sim.duration %s -sim.log -v",
				seed, strings.Join(o.violations, "\n  "), seed, dur)
		}
	}
	t.Logf("%d seeds, %.0f simulated seconds in %.1f s of wall time", len(seeds), simulated.Seconds(), time.Since(began).Seconds())
}

// TestSimReplaysExactly runs one seed three times: the event logs must be
// the same bytes, so a failing seed replays to the same failure.
func TestSimReplaysExactly(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without the race detector, in scripts/test.sh's simulation step: under it three runs take 15 s")
	}
	const seed, dur = 7, 60 * time.Second
	var logs []string
	for i := 0; i < 3; i++ {
		logs = append(logs, runSeed(t, seed, dur).log)
	}
	for i := 1; i < 3; i++ {
		if logs[i] != logs[0] {
			a, b := strings.Split(logs[0], "\n"), strings.Split(logs[i], "\n")
			for j := range min(len(a), len(b)) {
				if a[j] != b[j] {
					t.Fatalf("run %d of seed %d differs from run 1 at line %d:\n  run 1: %s\n  run %d: %s", i+1, seed, j+1, a[j], i+1, b[j])
				}
			}
			t.Fatalf("run %d of seed %d has %d lines, run 1 %d", i+1, seed, len(b), len(a))
		}
	}
	if n := strings.Count(logs[0], "\n"); n < 200 {
		t.Fatalf("seed %d logged only %d events in %s; the workload did not run", seed, n, dur)
	}
}

// runSeed builds the world for seed, runs faults and workload for dur of
// simulated time, then checks the cluster settles.
func runSeed(t *testing.T, seed uint64, dur time.Duration) outcome {
	// One processor: goroutines woken at the same virtual instant then run
	// one after another in the order the runtime readied them, which the
	// run itself decides, instead of in parallel, where the machine's
	// timing would. (With two, about one seed in twelve replayed
	// differently.)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var o outcome
	root := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// The disks' files are rewritten constantly; memory is faster than
		// whatever TMPDIR is. Each seed's go when it ends: a set of them
		// would hold gigabytes of memory.
		d, err := os.MkdirTemp("/dev/shm", "dfkv-sim-")
		if err == nil {
			root = d
			defer os.RemoveAll(d)
		}
	}
	// The cluster's paths are relative to the run's directory: the disks'
	// paths travel in the nodes' registrations, and a replay must send the
	// same bytes wherever its directory is.
	t.Chdir(root)
	root = fmt.Sprintf("seed-%d", seed)
	var latest atomic.Int64
	defer watchVirtualTime(seed, dur, &latest)()
	synctest.Test(t, func(t *testing.T) {
		w := &world{t: t, seed: seed, root: root, start: time.Now(), net: sim.NewNet(seed), stopped: make(chan struct{})}
		w.log.latest = &latest
		w.rng = w.seeded("faults")
		if f := *traceFlg; f != "" {
			var mu sync.Mutex
			var lines []string
			w.net.Trace = func(e string) { mu.Lock(); lines = append(lines, e); mu.Unlock() }
			defer func() { _ = os.WriteFile(f, []byte(strings.Join(lines, "\n")), 0o644) }()
		}
		w.setup()
		o.stall = w.exercise(dur)
		w.teardown()
		o.simulated = w.now()
		o.log = w.log.String()
		o.violations = w.log.violations()
		o.ops = strings.Count(o.log, "\n")
	})
	return o
}

// stuckAfter is how long virtual time may stand still, in real time,
// before the watchdog calls the run stuck. A healthy run moves it hundreds
// of times a real second.
const stuckAfter = 60 * time.Second

// watchVirtualTime fails a run whose virtual time stopped: some goroutine
// of the cluster is runnable but never gets on (a sync.Mutex waiter, which
// synctest does not count as blocked, behind a holder asleep in a slow
// I/O), so synctest never advances the clock and the run would hang until
// go test's timeout, in CI after the whole budget. It watches from outside
// the bubble, in real time, and when latest (the virtual instant of the
// newest event) has not moved for stuckAfter it prints every goroutine
// and panics with the run's replay line. Call the returned stop when the run
// ends.
func watchVirtualTime(seed uint64, dur time.Duration, latest *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, since := latest.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if v := latest.Load(); v != last {
				last, since = v, time.Now()
				continue
			}
			if time.Since(since) < stuckAfter {
				continue
			}
			buf := make([]byte, 64<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "%s\n", buf)
			panic(fmt.Sprintf("seed %d: virtual time stood still at %s for %s of real time: a goroutine of the cluster is waiting for a lock "+
				"whose holder sleeps in simulated I/O (a lock held across disk or network I/O; the stacks above show a waiter in sync.Mutex.Lock "+
				"and the holder asleep in the world)\n  replay: go test ./roles/internal/sim -run 'TestSim$' -sim.seed %d -sim.duration %s -sim.log -v",
				seed, time.Duration(last), stuckAfter, seed, dur))
		}
	}()
	return func() { close(done) }
}

func (w *world) setup() {
	w.mds = &mdsProc{w: w, dbPath: filepath.Join(w.root, "mds", "mds.db")}
	if err := os.MkdirAll(filepath.Dir(w.mds.dbPath), 0o755); err != nil {
		w.t.Fatal(err)
	}
	w.mds.start()
	for i := 1; i <= 3; i++ {
		n := &nodeProc{w: w, id: fmt.Sprintf("n%d", i), host: fmt.Sprintf("10.0.0.%d", i),
			dir: filepath.Join(w.root, fmt.Sprintf("n%d", i)), ram: i == 3,
			disk: sim.NewDisk(w.seed + uint64(i))}
		time.Sleep(between(w.rng, 0, 300*time.Millisecond))
		n.start()
		w.nodes = append(w.nodes, n)
	}
	time.Sleep(2 * mdsPoll)
	for i := 1; i <= 3; i++ {
		c := &clientProc{w: w, name: fmt.Sprintf("c%d", i), host: fmt.Sprintf("10.0.1.%d", i)}
		c.rng = w.seeded(c.name)
		for j := 0; j < keysPerClient; j++ {
			c.keys = append(c.keys, &keyState{key: fmt.Appendf(nil, "%s/k%02d", c.name, j), written: map[int]*version{}})
		}
		c.open()
		w.clients = append(w.clients, c)
	}
	time.Sleep(settle)
}

// exercise runs the workload and the fault schedule for dur, heals every
// fault, lets the cluster settle and checks it agrees on its membership;
// then checks that acknowledged writes survive a graceful restart of
// every node. It returns how often the directory stalled.
func (w *world) exercise(dur time.Duration) int {
	stopWork := make(chan struct{})
	var work sync.WaitGroup
	for _, c := range w.clients {
		work.Go(func() { c.run(stopWork) })
	}
	obs := newObserver(w)
	stopObs := make(chan struct{})
	var obsDone sync.WaitGroup
	obsDone.Go(func() { obs.run(stopObs) })

	w.faults(dur)
	w.healAll()
	w.sleep(settle)
	close(stopWork)
	work.Wait()
	w.sleep(leaseTTL + time.Second)
	w.released()
	close(stopObs)
	obsDone.Wait()
	if !w.violated.Load() {
		w.converged("after the last fault")
	}
	if !w.violated.Load() {
		w.durability()
	}
	return int(w.mds.stalls.Load())
}

// leaseTTL is server.lease_ms, how long a pin lives without a GET.
const leaseTTL = 2 * time.Second

// released checks, once the clients have been idle for longer than a pin
// lives, that no node still holds a pin or a payload buffer, and that
// none holds a connection beyond the clients' pools (three clients of at
// most PoolSize idle connections, a probe each, and the MDS's).
func (w *world) released() {
	c := w.clients[0]
	for _, n := range w.nodes {
		if !n.up.Load() {
			continue
		}
		ctx, cancel := c.ctx()
		body, err := c.cl.Stats(ctx, n.addr())
		cancel()
		if err != nil {
			w.violation("world", "STATS of %s: %v", n.id, err)
			continue
		}
		var st server.StatsReply
		if err := json.Unmarshal(body, &st); err != nil {
			w.violation("world", "STATS of %s: %v", n.id, err)
			continue
		}
		if st.Server.BufferInUse != 0 {
			w.violation(n.id, "idle for %s, still holds %d bytes of payload buffers", leaseTTL+time.Second, st.Server.BufferInUse)
		}
		w.withinQuotas(n.id, &st)
		if st.Pins != nil && st.Pins.Live != 0 {
			w.violation(n.id, "idle for longer than a pin's lease, still holds %d pins", st.Pins.Live)
		}
		if limit := int64(len(w.clients) * (clientPool + 1)); st.Server.OpenConns > limit {
			w.violation(n.id, "idle, holds %d connections; the clients keep at most %d", st.Server.OpenConns, limit)
		}
		w.log.add(w.now(), n.id, fmt.Sprintf("idle: %d buffer bytes, %d connections", st.Server.BufferInUse, st.Server.OpenConns))
	}
}

// withinQuotas checks that no tenant holds more on a node than its quota.
func (w *world) withinQuotas(node string, st *server.StatsReply) {
	for _, t := range st.Tenants {
		if t.QuotaBytes > 0 && t.UsedBytes > int64(t.QuotaBytes) {
			w.violation(node, "tenant %s holds %d bytes, over its quota of %d", t.Tenant, t.UsedBytes, t.QuotaBytes)
		}
		if t.UsedBytes < 0 {
			w.violation(node, "tenant %s holds %d bytes: the accounting went negative", t.Tenant, t.UsedBytes)
		}
	}
}

// sleep waits d of simulated time, or less if the run is over.
func (w *world) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stopped:
	}
}

func (w *world) teardown() {
	for _, c := range w.clients {
		_ = c.cl.Close()
	}
	for _, n := range w.nodes {
		if n.up.Load() {
			n.stop("graceful", false)
		}
	}
	if w.mds.up.Load() {
		w.mds.stop()
	}
	for _, n := range w.nodes {
		n.disk.Close()
	}
}

// healAll ends every fault: links, slow hosts and disks, and starts what
// is down.
func (w *world) healAll() {
	w.net.HealAll()
	if !w.mds.up.Load() {
		w.mds.start()
	}
	for _, n := range w.nodes {
		n.disk.SetFaults(sim.Faults{})
		n.disk.Slow(0)
		if n.up.Load() && n.faulted {
			// An engine that failed closed serves again after a restart,
			// as an operator (or the orchestrator's liveness probe) does.
			n.stop("graceful", false)
		}
		if !n.up.Load() {
			n.start()
		}
	}
	w.log.add(w.now(), "world", "healed every fault")
}

// liveIDs are the ids of the nodes that run.
func (w *world) liveIDs() []string {
	var ids []string
	for _, n := range w.nodes {
		if n.up.Load() {
			ids = append(ids, n.id)
		}
	}
	return ids
}

func memberIDs(ms []wire.MemberInfo) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// converged checks that the directory lists exactly the running nodes and
// that every client routes over exactly that list.
func (w *world) converged(when string) {
	want := w.liveIDs()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	mc, err := client.NewMDSClient([]string{mdsAddr()}, "default", w.net.Dialer("10.0.2.1"), opTimeout)
	if err != nil {
		w.t.Fatal(err)
	}
	_, ms, _, err := mc.Members(ctx, 0)
	if err != nil {
		w.violation("world", "%s: the MDS does not answer MEMBERS: %v", when, err)
		return
	}
	if got := memberIDs(ms); !slices.Equal(got, want) {
		w.violation("world", "%s: the MDS lists %v, the running nodes are %v", when, got, want)
	}
	for _, c := range w.clients {
		if got := memberIDs(c.cl.MemberList()); !slices.Equal(got, want) {
			w.violation(c.name, "%s: routes over %v, the running nodes are %v", when, got, want)
		}
	}
	w.log.add(w.now(), "world", fmt.Sprintf("%s: membership %v everywhere", when, want))
}

// durability writes fresh keys, as a tenant of their own (the workload's
// tenant may be at its quota), with every node healthy, restarts every
// node gracefully, and reads them all back: an acknowledged write
// survives a graceful restart, byte for byte.
func (w *world) durability() {
	c := &clientProc{w: w, name: "durable", host: "10.0.1.9", namespace: "sim-durable"}
	c.rng = w.seeded(c.name)
	c.open()
	defer func() { _ = c.cl.Close() }()
	w.sleep(2 * mdsPoll)
	keys, vals := make([][]byte, 24), make([][]byte, 24)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "durable%02d", i)
		vals[i] = makeValue(keys[i], 1, c.size())
		ctx, cancel := c.ctx()
		err := c.cl.Put(ctx, keys[i], vals[i])
		cancel()
		owner, _ := c.cl.Owner(keys[i])
		if err != nil {
			w.violation(c.name, "PUT %s to %s failed with every node healthy: %v", keys[i], owner, err)
			return
		}
		c.logf("put %s to %s", keys[i], owner)
	}
	for _, n := range w.nodes {
		n.stop("graceful", false)
	}
	for _, n := range w.nodes {
		n.start()
	}
	w.sleep(settle)
	w.converged("after a graceful restart of every node")
	buf := make([]byte, readBuf)
	for i, key := range keys {
		ctx, cancel := c.ctx()
		n, _, err := c.cl.Get(ctx, key, buf)
		cancel()
		if err != nil || string(buf[:n]) != string(vals[i]) {
			owner, _ := c.cl.Owner(key)
			w.violation(c.name, "%s, acknowledged before a graceful restart, reads back from %s as %s (%d bytes)", key, owner, errClass(err), n)
		}
	}
	w.log.add(w.now(), "world", fmt.Sprintf("%d acknowledged writes read back after a graceful restart", len(keys)))
}
