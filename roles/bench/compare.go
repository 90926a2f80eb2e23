package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
)

// --compare A.json B.json renders two earlier results side by side, with
// the ratio B/A of every figure: dfkv against redis, or a node before and
// after a change. It runs nothing. Results of different workloads are
// refused: their ratios would compare nothing.

// compareFlag is the mode flag.
const compareFlag = "compare"

// comparison is two results of the same workload.
type comparison struct {
	a, b         *Result
	nameA, nameB string
	notes        []string // differences that do not prevent the comparison
}

// compareAction is `dfkv bench --compare A.json B.json`.
func compareAction(c *cli.Context) error {
	files, htmlPath, err := compareArgs(c)
	if err != nil {
		return cli.Exit("dfkv bench: "+err.Error(), exitUsage)
	}
	cmp, err := loadComparison(files[0], files[1])
	if err != nil {
		return cli.Exit("dfkv bench: --compare: "+err.Error(), exitUsage)
	}
	if err := cmp.WriteTable(c.App.Writer); err != nil {
		return cli.Exit("dfkv bench: writing the table: "+err.Error(), exitErrors)
	}
	if err := writeOutputs(c, output{"--html", htmlPath, "HTML comparison", cmp.WriteHTML}); err != nil {
		return err
	}
	if w := cmp.warning(); w != "" {
		return cli.Exit("dfkv bench: "+w, exitErrors)
	}
	return nil
}

// compareArgs returns the two files and the --html path. The flag parser
// stops at the first file, so an --html after the files is read here;
// any other flag is refused, since a comparison runs nothing.
func compareArgs(c *cli.Context) ([]string, string, error) {
	for _, name := range c.LocalFlagNames() {
		if name != compareFlag && name != "html" {
			return nil, "", fmt.Errorf("--compare renders two earlier results and runs nothing; --%s does not go with it (only --html does)", name)
		}
	}
	htmlPath := c.String("html")
	var files []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "--html" || a == "-html") && i+1 < len(args):
			htmlPath = args[i+1]
			i++
		case strings.HasPrefix(a, "--html="):
			htmlPath = strings.TrimPrefix(a, "--html=")
		case strings.HasPrefix(a, "-") && a != "-":
			return nil, "", fmt.Errorf("unexpected %s after --compare: it takes two JSON files, and only --html besides", a)
		default:
			files = append(files, a)
		}
	}
	if len(files) != 2 {
		return nil, "", fmt.Errorf("--compare takes two JSON files written by --json (A and B), got %d: dfkv bench --compare A.json B.json", len(files))
	}
	if htmlPath == "-" {
		return nil, "", errors.New("--compare writes its table to stdout; send --html to a file")
	}
	return files, htmlPath, nil
}

// readResult reads a --json result.
func readResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s is not a dfkv bench --json result: %v", path, err)
	}
	if res.Tool != "dfkv bench" || res.Version < 1 || res.Version > formatVersion {
		return nil, fmt.Errorf("%s is not a dfkv bench --json result of format 1..%d (tool %q, format %d)", path, formatVersion, res.Tool, res.Version)
	}
	if res.Sweep == nil && res.Stage == nil {
		res.Stage = &Stage{}
	}
	return &res, nil
}

// loadComparison reads A and B and checks that they measured the same
// workload.
func loadComparison(pathA, pathB string) (*comparison, error) {
	a, err := readResult(pathA)
	if err != nil {
		return nil, err
	}
	b, err := readResult(pathB)
	if err != nil {
		return nil, err
	}
	cmp := &comparison{a: a, b: b, nameA: pathA, nameB: pathB}
	if err := cmp.check(); err != nil {
		return nil, err
	}
	return cmp, nil
}

// workloadOf says what each operation of res did: what must match.
func workloadOf(res *Result) string {
	c := res.Config
	var b strings.Builder
	b.WriteString(c.Workload)
	if c.ValueSize > 0 {
		fmt.Fprintf(&b, " of %s values", config.FormatSize(uint64(c.ValueSize)))
	}
	switch c.Workload {
	case wMixed:
		fmt.Fprintf(&b, ", %g%% GET", 100*c.MixedGetRatio)
	case wPrefix:
		fmt.Fprintf(&b, ", %d sequences of %d pages, %g shared", c.Sequences, c.PagesPerSeq, c.SharedPrefix)
	}
	if res.Sweep != nil {
		fmt.Fprintf(&b, ", swept over %s", res.Sweep.Dimension)
	}
	return b.String()
}

// check refuses results of different workloads (the protocol, target
// and load may differ: those are what a comparison is for) and notes the
// differences in load.
func (cmp *comparison) check() error {
	wa, wb := workloadOf(cmp.a), workloadOf(cmp.b)
	if wa != wb {
		return fmt.Errorf("%s measured %s, %s measured %s: a comparison needs the same workload (any protocol or target)", cmp.nameA, wa, cmp.nameB, wb)
	}
	ca, cb := cmp.a.Config, cmp.b.Config
	for _, d := range []struct {
		what string
		a, b any
	}{{"concurrency", ca.Concurrency, cb.Concurrency}, {"keys", ca.Keys, cb.Keys}, {"measured", cmp.a.measured(), cmp.b.measured()}, {"sweep", ca.Sweep, cb.Sweep}} {
		if d.a != d.b {
			cmp.notes = append(cmp.notes, fmt.Sprintf("note: %s differs: A %v, B %v", d.what, d.a, d.b))
		}
	}
	return nil
}

// warning is the line saying that A or B is not a valid result, or "".
func (cmp *comparison) warning() string {
	var bad []string
	for _, r := range []struct {
		name string
		res  *Result
	}{{"A (" + cmp.nameA + ")", cmp.a}, {"B (" + cmp.nameB + ")", cmp.b}} {
		if !r.res.OK {
			bad = append(bad, r.name+": "+strings.TrimPrefix(strings.SplitN(r.res.warning(), " — ", 2)[0], "WARNING: "))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "WARNING: not a valid result, so neither are the ratios: " + strings.Join(bad, "; ")
}

// ratio is b/a for the table, "-" when a is 0.
func ratio(a, b float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", b/a)
}

// source describes one side for the header.
func source(side, name string, res *Result) string {
	c := res.Config
	s := fmt.Sprintf("%s: %s: protocol %s, target %s", side, name, c.Protocol, c.Target)
	if c.Concurrency > 0 {
		s += fmt.Sprintf(", concurrency %d", c.Concurrency)
	}
	if c.Sweep != "" {
		s += ", sweep " + c.Sweep
	}
	s += ", " + res.measured() + ", started " + res.Started.Format("2006-01-02 15:04:05 MST")
	if res.BenchVersion != "" {
		s += ", bench dfkv " + res.BenchVersion
	}
	return s
}

// header is the lines above the comparison's table.
func (cmp *comparison) header() []string {
	lines := []string{"dfkv bench comparison: workload " + workloadOf(cmp.a) + "; ratios are B/A",
		source("A", cmp.nameA, cmp.a), source("B", cmp.nameB, cmp.b)}
	for _, side := range []struct {
		name string
		res  *Result
	}{{"A", cmp.a}, {"B", cmp.b}} {
		for _, l := range side.res.Server.lines() {
			lines = append(lines, side.name+" "+l)
		}
	}
	return append(lines, cmp.notes...)
}

// rows is the comparison as a table: a stage's operations one metric a
// row, or a sweep's steps one step a row.
func (cmp *comparison) rows() (head []string, rows [][]string, knees []bool, marked [4]bool) {
	if cmp.a.Sweep != nil {
		return cmp.sweepRows()
	}
	head, rows, marked = cmp.stageRows()
	return head, rows, make([]bool, len(rows)), marked
}

// stageRows compares two single stages, operation by operation.
func (cmp *comparison) stageRows() ([]string, [][]string, [4]bool) {
	head := []string{"op", "metric", "A", "B", "B/A"}
	var rows [][]string
	var marked [4]bool
	find := func(st *Stage, op string) *OpResult {
		for i := range st.Ops {
			if st.Ops[i].Op == op {
				return &st.Ops[i]
			}
		}
		return &OpResult{Op: op}
	}
	for _, op := range opsOf(cmp.a.Stage, cmp.b.Stage) {
		oa, ob := find(cmp.a.Stage, op), find(cmp.b.Stage, op)
		rows = append(rows, []string{op, "ops/s", sig3(oa.OpsPerS), sig3(ob.OpsPerS), ratio(oa.OpsPerS, ob.OpsPerS)})
		if oa.GBPerS > 0 || ob.GBPerS > 0 {
			rows = append(rows, []string{op, "GB/s", sig3(oa.GBPerS), sig3(ob.GBPerS), ratio(oa.GBPerS, ob.GBPerS)})
		}
		ca, fa := oa.Latency.percentiles()
		cb, fb := ob.Latency.percentiles()
		va, vb := oa.Latency.values(), ob.Latency.values()
		for i, name := range percentileNames {
			rows = append(rows, []string{op, name, ca[i], cb[i], ratio(va[i], vb[i])})
		}
		marked = orMarks(orMarks(marked, fa), fb)
	}
	ta, tb := cmp.a.Totals, cmp.b.Totals
	rows = append(rows, []string{"total", "ops/s", sig3(ta.OpsPerS), sig3(tb.OpsPerS), ratio(ta.OpsPerS, tb.OpsPerS)},
		[]string{"total", "GB/s", sig3(ta.GBPerS), sig3(tb.GBPerS), ratio(ta.GBPerS, tb.GBPerS)})
	return head, rows, marked
}

// opsOf lists the operations of a and then those only b has.
func opsOf(a, b *Stage) []string {
	var out []string
	for _, st := range []*Stage{a, b} {
		for _, o := range st.Ops {
			if !slices.Contains(out, o.Op) {
				out = append(out, o.Op)
			}
		}
	}
	return out
}

// values are the four reported percentiles.
func (l Latency) values() [4]float64 { return [4]float64{l.P50, l.P90, l.P99, l.P999} }

// sweepRows compares two sweeps step by step, matched by value; a step
// only one of them has shows "-" for the other.
func (cmp *comparison) sweepRows() ([]string, [][]string, []bool, [4]bool) {
	sa, sb := cmp.a.Sweep, cmp.b.Sweep
	unit := sa.throughputUnit()
	head := []string{sa.Dimension, "A " + unit, "B " + unit, "B/A", "A p50", "B p50", "B/A", "A p99", "B p99", "B/A", "knee"}
	var values []uint64
	for _, st := range append(append([]Step{}, sa.Steps...), sb.Steps...) {
		if !slices.Contains(values, st.Value) {
			values = append(values, st.Value)
		}
	}
	slices.Sort(values)
	var rows [][]string
	var knees []bool
	var marked [4]bool
	for _, v := range values {
		a, b := stepOf(sa, v), stepOf(sb, v)
		row := []string{config.Sweep{Dimension: sa.Dimension}.Label(v)}
		ta, tb := sideThroughput(sa, a), sideThroughput(sb, b)
		row = append(row, side(a, sig3(ta)), side(b, sig3(tb)), both(a, b, ratio(ta, tb)))
		ca, fa := latencyOfStep(a).percentiles()
		cb, fb := latencyOfStep(b).percentiles()
		va, vb := latencyOfStep(a).values(), latencyOfStep(b).values()
		for _, i := range []int{0, 2} { // p50 and p99
			row = append(row, side(a, ca[i]), side(b, cb[i]), both(a, b, ratio(va[i], vb[i])))
			marked[i] = marked[i] || (a != nil && fa[i]) || (b != nil && fb[i])
		}
		row = append(row, strings.TrimSpace(kneeOf(a, "A")+" "+kneeOf(b, "B")))
		rows = append(rows, row)
		knees = append(knees, (a != nil && a.Knee) || (b != nil && b.Knee))
	}
	return head, rows, knees, marked
}

func stepOf(sw *SweepResult, v uint64) *Step {
	for i := range sw.Steps {
		if sw.Steps[i].Value == v {
			return &sw.Steps[i]
		}
	}
	return nil
}

func sideThroughput(sw *SweepResult, st *Step) float64 {
	if st == nil {
		return 0
	}
	return sw.throughput(st)
}

func latencyOfStep(st *Step) Latency {
	if st == nil {
		return Latency{}
	}
	return st.Latency
}

// side is s, or "-" for a step the side does not have.
func side(st *Step, s string) string {
	if st == nil {
		return "-"
	}
	return s
}

func both(a, b *Step, s string) string {
	if a == nil || b == nil {
		return "-"
	}
	return s
}

// kneeOf is "A"/"B" when st is its side's knee.
func kneeOf(st *Step, name string) string {
	if st != nil && st.Knee {
		return name
	}
	return ""
}

// footer is the lines under the table.
func (cmp *comparison) footer(marked [4]bool) []string {
	out := fewNotes(marked)
	out = append(out, "B/A is B's figure over A's: above 1, B has more throughput or more latency")
	if cmp.a.Sweep != nil {
		for _, side := range []struct {
			name string
			sw   *SweepResult
		}{{"A", cmp.a.Sweep}, {"B", cmp.b.Sweep}} {
			out = append(out, side.name+" "+side.sw.kneeLine())
		}
		out = append(out, kneeRule)
	}
	return out
}

// WriteTable prints the comparison.
func (cmp *comparison) WriteTable(w io.Writer) error {
	var b strings.Builder
	for _, l := range cmp.header() {
		b.WriteString(l + "\n")
	}
	if warn := cmp.warning(); warn != "" {
		b.WriteString(warn + "\n")
	}
	head, rows, _, marked := cmp.rows()
	if err := writeColumns(&b, append([][]string{head}, rows...)); err != nil {
		return err
	}
	for _, l := range cmp.footer(marked) {
		b.WriteString(l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteHTML writes the comparison as a self-contained page.
func (cmp *comparison) WriteHTML(w io.Writer) error {
	h := cmp.header()
	page := htmlPage{Title: "dfkv bench comparison", Summary: strings.TrimPrefix(h[0], "dfkv bench comparison: "), Lede: h[1:], Warning: cmp.warning(),
		Footer: "Generated by dfkv bench --compare from two --json results."}
	head, rows, knees, marked := cmp.rows()
	t := htmlTable{Head: head, Notes: cmp.footer(marked)}
	for i, r := range rows {
		t.Rows = append(t.Rows, htmlRow{Cells: r, Knee: knees[i]})
	}
	page.Tables = []htmlTable{t}
	page.Figures = cmp.figures()
	return reportTemplate.Execute(w, page)
}

// figures overlay A (solid) and B (dashed): a sweep's throughput against
// p99 with both knees ringed, or a stage's percentile curves and
// throughput over time.
func (cmp *comparison) figures() []figure {
	if sa, sb := cmp.a.Sweep, cmp.b.Sweep; sa != nil {
		la, lb := sa.p99Line("A p99", "#1f77b4", 1e-3, "A "), sb.p99Line("B p99", "#d62728", 1e-3, "B ")
		lb.dash = true
		f := plot(plotSpec{title: "Throughput against p99, a point per step: A solid, B dashed", xLabel: "throughput (" + sa.throughputUnit() + ")",
			yLabel: "p99 latency (ms)", lines: []plotLine{la, lb}, xFromZero: true})
		f.First = true
		return []figure{f}
	}
	var curves []plotLine
	for _, op := range opsOf(cmp.a.Stage, cmp.b.Stage) {
		for _, side := range []struct {
			name string
			st   *Stage
			dash bool
		}{{"A", cmp.a.Stage, false}, {"B", cmp.b.Stage, true}} {
			for _, o := range side.st.Ops {
				if o.Op == op {
					l := curveLine(side.name+" "+op, opColor(op), o.Curve)
					l.dash = side.dash
					curves = append(curves, l)
				}
			}
		}
	}
	return []figure{percentilePlot("Latency by percentile: A solid, B dashed", curves)}
}

// p99Line is the sweep's p99 against its throughput, each point labelled
// with its step and the knee ringed (its text after kneePrefix),
// latencies scaled by scale.
func (sw *SweepResult) p99Line(name, color string, scale float64, kneePrefix string) plotLine {
	l := newLine(name)
	l.color, l.dots = color, true
	for i := range sw.Steps {
		st := &sw.Steps[i]
		l.xs, l.ys, l.labels = append(l.xs, sw.throughput(st)), append(l.ys, st.Latency.P99*scale), append(l.labels, st.Label)
	}
	if sw.Knee >= 0 && sw.Knee < len(sw.Steps) {
		l.ring, l.ringText = sw.Knee, kneePrefix+"knee: "+sw.Dimension+"="+sw.Steps[sw.Knee].Label
	}
	return l
}
