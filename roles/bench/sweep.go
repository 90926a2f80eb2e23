package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dfkv/dfkv/config"
)

// A sweep (--sweep concurrency=1,4,16,64) measures one stage per value
// of one setting, so one invocation draws throughput against latency as
// the load grows and finds where more load stops buying throughput: the
// knee.

// kneeRule is the knee, as the help, the table, the HTML and the JSON
// say it.
const kneeRule = "the knee is the first step whose p99 rose by at least 50 points of percent more than its throughput did, against the step before, and stayed up (no later step's p99 is over 10% below it)"

// SweepResult is a sweep's steps and its knee.
type SweepResult struct {
	Dimension string   `json:"dimension"` // config.SweepConcurrency or config.SweepValueSize
	Values    []uint64 `json:"values"`
	// Throughput is the figure the knee rule compares: "gb_per_s" (the
	// values moved), or "ops_per_s" for a workload that moves none.
	Throughput string `json:"knee_throughput"`
	KneeRule   string `json:"knee_rule"`
	// Knee is the index in Steps of the knee, -1 when no step is one.
	Knee  int    `json:"knee_step"`
	Steps []Step `json:"steps"`
}

// Step is one value of the sweep and its measured stage.
type Step struct {
	Value uint64 `json:"value"`
	Label string `json:"label"` // the value as written: "16", "64KiB"
	Knee  bool   `json:"knee"`
	// Latency and Curve are of every operation of the step together.
	Latency Latency      `json:"latency_us"`
	Curve   []CurvePoint `json:"percentile_curve"`
	// ErrorCount is the step's failed operations (with its fill's).
	ErrorCount uint64 `json:"error_count"`
	// Fill is the step's own fill: a value_size sweep stores its keys
	// anew with each size.
	Fill *FillResult `json:"fill,omitempty"`
	Stage
}

// step returns the options of the sweep's step of value v.
func (o Options) step(v uint64) Options {
	switch o.Sweep.Dimension {
	case config.SweepConcurrency:
		o.Concurrency = int(v)
	case config.SweepValueSize:
		o.ValueSize = int(v)
	}
	return o
}

// maxConcurrency is the most workers any stage of o runs.
func (o *Options) maxConcurrency() int {
	if o.Sweep.Dimension == config.SweepConcurrency {
		return int(o.Sweep.Values[len(o.Sweep.Values)-1])
	}
	return o.Concurrency
}

// sweeper runs the steps of a sweep.
type sweeper struct {
	o        Options
	t        target
	progress io.Writer
	res      *Result
	// shared is the run whose keys, filled once, every step of a
	// concurrency sweep reads.
	shared *run
}

// executeSweep runs the sweep of o: the fill once (for a value_size
// sweep, once per step, since the values change), then for each step a
// warm-up and a measured stage.
func executeSweep(ctx context.Context, o Options, t target, progress io.Writer) (*Result, error) {
	res := newResult(o, time.Now())
	sw := &SweepResult{Dimension: o.Sweep.Dimension, Values: o.Sweep.Values, Throughput: "gb_per_s", KneeRule: kneeRule, Knee: -1, Steps: []Step{}}
	if o.Workload == wExist {
		sw.Throughput = "ops_per_s"
	}
	res.Sweep = sw
	sp := &sweeper{o: o, t: t, progress: progress, res: res}
	for i, v := range o.Sweep.Values {
		if ctx.Err() != nil {
			break
		}
		st, err := sp.step(ctx, i, v)
		if err != nil {
			return nil, err
		}
		sw.Steps = append(sw.Steps, st)
	}
	sw.markKnee()
	return res.finish(ctx.Err() != nil || len(sw.Steps) < len(sw.Values)), nil
}

// step runs step i, of value v.
func (sp *sweeper) step(ctx context.Context, i int, v uint64) (Step, error) {
	so := sp.o.step(v)
	r, fill, err := sp.runFor(ctx, so)
	if err != nil {
		return Step{}, err
	}
	if sp.res.Server == nil && ctx.Err() == nil {
		sp.res.Server = sp.t.describe(ctx)
	}
	label := fmt.Sprintf("step %d/%d %s=%s: ", i+1, len(sp.o.Sweep.Values), sp.o.Sweep.Dimension, sp.o.Sweep.Label(v))
	if ctx.Err() == nil {
		if err := r.measureStage(ctx, sp.progress, label); err != nil {
			return Step{}, err
		}
	}
	sp.res.addErrors("run", &r.runErr)
	st := Step{Value: v, Label: sp.o.Sweep.Label(v), Fill: fill, ErrorCount: r.runErr.total(), Stage: r.stage(), Curve: []CurvePoint{}}
	if fill != nil {
		st.ErrorCount += fill.Errors
	}
	if h := r.mergedAll(); h != nil {
		st.Latency, st.Curve = latencyOf(h), curve(h)
	}
	return st, nil
}

// runFor returns the run of a step's options: over the shared keys of a
// concurrency sweep (filled by its first step), or over keys of its own
// filled now (the first step, or any step of a value_size sweep). The
// fill returned is the step's own.
func (sp *sweeper) runFor(ctx context.Context, so Options) (*run, *FillResult, error) {
	if sp.shared != nil {
		return sp.shared.withOptions(so), nil, nil
	}
	r := newRun(so, sp.t)
	fill, err := r.fillStage(ctx, sp.progress)
	if err != nil {
		return nil, nil, err
	}
	sp.res.addErrors("fill", &r.fillErr)
	if so.Sweep.Dimension == config.SweepConcurrency {
		sp.shared = r
		sp.res.Fill = fill
		return r, nil, nil
	}
	return r, fill, nil
}

// throughput is the figure of st the knee rule compares.
func (sw *SweepResult) throughput(st *Step) float64 {
	if sw.Throughput == "ops_per_s" {
		return st.Totals.OpsPerS
	}
	return st.Totals.GBPerS
}

// markKnee finds the knee of the steps measured.
func (sw *SweepResult) markKnee() {
	thr := make([]float64, len(sw.Steps))
	p99 := make([]float64, len(sw.Steps))
	for i := range sw.Steps {
		thr[i], p99[i] = sw.throughput(&sw.Steps[i]), sw.Steps[i].Latency.P99
	}
	sw.Knee = knee(thr, p99)
	if sw.Knee >= 0 {
		sw.Steps[sw.Knee].Knee = true
	}
}

// knee returns the index of the first step whose p99 rose by at least
// kneeMargin more than its throughput did (as fractions of the step
// before: +80 % p99 against +25 % throughput is a knee), and stayed up: no
// later step's p99 is more than a tenth below it. Or -1. On a shared
// machine a light step's p99 moves by half either way between runs; the
// margin and the staying up keep such a blip from being the knee (it put
// the knee of a sweep that saturated at its sixth step at its second). A
// step without throughput or latency, or after one, is not judged.
func knee(thr, p99 []float64) int {
	for i := 1; i < len(thr) && i < len(p99); i++ {
		if thr[i-1] <= 0 || p99[i-1] <= 0 || thr[i] <= 0 || p99[i] <= 0 {
			continue
		}
		dp, dt := p99[i]/p99[i-1]-1, thr[i]/thr[i-1]-1
		if dp-dt >= kneeMargin && stayedUp(p99[i], p99[i+1:]) {
			return i
		}
	}
	return -1
}

// stayedUp reports whether no later p99 is more than a tenth below p.
func stayedUp(p float64, later []float64) bool {
	for _, l := range later {
		if l > 0 && l < 0.9*p {
			return false
		}
	}
	return true
}

// kneeMargin is how much more p99 must rise than throughput, as a
// fraction of the step before, for a knee.
const kneeMargin = 0.5

// throughputUnit names the knee's throughput for people.
func (sw *SweepResult) throughputUnit() string {
	if sw.Throughput == "ops_per_s" {
		return "ops/s"
	}
	return "GB/s"
}

// kneeLine says where the knee is and why, or that there is none.
func (sw *SweepResult) kneeLine() string {
	if sw.Knee < 0 {
		return "knee: none within the sweep: no step's p99 rose by 50 points of percent more than its throughput (" + sw.throughputUnit() + ") did and stayed up"
	}
	k, prev := &sw.Steps[sw.Knee], &sw.Steps[sw.Knee-1]
	tk, tp := sw.throughput(k), sw.throughput(prev)
	return fmt.Sprintf("knee: %s=%s (%s %s, p99 %s): against %s=%s, p99 %s (%s to %s) while throughput %s (%s to %s %s)",
		sw.Dimension, k.Label, sig3(tk), sw.throughputUnit(), fmtUs(k.Latency.P99), sw.Dimension, prev.Label,
		change(k.Latency.P99/prev.Latency.P99), fmtUs(prev.Latency.P99), fmtUs(k.Latency.P99),
		change(tk/tp), sig3(tp), sig3(tk), sw.throughputUnit())
}

// peakLine names the step of the highest throughput, or "".
func (sw *SweepResult) peakLine() string {
	best := -1
	for i := range sw.Steps {
		if best < 0 || sw.throughput(&sw.Steps[i]) > sw.throughput(&sw.Steps[best]) {
			best = i
		}
	}
	if best < 0 || sw.throughput(&sw.Steps[best]) <= 0 {
		return ""
	}
	st := &sw.Steps[best]
	ops := ""
	if sw.Throughput != "ops_per_s" {
		ops = " (" + sig3(st.Totals.OpsPerS) + " ops/s)"
	}
	return fmt.Sprintf("highest throughput: %s %s%s at %s=%s, p99 %s", sig3(sw.throughput(st)), sw.throughputUnit(),
		ops, sw.Dimension, st.Label, fmtUs(st.Latency.P99))
}

// change says how much a ratio new/old rose or fell, in percent.
func change(r float64) string {
	if r >= 1 {
		return fmt.Sprintf("rose %.0f%%", 100*(r-1))
	}
	return fmt.Sprintf("fell %.0f%%", 100*(1-r))
}

// table writes the sweep's table: a row per step, throughput against
// latency percentiles, the knee marked.
func (sw *SweepResult) table(b *strings.Builder, measured string) error {
	rows := [][]string{{sw.Dimension, "ops/s", "GB/s", "p50", "p90", "p99", "p99.9", "errors", ""}}
	var marked [4]bool
	for i := range sw.Steps {
		st := &sw.Steps[i]
		cells, few := st.Latency.percentiles()
		mark := ""
		if st.Knee {
			mark = "<- knee"
		}
		rows = append(rows, append(append([]string{st.Label, sig3(st.Totals.OpsPerS), sig3(st.Totals.GBPerS)}, cells[:]...), fmt.Sprint(st.ErrorCount), mark))
		marked = orMarks(marked, few)
	}
	if err := writeColumns(b, rows); err != nil {
		return err
	}
	for _, n := range fewNotes(marked) {
		b.WriteString(n + "\n")
	}
	b.WriteString(sw.kneeLine() + "\n")
	if p := sw.peakLine(); p != "" {
		b.WriteString(p + "\n")
	}
	fmt.Fprintf(b, "%s (throughput in %s); each step %s; latency of all operations of a step together; GB = 1e9 bytes of values; latency percentiles within %.2f%%\n",
		kneeRule, sw.throughputUnit(), measured, 100*RelativeError)
	return nil
}
