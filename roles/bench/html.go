package bench

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
)

// The HTML report is one self-contained file: inline CSS and inline SVG
// drawn here (plot.go), no script, no font or stylesheet fetched from
// anywhere, so it opens the same on an air-gapped machine and can be
// attached to a ticket. html/template escapes every value put into it (a
// target or an error message may hold any bytes), by where it lands:
// text or attribute.

// htmlPage is what the template renders: a run, a sweep, or a comparison.
type htmlPage struct {
	Title, Summary, Started, BenchLine, Warning string
	Lede                                        []string // lines under the summary (a comparison's two sources)
	ErrorSamples, ServerNotes                   []string
	ServerHead                                  []string
	ServerRows                                  [][]string
	// Headline is the finding a reader looks for first: the knee, and
	// the highest throughput; its first line is in bold.
	Headline []string
	Tables   []htmlTable
	Prefix   *PrefixResult
	Figures  []figure
	Footer   string
}

// htmlTable is a table of figures: its first column names the row.
type htmlTable struct {
	Caption string
	Head    []string
	Rows    []htmlRow
	// Foot is a closing row; its last cell spans the columns left.
	Foot  []string
	Notes []string // footnotes
}

// htmlRow is a row; a knee row is highlighted.
type htmlRow struct {
	Cells []string
	Knee  bool
}

// FootSpan is how many columns the last cell of the foot spans.
func (t htmlTable) FootSpan() int { return len(t.Head) - len(t.Foot) + 1 }

// reportTemplate is the page. Numbers are formatted by the Go code or by
// printf here, every string is escaped by html/template.
var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"percent": func(f float64) float64 { return 100 * f },
	"inc":     func(i int) int { return i + 1 },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;max-width:980px;color:#222}
h1{margin-bottom:.2em}h2{font-size:1.1em;margin:1.4em 0 .3em}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}caption{text-align:left;font-weight:bold;padding:.3em 0}
tr.knee td{background:#fff0e0;font-weight:bold}
.warn{background:#fde2e1;border:2px solid #c0392b;color:#8e1b10;padding:.6em 1em;font-weight:bold}
.ok{background:#e3f6e5;border:1px solid #2e7d32;padding:.4em 1em}
.headline{font-size:1.15em;background:#fff6e8;border-left:5px solid #e08a10;padding:.5em 1em;margin:1em 0}
figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.3em}svg text{font-size:12px;fill:#333}
code{background:#f3f3f3;padding:1px 4px}.note{font-size:90%;color:#555;margin:.2em 0}.meta{color:#555;margin:.2em 0}
</style></head><body>
<h1>{{.Title}}</h1>
<p>{{.Summary}}</p>
{{range .Lede}}<p class="meta">{{.}}</p>
{{end -}}
{{if .Started}}<p class="meta">started {{.Started}}; {{.BenchLine}}</p>
{{end -}}
{{if .ServerRows}}<table><tr>{{range .ServerHead}}<th>{{.}}</th>{{end}}</tr>
{{range .ServerRows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{range .ServerNotes}}<p class="meta">{{.}}</p>
{{end -}}
{{if .Warning}}<div class="warn">{{.Warning}}{{range .ErrorSamples}}<br><code>{{.}}</code>{{end}}</div>
{{else}}<div class="ok">no errors</div>
{{end -}}
{{if .Headline}}<div class="headline">{{range $i, $l := .Headline}}{{if $i}}<br>{{$l}}{{else}}<b>{{$l}}</b>{{end}}{{end}}</div>
{{end -}}
{{range .Figures}}{{if .First}}{{template "figure" .}}{{end}}{{end -}}
{{range .Tables}}<table>{{if .Caption}}<caption>{{.Caption}}</caption>{{end}}<tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr{{if .Knee}} class="knee"{{end}}>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end -}}
{{if .Foot}}{{$span := .FootSpan}}{{$n := len .Foot}}<tr>{{range $i, $c := .Foot}}<th{{if eq (inc $i) $n}} colspan="{{$span}}"{{end}}>{{$c}}</th>{{end}}</tr>
{{end}}</table>
{{range .Notes}}<p class="note">{{.}}</p>
{{end}}{{end -}}
{{with .Prefix}}<p>prefix workload: {{.Sequences}} sequences × {{.PagesPerSeq}} pages ({{.SharedPages}} shared, {{.CachedSequences}} sequences cached): {{.Lookups}} lookups, hit rate <b>{{printf "%.1f" (percent .HitRate)}} %</b>, mean loadable prefix <b>{{printf "%.2f" .MeanPrefixPages}} pages</b></p>
{{end -}}
{{range .Figures}}{{if not .First}}{{template "figure" .}}{{end}}{{end -}}
<p>{{.Footer}}</p>
</body></html>
{{define "figure"}}<figure><figcaption>{{.Title}}</figcaption>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Title}}">
<rect x="{{.Left}}" y="{{.Top}}" width="{{printf "%.0f" .IW}}" height="{{printf "%.0f" .IH}}" fill="#fff" stroke="#999"/>
{{$f := .}}{{range .YTicks}}<line x1="{{$f.Left}}" y1="{{printf "%.1f" .Pos}}" x2="{{printf "%.0f" $f.Right}}" y2="{{printf "%.1f" .Pos}}" stroke="#e5e5e5"/><text x="{{$f.TickLabelX}}" y="{{printf "%.1f" .Pos}}" text-anchor="end" dominant-baseline="middle">{{.Label}}</text>
{{end}}{{range .XTicks}}<line x1="{{printf "%.1f" .Pos}}" y1="{{$f.Top}}" x2="{{printf "%.1f" .Pos}}" y2="{{printf "%.0f" $f.Bottom}}" stroke="#e5e5e5"/><text x="{{printf "%.1f" .Pos}}" y="{{printf "%.0f" $f.TickLabelY}}" text-anchor="middle">{{.Label}}</text>
{{end}}<text x="{{printf "%.0f" .XLabelX}}" y="{{.XLabelY}}" text-anchor="middle">{{.XLabel}}</text>
<text transform="translate(16 {{printf "%.0f" .YLabelY}}) rotate(-90)" text-anchor="middle">{{.YLabel}}</text>
{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="2"{{if .Dash}} stroke-dasharray="6 4"{{end}} points="{{.Points}}"/>
{{$c := .Color}}{{range .Circles}}<circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" .Y}}" r="3.5" fill="#fff" stroke="{{$c}}" stroke-width="1.5"/>
{{end}}{{range .Dots}}<circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" .Y}}" r="3.5" fill="{{$c}}"/>
{{end}}{{range .Labels}}<text x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" text-anchor="{{.Anchor}}" style="fill:{{$c}}">{{.Text}}</text>
{{end}}{{with .Ring}}<circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" .Y}}" r="10" fill="none" stroke="#d62728" stroke-width="2.5"/><text x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" dx="-14" dy="-16" text-anchor="end" font-weight="bold" style="fill:#d62728">{{.Text}}</text>
{{end}}{{if .Dot}}<circle cx="{{printf "%.1f" .DotX}}" cy="{{printf "%.1f" .DotY}}" r="3" fill="{{.Color}}"/>
{{end}}{{if .LegendY}}<line x1="{{$f.LegendX}}" y1="{{.LegendY}}" x2="{{$f.LegendLineEnd}}" y2="{{.LegendY}}" stroke="{{.Color}}" stroke-width="3"{{if .Dash}} stroke-dasharray="5 3"{{end}}/><text x="{{$f.LegendTextX}}" y="{{.LegendY}}" dominant-baseline="middle">{{.Name}}</text>
{{end}}{{end}}</svg></figure>
{{end}}`))

// WriteHTML writes the self-contained report.
func (res *Result) WriteHTML(w io.Writer) error {
	page := htmlPage{
		Title: "dfkv bench report", Summary: res.summary(), Started: res.Started.Format("2006-01-02 15:04:05 MST"), BenchLine: res.benchLine(),
		Warning: res.warning(), ErrorSamples: res.ErrorSamples, ServerHead: serverHead,
		Footer: "Generated by dfkv bench. Failed operations are not part of any figure; the JSON output (--json) has the same data.",
	}
	page.ServerRows, page.ServerNotes = res.Server.htmlRows()
	switch {
	case res.Sweep != nil:
		res.Sweep.htmlParts(&page, "measured "+res.perStage()+" after a "+strconv.FormatFloat(res.Config.WarmupS, 'g', -1, 64)+"s warm-up")
	case res.Stage != nil:
		res.Stage.htmlParts(&page)
	}
	return reportTemplate.Execute(w, page)
}

// htmlParts adds the stage's table and plots to page.
func (st *Stage) htmlParts(page *htmlPage) {
	t := htmlTable{Head: []string{"op", "ops", "ops/s", "GB/s", "min", "mean", "p50", "p90", "p99", "p99.9", "max"}}
	var marked [4]bool
	for _, o := range st.Ops {
		l := o.Latency
		cells, few := l.percentiles()
		t.Rows = append(t.Rows, htmlRow{Cells: append([]string{o.Op, strconv.FormatUint(o.Count, 10), sig3(o.OpsPerS), sig3(o.GBPerS),
			fmtUs(l.Min), fmtUs(l.Mean)}, append(cells[:], fmtUs(l.Max))...)})
		marked = orMarks(marked, few)
	}
	t.Foot = []string{"total", strconv.FormatUint(st.Totals.Ops, 10), sig3(st.Totals.OpsPerS), sig3(st.Totals.GBPerS), fmt.Sprintf("measured %.2f s", st.Totals.Seconds)}
	t.Notes = fewNotes(marked)
	page.Tables = append(page.Tables, t)
	page.Prefix = st.Prefix
	curves := make([]plotLine, 0, len(st.Ops))
	for _, o := range st.Ops {
		curves = append(curves, curveLine(o.Op, opColor(o.Op), o.Curve))
	}
	page.Figures = append(page.Figures,
		throughputPlot(st.Series, st.Totals.Bytes > 0),
		latencyTimePlot(st.Series),
		percentilePlot("Latency by percentile", curves))
}

// throughputPlot is throughput over time: GB/s when values move, else
// ops/s, as step lines (each sample holds its rate over its interval):
// the total, and each operation apart when there are several.
func throughputPlot(series []Sample, byBytes bool) figure {
	tl := newLine("")
	tl.color = "#333"
	var perOp []plotLine
	if len(series) > 0 && len(series[0].PerOp) > 1 {
		tl.name = "total"
		for _, ps := range series[0].PerOp {
			l := newLine(ps.Op)
			l.color = opColor(ps.Op)
			perOp = append(perOp, l)
		}
	} else if len(series) > 0 && len(series[0].PerOp) == 1 {
		tl.color = opColor(series[0].PerOp[0].Op)
	}
	for _, s := range series {
		y := rate(s.OpsPerS, s.GBPerS, byBytes)
		tl.xs, tl.ys = append(tl.xs, s.T, s.T+s.Seconds), append(tl.ys, y, y)
		for i := range perOp {
			if i < len(s.PerOp) {
				y := rate(s.PerOp[i].OpsPerS, s.PerOp[i].GBPerS, byBytes)
				perOp[i].xs, perOp[i].ys = append(perOp[i].xs, s.T, s.T+s.Seconds), append(perOp[i].ys, y, y)
			}
		}
	}
	return plot(plotSpec{title: "Throughput over time", xLabel: "seconds into the measured stage", yLabel: rateUnit(byBytes),
		lines: append([]plotLine{tl}, perOp...), xFromZero: true})
}

func rate(ops, gb float64, byBytes bool) float64 {
	if byBytes {
		return gb
	}
	return ops
}

func rateUnit(byBytes bool) string {
	if byBytes {
		return "GB/s (values, 1e9 bytes)"
	}
	return "ops/s"
}

// latencyTimePlot is each operation's p50 (dashed) and p99 (solid) per
// interval, on a log latency axis; an open circle marks a percentile
// from too few operations to be more than an estimate.
func latencyTimePlot(series []Sample) figure {
	const title = "Latency over time (p99 solid, p50 dashed; ○ fewer than 10/(1−p) operations in the interval)"
	yScale, yUnit := latencyUnit(series)
	var lines []plotLine
	for i := 0; len(series) > 0 && i < len(series[0].PerOp); i++ {
		op := series[0].PerOp[i].Op
		p50, p99 := newLine(op+" p50"), newLine(op+" p99")
		p50.dash, p50.color, p99.color = true, opColor(op), opColor(op)
		for _, s := range series {
			if i >= len(s.PerOp) || s.PerOp[i].Ops == 0 {
				continue
			}
			ps, x := s.PerOp[i], s.T+s.Seconds/2
			p50.xs, p50.ys, p50.hollow = append(p50.xs, x), append(p50.ys, ps.P50*yScale), append(p50.hollow, ps.P50Few)
			p99.xs, p99.ys, p99.hollow = append(p99.xs, x), append(p99.ys, ps.P99*yScale), append(p99.hollow, ps.P99Few)
		}
		lines = append(lines, p99, p50)
	}
	return plot(plotSpec{title: title, xLabel: "seconds into the measured stage", yLabel: "latency (" + yUnit + ", log scale)",
		lines: lines, xFromZero: true, yLog: true})
}

// latencyUnit picks ms when a p99 of the series reaches 5 ms, else µs.
func latencyUnit(series []Sample) (float64, string) {
	for _, s := range series {
		for _, ps := range s.PerOp {
			if ps.P99 >= 5000 {
				return 1e-3, "ms"
			}
		}
	}
	return 1, "µs"
}

// curveLine is a percentile curve on the HDR x axis (position
// log10(1/(1-q))), in µs.
func curveLine(name, color string, c []CurvePoint) plotLine {
	l := newLine(name)
	l.color = color
	for _, p := range c {
		q := p.Percentile / 100
		x := 5.0
		if q < 1 {
			x = math.Min(5, -math.Log10(1-q))
		}
		l.xs = append(l.xs, x)
		l.ys = append(l.ys, p.Us)
	}
	return l
}

// percentilePlot draws curves (curveLine) on a log latency axis, in ms
// when one reaches 5 ms: the tail spans decades above the median.
func percentilePlot(title string, curves []plotLine) figure {
	scale, unit := 1.0, "µs"
	for _, l := range curves {
		if len(l.ys) > 0 && l.ys[len(l.ys)-1] >= 5000 {
			scale, unit = 1e-3, "ms"
		}
	}
	for i := range curves {
		ys := make([]float64, len(curves[i].ys))
		for j, y := range curves[i].ys {
			ys[j] = y * scale
		}
		curves[i].ys = ys
	}
	xt := map[float64]string{0: "0%", 1: "90%", 2: "99%", 3: "99.9%", 4: "99.99%", 5: "99.999%"}
	return plot(plotSpec{title: title, xLabel: "percentile", yLabel: "latency (" + unit + ", log scale)", lines: curves, xTicks: xt, xFromZero: true, yLog: true})
}

// htmlParts adds the sweep to page: the knee as the headline, throughput
// against latency with the knee ringed, the table of steps, and each
// step over time and by percentile.
func (sw *SweepResult) htmlParts(page *htmlPage, measured string) {
	page.Headline = []string{capitalize(sw.kneeLine())}
	if p := sw.peakLine(); p != "" {
		page.Headline = append(page.Headline, capitalize(p))
	}
	page.Figures = append(page.Figures, sw.capacityPlot())
	t := htmlTable{Caption: "One row per step (latency of all operations of a step together)",
		Head: []string{sw.Dimension, "ops/s", "GB/s", "p50", "p90", "p99", "p99.9", "errors"}}
	var marked [4]bool
	for i := range sw.Steps {
		st := &sw.Steps[i]
		cells, few := st.Latency.percentiles()
		label := st.Label
		if st.Knee {
			label += " (knee)"
		}
		t.Rows = append(t.Rows, htmlRow{Knee: st.Knee, Cells: append(append([]string{label, sig3(st.Totals.OpsPerS), sig3(st.Totals.GBPerS)}, cells[:]...), strconv.FormatUint(st.ErrorCount, 10))})
		marked = orMarks(marked, few)
	}
	t.Notes = append(fewNotes(marked), "Each step "+measured+". The "+kneeRule[4:]+" (throughput in "+sw.throughputUnit()+").")
	page.Tables = append(page.Tables, t)
	page.Figures = append(page.Figures, sw.timePlots()...)
}

// capacityPlot is the sweep at a glance: throughput against p99 (and
// p50), a point per step labelled with its value, the knee ringed.
func (sw *SweepResult) capacityPlot() figure {
	scale, unit := 1.0, "µs"
	for _, st := range sw.Steps {
		if st.Latency.P99 >= 5000 {
			scale, unit = 1e-3, "ms"
		}
	}
	p99, p50 := sw.p99Line("p99", "#1f77b4", scale, ""), newLine("p50")
	p50.color, p50.dash, p50.dots = "#7f9fbf", true, true
	for i := range sw.Steps {
		st := &sw.Steps[i]
		p50.xs, p50.ys = append(p50.xs, sw.throughput(st)), append(p50.ys, st.Latency.P50*scale)
	}
	f := plot(plotSpec{title: "Throughput against latency, a point per step (labelled with its " + sw.Dimension + ")",
		xLabel: "throughput (" + rateUnit(sw.Throughput != "ops_per_s") + ")", yLabel: "latency (" + unit + ")",
		lines: []plotLine{p99, p50}, xFromZero: true})
	f.First = true
	return f
}

// timePlots are each step's throughput and p99 over time, and its
// percentile curve, a line per step.
func (sw *SweepResult) timePlots() []figure {
	byBytes := sw.Throughput != "ops_per_s"
	var thr, p99, curves []plotLine
	op := ""
	for i := range sw.Steps {
		st := &sw.Steps[i]
		name, color := sw.Dimension+"="+st.Label, stepColor(i, len(sw.Steps))
		tl, pl := newLine(name), newLine(name)
		tl.color, pl.color = color, color
		if op == "" {
			op = st.busiestOp()
		}
		for _, s := range st.Series {
			y := rate(s.OpsPerS, s.GBPerS, byBytes)
			tl.xs, tl.ys = append(tl.xs, s.T, s.T+s.Seconds), append(tl.ys, y, y)
			for _, ps := range s.PerOp {
				if ps.Op == op && ps.Ops > 0 {
					pl.xs, pl.ys = append(pl.xs, s.T+s.Seconds/2), append(pl.ys, ps.P99/1e3)
				}
			}
		}
		thr, p99 = append(thr, tl), append(p99, pl)
		curves = append(curves, curveLine(name, color, st.Curve))
	}
	return []figure{
		plot(plotSpec{title: "Throughput over time, per step", xLabel: "seconds into the step's measured stage", yLabel: rateUnit(byBytes), lines: thr, xFromZero: true}),
		plot(plotSpec{title: "p99 of " + op + " over time, per step (an interval of fewer than 1,000 operations gives an estimate)", xLabel: "seconds into the step's measured stage",
			yLabel: "latency (ms, log scale)", lines: p99, xFromZero: true, yLog: true}),
		percentilePlot("Latency by percentile, per step (all operations)", curves),
	}
}

// busiestOp names the operation st did most.
func (st *Stage) busiestOp() string {
	best, n := "", uint64(0)
	for _, o := range st.Ops {
		if o.Count > n {
			best, n = o.Op, o.Count
		}
	}
	return best
}

// capitalize upper-cases the first letter of an ASCII sentence.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
