package bench

import (
	"math"
	"testing"
	"time"
)

// TestIvHistBuckets: the coarse buckets tile the values without gap or
// overlap, and a quantile is within 1/32 of the value it stands for.
func TestIvHistBuckets(t *testing.T) {
	next := uint64(0)
	for i := 0; i < ivBuckets; i++ {
		low, width := ivRange(i)
		if low != next || ivBucket(low) != i || ivBucket(low+width-1) != i {
			t.Fatalf("bucket %d: [%d, +%d) does not follow %d or does not map back", i, low, width, next)
		}
		next = low + width
	}
	if next != maxTrackable+1 {
		t.Fatalf("buckets end at %d, want %d", next, uint64(maxTrackable)+1)
	}
	for _, v := range []uint64{1, 15, 16, 17, 999, 1000, 123456, 5e6, 7e9} {
		var h ivHist
		h.record(time.Duration(v), 0)
		got := h.quantile(0.5) * 1e3
		if math.Abs(got-float64(v)) > float64(v)/32 {
			t.Errorf("a lone %d ns reads back as %.0f ns", v, got)
		}
	}
	var h ivHist
	for v := 1; v <= 1000; v++ {
		h.record(time.Duration(v)*time.Microsecond, 10)
	}
	if p50, p99 := h.quantile(0.5), h.quantile(0.99); math.Abs(p50-500) > 500.0/32 || math.Abs(p99-990) > 990.0/32 || h.bytes != 10000 {
		t.Fatalf("1..1000 µs: p50 %.1f, p99 %.1f µs, %d bytes", p50, p99, h.bytes)
	}
}

func TestFewSamples(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		q    float64
		want bool
	}{
		{19, 0.5, true}, {20, 0.5, false}, {99, 0.9, true}, {100, 0.9, false},
		{999, 0.99, true}, {1000, 0.99, false}, {9999, 0.999, true}, {10000, 0.999, false}, {0, 0.5, true},
	} {
		if got := fewSamples(c.n, c.q); got != c.want {
			t.Errorf("fewSamples(%d, %g) = %v", c.n, c.q, got)
		}
	}
}

// TestBaseInterval: about 20 round intervals over a duration, never
// under 100 ms; 100 ms when the stage's length is a count of operations.
func TestBaseInterval(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		time.Second: 100 * time.Millisecond, 3 * time.Second: 100 * time.Millisecond, 4 * time.Second: 200 * time.Millisecond,
		10 * time.Second: 500 * time.Millisecond, 20 * time.Second: time.Second, time.Minute: 2 * time.Second,
		time.Hour: 100 * time.Second,
	} {
		if got := baseInterval(&Options{Duration: d}); got != want {
			t.Errorf("--duration %s: interval %s, want %s", d, got, want)
		}
	}
	if got := baseInterval(&Options{Duration: time.Hour, Ops: 5}); got != minInterval {
		t.Errorf("--ops: interval %s", got)
	}
}

// TestSeriesCoarsens: a stage of many epochs ends with maxSlots/2 ..
// maxSlots intervals that still add up to every operation, with the
// histograms of late flushes in the right interval, and a short last
// interval folded into the one before.
func TestSeriesCoarsens(t *testing.T) {
	var s series
	// 296 epochs end up 8 to a slot: 37 slots, and the tail a 38th.
	const epochs = 296
	for e := uint64(0); e < epochs; e++ {
		var hs [numOps]*ivHist
		hs[opGet] = new(ivHist)
		hs[opGet].record(time.Duration(e+1)*time.Microsecond, 100)
		hs[opGet].record(time.Duration(e+1)*time.Microsecond, 100)
		s.addTotals(e, 0.1, sampleTotals{ops: 2, bytes: 200})
		s.addHists(e, &hs) // after the sampler closed e, as a late worker does
		if hs[opGet].n != 0 {
			t.Fatal("addHists did not empty the worker's histogram")
		}
	}
	s.addTotals(epochs, 0.01, sampleTotals{ops: 1}) // a tail of 10 ms
	got, interval := s.samples(minInterval, []opKind{opGet})
	if len(got) < maxSlots/2 || len(got) > maxSlots {
		t.Fatalf("%d samples after %d epochs", len(got), epochs)
	}
	var ops, perOp uint64
	tNext := 0.0
	for i, smp := range got {
		ops += smp.OpsCount
		perOp += smp.PerOp[0].Ops
		if math.Abs(smp.T-tNext) > 1e-9 || smp.PerOp[0].Op != "get" {
			t.Fatalf("sample %d starts at %g, want %g (%+v)", i, smp.T, tNext, smp)
		}
		tNext += smp.Seconds
	}
	if ops != 2*epochs+1 || perOp != 2*epochs || math.Abs(tNext-29.61) > 1e-6 || s.shift != 3 || interval != 800*time.Millisecond || len(got) != 37 {
		t.Fatalf("series adds up to %d ops (%d recorded) over %gs", ops, perOp, tNext)
	}
	// With 2^shift epochs per sample, the first sample holds epochs
	// 0..2^shift-1, whose latencies are 1..2^shift µs.
	per := uint64(1) << s.shift
	if p99 := got[0].PerOp[0].P99; math.Abs(p99-float64(per)) > float64(per)/32+0.5 {
		t.Fatalf("first of %d-epoch samples: p99 %.2f µs", per, p99)
	}
	if last := got[len(got)-1]; math.Abs(last.Seconds-0.81) > 1e-9 {
		t.Fatalf("the 10 ms tail is a sample of its own: %+v", last)
	}
}
