package bench

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// The time series of the measured stage: throughput in total and per
// operation, and latency percentiles per operation, over intervals.
//
// A sampler ticks every base interval and advances an epoch counter.
// Each worker records the latency of an operation into a coarse
// histogram of its own for the epoch it completed in, and hands that
// histogram over (under a mutex, once per epoch, not per operation) when
// it sees the epoch change. The sampler adds the growth of the live
// counters to the same epoch. An interval (a slot) is 2^shift epochs:
// when a stage runs long enough to fill more than maxSlots slots, pairs
// are merged and shift grows, so a run of --ops of unknown length still
// ends with maxSlots/2..maxSlots intervals.

// ivHist is a coarse latency histogram of one interval: 16 buckets per
// power of two, so a percentile is within 1/32 (about 3 %) of the exact
// value, in 2 KB, small enough to keep one per worker and operation.
type ivHist struct {
	counts [ivBuckets]uint32
	n      uint64
	bytes  uint64
}

const (
	ivSub     = 4 // log2 of the buckets per power of two
	ivBuckets = (maxExp - ivSub + 1) << ivSub
)

func ivBucket(v uint64) int {
	v = min(v, maxTrackable)
	if v < 1<<ivSub {
		return int(v)
	}
	e := bits.Len64(v) - 1 - ivSub
	return (e+1)<<ivSub + int(v>>uint(e)) - 1<<ivSub
}

// ivRange returns the lowest value of bucket i and its width.
func ivRange(i int) (low, width uint64) {
	if i < 1<<ivSub {
		return uint64(i), 1
	}
	e := i>>ivSub - 1
	m := uint64(i&(1<<ivSub-1) + 1<<ivSub)
	return m << uint(e), 1 << uint(e)
}

func (h *ivHist) record(d time.Duration, n int64) {
	h.counts[ivBucket(uint64(max(d, 0)))]++
	h.n++
	h.bytes += uint64(n)
}

func (h *ivHist) merge(o *ivHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.bytes += o.bytes
}

// quantile returns the value of rank ceil(q·n) as its bucket's midpoint,
// in microseconds; 0 when empty.
func (h *ivHist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			low, width := ivRange(i)
			return (float64(low) + float64(width-1)/2) / 1e3
		}
	}
	return 0
}

// Interval lengths.
const (
	minInterval = 100 * time.Millisecond
	maxSlots    = 64
	// intervalsPerStage is how many intervals a stage of known length
	// aims for.
	intervalsPerStage = 20
)

// baseInterval is the epoch length for o: a round 1-2-5 length giving
// at least intervalsPerStage intervals over --duration, never under
// minInterval; minInterval for --ops, whose length is not known.
func baseInterval(o *Options) time.Duration {
	if o.Ops > 0 {
		return minInterval
	}
	want := o.Duration / intervalsPerStage
	best := minInterval
	for mag := minInterval; ; mag *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if mag*m > want {
				return best
			}
			best = mag * m
		}
	}
}

// slot is one interval of the series.
type slot struct {
	secs             float64
	ops, bytes, errs uint64
	hist             [numOps]*ivHist
}

// series collects the slots of one measured stage.
type series struct {
	mu    sync.Mutex
	shift uint
	slots []*slot
}

// at returns the slot of epoch e, creating it; call with mu held.
func (s *series) at(e uint64) *slot {
	i := int(e >> s.shift)
	for len(s.slots) <= i {
		s.slots = append(s.slots, &slot{})
	}
	return s.slots[i]
}

// addHists merges a worker's histograms of epoch e and empties them.
func (s *series) addHists(e uint64, hs *[numOps]*ivHist) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sl *slot
	for op, h := range hs {
		if h == nil || h.n == 0 {
			continue
		}
		if sl == nil {
			sl = s.at(e)
		}
		if sl.hist[op] == nil {
			sl.hist[op] = new(ivHist)
		}
		sl.hist[op].merge(h)
		*h = ivHist{}
	}
}

// addTotals adds the counters' growth over epoch e, secs long, and
// merges pairs of slots when there are too many.
func (s *series) addTotals(e uint64, secs float64, d sampleTotals) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.at(e)
	sl.secs += secs
	sl.ops += d.ops
	sl.bytes += d.bytes
	sl.errs += d.errs
	if len(s.slots) > maxSlots {
		s.coarsen()
	}
}

// coarsen merges slots 2i and 2i+1 into slot i.
func (s *series) coarsen() {
	n := (len(s.slots) + 1) / 2
	for i := 0; i < n; i++ {
		a := s.slots[2*i]
		if 2*i+1 < len(s.slots) {
			a.mergeSlot(s.slots[2*i+1])
		}
		s.slots[i] = a
	}
	clear(s.slots[n:])
	s.slots = s.slots[:n]
	s.shift++
}

func (a *slot) mergeSlot(b *slot) {
	a.secs += b.secs
	a.ops += b.ops
	a.bytes += b.bytes
	a.errs += b.errs
	for op, h := range b.hist {
		if h == nil {
			continue
		}
		if a.hist[op] == nil {
			a.hist[op] = new(ivHist)
		}
		a.hist[op].merge(h)
	}
}

// samples turns the slots into the reported series, and returns the
// length of its intervals. A last slot shorter
// than half its interval (the stage ended just after a tick) is folded
// into the one before rather than plotted as a rate over a few
// milliseconds; the series still adds up to the totals.
func (s *series) samples(base time.Duration, ops []opKind) ([]Sample, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots := s.slots
	interval := base << s.shift
	full := interval.Seconds()
	if n := len(slots); n > 1 && slots[n-1].secs < full/2 {
		slots[n-2].mergeSlot(slots[n-1])
		slots = slots[:n-1]
	}
	out := make([]Sample, 0, len(slots))
	t := 0.0
	for _, sl := range slots {
		if sl.secs <= 0 {
			continue
		}
		out = append(out, sl.sample(t, ops))
		t += sl.secs
	}
	return out, interval
}

func (sl *slot) sample(t float64, ops []opKind) Sample {
	s := Sample{T: t, Seconds: sl.secs, OpsPerS: float64(sl.ops) / sl.secs, GBPerS: float64(sl.bytes) / sl.secs / 1e9,
		Errors: sl.errs, OpsCount: sl.ops, Bytes: sl.bytes, PerOp: make([]OpSample, 0, len(ops))}
	for _, op := range ops {
		ps := OpSample{Op: opNames[op], P50Few: true, P99Few: true}
		if h := sl.hist[op]; h != nil {
			ps.Ops, ps.OpsPerS, ps.GBPerS = h.n, float64(h.n)/sl.secs, float64(h.bytes)/sl.secs/1e9
			ps.P50, ps.P99 = h.quantile(0.5), h.quantile(0.99)
			ps.P50Few, ps.P99Few = fewSamples(h.n, 0.5), fewSamples(h.n, 0.99)
		}
		s.PerOp = append(s.PerOp, ps)
	}
	return s
}

// fewSamples reports whether percentile q of n samples rests on too few
// of them to be more than an estimate: fewer than 10/(1-q), ten samples
// at or beyond it.
func fewSamples(n uint64, q float64) bool {
	return float64(n) < math.Round(10/(1-q))
}
