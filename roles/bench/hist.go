package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records latencies in nanoseconds in log-linear buckets, the
// HDR histogram layout: values below subCount (1024 ns) are exact, and
// above that every power-of-two range [2^k, 2^(k+1)) is cut into halfCount
// (512) equal buckets, so a bucket is never wider than 1/halfCount of its
// lower bound.
// Reporting a bucket's midpoint bounds the relative error of any
// percentile by 1/(2·halfCount) = 1/1024 < 0.1 % (three significant
// digits). Memory is fixed (about 120 KB); values above maxTrackable are
// counted in the last bucket, and the exact maximum is kept separately.
//
// A Histogram is not safe for concurrent use: each worker records into its
// own and the reporter merges them.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64 // nanoseconds; overflows after ~584 years of latency
	min    uint64
	max    uint64
}

const (
	subBits   = 10
	subCount  = 1 << subBits // values below it have a bucket each
	halfCount = subCount / 2
	// maxTrackable is the largest latency bucketed without clamping:
	// 2^36 ns ≈ 68.7 s, past any sane request timeout.
	maxExp       = 36
	maxTrackable = 1<<maxExp - 1
	// numBuckets: exponents e in 0..maxExp-subBits, halfCount buckets each,
	// plus the first halfCount exact values.
	numBuckets = (maxExp-subBits+1)*halfCount + halfCount
)

// RelativeError is the bound on |reported-exact|/exact of any percentile
// (for exact values ≥ 1 ns).
const RelativeError = 1.0 / (2 * halfCount)

// bucketOf returns the bucket index of v (v ≤ maxTrackable).
func bucketOf(v uint64) int {
	e := bits.Len64(v) - subBits
	if e < 0 {
		e = 0
	}
	// For e ≥ 1, v>>e is in [halfCount, subCount); e = 0 covers [0, subCount).
	return e*halfCount + int(v>>uint(e))
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (low, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	e := i/halfCount - 1
	m := uint64(i - e*halfCount)
	return m << uint(e), 1 << uint(e)
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.RecordValue(v)
}

// RecordValue adds one value in nanoseconds.
func (h *Histogram) RecordValue(v uint64) {
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
	if v > maxTrackable {
		v = maxTrackable
	}
	h.counts[bucketOf(v)]++
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest value recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest value recorded, exactly.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the value of rank
// ceil(q·n) (the smallest recorded value for q = 0), as its bucket's
// midpoint clamped to the exact min and max. An empty histogram gives 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			low, width := bucketRange(i)
			v := low + width/2 // the midpoint; exact for width 1
			v = max(v, h.min)
			v = min(v, h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
