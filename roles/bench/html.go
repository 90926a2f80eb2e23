package bench

import (
	"fmt"
	"html"
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
// ticket.

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

// svgPlot draws lines against x (from 0 when xFromZero) on a linear y axis
// from 0, or a logarithmic one (yLog) spanning the positive values; xTicks
// maps x positions to labels (nil: numeric ticks over the x range).
func svgPlot(b *strings.Builder, title, xLabel, yLabel string, lines []plotLine, xTicks map[float64]string, xFromZero, yLog bool) {
	xMin, xMax := math.Inf(1), math.Inf(-1)
	yMax, yMinPos := 0.0, math.Inf(1)
	for _, l := range lines {
		for i := range l.xs {
			xMin, xMax = math.Min(xMin, l.xs[i]), math.Max(xMax, l.xs[i])
			yMax = math.Max(yMax, l.ys[i])
			if l.ys[i] > 0 {
				yMinPos = math.Min(yMinPos, l.ys[i])
			}
		}
	}
	if math.IsInf(xMin, 0) {
		xMin, xMax = 0, 1
	}
	if xFromZero {
		xMin = math.Min(xMin, 0)
	}
	if xMax <= xMin {
		xMax = xMin + 1
	}
	if yMax <= 0 {
		yMax = 1
	}
	iw, ih := float64(plotW-padL-padR), float64(plotH-padTop-padBottom)
	px := func(x float64) float64 { return padL + (x-xMin)/(xMax-xMin)*iw }
	var yt []float64
	var py func(float64) float64
	if yLog && !math.IsInf(yMinPos, 0) {
		// Decades with 1-2-5 steps, from the decade below the smallest
		// positive value to the step above the largest.
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
		py = func(y float64) float64 {
			y = math.Max(y, yt[0])
			return padTop + ih - (math.Log10(y)-l0)/(l1-l0)*ih
		}
	} else {
		yt = niceTicks(0, yMax, 5)
		yTop := math.Max(yMax, yt[len(yt)-1])
		py = func(y float64) float64 { return padTop + ih - y/yTop*ih }
	}

	fmt.Fprintf(b, "<figure><figcaption>%s</figcaption>\n", html.EscapeString(title))
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`+"\n",
		plotW, plotH, plotW, plotH, html.EscapeString(title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="#fff" stroke="#999"/>`+"\n", padL, padTop, iw, ih)
	for _, v := range yt {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			padL, y, padL+iw, y, padL-6, y, fmtTick(v))
	}
	if xTicks == nil {
		xTicks = map[float64]string{}
		for _, v := range niceTicks(xMin, xMax, 8) {
			xTicks[v] = fmtTick(v)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(xTicks)) { // sorted: the same report for the same data
		label := xTicks[v]
		if v < xMin-1e-9 || v > xMax+1e-9 {
			continue
		}
		x := px(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#e5e5e5"/><text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
			x, padTop, x, padTop+ih, x, padTop+ih+16, html.EscapeString(label))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+iw/2, plotH-8, html.EscapeString(xLabel))
	fmt.Fprintf(b, `<text transform="translate(16 %.0f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padTop+ih/2, html.EscapeString(yLabel))
	for i, l := range lines {
		color := palette[i%len(palette)]
		var pts strings.Builder
		for j := range l.xs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(l.xs[j]), py(l.ys[j]))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		if len(l.xs) == 1 {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(l.xs[0]), py(l.ys[0]), color)
		}
		if l.name != "" { // legend, top left: curves rise to the right
			ly := padTop + 14 + 16*i
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="3" fill="%s"/><text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n",
				padL+10, ly-1, color, padL+26, ly, html.EscapeString(l.name))
		}
	}
	b.WriteString("</svg></figure>\n")
}

// WriteHTML writes the self-contained report.
func (res *Result) WriteHTML(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dfkv bench report</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;max-width:980px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{background:#fde2e1;border:2px solid #c0392b;color:#8e1b10;padding:.6em 1em;font-weight:bold}
.ok{background:#e3f6e5;border:1px solid #2e7d32;padding:.4em 1em}
figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.3em}svg text{font-size:12px;fill:#333}
code{background:#f3f3f3;padding:1px 4px}
</style></head><body>
<h1>dfkv bench report</h1>
`)
	fmt.Fprintf(&b, "<p>%s</p>\n<p>started %s, %s</p>\n", html.EscapeString(res.summary()), res.Started.Format("2006-01-02 15:04:05 MST"), html.EscapeString(res.GoVer))
	if warn := res.warning(); warn != "" {
		fmt.Fprintf(&b, "<div class=\"warn\">%s", html.EscapeString(warn))
		for _, s := range res.ErrorSamples {
			fmt.Fprintf(&b, "<br><code>%s</code>", html.EscapeString(s))
		}
		b.WriteString("</div>\n")
	} else {
		b.WriteString("<div class=\"ok\">no errors</div>\n")
	}
	b.WriteString("<table><tr><th>op</th><th>ops</th><th>ops/s</th><th>GB/s</th><th>min</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n")
	for _, o := range res.Ops {
		l := o.Latency
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			html.EscapeString(o.Op), o.Count, sig3(o.OpsPerS), sig3(o.GBPerS), fmtUs(l.Min), fmtUs(l.Mean), fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max))
	}
	t := res.Totals
	fmt.Fprintf(&b, "<tr><th>total</th><th>%d</th><th>%s</th><th>%s</th><th colspan=\"7\">measured %.2f s</th></tr></table>\n", t.Ops, sig3(t.OpsPerS), sig3(t.GBPerS), t.Seconds)
	if p := res.Prefix; p != nil {
		fmt.Fprintf(&b, "<p>prefix workload: %d sequences × %d pages (%d shared, %d sequences cached): %d lookups, hit rate <b>%.1f %%</b>, mean loadable prefix <b>%.2f pages</b></p>\n",
			p.Sequences, p.PagesPerSeq, p.SharedPages, p.CachedSequences, p.Lookups, 100*p.HitRate, p.MeanPrefixPages)
	}

	// Throughput over time: GB/s when values move, else ops/s.
	byBytes := t.Bytes > 0
	// A step line: each sample holds its rate over its whole interval.
	tl := plotLine{}
	for _, s := range res.Series {
		y := s.OpsPerS
		if byBytes {
			y = s.GBPerS
		}
		tl.xs = append(tl.xs, s.T, s.T+s.Seconds)
		tl.ys = append(tl.ys, y, y)
	}
	unit := "ops/s"
	if byBytes {
		unit = "GB/s (values, 1e9 bytes)"
	}
	svgPlot(&b, "Throughput over time", "seconds into the measured stage", unit, []plotLine{tl}, nil, true, false)

	// Latency percentile curve on the HDR x axis: position log10(1/(1-q)).
	var lines []plotLine
	yScale, yUnit := 1.0, "µs"
	for _, o := range res.Ops {
		if o.Latency.Max >= 5000 {
			yScale, yUnit = 1e-3, "ms"
		}
	}
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
	// Log latency axis: the tail spans decades above the median.
	svgPlot(&b, "Latency by percentile", "percentile", "latency ("+yUnit+", log scale)", lines, xt, true, true)

	b.WriteString("<p>Generated by <code>dfkv bench</code>. Failed operations are not part of any figure; the JSON output (<code>--json</code>) has the same data.</p>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
