package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dfkv/dfkv/config"
)

// Result is what one run measured: the JSON document of --json, and the
// source of the table and the HTML report. Latencies are microseconds,
// GB is 1e9 bytes of values (keys and framing are not counted).
type Result struct {
	Tool    string       `json:"tool"`
	Version int          `json:"format_version"`
	Started time.Time    `json:"started"`
	GoVer   string       `json:"go_version"`
	Config  ResultConfig `json:"config"`
	// OK is true when the run had no error and was not interrupted: only
	// then are its figures a result.
	OK          bool `json:"ok"`
	Interrupted bool `json:"interrupted"`
	// ErrorCount and Errors count every failed operation of the run (fill,
	// warm-up and measured stage) by class: a dfkv status name
	// (NOT_FOUND, UNAVAILABLE, …), REDIS_<error word>, MEMCACHED_<reply>,
	// WRONG_SIZE or PROTOCOL. Failed operations are not in the latency
	// and throughput figures. ErrorsByPhase splits them into "fill" and
	// "run" (warm-up and measured stage).
	ErrorCount    uint64                       `json:"error_count"`
	Errors        map[string]uint64            `json:"errors"`
	ErrorsByPhase map[string]map[string]uint64 `json:"errors_by_phase"`
	ErrorSamples  []string                     `json:"error_samples,omitempty"`

	Fill   *FillResult   `json:"fill,omitempty"`
	Totals Totals        `json:"totals"`
	Ops    []OpResult    `json:"ops"`
	Series []Sample      `json:"series"`
	Prefix *PrefixResult `json:"prefix,omitempty"`
}

// ResultConfig echoes the options of the run.
type ResultConfig struct {
	Workload      string  `json:"workload"`
	Protocol      string  `json:"protocol"`
	Target        string  `json:"target"`
	ValueSize     int     `json:"value_size"`
	Keys          int     `json:"keys,omitempty"`
	Concurrency   int     `json:"concurrency"`
	DurationS     float64 `json:"duration_s,omitempty"`
	Ops           int64   `json:"ops,omitempty"`
	WarmupS       float64 `json:"warmup_s"`
	Fill          bool    `json:"fill"`
	MixedGetRatio float64 `json:"mixed_get_ratio,omitempty"`
	Sequences     int     `json:"sequences,omitempty"`
	PagesPerSeq   int     `json:"pages_per_seq,omitempty"`
	SharedPrefix  float64 `json:"shared_prefix,omitempty"`
}

// FillResult is the unmeasured fill stage.
type FillResult struct {
	Keys    int     `json:"keys"`
	Seconds float64 `json:"seconds"`
	GBPerS  float64 `json:"gb_per_s"`
	Errors  uint64  `json:"errors"`
}

// Totals are the measured stage's successful operations.
type Totals struct {
	Ops     uint64  `json:"ops"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	OpsPerS float64 `json:"ops_per_s"`
	GBPerS  float64 `json:"gb_per_s"`
}

// OpResult is one operation kind of the measured stage.
type OpResult struct {
	Op      string       `json:"op"`
	Count   uint64       `json:"count"`
	Bytes   uint64       `json:"bytes"`
	OpsPerS float64      `json:"ops_per_s"`
	GBPerS  float64      `json:"gb_per_s"`
	Latency Latency      `json:"latency_us"`
	Curve   []CurvePoint `json:"percentile_curve"`
}

// Latency holds percentiles in microseconds, each within RelativeError of
// the exact value (min, mean and max are exact).
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	// Few marks the percentiles computed from too few samples to be more
	// than an estimate of the tail.
	Few FewSamples `json:"few_samples"`
}

// FewSamples marks each percentile p computed from fewer than 10/(1-p)
// samples (p99 from fewer than 1,000, p99.9 from fewer than 10,000):
// fewer than ten samples lie at or beyond it, so one slow operation more
// or less moves it.
type FewSamples struct {
	P50  bool `json:"p50"`
	P90  bool `json:"p90"`
	P99  bool `json:"p99"`
	P999 bool `json:"p999"`
}

// latencyOf summarises h.
func latencyOf(h *Histogram) Latency {
	n := h.Count()
	return Latency{
		Min: us(h.Min()), Mean: us(h.Mean()), P50: us(h.Quantile(0.5)), P90: us(h.Quantile(0.9)),
		P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)), Max: us(h.Max()),
		Few: FewSamples{P50: fewSamples(n, 0.5), P90: fewSamples(n, 0.9), P99: fewSamples(n, 0.99), P999: fewSamples(n, 0.999)},
	}
}

// percentileNames are the reported percentiles, as the table heads them.
var percentileNames = [4]string{"p50", "p90", "p99", "p99.9"}

// fewMark is what a percentile from few samples carries in a table.
const fewMark = "*"

// percentiles returns l's p50, p90, p99 and p99.9 formatted, each marked
// when it rests on few samples, and which were.
func (l Latency) percentiles() (cells [4]string, few [4]bool) {
	few = [4]bool{l.Few.P50, l.Few.P90, l.Few.P99, l.Few.P999}
	for i, v := range [4]float64{l.P50, l.P90, l.P99, l.P999} {
		cells[i] = fmtUs(v)
		if few[i] {
			cells[i] += fewMark
		}
	}
	return cells, few
}

// fewNotes are the footnotes of the percentiles marked in a table: one
// per percentile that any row marked.
func fewNotes(marked [4]bool) []string {
	var out []string
	for i, m := range marked {
		if m {
			q := [4]float64{0.5, 0.9, 0.99, 0.999}[i]
			out = append(out, fmt.Sprintf("%s %s: fewer than %s samples, so fewer than 10 at or beyond it; an estimate", fewMark, percentileNames[i], thousands(uint64(math.Round(10/(1-q))))))
		}
	}
	return out
}

// thousands writes n with commas between groups of three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// CurvePoint is one point of the latency percentile curve.
type CurvePoint struct {
	Percentile float64 `json:"percentile"`
	Us         float64 `json:"us"`
}

// PrefixResult is what the prefix workload found.
type PrefixResult struct {
	Sequences       int     `json:"sequences"`
	PagesPerSeq     int     `json:"pages_per_seq"`
	SharedPages     int     `json:"shared_pages"`
	CachedSequences int     `json:"cached_sequences"`
	Lookups         uint64  `json:"lookups"`
	HitRate         float64 `json:"hit_rate"` // loadable pages / pages asked
	MeanPrefixPages float64 `json:"mean_loadable_prefix_pages"`
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// curve samples the percentile curve of h evenly on the 1/(1-q) log scale
// (the HDR plot's x axis), from q = 0 up to where the data ends
// (1/(1-q) = count, at most 99.999 %), ending with the exact maximum.
func curve(h *Histogram) []CurvePoint {
	n := float64(h.Count())
	if n == 0 {
		return nil
	}
	xMax := math.Min(5, math.Log10(n))
	var pts []CurvePoint
	for x := 0.0; x < xMax; x += 0.05 {
		q := 1 - math.Pow(10, -x)
		pts = append(pts, CurvePoint{Percentile: 100 * q, Us: us(h.Quantile(q))})
	}
	return append(pts, CurvePoint{Percentile: 100 * (1 - math.Pow(10, -xMax)), Us: us(h.Max())})
}

// result assembles the Result of r.
func (r *run) result(started time.Time, fillKeys int, fillTime time.Duration, elapsed time.Duration, series []Sample, interrupted bool) *Result {
	o := r.o
	res := &Result{
		Tool: "dfkv bench", Version: 1, Started: started.UTC(), GoVer: runtime.Version(),
		Config: ResultConfig{
			Workload: o.Workload, Protocol: o.Protocol, Target: o.Target, ValueSize: o.ValueSize,
			Concurrency: o.Concurrency, WarmupS: o.Warmup.Seconds(), Fill: o.Fill,
		},
		Interrupted:   interrupted,
		Series:        series,
		Errors:        map[string]uint64{},
		ErrorsByPhase: map[string]map[string]uint64{},
	}
	if res.Series == nil {
		res.Series = []Sample{}
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
	for phase, ec := range map[string]*errCounts{"fill": &r.fillErr, "run": &r.runErr} {
		ec.mu.Lock()
		if len(ec.byClass) > 0 {
			m := map[string]uint64{}
			for k, v := range ec.byClass {
				m[k] = v
				res.Errors[k] += v
				res.ErrorCount += v
			}
			res.ErrorsByPhase[phase] = m
		}
		ec.mu.Unlock()
	}
	res.ErrorSamples = append(append([]string{}, r.fillErr.samples...), r.runErr.samples...)
	if len(res.ErrorSamples) > maxErrorSamples {
		res.ErrorSamples = res.ErrorSamples[:maxErrorSamples]
	}
	if o.Fill {
		res.Fill = &FillResult{Keys: fillKeys, Seconds: fillTime.Seconds(), Errors: r.fillErr.total()}
		if s := fillTime.Seconds(); s > 0 && res.Fill.Errors < uint64(fillKeys) {
			stored := uint64(fillKeys) - res.Fill.Errors
			res.Fill.GBPerS = float64(stored) * float64(o.ValueSize) / s / 1e9
		}
	}
	secs := elapsed.Seconds()
	res.Totals.Seconds = secs
	res.Ops = []OpResult{}
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
		res.Ops = append(res.Ops, or)
		res.Totals.Bytes += b
	}
	for _, w := range r.workers {
		res.Totals.Ops += w.live.ops.Load()
	}
	if secs > 0 {
		res.Totals.OpsPerS = float64(res.Totals.Ops) / secs
		res.Totals.GBPerS = float64(res.Totals.Bytes) / secs / 1e9
	}
	if o.Workload == wPrefix {
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
		res.Prefix = p
	}
	res.OK = res.ErrorCount == 0 && !interrupted && res.Totals.Ops > 0
	return res
}

// sig3 formats x with three significant digits, without exponent.
func sig3(x float64) string {
	switch ax := math.Abs(x); {
	case ax == 0:
		return "0"
	case ax >= 100:
		return fmt.Sprintf("%.0f", x)
	case ax >= 10:
		return fmt.Sprintf("%.1f", x)
	case ax >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// fmtUs formats a latency given in microseconds.
func fmtUs(v float64) string {
	switch {
	case v >= 1e6:
		return sig3(v/1e6) + "s"
	case v >= 1e3:
		return sig3(v/1e3) + "ms"
	}
	return sig3(v) + "µs"
}

// warning is the loud line a result with errors carries, or "".
func (res *Result) warning() string {
	var parts []string
	if res.ErrorCount > 0 {
		var cls []string
		for _, c := range sortedClasses(res.Errors) {
			cls = append(cls, fmt.Sprintf("%s %d", c, res.Errors[c]))
		}
		parts = append(parts, fmt.Sprintf("%d errors (%s)", res.ErrorCount, strings.Join(cls, ", ")))
	}
	if res.Interrupted {
		parts = append(parts, "run interrupted")
	}
	if res.ErrorCount == 0 && !res.Interrupted && res.Totals.Ops == 0 {
		parts = append(parts, "no operation completed in the measured stage")
	}
	if len(parts) == 0 {
		return ""
	}
	return "WARNING: " + strings.Join(parts, "; ") + " — the figures below are NOT a valid result (failed operations are left out of them)"
}

// summary is the one-line description of the run.
func (res *Result) summary() string {
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "dfkv bench: workload %s, protocol %s, target %s, value %s", c.Workload, c.Protocol, c.Target, config.FormatSize(uint64(c.ValueSize)))
	if c.Keys > 0 {
		fmt.Fprintf(&b, ", keys %d", c.Keys)
	}
	fmt.Fprintf(&b, ", concurrency %d", c.Concurrency)
	if c.Ops > 0 {
		fmt.Fprintf(&b, ", %d ops", c.Ops)
	} else {
		fmt.Fprintf(&b, ", %gs", c.DurationS)
	}
	fmt.Fprintf(&b, " (warm-up %gs", c.WarmupS)
	if res.Fill != nil {
		switch f := res.Fill; {
		case f.Errors == 0:
			fmt.Fprintf(&b, "; fill %d keys in %.2fs, %s GB/s", f.Keys, f.Seconds, sig3(f.GBPerS))
		case f.Errors >= uint64(f.Keys):
			// Not "filled in 0.04s": nothing was stored.
			fmt.Fprintf(&b, "; fill FAILED: all %d PUTs failed", f.Keys)
		default:
			fmt.Fprintf(&b, "; fill %d keys in %.2fs, %d of them FAILED", f.Keys, f.Seconds, f.Errors)
		}
	}
	b.WriteString(")")
	if c.Workload == wMixed {
		fmt.Fprintf(&b, ", %g%% GET", 100*c.MixedGetRatio)
	}
	return b.String()
}

// WriteTable prints the human table.
func (res *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString(res.summary() + "\n")
	if warn := res.warning(); warn != "" {
		b.WriteString(warn + "\n")
		for _, s := range res.ErrorSamples {
			b.WriteString("  error: " + s + "\n")
		}
	}
	rows := [][]string{{"op", "ops", "ops/s", "GB/s", "p50", "p90", "p99", "p99.9", "max"}}
	var marked [4]bool
	for _, o := range res.Ops {
		cells, few := o.Latency.percentiles()
		rows = append(rows, append([]string{o.Op, fmt.Sprint(o.Count), sig3(o.OpsPerS), sig3(o.GBPerS)}, append(cells[:], fmtUs(o.Latency.Max))...))
		marked = orMarks(marked, few)
	}
	t := res.Totals
	rows = append(rows, []string{"total", fmt.Sprint(t.Ops), sig3(t.OpsPerS), sig3(t.GBPerS)})
	if err := writeColumns(&b, rows); err != nil {
		return err
	}
	for _, n := range fewNotes(marked) {
		b.WriteString(n + "\n")
	}
	fmt.Fprintf(&b, "measured %.2fs; GB = 1e9 bytes of values; latency percentiles within %.2f%%\n", t.Seconds, 100*RelativeError)
	if p := res.Prefix; p != nil {
		fmt.Fprintf(&b, "prefix: %d sequences x %d pages (%d shared, %d sequences cached): %d lookups, hit rate %.1f%%, mean loadable prefix %.2f pages\n",
			p.Sequences, p.PagesPerSeq, p.SharedPages, p.CachedSequences, p.Lookups, 100*p.HitRate, p.MeanPrefixPages)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orMarks(a, b [4]bool) [4]bool {
	for i := range a {
		a[i] = a[i] || b[i]
	}
	return a
}

// WriteJSON writes the result as indented JSON.
func (res *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// writeColumns writes rows as columns two spaces apart, the first column
// (names) left-aligned and the others (figures) right-aligned. One
// tabwriter aligns all its columns alike, so the figures are aligned
// first and the names then put in a column before them.
func writeColumns(w io.Writer, rows [][]string) error {
	var figures strings.Builder
	tw := tabwriter.NewWriter(&figures, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range rows {
		// Every cell ends with a tab: tabwriter aligns only the cells a
		// tab closes.
		fmt.Fprintln(tw, strings.Join(r[1:], "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(figures.String(), "\n")
	tw = tabwriter.NewWriter(w, 0, 0, 0, ' ', 0)
	for i, r := range rows {
		fmt.Fprintf(tw, "%s\t%s", r[0], lines[i])
	}
	return tw.Flush()
}
