package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSmallSampleTails: a percentile p from fewer than 10/(1-p) samples
// is flagged in the JSON, starred in the table and the HTML, and
// footnoted once per percentile; one from enough samples is not.
func TestSmallSampleTails(t *testing.T) {
	hist := func(n int) *Histogram {
		h := new(Histogram)
		for i := 1; i <= n; i++ {
			h.Record(time.Duration(i) * time.Microsecond)
		}
		return h
	}
	if l := latencyOf(hist(999)); l.Few != (FewSamples{P99: true, P999: true}) {
		t.Fatalf("999 samples: %+v", l.Few)
	}
	if l := latencyOf(hist(10000)); l.Few != (FewSamples{}) {
		t.Fatalf("10,000 samples: %+v", l.Few)
	}
	if l := latencyOf(hist(19)); l.Few != (FewSamples{P50: true, P90: true, P99: true, P999: true}) {
		t.Fatalf("19 samples: %+v", l.Few)
	}

	res := &Result{Config: ResultConfig{Workload: "mixed", Protocol: "dfkv", Target: "x:1", ValueSize: 4096, Concurrency: 1, DurationS: 1},
		Stage: &Stage{Ops: []OpResult{
			{Op: "put", Count: 500, Latency: latencyOf(hist(500))},
			{Op: "get", Count: 5000, Latency: latencyOf(hist(5000))},
		}, Totals: Totals{Ops: 5500}}}
	var tb, hb, jb bytes.Buffer
	if err := res.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	table := tb.String()
	putRow, getRow := lineWith(table, "put "), lineWith(table, "get ")
	// put: p99 and p99.9 starred; get: only p99.9.
	if strings.Count(putRow, fewMark) != 2 || strings.Count(getRow, fewMark) != 1 || !strings.HasSuffix(strings.TrimSpace(strings.Fields(getRow)[7]), fewMark) {
		t.Fatalf("stars in the rows:\n%s", table)
	}
	for _, want := range []string{"* p99: fewer than 1,000 samples", "* p99.9: fewer than 10,000 samples"} {
		if strings.Count(table, want) != 1 {
			t.Fatalf("table lacks the footnote %q once:\n%s", want, table)
		}
	}
	if strings.Contains(table, "* p90") || strings.Contains(table, "* p50") {
		t.Fatalf("table footnotes a percentile no row marked:\n%s", table)
	}
	if err := res.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	if h := hb.String(); !strings.Contains(h, "<td>"+fmtUs(res.Ops[0].Latency.P99)+"*</td>") || !strings.Contains(h, "p99.9: fewer than 10,000 samples") {
		t.Fatalf("HTML lacks the starred p99 of put or the footnote:\n%s", h)
	}
	if err := res.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Ops []struct {
			Latency struct {
				Few map[string]bool `json:"few_samples"`
			} `json:"latency_us"`
		} `json:"ops"`
	}
	if err := json.Unmarshal(jb.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if f := doc.Ops[0].Latency.Few; len(f) != 4 || f["p50"] || f["p90"] || !f["p99"] || !f["p999"] {
		t.Fatalf("JSON few_samples of put: %v", f)
	}
}

// lineWith returns the first line of s that starts with prefix.
func lineWith(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
