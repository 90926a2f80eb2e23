package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
)

// stageResult is a finished single-stage result of workload over
// protocol, with one operation of the given throughput and p99.
func stageResult(workload, protocol string, opsPerS, p99 float64) *Result {
	o := Options{Workload: workload, Protocol: protocol, Target: protocol + ":1", ValueSize: 4096, Keys: 8, Concurrency: 4, Duration: time.Second}
	res := newResult(o, time.Unix(0, 0))
	op := opNames[workloadOps(workload)[0]]
	res.Stage = &Stage{Totals: Totals{Ops: 100000, OpsPerS: opsPerS, GBPerS: opsPerS * 4096 / 1e9, Seconds: 1},
		Ops: []OpResult{{Op: op, Count: 100000, OpsPerS: opsPerS, GBPerS: opsPerS * 4096 / 1e9,
			Latency: Latency{P50: p99 / 4, P90: p99 / 2, P99: p99, P999: 2 * p99}}}, Series: []Sample{}}
	return res.finish(false)
}

// saveJSON writes res where --compare can read it.
func saveJSON(t *testing.T, name string, res *Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := res.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCompare: two results of the same workload, dfkv against redis,
// side by side with ratios B/A, and as HTML with --html after the files.
func TestCompare(t *testing.T) {
	a := saveJSON(t, "a.json", stageResult(wGet, "dfkv", 10000, 200))
	b := saveJSON(t, "b.json", stageResult(wGet, "redis", 5000, 500))
	htmlPath := filepath.Join(t.TempDir(), "cmp.html")
	code, out, errs := runBench(t, "--compare", a, b, "--html", htmlPath)
	if code != 0 || errs != "dfkv bench: HTML comparison written to "+htmlPath+"\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{
		"dfkv bench comparison: workload get of 4KiB values; ratios are B/A\n",
		"A: " + a + ": protocol dfkv, target dfkv:1, concurrency 4, 1s",
		"B: " + b + ": protocol redis, target redis:1",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	for metric, ratio := range map[string]string{"ops/s": "0.50", "GB/s": "0.50", "p50": "2.50", "p99": "2.50", "p99.9": "2.50"} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 5 && f[0] == "get" && f[1] == metric {
				found = f[4] == ratio
			}
		}
		if !found {
			t.Errorf("get %s: B/A is not %s:\n%s", metric, ratio, out)
		}
	}
	if strings.Contains(out, "WARNING") || strings.Contains(out, "note:") {
		t.Fatalf("a clean comparison of equal loads warns or notes:\n%s", out)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil || !bytes.Contains(page, []byte("<td>get</td><td>p99</td>")) || !bytes.Contains(page, []byte("Latency by percentile: A solid, B dashed")) ||
		bytes.Contains(page, []byte("<script")) {
		t.Fatalf("HTML comparison: %v\n%s", err, page)
	}

	// A different load is noted, not refused; --html before --compare.
	c := stageResult(wGet, "dfkv", 20000, 100)
	c.Config.Concurrency = 16
	code, out, _ = runBench(t, "--html", htmlPath, "--compare", a, saveJSON(t, "c.json", c))
	if code != 0 || !strings.Contains(out, "note: concurrency differs: A 4, B 16") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestCompareRefuses: different workloads, a sweep against a single
// stage, sweeps of different dimensions, files that are not results,
// the wrong number of files and flags of a run are refused with usage
// status 2; an invalid result is compared, loudly, with status 1.
func TestCompareRefuses(t *testing.T) {
	get := saveJSON(t, "get.json", stageResult(wGet, "dfkv", 1000, 100))
	put := saveJSON(t, "put.json", stageResult(wPut, "dfkv", 1000, 100))
	big := stageResult(wGet, "dfkv", 1000, 100)
	big.Config.ValueSize = 1 << 20
	bigPath := saveJSON(t, "big.json", big)
	sweep := saveJSON(t, "sweep.json", syntheticSweep())
	vs := syntheticSweep()
	vs.Sweep.Dimension = config.SweepValueSize
	vsPath := saveJSON(t, "vs.json", vs)
	junk := filepath.Join(t.TempDir(), "junk.json")
	if err := os.WriteFile(junk, []byte(`{"tool":"other","format_version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := func(want string, args ...string) {
		t.Helper()
		code, out, errs := runBench(t, args...)
		if code != exitUsage || !strings.Contains(errs, want) || out != "" {
			t.Fatalf("bench %v: exit %d, stderr %q (want %q), stdout %q", args, code, errs, want, out)
		}
	}
	f("--compare: "+get+" measured get of 4KiB values, "+put+" measured put of 4KiB values: a comparison needs the same workload", "--compare", get, put)
	f("get of 4KiB values, "+bigPath+" measured get of 1MiB values", "--compare", get, bigPath)
	f("measured get of 1KiB values, swept over concurrency, "+get+" measured get of 4KiB values", "--compare", sweep, get)
	f("swept over concurrency, "+vsPath+" measured get of 1KiB values, swept over value_size", "--compare", sweep, vsPath)
	f(junk+` is not a dfkv bench --json result of format 1..2 (tool "other", format 1)`, "--compare", get, junk)
	f("--compare takes two JSON files written by --json (A and B), got 1", "--compare", get)
	f("--compare takes two JSON files written by --json (A and B), got 3", "--compare", get, get, get)
	f("--compare renders two earlier results and runs nothing; --workload does not go with it", "--workload", "get", "--compare", get, get)
	f("unexpected --json after --compare", "--compare", get, get, "--json", "x")

	bad := stageResult(wGet, "dfkv", 1000, 100)
	bad.ErrorCount, bad.Errors = 3, map[string]uint64{"TIMEOUT": 3}
	bad.finish(false)
	code, out, errs := runBench(t, "--compare", get, saveJSON(t, "bad.json", bad))
	if code != exitErrors || !strings.Contains(out, "WARNING: not a valid result, so neither are the ratios: B (") || !strings.Contains(errs, "3 errors (TIMEOUT 3)") {
		t.Fatalf("an invalid B: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestCompareSweeps: steps are matched by value; a step only one sweep
// has shows "-" on the other side; each sweep's knee is named.
func TestCompareSweeps(t *testing.T) {
	a := syntheticSweep()
	b := syntheticSweep()
	b.Sweep.Steps = append(b.Sweep.Steps[:1:1], b.Sweep.Steps[2]) // 1 and 4
	for i := range b.Sweep.Steps {
		b.Sweep.Steps[i].Totals.GBPerS *= 2
		b.Sweep.Steps[i].Knee = false
	}
	b.Sweep.markKnee()
	code, out, _ := runBench(t, "--compare", saveJSON(t, "a.json", a), saveJSON(t, "b.json", b))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 10 && (f[0] == "1" || f[0] == "2" || f[0] == "4") {
			rows[f[0]] = f
		}
	}
	if r := rows["1"]; len(r) != 10 || r[1] != "0.1" || r[2] != "0.2" || r[3] != "2.00" {
		t.Fatalf("step 1: %q\n%s", r, out)
	}
	if r := rows["2"]; len(r) != 10 || r[2] != "-" || r[3] != "-" || r[5] != "-" {
		t.Fatalf("step 2, only in A: %q\n%s", r, out)
	}
	if r := rows["4"]; len(r) != 12 || r[10] != "A" || r[11] != "B" {
		t.Fatalf("step 4, the knee of both: %q\n%s", r, out)
	}
	if !strings.Contains(out, "A knee: concurrency=4") || !strings.Contains(out, "B knee: concurrency=4") {
		t.Fatalf("knees not named:\n%s", out)
	}
}
