package bench

import (
	"runtime"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/version"
)

// formatVersion is the Result's format_version: 2 added the server
// section, per-operation series, the small-sample flags and sweeps.
const formatVersion = 2

// newResult starts the Result of o: what was asked, no figures yet.
func newResult(o Options, started time.Time) *Result {
	res := &Result{
		Tool: "dfkv bench", Version: formatVersion, Started: started.UTC(), GoVer: runtime.Version(),
		BenchVersion: version.Version, BenchCommit: version.CommitID(), BenchCPUs: runtime.NumCPU(),
		Config: ResultConfig{
			Workload: o.Workload, Protocol: o.Protocol, Target: o.Target, ValueSize: o.ValueSize,
			Concurrency: o.Concurrency, WarmupS: o.Warmup.Seconds(), Fill: o.Fill, Sweep: o.Sweep.String(),
		},
		Errors:        map[string]uint64{},
		ErrorsByPhase: map[string]map[string]uint64{},
	}
	switch o.Sweep.Dimension {
	case config.SweepConcurrency:
		res.Config.Concurrency = 0
	case config.SweepValueSize:
		res.Config.ValueSize = 0
	}
	if o.Ops > 0 {
		res.Config.Ops = o.Ops
	} else {
		res.Config.DurationS = o.Duration.Seconds()
	}
	switch o.Workload {
	case wMixed:
		res.Config.MixedGetRatio = o.GetRatio
	case wPrefix:
		res.Config.Sequences, res.Config.PagesPerSeq, res.Config.SharedPrefix = o.Sequences, o.PagesPerSeq, o.SharedPrefix
	}
	if o.Workload != wPrefix {
		res.Config.Keys = o.Keys
	}
	return res
}

// addErrors counts ec's errors under phase ("fill" or "run") and keeps
// its first messages, up to maxErrorSamples in all.
func (res *Result) addErrors(phase string, ec *errCounts) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if len(ec.byClass) == 0 {
		return
	}
	m := res.ErrorsByPhase[phase]
	if m == nil {
		m = map[string]uint64{}
		res.ErrorsByPhase[phase] = m
	}
	for k, v := range ec.byClass {
		m[k] += v
		res.Errors[k] += v
		res.ErrorCount += v
	}
	for _, s := range ec.samples {
		if len(res.ErrorSamples) < maxErrorSamples {
			res.ErrorSamples = append(res.ErrorSamples, s)
		}
	}
}

// finish decides whether the figures are a result: no error, not
// interrupted, and operations measured in every stage.
func (res *Result) finish(interrupted bool) *Result {
	res.Interrupted = interrupted
	res.OK = res.ErrorCount == 0 && !interrupted && res.emptyStage() == ""
	return res
}

// emptyStage names a measured stage without a single completed
// operation ("the measured stage", "step concurrency=4"), or "".
func (res *Result) emptyStage() string {
	if res.Sweep == nil {
		if res.Stage == nil || res.Totals.Ops == 0 {
			return "the measured stage"
		}
		return ""
	}
	if len(res.Sweep.Steps) == 0 {
		return "any step"
	}
	for _, st := range res.Sweep.Steps {
		if st.Totals.Ops == 0 {
			return "step " + res.Sweep.Dimension + "=" + st.Label
		}
	}
	return ""
}

// fillResult is the fill stage of r: keys stored in d, with r's fill
// errors.
func (r *run) fillResult(keys int, d time.Duration) *FillResult {
	f := &FillResult{Keys: keys, Seconds: d.Seconds(), Errors: r.fillErr.total()}
	if s := d.Seconds(); s > 0 && f.Errors < uint64(keys) {
		stored := uint64(keys) - f.Errors
		f.GBPerS = float64(stored) * float64(r.o.ValueSize) / s / 1e9
	}
	return f
}

// stage assembles what r's measured stage measured.
func (r *run) stage() Stage {
	o := r.o
	st := Stage{Series: r.samples, SeriesInterval: r.interval.Seconds(), Ops: []OpResult{}}
	if st.Series == nil {
		st.Series = []Sample{}
	}
	secs := r.elapsed.Seconds()
	st.Totals.Seconds = secs
	for op := opKind(0); op < numOps; op++ {
		h, b := r.merged(op)
		if h == nil {
			continue
		}
		or := OpResult{Op: opNames[op], Count: h.Count(), Bytes: b, Curve: curve(h), Latency: latencyOf(h)}
		if secs > 0 {
			or.OpsPerS = float64(or.Count) / secs
			or.GBPerS = float64(b) / secs / 1e9
		}
		st.Ops = append(st.Ops, or)
		st.Totals.Bytes += b
	}
	for _, w := range r.workers {
		st.Totals.Ops += w.live.ops.Load()
	}
	if secs > 0 {
		st.Totals.OpsPerS = float64(st.Totals.Ops) / secs
		st.Totals.GBPerS = float64(st.Totals.Bytes) / secs / 1e9
	}
	if o.Workload == wPrefix {
		st.Prefix = r.prefixResult()
	}
	return st
}

// prefixResult is what the prefix workload's lookups found.
func (r *run) prefixResult() *PrefixResult {
	o := r.o
	p := &PrefixResult{Sequences: o.Sequences, PagesPerSeq: o.PagesPerSeq, SharedPages: o.sharedPages(), CachedSequences: (o.Sequences + 1) / 2}
	var loadable, pages uint64
	for _, w := range r.workers {
		p.Lookups += w.lookups
		loadable += w.loadable
		pages += w.pages
	}
	if pages > 0 {
		p.HitRate = float64(loadable) / float64(pages)
	}
	if p.Lookups > 0 {
		p.MeanPrefixPages = float64(loadable) / float64(p.Lookups)
	}
	return p
}

// mergedAll is every operation of r's measured stage in one histogram
// (nil when none was recorded).
func (r *run) mergedAll() *Histogram {
	var all *Histogram
	for op := opKind(0); op < numOps; op++ {
		if h, _ := r.merged(op); h != nil {
			if all == nil {
				all = new(Histogram)
			}
			all.Merge(h)
		}
	}
	return all
}
