package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// plot geometry, in SVG user units: the legend is to the right of the
// plot area, so it never hides a line.
const (
	plotW, plotH                  = 880, 320
	padL, padR, padTop, padBottom = 70, 190, 20, 50
	legendStep                    = 16
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}

// opColors keeps an operation's colour the same in every plot.
var opColors = [numOps]string{opPut: "#ff7f0e", opGet: "#1f77b4", opExist: "#2ca02c", opExistPrefix: "#9467bd", opGetPrefix: "#8c564b"}

// opColor is the colour of the operation named name.
func opColor(name string) string {
	for op, n := range opNames {
		if n == name {
			return opColors[op]
		}
	}
	return "#333"
}

// stepColor is the colour of step i of n: from blue through green to
// red as the load grows.
func stepColor(i, n int) string {
	anchors := [][3]float64{{0x2b, 0x57, 0xc0}, {0x1f, 0xa0, 0x6a}, {0xe0, 0x8a, 0x10}, {0xc8, 0x1e, 0x1e}}
	f := 0.0
	if n > 1 {
		f = float64(i) / float64(n-1) * float64(len(anchors)-1)
	}
	k := min(int(f), len(anchors)-2)
	t := f - float64(k)
	var c [3]int
	for j := range c {
		c[j] = int(math.Round(anchors[k][j]*(1-t) + anchors[k+1][j]*t))
	}
	return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])
}

// plotLine is one line of a plot.
type plotLine struct {
	name   string
	xs, ys []float64
	dash   bool   // dashed
	color  string // "": the palette's
	// hollow marks the points drawn as open circles (an estimate from few
	// samples); nil or false: no circle.
	hollow []bool
	// labels are written beside the points ("" or nil: none); ring is
	// the index of a point circled and named ringText (-1: none).
	labels   []string
	ring     int
	ringText string
	dots     bool // a dot on every point
}

// newLine returns a line named name, with no point ringed.
func newLine(name string) plotLine { return plotLine{name: name, ring: -1} }

// plotSpec is what a plot shows: its lines, axes and labels. xTicks maps
// x positions to labels (nil: numeric ticks over the x range); the x
// axis starts at 0 when xFromZero, the y axis is linear from 0 or, with
// yLog, logarithmic over the positive values.
type plotSpec struct {
	title, xLabel, yLabel string
	lines                 []plotLine
	xTicks                map[float64]string
	xFromZero, yLog       bool
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
	// First puts the figure above the tables: the one plot to read.
	First bool
}

// tick is one grid line with its label, at Pos on its axis.
type tick struct {
	Pos   float64
	Label string
}

// figLine is one drawn line: its points, a dot where it has only one,
// and its legend entry (LegendY 0: none).
type figLine struct {
	Color, Points, Name string
	Dash                bool
	Dot                 bool
	DotX, DotY          float64
	LegendY             int
	Circles             []point // open circles on the line
	Dots                []point // filled dots on the line
	Labels              []label // text beside points
	Ring                *label  // a point circled, and its name
}

// point is a position in the SVG.
type point struct{ X, Y float64 }

// label is a text at a position in the SVG, starting there or, with
// Anchor "end", ending there.
type label struct {
	X, Y   float64
	Text   string
	Anchor string
}

// Template helpers for the positions derived from a figure's own.
func (f figure) TickLabelX() int        { return f.Left - 6 }
func (f figure) TickLabelY() float64    { return f.Bottom + 16 }
func (f figure) XLabelX() float64       { return float64(f.Left) + f.IW/2 }
func (f figure) XLabelY() int           { return f.H - 8 }
func (f figure) YLabelY() float64       { return float64(f.Top) + f.IH/2 }
func (f figure) LegendX() float64       { return f.Right + 14 }
func (f figure) LegendLineEnd() float64 { return f.Right + 34 }
func (f figure) LegendTextX() float64   { return f.Right + 40 }

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
		yt := niceTicks(0, yMax*1.05, 5) // headroom for the labels above the highest point
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

// plot lays out sp.
func plot(sp plotSpec) figure {
	lines := sp.lines
	h := max(plotH, padTop+padBottom+legendStep*(len(lines)+1))
	iw, ih := float64(plotW-padL-padR), float64(h-padTop-padBottom)
	f := figure{Title: sp.title, XLabel: sp.xLabel, YLabel: sp.yLabel, W: plotW, H: h, Left: padL, Top: padTop,
		Right: padL + iw, Bottom: padTop + ih, IW: iw, IH: ih}
	xMin, xMax := xRange(lines, sp.xFromZero)
	px := func(x float64) float64 { return padL + (x-xMin)/(xMax-xMin)*iw }
	yt, py := yAxis(lines, sp.yLog, padTop, ih)
	for _, v := range yt {
		f.YTicks = append(f.YTicks, tick{Pos: py(v), Label: fmtTick(v)})
	}
	xTicks := sp.xTicks
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
	legend := 0
	for i, l := range lines {
		fl := layLine(l, palette[i%len(palette)], px, py, f.Right)
		if l.name != "" {
			legend++
			fl.LegendY = padTop + legendStep*legend
		}
		f.Lines = append(f.Lines, fl)
	}
	return f
}

// layLine places l's points; a point label near the right edge (at
// right) ends left of its point, so it stays inside the plot.
func layLine(l plotLine, color string, px, py func(float64) float64, right float64) figLine {
	fl := figLine{Color: color, Name: l.name, Dash: l.dash}
	if l.color != "" {
		fl.Color = l.color
	}
	var pts strings.Builder
	for j := range l.xs {
		p := point{px(l.xs[j]), py(l.ys[j])}
		fmt.Fprintf(&pts, "%.1f,%.1f ", p.X, p.Y)
		if j < len(l.hollow) && l.hollow[j] {
			fl.Circles = append(fl.Circles, p)
		} else if l.dots {
			fl.Dots = append(fl.Dots, p)
		}
		if j < len(l.labels) && l.labels[j] != "" {
			lb := label{X: p.X + 6, Y: p.Y - 7, Text: l.labels[j], Anchor: "start"}
			if p.X > right-40 {
				lb.X, lb.Anchor = p.X-6, "end"
			}
			fl.Labels = append(fl.Labels, lb)
		}
		if j == l.ring {
			fl.Ring = &label{X: p.X, Y: p.Y, Text: l.ringText}
		}
	}
	fl.Points = strings.TrimSpace(pts.String())
	if len(l.xs) == 1 {
		fl.Dot, fl.DotX, fl.DotY = true, px(l.xs[0]), py(l.ys[0])
	}
	return fl
}
