package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/wire"
)

// TestKnee: the knee rule on synthetic steps.
func TestKnee(t *testing.T) {
	for _, c := range []struct {
		name     string
		thr, p99 []float64
		want     int
	}{
		{"linear, then saturated", []float64{1, 2, 4, 4.2, 4.3}, []float64{100, 105, 110, 200, 400}, 3},
		{"throughput doubles, p99 only grows", []float64{1, 2, 4, 8}, []float64{100, 150, 250, 450}, -1},
		{"p99 grows as fast as throughput: not faster", []float64{1, 2, 4}, []float64{100, 200, 400}, -1},
		{"a blip a later step undoes is not a knee", []float64{0.158, 0.198, 0.344, 0.409}, []float64{1.46, 3.02, 2.20, 3.47}, -1},
		// Two sweeps of GET 64 KiB at concurrency 1..64 on the 2-core test
		// machine (GB/s, p99 ms): the knees are where p99 left the pack.
		{"measured sweep A", []float64{0.179, 0.237, 0.311, 0.48, 0.61, 0.819, 0.649}, []float64{1.56, 2.41, 2.82, 2.58, 5.38, 5.41, 23.2}, 4},
		{"measured sweep B", []float64{0.158, 0.198, 0.344, 0.409, 0.52, 0.684, 0.729}, []float64{1.46, 3.02, 2.20, 3.47, 4.49, 5.87, 9.92}, 6},
		{"p99 rises less than 50 points over throughput", []float64{1, 1.3}, []float64{100, 175}, -1},
		{"throughput falls while p99 rises", []float64{1, 2, 1.9}, []float64{100, 110, 180}, 2},
		{"both fall: p99 did not rise", []float64{4, 3}, []float64{200, 190}, -1},
		{"a step without operations is not judged", []float64{1, 0, 2, 2.1}, []float64{100, 0, 105, 300}, 3},
		{"one step", []float64{1}, []float64{100}, -1},
		{"none", nil, nil, -1},
	} {
		if got := knee(c.thr, c.p99); got != c.want {
			t.Errorf("%s: knee %d, want %d", c.name, got, c.want)
		}
	}
}

// fakeStore is an in-memory target that logs what reached it: the
// value sizes it was given, and each dial.
type fakeStore struct {
	mu   sync.Mutex
	vals map[string]int // key -> value size
	log  []string       // "dial", "put SIZE"
	gets map[int]int    // GETs per value size
}

func newFakeStore() *fakeStore { return &fakeStore{vals: map[string]int{}, gets: map[int]int{}} }

func (f *fakeStore) Dial() (conn, error) {
	f.mu.Lock()
	f.log = append(f.log, "dial")
	f.mu.Unlock()
	return &fakeConn{f: f}, nil
}
func (f *fakeStore) Close() error { return nil }
func (f *fakeStore) describe(context.Context) *ServerInfo {
	return &ServerInfo{Protocol: "dfkv", Nodes: []NodeInfo{{Addr: "fake:1", Version: "test", Engine: "fake", CPUs: 3}}}
}

type fakeConn struct{ f *fakeStore }

func (c *fakeConn) Put(key, val []byte) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.vals[string(key)] = len(val)
	c.f.log = append(c.f.log, fmt.Sprint("put ", len(val)))
	return nil
}

func (c *fakeConn) Get(key, dst []byte) (int, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	n, ok := c.f.vals[string(key)]
	if !ok {
		return 0, wire.StatusNotFound
	}
	c.f.gets[n]++
	return n, nil
}

func (c *fakeConn) Exist(key []byte) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if _, ok := c.f.vals[string(key)]; !ok {
		return wire.StatusNotFound
	}
	return nil
}

func (c *fakeConn) Close() error { return nil }

func sweepOptions(workload string, sw config.Sweep) Options {
	return Options{Workload: workload, Protocol: "dfkv", Target: "fake:1", ValueSize: 1024, Keys: 8, Concurrency: 2, Ops: 30,
		Fill: workload != wPut, KeyPrefix: "k/", Seed: 1, Sequences: 2, PagesPerSeq: 2, SharedPrefix: 0.5, Sweep: sw}
}

// TestSweepConcurrency: the steps run in the order given, each with its
// own number of workers and its own count of operations, over keys
// filled once before the first.
func TestSweepConcurrency(t *testing.T) {
	f := newFakeStore()
	sw := config.Sweep{Dimension: config.SweepConcurrency, Values: []uint64{1, 3, 5}}
	res, err := execute(context.Background(), sweepOptions(wGet, sw), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Stage != nil || res.Sweep == nil || len(res.Sweep.Steps) != 3 {
		t.Fatalf("ok=%v stage=%v sweep=%+v", res.OK, res.Stage, res.Sweep)
	}
	for i, want := range []string{"1", "3", "5"} {
		st := res.Sweep.Steps[i]
		if st.Label != want || st.Value != sw.Values[i] || st.Totals.Ops != 30 || len(st.Ops) != 1 || st.Ops[0].Op != "get" || st.Latency.P50 <= 0 || len(st.Curve) == 0 || st.Fill != nil {
			t.Fatalf("step %d: %+v", i, st)
		}
	}
	// The log: the fill (4 connections, 8 PUTs), then 1+3+5 dials, and
	// no PUT after the fill.
	if got := runLengths(f.log); got != "dial×4 put 1024×8 dial×9" || res.Fill == nil || res.Fill.Keys != 8 {
		t.Fatalf("fill once, then the steps' dials: %s, fill %+v", got, res.Fill)
	}
	if res.Config.Concurrency != 0 || res.Config.Sweep != "concurrency=1,3,5" || res.Server == nil || res.Server.Nodes[0].Engine != "fake" {
		t.Fatalf("config %+v, server %+v", res.Config, res.Server)
	}
}

// runLengths writes log as "event×count" runs.
func runLengths(log []string) string {
	var out []string
	for i := 0; i < len(log); {
		j := i
		for j < len(log) && log[j] == log[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%s×%d", log[i], j-i))
		i = j
	}
	return strings.Join(out, " ")
}

// TestSweepValueSize: each step stores its keys anew with its size and
// reads back values of that size; the steps run in the order given.
func TestSweepValueSize(t *testing.T) {
	f := newFakeStore()
	sw := config.Sweep{Dimension: config.SweepValueSize, Values: []uint64{512, 4096, 65536}}
	res, err := execute(context.Background(), sweepOptions(wGet, sw), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Fill != nil || len(res.Sweep.Steps) != 3 {
		t.Fatalf("ok=%v fill=%+v steps %d", res.OK, res.Fill, len(res.Sweep.Steps))
	}
	// Each step dials its fill (4) and its 2 workers after the fill.
	if got := runLengths(f.log); got != "dial×4 put 512×8 dial×6 put 4096×8 dial×6 put 65536×8 dial×2" {
		t.Fatalf("fills in order of size: %s", got)
	}
	for i, st := range res.Sweep.Steps {
		size := int(sw.Values[i])
		if st.Fill == nil || st.Fill.Keys != 8 || st.Label != config.FormatSize(sw.Values[i]) || f.gets[size] != 30 || st.Totals.Bytes != uint64(30*size) {
			t.Fatalf("step %d: fill %+v, label %s, %d GETs of %d bytes, %d bytes", i, st.Fill, st.Label, f.gets[size], size, st.Totals.Bytes)
		}
	}
	if res.Config.ValueSize != 0 || !strings.Contains(res.summary(), "sweep value_size=512,4KiB,64KiB, 30 ops per step (warm-up 0s; fill per step)") {
		t.Fatalf("summary %q", res.summary())
	}
}

// syntheticSweep is a sweep result with a knee at step 2, without a run.
func syntheticSweep() *Result {
	res := newResult(sweepOptions(wGet, config.Sweep{Dimension: config.SweepConcurrency, Values: []uint64{1, 2, 4}}), time.Unix(0, 0))
	sw := &SweepResult{Dimension: "concurrency", Values: []uint64{1, 2, 4}, Throughput: "gb_per_s", KneeRule: kneeRule, Knee: -1}
	for i, c := range []struct{ gb, p99 float64 }{{0.1, 100}, {0.2, 110}, {0.22, 300}} {
		sw.Steps = append(sw.Steps, Step{Value: sw.Values[i], Label: fmt.Sprint(sw.Values[i]),
			Latency: Latency{P50: c.p99 / 2, P90: c.p99 * 0.8, P99: c.p99, P999: c.p99 * 1.5},
			Stage:   Stage{Totals: Totals{Ops: 1000, OpsPerS: c.gb * 1e4, GBPerS: c.gb}, Ops: []OpResult{}, Series: []Sample{}}})
	}
	sw.markKnee()
	res.Sweep = sw
	return res.finish(false)
}

// TestSweepReport: the table, the HTML and the JSON mark the knee and
// say the rule; the JSON has the sweep's fields and no single stage.
func TestSweepReport(t *testing.T) {
	res := syntheticSweep()
	if res.Sweep.Knee != 2 || !res.Sweep.Steps[2].Knee || res.Sweep.Steps[1].Knee || !res.OK {
		t.Fatalf("knee %d, ok %v", res.Sweep.Knee, res.OK)
	}
	var tb, hb, jb bytes.Buffer
	if err := res.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	table := tb.String()
	if !strings.HasSuffix(strings.TrimSpace(lineWith(table, "4 ")), "<- knee") || strings.Contains(lineWith(table, "2 "), "knee") ||
		!strings.Contains(table, "knee: concurrency=4 (0.22 GB/s, p99 300µs): against concurrency=2, p99 rose 173% (110µs to 300µs) while throughput rose 10% (0.2 to 0.22 GB/s)") ||
		!strings.Contains(table, kneeRule) || !strings.Contains(table, "highest throughput: 0.22 GB/s (2200 ops/s) at concurrency=4") {
		t.Fatalf("table:\n%s", table)
	}
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	h := hb.String()
	for _, want := range []string{`<tr class="knee"><td>4 (knee)</td>`, `>knee: concurrency=4</text>`, `class="headline"><b>Knee: concurrency=4 (0.22 GB/s, p99 300µs)`, "<br>Highest throughput: 0.22 GB/s",
		"Throughput against latency", "The knee is the first step whose p99 rose by at least 50 points"} {
		if !strings.Contains(h, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// The throughput-against-latency plot comes before the table.
	if strings.Index(h, "Throughput against latency") > strings.Index(h, "<caption>") {
		t.Error("the sweep plot is not above the table")
	}
	if err := res.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(jb.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	sweep, _ := doc["sweep"].(map[string]any)
	if doc["format_version"] != 2.0 || doc["totals"] != nil || doc["ops"] != nil || sweep == nil || sweep["dimension"] != "concurrency" ||
		sweep["knee_step"] != 2.0 || sweep["knee_rule"] != kneeRule || sweep["knee_throughput"] != "gb_per_s" {
		t.Fatalf("JSON: %s", jb.String())
	}
	steps, _ := sweep["steps"].([]any)
	st, _ := steps[2].(map[string]any)
	lat, _ := st["latency_us"].(map[string]any)
	if len(steps) != 3 || st["knee"] != true || st["label"] != "4" || st["totals"] == nil || lat["few_samples"] == nil {
		t.Fatalf("JSON step: %v", st)
	}
	// And it reads back.
	var back Result
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil || back.Sweep.Knee != 2 || back.Stage != nil || back.Sweep.Steps[2].Totals.GBPerS != 0.22 {
		t.Fatalf("JSON does not read back: %v %+v", err, back.Sweep)
	}
}

// TestSweepHTMLEscapes: the step labels and the server of a sweep are
// text in the HTML, never markup.
func TestSweepHTMLEscapes(t *testing.T) {
	res := syntheticSweep()
	const evil = `<b onclick="x">`
	res.Sweep.Steps[2].Label = evil
	res.Server = &ServerInfo{Protocol: "dfkv", Nodes: []NodeInfo{{Addr: evil, Engine: evil}}}
	var hb bytes.Buffer
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	h := hb.String()
	if strings.Contains(h, evil) || !strings.Contains(h, "&lt;b onclick=&#34;x&#34;&gt; (knee)") {
		t.Fatalf("HTML does not escape the step label or the server:\n%s", h)
	}
}
