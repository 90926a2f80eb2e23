package bench

import (
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The HTML report is one self-contained file: inline CSS and inline SVG
// drawn here, no script, no font or stylesheet fetched from anywhere, so
// it opens the same on an air-gapped machine and can be attached to a
// ticket. html/template escapes every value put into it (a target or an
// error message may hold any bytes), by where it lands: text or attribute.

// plot geometry, in SVG user units.
const (
	plotW, plotH                  = 720, 320
	padL, padR, padTop, padBottom = 70, 20, 20, 50
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}

// plotLine is one line of a plot.
type plotLine struct {
	name   string
	xs, ys []float64
	dash   bool // dashed
	color  string
	// hollow marks the points drawn as open circles (an estimate from few
	// samples); nil or false: no circle.
	hollow []bool
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// The last tick is the first at or above hi, so an axis drawn to it
	// holds every point.
	var ticks []float64
	for i := math.Ceil(lo / step); ; i++ {
		v := i * step
		ticks = append(ticks, v)
		if v >= hi-step*1e-9 {
			return ticks
		}
	}
}

func fmtTick(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// figure is one plot, laid out: every position the template writes, in
// SVG user units.
type figure struct {
	Title, XLabel, YLabel string
	W, H                  int     // the SVG
	Left, Top             int     // the plot area's top left corner
	Right, Bottom         float64 // and its bottom right one
	IW, IH                float64 // its size
	YTicks, XTicks        []tick
	Lines                 []figLine
}

// tick is one grid line with its label, at Pos on its axis.
type tick struct {
	Pos   float64
	Label string
}

// figLine is one drawn line: its points, a dot where it has only one,
// and its legend entry (LegendY 0: none).
type figLine struct {
	Color, Points, Name  string
	Dash                 bool
	Dot                  bool
	DotX, DotY           float64
	LegendY, LegendRectY int
	Circles              []point // open circles on the line
}

// point is a position in the SVG.
type point struct{ X, Y float64 }

// Template helpers for the positions derived from a figure's own.
func (f figure) TickLabelX() int     { return f.Left - 6 }
func (f figure) TickLabelY() float64 { return f.Bottom + 16 }
func (f figure) XLabelX() float64    { return float64(f.Left) + f.IW/2 }
func (f figure) XLabelY() int        { return f.H - 8 }
func (f figure) YLabelY() float64    { return float64(f.Top) + f.IH/2 }
func (f figure) LegendX() int        { return f.Left + 10 }
func (f figure) LegendLineEnd() int  { return f.Left + 28 }
func (f figure) LegendTextX() int    { return f.Left + 34 }

// xRange is the x extent of lines (from 0 when fromZero), never empty.
func xRange(lines []plotLine, fromZero bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, x := range l.xs {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if fromZero {
		lo = math.Min(lo, 0)
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// yAxis returns the y ticks of lines and the mapping of a value to its
// position in a plot area ih high below top: linear from 0, or
// logarithmic (yLog) over the positive values.
func yAxis(lines []plotLine, yLog bool, top, ih float64) ([]float64, func(float64) float64) {
	yMax, yMinPos := 0.0, math.Inf(1)
	for _, l := range lines {
		for _, y := range l.ys {
			yMax = math.Max(yMax, y)
			if y > 0 {
				yMinPos = math.Min(yMinPos, y)
			}
		}
	}
	if yMax <= 0 {
		yMax = 1
	}
	if !yLog || math.IsInf(yMinPos, 0) {
		yt := niceTicks(0, yMax, 5)
		yTop := math.Max(yMax, yt[len(yt)-1])
		return yt, func(y float64) float64 { return top + ih - y/yTop*ih }
	}
	// Decades with 1-2-5 steps, from the decade below the smallest
	// positive value to the step above the largest.
	var yt []float64
	lo := math.Pow(10, math.Floor(math.Log10(yMinPos)))
decades:
	for d := lo; ; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			yt = append(yt, d*m)
			if d*m >= yMax && len(yt) >= 2 {
				break decades
			}
		}
	}
	l0, l1 := math.Log10(yt[0]), math.Log10(yt[len(yt)-1])
	return yt, func(y float64) float64 {
		y = math.Max(y, yt[0])
		return top + ih - (math.Log10(y)-l0)/(l1-l0)*ih
	}
}

// plot lays out lines against x (from 0 when xFromZero) on a linear y
// axis from 0, or a logarithmic one (yLog) spanning the positive values;
// xTicks maps x positions to labels (nil: numeric ticks over the x range).
func plot(title, xLabel, yLabel string, lines []plotLine, xTicks map[float64]string, xFromZero, yLog bool) figure {
	iw, ih := float64(plotW-padL-padR), float64(plotH-padTop-padBottom)
	f := figure{Title: title, XLabel: xLabel, YLabel: yLabel, W: plotW, H: plotH, Left: padL, Top: padTop,
		Right: padL + iw, Bottom: padTop + ih, IW: iw, IH: ih}
	xMin, xMax := xRange(lines, xFromZero)
	px := func(x float64) float64 { return padL + (x-xMin)/(xMax-xMin)*iw }
	yt, py := yAxis(lines, yLog, padTop, ih)
	for _, v := range yt {
		f.YTicks = append(f.YTicks, tick{Pos: py(v), Label: fmtTick(v)})
	}
	if xTicks == nil {
		xTicks = map[float64]string{}
		for _, v := range niceTicks(xMin, xMax, 8) {
			xTicks[v] = fmtTick(v)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(xTicks)) { // sorted: the same report for the same data
		if v >= xMin-1e-9 && v <= xMax+1e-9 {
			f.XTicks = append(f.XTicks, tick{Pos: px(v), Label: xTicks[v]})
		}
	}
	for i, l := range lines {
		fl := figLine{Color: palette[i%len(palette)], Name: l.name, Dash: l.dash}
		if l.color != "" {
			fl.Color = l.color
		}
		var pts strings.Builder
		for j := range l.xs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(l.xs[j]), py(l.ys[j]))
			if j < len(l.hollow) && l.hollow[j] {
				fl.Circles = append(fl.Circles, point{px(l.xs[j]), py(l.ys[j])})
			}
		}
		fl.Points = strings.TrimSpace(pts.String())
		if len(l.xs) == 1 {
			fl.Dot, fl.DotX, fl.DotY = true, px(l.xs[0]), py(l.ys[0])
		}
		if l.name != "" { // legend, top left: curves rise to the right
			fl.LegendY = padTop + 14 + 16*i
			fl.LegendRectY = fl.LegendY
		}
		f.Lines = append(f.Lines, fl)
	}
	return f
}

// reportTemplate is the page. Numbers are formatted by the Go code or by
// printf here, every string is escaped by html/template.
var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"sig3":    sig3,
	"percent": func(f float64) float64 { return 100 * f },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dfkv bench report</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;max-width:980px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{background:#fde2e1;border:2px solid #c0392b;color:#8e1b10;padding:.6em 1em;font-weight:bold}
.ok{background:#e3f6e5;border:1px solid #2e7d32;padding:.4em 1em}
figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.3em}svg text{font-size:12px;fill:#333}
code{background:#f3f3f3;padding:1px 4px}.note{font-size:90%;color:#555;margin:.2em 0}
</style></head><body>
<h1>dfkv bench report</h1>
<p>{{.Summary}}</p>
<p>started {{.Started}}, {{.GoVersion}}</p>
{{if .Warning}}<div class="warn">{{.Warning}}{{range .ErrorSamples}}<br><code>{{.}}</code>{{end}}</div>
{{else}}<div class="ok">no errors</div>
{{end -}}
<table><tr><th>op</th><th>ops</th><th>ops/s</th><th>GB/s</th><th>min</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end -}}
{{with .Totals}}<tr><th>total</th><th>{{.Ops}}</th><th>{{sig3 .OpsPerS}}</th><th>{{sig3 .GBPerS}}</th><th colspan="7">measured {{printf "%.2f" .Seconds}} s</th></tr></table>
{{end -}}
{{range .FewNotes}}<p class="note">{{.}}</p>
{{end -}}
{{with .Prefix}}<p>prefix workload: {{.Sequences}} sequences × {{.PagesPerSeq}} pages ({{.SharedPages}} shared, {{.CachedSequences}} sequences cached): {{.Lookups}} lookups, hit rate <b>{{printf "%.1f" (percent .HitRate)}} %</b>, mean loadable prefix <b>{{printf "%.2f" .MeanPrefixPages}} pages</b></p>
{{end -}}
{{range .Figures}}<figure><figcaption>{{.Title}}</figcaption>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Title}}">
<rect x="{{.Left}}" y="{{.Top}}" width="{{printf "%.0f" .IW}}" height="{{printf "%.0f" .IH}}" fill="#fff" stroke="#999"/>
{{$f := .}}{{range .YTicks}}<line x1="{{$f.Left}}" y1="{{printf "%.1f" .Pos}}" x2="{{printf "%.0f" $f.Right}}" y2="{{printf "%.1f" .Pos}}" stroke="#e5e5e5"/><text x="{{$f.TickLabelX}}" y="{{printf "%.1f" .Pos}}" text-anchor="end" dominant-baseline="middle">{{.Label}}</text>
{{end}}{{range .XTicks}}<line x1="{{printf "%.1f" .Pos}}" y1="{{$f.Top}}" x2="{{printf "%.1f" .Pos}}" y2="{{printf "%.0f" $f.Bottom}}" stroke="#e5e5e5"/><text x="{{printf "%.1f" .Pos}}" y="{{printf "%.0f" $f.TickLabelY}}" text-anchor="middle">{{.Label}}</text>
{{end}}<text x="{{printf "%.0f" .XLabelX}}" y="{{.XLabelY}}" text-anchor="middle">{{.XLabel}}</text>
<text transform="translate(16 {{printf "%.0f" .YLabelY}}) rotate(-90)" text-anchor="middle">{{.YLabel}}</text>
{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="2"{{if .Dash}} stroke-dasharray="6 4"{{end}} points="{{.Points}}"/>
{{$c := .Color}}{{range .Circles}}<circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" .Y}}" r="3.5" fill="#fff" stroke="{{$c}}" stroke-width="1.5"/>
{{end}}{{if .Dot}}<circle cx="{{printf "%.1f" .DotX}}" cy="{{printf "%.1f" .DotY}}" r="3" fill="{{.Color}}"/>
{{end}}{{if .LegendY}}<line x1="{{$f.LegendX}}" y1="{{.LegendRectY}}" x2="{{$f.LegendLineEnd}}" y2="{{.LegendRectY}}" stroke="{{.Color}}" stroke-width="3"{{if .Dash}} stroke-dasharray="5 3"{{end}}/><text x="{{$f.LegendTextX}}" y="{{.LegendY}}" dominant-baseline="middle">{{.Name}}</text>
{{end}}{{end}}</svg></figure>
{{end -}}
<p>Generated by <code>dfkv bench</code>. Failed operations are not part of any figure; the JSON output (<code>--json</code>) has the same data.</p>
</body></html>
`))

// WriteHTML writes the self-contained report.
func (res *Result) WriteHTML(w io.Writer) error {
	page := struct {
		Summary, Started, GoVersion, Warning string
		ErrorSamples, FewNotes               []string
		Rows                                 [][]string
		Totals                               Totals
		Prefix                               *PrefixResult
		Figures                              []figure
	}{
		Summary: res.summary(), Started: res.Started.Format("2006-01-02 15:04:05 MST"), GoVersion: res.GoVer,
		Warning: res.warning(), ErrorSamples: res.ErrorSamples, Totals: res.Totals, Prefix: res.Prefix,
		Figures: []figure{throughputPlot(res.Series, res.Totals.Bytes > 0), latencyTimePlot(res.Series), latencyPlot(res)},
	}
	var marked [4]bool
	for _, o := range res.Ops {
		l := o.Latency
		cells, few := l.percentiles()
		page.Rows = append(page.Rows, append([]string{o.Op, strconv.FormatUint(o.Count, 10), sig3(o.OpsPerS), sig3(o.GBPerS),
			fmtUs(l.Min), fmtUs(l.Mean)}, append(cells[:], fmtUs(l.Max))...))
		marked = orMarks(marked, few)
	}
	page.FewNotes = fewNotes(marked)
	return reportTemplate.Execute(w, page)
}

// throughputPlot is throughput over time: GB/s when values move, else
// ops/s, as step lines (each sample holds its rate over its interval):
// the total, and each operation apart when there are several.
func throughputPlot(series []Sample, byBytes bool) figure {
	rate := func(ops, gb float64) float64 {
		if byBytes {
			return gb
		}
		return ops
	}
	tl := plotLine{}
	var perOp []plotLine
	if len(series) > 0 && len(series[0].PerOp) > 1 {
		tl.name = "total"
		for _, ps := range series[0].PerOp {
			perOp = append(perOp, plotLine{name: ps.Op})
		}
	}
	for _, s := range series {
		y := rate(s.OpsPerS, s.GBPerS)
		tl.xs = append(tl.xs, s.T, s.T+s.Seconds)
		tl.ys = append(tl.ys, y, y)
		for i := range perOp {
			if i < len(s.PerOp) {
				y := rate(s.PerOp[i].OpsPerS, s.PerOp[i].GBPerS)
				perOp[i].xs = append(perOp[i].xs, s.T, s.T+s.Seconds)
				perOp[i].ys = append(perOp[i].ys, y, y)
			}
		}
	}
	unit := "ops/s"
	if byBytes {
		unit = "GB/s (values, 1e9 bytes)"
	}
	return plot("Throughput over time", "seconds into the measured stage", unit, append([]plotLine{tl}, perOp...), nil, true, false)
}

// latencyTimePlot is each operation's p50 (dashed) and p99 (solid) per
// interval, on a log latency axis; an open circle marks a percentile
// from too few operations to be more than an estimate.
func latencyTimePlot(series []Sample) figure {
	if len(series) == 0 {
		return plot("Latency over time", "seconds into the measured stage", "latency (µs, log scale)", nil, nil, true, true)
	}
	nOps := len(series[0].PerOp)
	lines := make([]plotLine, 0, 2*nOps)
	yScale, yUnit := latencyUnit(series)
	for i := 0; i < nOps; i++ {
		color := palette[i%len(palette)]
		p50 := plotLine{name: series[0].PerOp[i].Op + " p50", dash: true, color: color}
		p99 := plotLine{name: series[0].PerOp[i].Op + " p99", color: color}
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
	return plot("Latency over time (p99 solid, p50 dashed)", "seconds into the measured stage", "latency ("+yUnit+", log scale)", lines, nil, true, true)
}

// latencyUnit picks ms when the series' p99 reaches 5 ms, else µs.
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

// latencyPlot is the latency percentile curve of each operation on the
// HDR x axis (position log10(1/(1-q))) and a log latency axis: the tail
// spans decades above the median.
func latencyPlot(res *Result) figure {
	yScale, yUnit := 1.0, "µs"
	for _, o := range res.Ops {
		if o.Latency.Max >= 5000 {
			yScale, yUnit = 1e-3, "ms"
		}
	}
	var lines []plotLine
	for _, o := range res.Ops {
		l := plotLine{name: o.Op}
		for _, p := range o.Curve {
			q := p.Percentile / 100
			x := 5.0
			if q < 1 {
				x = math.Min(5, -math.Log10(1-q))
			}
			l.xs = append(l.xs, x)
			l.ys = append(l.ys, p.Us*yScale)
		}
		lines = append(lines, l)
	}
	xt := map[float64]string{0: "0%", 1: "90%", 2: "99%", 3: "99.9%", 4: "99.99%", 5: "99.999%"}
	return plot("Latency by percentile", "percentile", "latency ("+yUnit+", log scale)", lines, xt, true, true)
}
