package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/config"
)

// Workloads.
const (
	wPut    = "put"
	wGet    = "get"
	wExist  = "exist"
	wMixed  = "mixed"
	wPrefix = "prefix"
)

// opKind indexes the per-operation histograms and counters.
type opKind int

const (
	opPut opKind = iota
	opGet
	opExist
	opExistPrefix
	opGetPrefix
	numOps
)

var opNames = [numOps]string{"put", "get", "exist", "exist_prefix", "get_prefix"}

// workloadOps lists the operations workload records, in report order.
func workloadOps(workload string) []opKind {
	switch workload {
	case wGet:
		return []opKind{opGet}
	case wExist:
		return []opKind{opExist}
	case wMixed:
		return []opKind{opPut, opGet}
	case wPrefix:
		return []opKind{opExistPrefix, opGetPrefix}
	}
	return []opKind{opPut}
}

// Options describe one bench run; Command fills them from flags.
type Options struct {
	Workload    string
	Protocol    string // dfkv, redis, memcache
	Target      string // members or address, for the report
	ValueSize   int
	Keys        int
	Concurrency int
	Duration    time.Duration // measured time; ignored when Ops > 0
	Ops         int64         // measured operations (all workers together); 0 = use Duration
	Warmup      time.Duration
	Fill        bool
	GetRatio    float64 // mixed: fraction of GETs
	KeyPrefix   string
	Seed        uint64
	Sweep       config.Sweep // one setting varied over steps; none when empty

	// prefix workload
	Sequences    int
	PagesPerSeq  int
	SharedPrefix float64
}

// fillConcurrency is how many workers fill the key space.
func (o *Options) fillConcurrency() int { return max(1, min(max(o.Concurrency, 4), o.Keys)) }

// sharedPages is how many leading pages every sequence shares.
func (o *Options) sharedPages() int {
	return int(o.SharedPrefix*float64(o.PagesPerSeq) + 0.5)
}

// errCounts counts errors by class and keeps the first message of each
// class (up to maxErrorSamples).
type errCounts struct {
	mu      sync.Mutex
	byClass map[string]uint64
	samples []string
}

const maxErrorSamples = 5

func (e *errCounts) add(err error) {
	class := errClass(err)
	e.mu.Lock()
	if e.byClass == nil {
		e.byClass = make(map[string]uint64)
	}
	e.byClass[class]++
	// The first error of each class: one line per kind of failure says
	// more than five lines of the same refused connection.
	if e.byClass[class] == 1 && len(e.samples) < maxErrorSamples {
		e.samples = append(e.samples, err.Error())
	}
	e.mu.Unlock()
}

func (e *errCounts) total() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	for _, c := range e.byClass {
		n += c
	}
	return n
}

// live are a worker's counters read by the sampler while it runs, padded
// so workers do not share cache lines.
type live struct {
	ops, bytes, errs atomic.Uint64
	_                [40]byte
}

// worker is one load-generating goroutine with its own connection,
// buffers, random source and histograms.
type worker struct {
	c    conn
	rng  *rand.Rand
	val  []byte
	dst  []byte
	hist [numOps]*Histogram
	byts [numOps]uint64
	live live

	// the time series: this epoch's coarse histograms, handed to ser
	// when the sampler has moved epoch on.
	epoch   *atomic.Uint64
	ser     *series
	ivEpoch uint64
	iv      [numOps]*ivHist

	// prefix workload
	dsts                     [][]byte
	lookups, loadable, pages uint64
}

func (w *worker) record(op opKind, d time.Duration, n int64) {
	h := w.hist[op]
	if h == nil {
		h = new(Histogram)
		w.hist[op] = h
	}
	h.Record(d)
	w.byts[op] += uint64(n)
	w.live.bytes.Add(uint64(n))
	if e := w.epoch.Load(); e != w.ivEpoch {
		w.flushInterval()
		w.ivEpoch = e
	}
	ih := w.iv[op]
	if ih == nil {
		ih = new(ivHist)
		w.iv[op] = ih
	}
	ih.record(d, n)
}

// flushInterval hands the worker's histograms of its epoch to the series.
func (w *worker) flushInterval() { w.ser.addHists(w.ivEpoch, &w.iv) }

// Phases of the measured stage, in the order they happen.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// run is one execution of Options against a target.
type run struct {
	o    Options
	t    target
	keys [][]byte
	// prefix workload: the page keys of every sequence.
	seqKeys [][][]byte
	seqNext atomic.Uint64

	phase   atomic.Int32
	tickets atomic.Int64
	fillErr errCounts
	runErr  errCounts
	workers []*worker
	// the time series of the measured stage: epoch counts base
	// intervals, ser collects them.
	epoch atomic.Uint64
	ser   series

	// what the measured stage measured: its length, its series and
	// the series' interval.
	elapsed  time.Duration
	samples  []Sample
	interval time.Duration

	// progress, if set, is called about 5 times a second while measuring.
	progress func(elapsed time.Duration, ops, bytes, errs uint64)
}

// payload fills b with pseudo-random bytes, so no layer can compress it.
func payload(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x62656e6368))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

func newRun(o Options, t target) *run {
	r := &run{o: o, t: t}
	if o.Workload == wPrefix {
		// A fresh nonce per run: pages of earlier runs (possibly of
		// another size) must not count as hits.
		base := fmt.Sprintf("%sp/%x/", o.KeyPrefix, time.Now().UnixNano()^int64(o.Seed))
		shared := o.sharedPages()
		sharedKeys := make([][]byte, shared)
		for j := range sharedKeys {
			sharedKeys[j] = []byte(base + "shared/" + strconv.Itoa(j))
		}
		r.seqKeys = make([][][]byte, o.Sequences)
		for s := range r.seqKeys {
			ks := make([][]byte, o.PagesPerSeq)
			copy(ks, sharedKeys)
			for j := shared; j < o.PagesPerSeq; j++ {
				ks[j] = []byte(base + strconv.Itoa(s) + "/" + strconv.Itoa(j))
			}
			r.seqKeys[s] = ks
		}
		return r
	}
	r.keys = make([][]byte, o.Keys)
	for i := range r.keys {
		r.keys[i] = []byte(o.KeyPrefix + strconv.Itoa(i))
	}
	return r
}

// withOptions is a run of o over r's keys, for a step of a sweep that
// does not change what the keys hold: the fill of r serves it too.
func (r *run) withOptions(o Options) *run {
	return &run{o: o, t: r.t, keys: r.keys, seqKeys: r.seqKeys, progress: r.progress}
}

// cached reports whether sequence s is one the populate stage stored: the
// even ones. The odd ones share only the common prefix with them.
func cached(s int) bool { return s%2 == 0 }

// fillKeys returns the keys the fill stage stores.
func (r *run) fillKeys() [][]byte {
	if r.o.Workload != wPrefix {
		return r.keys
	}
	var ks [][]byte
	seen := make(map[string]bool)
	for s, seq := range r.seqKeys {
		if !cached(s) {
			continue
		}
		for _, k := range seq {
			if !seen[string(k)] {
				seen[string(k)] = true
				ks = append(ks, k)
			}
		}
	}
	return ks
}

// fill stores every fill key once with fillConcurrency connections and
// returns how long it took. Its operations are not measured.
func (r *run) fill(ctx context.Context) (int, time.Duration, error) {
	keys := r.fillKeys()
	nw := min(r.o.fillConcurrency(), max(len(keys), 1))
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	conns := make([]conn, nw)
	for i := range conns {
		c, err := r.t.Dial()
		if err != nil {
			for _, c := range conns[:i] {
				_ = c.Close()
			}
			return 0, 0, err
		}
		conns[i] = c
	}
	for i, c := range conns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer c.Close()
			val := make([]byte, r.o.ValueSize)
			payload(val, r.o.Seed+uint64(i)+1)
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(len(keys)) {
					return
				}
				if err := c.Put(keys[k], val); err != nil {
					r.fillErr.add(fmt.Errorf("fill PUT %q: %w", keys[k], err))
					backoff(err)
				}
			}
		}(i)
	}
	wg.Wait()
	return len(keys), time.Since(start), ctx.Err()
}

// backoff pauses a worker briefly after a connection-level failure, so a
// stopped server is not hammered by a spinning loop.
func backoff(err error) {
	if errClass(err) == "UNAVAILABLE" {
		time.Sleep(10 * time.Millisecond)
	}
}

// measure runs the workers: a warm-up that is not recorded, then the
// measured stage for Duration or Ops. It keeps the measured wall time
// and the time series in r.
func (r *run) measure(ctx context.Context) error {
	o := r.o
	if err := r.startWorkers(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			defer w.c.Close()
			r.work(ctx, w)
			w.flushInterval()
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	stop := func() { r.phase.Store(phaseStop) }
	defer stop()
	r.warmUp(ctx, done)
	start := time.Now()
	var endTimer <-chan time.Time
	if o.Ops <= 0 {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		endTimer = t.C
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	base := baseInterval(&o)
	epochs := time.NewTicker(base)
	defer epochs.Stop()
	var last sampleTotals
	lastAt := start
	// closeEpoch adds the live counters' growth to the epoch ending now.
	closeEpoch := func(now time.Time) {
		e := r.epoch.Add(1) - 1
		t := r.totals()
		r.ser.addTotals(e, now.Sub(lastAt).Seconds(), t.minus(last))
		last, lastAt = t, now
	}
	for {
		select {
		case <-done:
			now := time.Now()
			closeEpoch(now)
			r.elapsed = now.Sub(start)
			r.samples, r.interval = r.ser.samples(base, workloadOps(o.Workload))
			return ctx.Err()
		case <-endTimer:
			stop()
		case <-ctx.Done():
			stop()
		case now := <-epochs.C:
			closeEpoch(now)
		case now := <-tick.C:
			if r.progress != nil {
				t := r.totals()
				r.progress(now.Sub(start), t.ops, t.bytes, t.errs)
			}
		}
	}
}

// startWorkers dials a connection per worker and gives each its buffers.
func (r *run) startWorkers() error {
	o := r.o
	r.workers = make([]*worker, o.Concurrency)
	for i := range r.workers {
		c, err := r.t.Dial()
		if err != nil {
			for _, w := range r.workers[:i] {
				_ = w.c.Close()
			}
			return err
		}
		w := &worker{c: c, rng: rand.New(rand.NewPCG(o.Seed, uint64(i)+1000)), epoch: &r.epoch, ser: &r.ser}
		w.val = make([]byte, o.ValueSize)
		payload(w.val, o.Seed+uint64(i)+1)
		switch o.Workload {
		case wGet, wMixed:
			w.dst = make([]byte, o.ValueSize)
		case wPrefix:
			w.dsts = make([][]byte, o.PagesPerSeq)
			for j := range w.dsts {
				w.dsts[j] = make([]byte, o.ValueSize)
			}
		}
		r.workers[i] = w
	}
	r.phase.Store(phaseWarmup)
	if o.Warmup <= 0 {
		r.phase.Store(phaseMeasure)
	}
	return nil
}

// warmUp lets the workers run unrecorded for the warm-up, then starts
// the measured stage.
func (r *run) warmUp(ctx context.Context, done <-chan struct{}) {
	if r.o.Warmup <= 0 {
		return
	}
	t := time.NewTimer(r.o.Warmup)
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-done:
	}
	t.Stop()
	// Warm-up operations reach neither the histograms nor the live
	// counters: both count only what starts in phaseMeasure.
	r.phase.Store(phaseMeasure)
}

type sampleTotals struct{ ops, bytes, errs uint64 }

func (a sampleTotals) minus(b sampleTotals) sampleTotals {
	return sampleTotals{a.ops - b.ops, a.bytes - b.bytes, a.errs - b.errs}
}

func (r *run) totals() sampleTotals {
	var t sampleTotals
	for _, w := range r.workers {
		t.ops += w.live.ops.Load()
		t.bytes += w.live.bytes.Load()
		t.errs += w.live.errs.Load()
	}
	return t
}

// Sample is one interval of the time series.
type Sample struct {
	T        float64 `json:"t_s"`     // start of the interval, seconds into the measured stage
	Seconds  float64 `json:"seconds"` // its length
	OpsPerS  float64 `json:"ops_per_s"`
	GBPerS   float64 `json:"gb_per_s"` // value bytes, GB = 1e9
	Errors   uint64  `json:"errors"`
	OpsCount uint64  `json:"ops"`
	Bytes    uint64  `json:"bytes"`
	// PerOp splits the interval by operation (get and put of the mixed
	// workload), with latency percentiles of the operations that
	// completed in it.
	PerOp []OpSample `json:"per_op"`
}

// OpSample is one operation's share of an interval. The percentiles are
// within about 3 % (coarser than the stage's); a PxxFew flag marks one
// that rests on fewer than 10/(1-p) samples.
type OpSample struct {
	Op      string  `json:"op"`
	Ops     uint64  `json:"ops"`
	OpsPerS float64 `json:"ops_per_s"`
	GBPerS  float64 `json:"gb_per_s"`
	P50     float64 `json:"p50_us"`
	P99     float64 `json:"p99_us"`
	P50Few  bool    `json:"p50_few_samples"`
	P99Few  bool    `json:"p99_few_samples"`
}

// work is one worker's loop.
func (r *run) work(ctx context.Context, w *worker) {
	o := &r.o
	for {
		ph := r.phase.Load()
		if ph == phaseStop || ctx.Err() != nil {
			return
		}
		if ph == phaseMeasure && o.Ops > 0 && r.tickets.Add(1) > o.Ops {
			return
		}
		rec := ph == phaseMeasure
		var err error
		switch o.Workload {
		case wPut:
			err = r.put(w, rec)
		case wGet:
			err = r.get(w, rec)
		case wExist:
			err = r.exist(w, rec)
		case wMixed:
			if w.rng.Float64() < o.GetRatio {
				err = r.get(w, rec)
			} else {
				err = r.put(w, rec)
			}
		case wPrefix:
			err = r.prefix(w, rec)
		}
		if err == nil {
			if rec {
				w.live.ops.Add(1)
			}
			continue
		}
		if ctx.Err() != nil {
			return // interrupted: the failure is ours, not the server's
		}
		r.runErr.add(err)
		if rec {
			w.live.errs.Add(1)
		}
		backoff(err)
	}
}

func (r *run) key(w *worker) []byte { return r.keys[w.rng.IntN(len(r.keys))] }

func (r *run) put(w *worker, rec bool) error {
	k := r.key(w)
	t := time.Now()
	if err := w.c.Put(k, w.val); err != nil {
		return fmt.Errorf("PUT %q: %w", k, err)
	}
	if rec {
		w.record(opPut, time.Since(t), int64(len(w.val)))
	}
	return nil
}

func (r *run) get(w *worker, rec bool) error {
	k := r.key(w)
	t := time.Now()
	n, err := w.c.Get(k, w.dst)
	d := time.Since(t)
	if err != nil {
		return fmt.Errorf("GET %q: %w", k, err)
	}
	if n != len(w.dst) {
		return &peerError{class: classWrongSize, msg: fmt.Sprintf("GET %q returned %d bytes, expected %d (was the key space filled with this --value-size?)", k, n, len(w.dst))}
	}
	if rec {
		w.record(opGet, d, int64(n))
	}
	return nil
}

func (r *run) exist(w *worker, rec bool) error {
	k := r.key(w)
	t := time.Now()
	if err := w.c.Exist(k); err != nil {
		return fmt.Errorf("EXIST %q: %w", k, err)
	}
	if rec {
		w.record(opExist, time.Since(t), 0)
	}
	return nil
}

// prefix looks one sequence up the way an inference engine does before a
// prefill: how many leading pages are cached, then load those.
func (r *run) prefix(w *worker, rec bool) error {
	s := int((r.seqNext.Add(1) - 1) % uint64(len(r.seqKeys)))
	keys := r.seqKeys[s]
	t := time.Now()
	n, err := existPrefix(w.c, keys)
	if err != nil {
		return fmt.Errorf("EXIST_PREFIX of sequence %d: %w", s, err)
	}
	if rec {
		w.record(opExistPrefix, time.Since(t), 0)
	}
	if n > 0 {
		t = time.Now()
		b, err := loadPages(w.c, keys[:n], w.dsts[:n])
		if err != nil {
			return fmt.Errorf("GET of the %d-page prefix of sequence %d: %w", n, s, err)
		}
		if want := int64(n) * int64(r.o.ValueSize); b != want {
			return &peerError{class: classWrongSize, msg: fmt.Sprintf("prefix of sequence %d: loaded %d bytes, expected %d", s, b, want)}
		}
		if rec {
			w.record(opGetPrefix, time.Since(t), b)
		}
	}
	if rec {
		w.lookups++
		w.loadable += uint64(n)
		w.pages += uint64(len(keys))
	}
	return nil
}

// merged returns the merged histogram and byte count of op over workers,
// or nil when no worker recorded it.
func (r *run) merged(op opKind) (*Histogram, uint64) {
	var h *Histogram
	var b uint64
	for _, w := range r.workers {
		if w.hist[op] == nil {
			continue
		}
		if h == nil {
			h = new(Histogram)
		}
		h.Merge(w.hist[op])
		b += w.byts[op]
	}
	return h, b
}

func sortedClasses(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if m[out[i]] != m[out[j]] {
			return m[out[i]] > m[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}
