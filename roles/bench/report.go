package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
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
	Tool    string    `json:"tool"`
	Version int       `json:"format_version"`
	Started time.Time `json:"started"`
	GoVer   string    `json:"go_version"`
	// BenchVersion and BenchCommit are the build of this bench binary,
	// BenchCPUs the CPUs of the machine it ran on (a load generator
	// short of CPU measures itself).
	BenchVersion string       `json:"bench_version"`
	BenchCommit  string       `json:"bench_commit"`
	BenchCPUs    int          `json:"bench_cpus"`
	Config       ResultConfig `json:"config"`
	// Server is what was measured, asked before measuring.
	Server *ServerInfo `json:"server,omitempty"`
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

	// Fill is the fill stage (of a value_size sweep: of each step, in
	// its Step).
	Fill *FillResult `json:"fill,omitempty"`
	// Stage is the measured stage of a run without a sweep; nil for a
	// sweep, whose stages are its steps.
	*Stage
	Sweep *SweepResult `json:"sweep,omitempty"`
}

// Stage is what one measured stage measured.
type Stage struct {
	Totals Totals     `json:"totals"`
	Ops    []OpResult `json:"ops"`
	// Series is the stage over time, in intervals of SeriesInterval
	// seconds (the last one may be longer).
	Series         []Sample      `json:"series"`
	SeriesInterval float64       `json:"series_interval_s"`
	Prefix         *PrefixResult `json:"prefix,omitempty"`
}

// ResultConfig echoes the options of the run.
type ResultConfig struct {
	Workload    string  `json:"workload"`
	Protocol    string  `json:"protocol"`
	Target      string  `json:"target"`
	ValueSize   int     `json:"value_size"`
	Keys        int     `json:"keys,omitempty"`
	Concurrency int     `json:"concurrency"`
	DurationS   float64 `json:"duration_s,omitempty"`
	Ops         int64   `json:"ops,omitempty"`
	WarmupS     float64 `json:"warmup_s"`
	Fill        bool    `json:"fill"`
	// Sweep is the swept setting and its values ("concurrency=1,4,16");
	// that setting's own field above is then 0.
	Sweep         string  `json:"sweep,omitempty"`
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
	if empty := res.emptyStage(); res.ErrorCount == 0 && !res.Interrupted && empty != "" {
		parts = append(parts, "no operation completed in "+empty)
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
	fmt.Fprintf(&b, "dfkv bench: workload %s, protocol %s, target %s", c.Workload, c.Protocol, c.Target)
	if c.ValueSize > 0 {
		fmt.Fprintf(&b, ", value %s", config.FormatSize(uint64(c.ValueSize)))
	}
	if c.Keys > 0 {
		fmt.Fprintf(&b, ", keys %d", c.Keys)
	}
	if c.Concurrency > 0 {
		fmt.Fprintf(&b, ", concurrency %d", c.Concurrency)
	}
	if c.Sweep != "" {
		fmt.Fprintf(&b, ", sweep %s", c.Sweep)
	}
	fmt.Fprintf(&b, ", %s (warm-up %gs", res.measured(), c.WarmupS)
	b.WriteString(res.fillSummary())
	b.WriteString(")")
	if c.Workload == wMixed {
		fmt.Fprintf(&b, ", %g%% GET", 100*c.MixedGetRatio)
	}
	return b.String()
}

// measured is how long a stage was asked to measure: "10s", "500 ops",
// "per step" added for a sweep.
func (res *Result) measured() string {
	if res.Sweep != nil {
		return res.perStage() + " per step"
	}
	return res.perStage()
}

// perStage is how long one stage was asked to measure: "10s", "500 ops".
func (res *Result) perStage() string {
	if res.Config.Ops > 0 {
		return fmt.Sprintf("%d ops", res.Config.Ops)
	}
	return fmt.Sprintf("%gs", res.Config.DurationS)
}

// fillSummary is the fill's part of the summary.
func (res *Result) fillSummary() string {
	f := res.Fill
	switch {
	case f == nil && res.Config.Fill && res.Sweep != nil:
		return "; fill per step"
	case f == nil:
		return ""
	case f.Errors == 0:
		return fmt.Sprintf("; fill %d keys in %.2fs, %s GB/s", f.Keys, f.Seconds, sig3(f.GBPerS))
	case f.Errors >= uint64(f.Keys):
		// Not "filled in 0.04s": nothing was stored.
		return fmt.Sprintf("; fill FAILED: all %d PUTs failed", f.Keys)
	}
	return fmt.Sprintf("; fill %d keys in %.2fs, %d of them FAILED", f.Keys, f.Seconds, f.Errors)
}

// benchLine describes the load generator.
func (res *Result) benchLine() string {
	n := NodeInfo{Version: res.BenchVersion, Commit: res.BenchCommit}
	return fmt.Sprintf("bench %s, %s, %s", n.build(), res.GoVer, plural(res.BenchCPUs, "CPU"))
}

// WriteTable prints the human table.
func (res *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString(res.summary() + "\n")
	for _, l := range res.Server.lines() {
		b.WriteString(l + "\n")
	}
	b.WriteString(res.benchLine() + "\n")
	if warn := res.warning(); warn != "" {
		b.WriteString(warn + "\n")
		for _, s := range res.ErrorSamples {
			b.WriteString("  error: " + s + "\n")
		}
	}
	var err error
	switch {
	case res.Sweep != nil:
		err = res.Sweep.table(&b, "measured "+res.perStage())
	case res.Stage != nil:
		err = res.Stage.table(&b)
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// table writes the stage's operations and totals.
func (st *Stage) table(b *strings.Builder) error {
	rows := [][]string{{"op", "ops", "ops/s", "GB/s", "p50", "p90", "p99", "p99.9", "max"}}
	var marked [4]bool
	for _, o := range st.Ops {
		cells, few := o.Latency.percentiles()
		rows = append(rows, append([]string{o.Op, fmt.Sprint(o.Count), sig3(o.OpsPerS), sig3(o.GBPerS)}, append(cells[:], fmtUs(o.Latency.Max))...))
		marked = orMarks(marked, few)
	}
	t := st.Totals
	rows = append(rows, []string{"total", fmt.Sprint(t.Ops), sig3(t.OpsPerS), sig3(t.GBPerS)})
	if err := writeColumns(b, rows); err != nil {
		return err
	}
	for _, n := range fewNotes(marked) {
		b.WriteString(n + "\n")
	}
	fmt.Fprintf(b, "measured %.2fs; GB = 1e9 bytes of values; latency percentiles within %.2f%%\n", t.Seconds, 100*RelativeError)
	if p := st.Prefix; p != nil {
		fmt.Fprintf(b, "prefix: %d sequences x %d pages (%d shared, %d sequences cached): %d lookups, hit rate %.1f%%, mean loadable prefix %.2f pages\n",
			p.Sequences, p.PagesPerSeq, p.SharedPages, p.CachedSequences, p.Lookups, 100*p.HitRate, p.MeanPrefixPages)
	}
	return nil
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
