package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactQuantile is the rank-ceil(q·n) value of sorted, the definition
// Histogram.Quantile approximates.
func exactQuantile(sorted []uint64, q float64) uint64 {
	if q <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(rank, 1)
	return sorted[rank-1]
}

var testQuantiles = []float64{0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1}

// TestHistogramAccuracy records known distributions and checks every
// percentile against the exact one within RelativeError, and min, max
// and mean exactly.
func TestHistogramAccuracy(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	dists := []struct {
		name string
		gen  func() uint64
	}{
		{"exact range 0..1023", func() uint64 { return rng.Uint64N(1024) }},
		{"uniform 1µs..10ms", func() uint64 { return 1000 + rng.Uint64N(10_000_000) }},
		{"log-uniform 1ns..60s", func() uint64 { return uint64(math.Exp(rng.Float64() * math.Log(60e9))) }},
		{"exponential mean 200µs", func() uint64 { return uint64(rng.ExpFloat64() * 200e3) }},
		{"bimodal 50µs and 40ms", func() uint64 {
			if rng.IntN(100) < 97 {
				return 50_000 + rng.Uint64N(5_000)
			}
			return 40_000_000 + rng.Uint64N(4_000_000)
		}},
	}
	for _, d := range dists {
		t.Run(d.name, func(t *testing.T) {
			var h Histogram
			vals := make([]uint64, 200_000)
			var sum uint64
			for i := range vals {
				vals[i] = d.gen()
				sum += vals[i]
				h.RecordValue(vals[i])
			}
			slices.Sort(vals)
			if h.Count() != uint64(len(vals)) {
				t.Fatalf("count %d, want %d", h.Count(), len(vals))
			}
			if uint64(h.Min()) != vals[0] || uint64(h.Max()) != vals[len(vals)-1] {
				t.Fatalf("min/max %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
			}
			if got, want := uint64(h.Mean()), sum/uint64(len(vals)); got != want {
				t.Fatalf("mean %d, want %d", got, want)
			}
			for _, q := range testQuantiles {
				exact := float64(exactQuantile(vals, q))
				got := float64(h.Quantile(q))
				if math.Abs(got-exact) > RelativeError*exact {
					t.Errorf("q=%g: got %.0f, exact %.0f: relative error %.5f > %.5f", q, got, exact, math.Abs(got-exact)/exact, RelativeError)
				}
			}
		})
	}
}

// TestHistogramBuckets walks values across every exponent: each value's
// bucket contains it, buckets are contiguous, and widths respect the
// relative bound.
func TestHistogramBuckets(t *testing.T) {
	prevIdx := -1
	for v := uint64(0); v <= maxTrackable; v = v + 1 + v/3000 {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("value %d: bucket %d out of 0..%d", v, i, numBuckets-1)
		}
		low, width := bucketRange(i)
		if v < low || v >= low+width {
			t.Fatalf("value %d in bucket %d = [%d, %d)", v, i, low, low+width)
		}
		if width > 1 && float64(width/2) > RelativeError*float64(low) {
			t.Fatalf("bucket %d [%d,+%d): half width exceeds the relative bound", i, low, width)
		}
		if i < prevIdx {
			t.Fatalf("bucket index went down at %d: %d after %d", v, i, prevIdx)
		}
		prevIdx = i
	}
	for i := 1; i < numBuckets; i++ {
		lo0, w0 := bucketRange(i - 1)
		lo1, _ := bucketRange(i)
		if lo0+w0 != lo1 {
			t.Fatalf("buckets %d and %d are not contiguous: [%d,+%d) then %d", i-1, i, lo0, w0, lo1)
		}
	}
	if bucketOf(maxTrackable) != numBuckets-1 {
		t.Fatalf("maxTrackable lands in bucket %d, want the last (%d)", bucketOf(maxTrackable), numBuckets-1)
	}
}

// TestHistogramMerge: merging per-worker histograms equals recording
// everything into one.
func TestHistogramMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var whole Histogram
	parts := make([]Histogram, 4)
	for i := 0; i < 100_000; i++ {
		v := uint64(rng.ExpFloat64() * 1e6)
		whole.RecordValue(v)
		parts[i%len(parts)].RecordValue(v)
	}
	var merged Histogram
	merged.Merge(&Histogram{}) // an empty one changes nothing
	for i := range parts {
		merged.Merge(&parts[i])
	}
	if merged != whole {
		t.Fatalf("merged histogram differs from the whole: count %d/%d min %d/%d max %d/%d", merged.Count(), whole.Count(), merged.Min(), whole.Min(), merged.Max(), whole.Max())
	}
	for _, q := range testQuantiles {
		if merged.Quantile(q) != whole.Quantile(q) {
			t.Fatalf("q=%g: merged %v, whole %v", q, merged.Quantile(q), whole.Quantile(q))
		}
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("an empty histogram reports non-zero values")
	}
	h.Record(-5) // a negative duration (clock step) counts as 0
	h.Record(2 * time.Hour)
	if h.Min() != 0 || h.Max() != 2*time.Hour {
		t.Fatalf("min %v max %v, want 0 and 2h (exact past maxTrackable)", h.Min(), h.Max())
	}
	if q := h.Quantile(0.99); q > 2*time.Hour || q < time.Duration(maxTrackable)/2 {
		t.Fatalf("p99 of {0, 2h} is %v; want the clamped top bucket, at most the exact max", q)
	}
	if h.Quantile(0.5) != 0 {
		t.Fatalf("p50 of {0, 2h} is %v, want 0", h.Quantile(0.5))
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Fatalf("Record allocates %.1f times per call", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.RecordValue(uint64(i) * 7919)
	}
}
