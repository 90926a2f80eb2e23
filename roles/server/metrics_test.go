package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/version"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// scrape fetches /metrics and parses it.
func scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// value returns the value of the series of family name whose labels
// include want (nil: the first series).
func value(t testing.TB, mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := mf[name]
	if f == nil {
		t.Fatalf("metric %s missing", name)
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		for _, lp := range m.Label {
			if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
		}
		found = true
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.Counter.GetValue()
		case dto.MetricType_GAUGE:
			sum += m.Gauge.GetValue()
		case dto.MetricType_HISTOGRAM:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	if !found {
		t.Fatalf("metric %s has no series with %v", name, want)
	}
	return sum
}

// TestMetricsScrapeLiveNode runs a node through Run, drives traffic and
// checks that the scraped metrics have the right types and move.
func TestMetricsScrapeLiveNode(t *testing.T) {
	dir := t.TempDir()
	addr, haddr, _ := runNode(t, map[string][]string{
		"disk": {dir + "/d0", dir + "/d1"}, "disk-capacity": {"64MiB"}, "tenant-default-quota": {"1GiB"},
	})

	before := scrape(t, haddr)
	for name, typ := range map[string]dto.MetricType{
		"dfkv_requests_total":               dto.MetricType_COUNTER,
		"dfkv_request_duration_seconds":     dto.MetricType_HISTOGRAM,
		"dfkv_open_connections":             dto.MetricType_GAUGE,
		"dfkv_tcp_first_req_ms":             dto.MetricType_GAUGE,
		"dfkv_first_request_timeouts_total": dto.MetricType_COUNTER,
		"dfkv_received_bytes_total":         dto.MetricType_COUNTER,
		"dfkv_sent_bytes_total":             dto.MetricType_COUNTER,
		"dfkv_disk_capacity_bytes":          dto.MetricType_GAUGE,
		"dfkv_disk_used_bytes":              dto.MetricType_GAUGE,
		"dfkv_disk_objects":                 dto.MetricType_GAUGE,
		"dfkv_disk_evictions_total":         dto.MetricType_COUNTER,
		"dfkv_disk_extent_moves_total":      dto.MetricType_COUNTER,
		"dfkv_disk_io_errors_total":         dto.MetricType_COUNTER,
		"dfkv_disk_checksum_failures_total": dto.MetricType_COUNTER,
		"dfkv_disk_section_tables_total":    dto.MetricType_COUNTER,
		"dfkv_disk_section_reads_total":     dto.MetricType_COUNTER,
		"dfkv_disk_section_misses_total":    dto.MetricType_COUNTER,
		"dfkv_engine_hits_total":            dto.MetricType_COUNTER,
		"dfkv_engine_misses_total":          dto.MetricType_COUNTER,
		"dfkv_build_info":                   dto.MetricType_GAUGE,
		"go_goroutines":                     dto.MetricType_GAUGE,
	} {
		f := before[name]
		if f == nil {
			t.Fatalf("metric %s missing", name)
		}
		if f.GetType() != typ {
			t.Fatalf("metric %s is %s, want %s", name, f.GetType(), typ)
		}
	}
	// The build's commit, as `dfkv version` reports it, never empty.
	if got := value(t, before, "dfkv_build_info", map[string]string{"commit": version.CommitID()}); got != 1 || version.CommitID() == "" {
		t.Fatalf("dfkv_build_info{commit=%q} = %v, want 1", version.CommitID(), got)
	}
	if got := value(t, before, "dfkv_tcp_first_req_ms", nil); got != 30000 {
		t.Fatalf("dfkv_tcp_first_req_ms %v", got)
	}
	if got := value(t, before, "dfkv_disk_capacity_bytes", nil); got != 2*64<<20 {
		t.Fatalf("capacity %v", got)
	}

	cl, err := client.Open(client.Options{Namespace: []byte("acme"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bg := context.Background()
	val := make([]byte, 5000)
	if err := cl.Put(bg, []byte("a"), val); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetAuto(bg, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetAuto(bg, []byte("missing")); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatal(err)
	}
	after := scrape(t, haddr)
	f := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if got := value(t, after, name, labels); got != want {
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	f("dfkv_requests_total", map[string]string{"op": "PUT", "status": "OK"}, 1)
	f("dfkv_requests_total", map[string]string{"op": "GET", "status": "OK"}, 1)
	f("dfkv_requests_total", map[string]string{"op": "GET", "status": "NOT_FOUND"}, 1)
	f("dfkv_request_duration_seconds", map[string]string{"op": "GET"}, 2)
	f("dfkv_disk_objects", nil, 1)
	f("dfkv_disk_used_bytes", nil, 5000)
	f("dfkv_engine_hits_total", nil, 1)
	f("dfkv_engine_misses_total", nil, 1)
	f("dfkv_tenant_committed_bytes", nil, 5000)
	// STATS says the same, with the quota.
	body, err := cl.Stats(bg, addr)
	if err != nil {
		t.Fatal(err)
	}
	var st StatsReply
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tenants) != 1 || st.Tenants[0].UsedBytes != 5000 || st.Tenants[0].QuotaBytes != 1<<30 ||
		st.Tenants[0].Tenant != fmt.Sprintf("0x%016x", wire.TenantHash([]byte("acme"))) {
		t.Fatalf("STATS tenants %+v, want acme's 5000 bytes of 1 GiB", st.Tenants)
	}
	if value(t, after, "dfkv_received_bytes_total", nil) < 5000 || value(t, after, "dfkv_sent_bytes_total", nil) < 5000 {
		t.Fatal("byte counters did not move")
	}

	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		resp, err := http.Get("http://" + haddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
}

// TestMetricsLint runs client_golang's metric linter over a node's
// registry: names, units and help follow Prometheus conventions.
func TestMetricsLint(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	g, err := engine.NewGroup([]engine.StoreEngine{newMemEngine()}, []string{"m0"})
	if err != nil {
		t.Fatal(err)
	}
	g.SetQuotas(engine.NewQuotas(0, nil))
	srv, err := New(Options{Engine: g, Listener: ln, MaxBlockBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg, srv, g); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		// dfkv_tcp_first_req_ms keeps the name operators of the original
		// dfkv know (their dashboards use it), unit abbreviation and all.
		if p.Metric == "dfkv_tcp_first_req_ms" {
			continue
		}
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestHTTPDripFeederCutOff: an HTTP client that never finishes its
// headers is disconnected after server.metrics_first_request_ms, and the
// listener keeps serving others.
func TestHTTPDripFeederCutOff(t *testing.T) {
	dir := t.TempDir()
	_, haddr, _ := runNode(t, map[string][]string{
		"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}, "metrics-first-request-ms": {"1000"},
	})
	c, err := net.Dial("tcp", haddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")) // and never the blank line
	if _, err := io.ReadAll(c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("drip feeder still connected after the header deadline")
		}
	}
	resp, err := http.Get("http://" + haddr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("listener after the drip feeder: %v", err)
	}
	resp.Body.Close()
}

// TestReadyzReasons: /readyz is 503 with a reason while an engine failed
// closed or a disk is full, and 200 otherwise.
func TestReadyzReasons(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	eng := newMemEngine()
	srv, err := New(Options{Engine: eng, Listener: ln, MaxBlockBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := newHTTPServer(srv, eng, prometheus.NewRegistry(), time.Second, false, nil).Handler
	check := func(wantCode int, wantBody string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != wantCode || !strings.Contains(rec.Body.String(), wantBody) {
			t.Fatalf("readyz: %d %q, want %d containing %q", rec.Code, rec.Body.String(), wantCode, wantBody)
		}
	}
	check(200, "ready")
	eng.mu.Lock()
	eng.full = true
	eng.mu.Unlock()
	check(503, "full")
	eng.mu.Lock()
	eng.full, eng.unhealthy = false, true
	eng.mu.Unlock()
	check(503, "failed closed")
}

// TestMetricsSectionReads checks that a node's ranged reads from disk
// show in the section counters: the first range of a block reads it whole
// and keeps its section sums, the next is served by its sections alone.
func TestMetricsSectionReads(t *testing.T) {
	dir := t.TempDir()
	addr, haddr, _ := runNode(t, map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"64MiB"}})
	cl, err := client.Open(client.Options{Namespace: []byte("acme"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bg := context.Background()
	val := make([]byte, 256<<10)
	for i := range val {
		val[i] = byte(i * 7)
	}
	if err := cl.Put(bg, []byte("block"), val); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 32<<10)
	for _, off := range []uint64{0, 96 << 10} {
		n, _, err := cl.GetRange(bg, []byte("block"), off, uint64(len(dst)), dst)
		if err != nil || n != len(dst) || string(dst) != string(val[off:off+uint64(len(dst))]) {
			t.Fatalf("range at %d: %d bytes, %v, or wrong bytes", off, n, err)
		}
	}
	mf := scrape(t, haddr)
	for name, want := range map[string]float64{
		"dfkv_disk_section_tables_total": 1, "dfkv_disk_section_reads_total": 1, "dfkv_disk_section_misses_total": 0,
	} {
		if got := value(t, mf, name, nil); got != want {
			t.Fatalf("%s = %v after two ranges of one block, want %v", name, got, want)
		}
	}
}
