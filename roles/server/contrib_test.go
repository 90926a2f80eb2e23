package server

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/roles/server/register"
)

// mdsMetricNames are the MDS's metrics, as roles/mds/mds.go declares them
// (its collector is unexported). NB: renaming one there means renaming it
// here and in the dashboard.
var mdsMetricNames = map[string]bool{
	"dfkv_mds_members": true, "dfkv_mds_epoch": true, "dfkv_mds_registrations_total": true,
	"dfkv_mds_deregistrations_total": true, "dfkv_mds_heartbeat_expiries_total": true,
	"dfkv_mds_backend_up": true, "dfkv_mds_first_request_timeouts_total": true,
	"dfkv_mds_accept_errors_total": true, "dfkv_mds_stale_member_replies_total": true,
	"dfkv_mds_unauthenticated_total": true, "dfkv_mds_forbidden_total": true, "dfkv_mds_duplicate_id_total": true,
	"dfkv_mds_settled_member_replies_total": true,
}

// TestGrafanaDashboardCoversAlerts: every metric the README's "What to
// alert on" names is on a panel of the dashboard, as the README says.
func TestGrafanaDashboardCoversAlerts(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "**What to alert on.**")
	end := strings.Index(text[max(start, 0):], "The Grafana dashboard has a panel for each")
	if start < 0 || end < 0 {
		t.Fatal(`README lost its "What to alert on" paragraph or its dashboard sentence`)
	}
	raw, err := os.ReadFile("../../contrib/grafana/dfkv.json")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`dfkv_[a-z0-9_]+`)
	queried := map[string]bool{}
	for _, name := range re.FindAllString(string(raw), -1) {
		queried[name] = true
	}
	named := re.FindAllString(text[start:start+end], -1)
	if len(named) < 5 {
		t.Fatalf("the alert paragraph names only %d metrics", len(named))
	}
	for _, name := range named {
		if !queried[name] {
			t.Errorf("the README says to alert on %s, but no dashboard panel shows it", name)
		}
	}
}

// TestGrafanaDashboardUsesRealMetrics: every dfkv_ metric the dashboard
// queries is one a node (or the MDS) exports, so a renamed metric breaks
// this test rather than an operator's dashboard.
func TestGrafanaDashboardUsesRealMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../contrib/grafana/dfkv.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	g, _ := engine.NewGroup([]engine.StoreEngine{newMemEngine()}, []string{"m"})
	g.SetQuotas(engine.NewQuotas(0, nil))
	g.Quotas().Committed(1, 10) // so the tenant series exists
	srv, _ := New(Options{Engine: g, Listener: ln, MaxBlockBytes: 1 << 20})
	srv.auth.forbidden = map[string]uint64{"acme": 1} // so the per-tenant series exists
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg, srv, g); err != nil {
		t.Fatal(err)
	}
	// The dfkv_ram_* series, as a node with the RAM tier on exports them.
	tier, err := ramtier.Open(ramtier.Options{Backing: g, Bytes: 1 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: ramtier.NoLargeReserve})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := reg.Register(&ramCollector{tier: tier}); err != nil {
		t.Fatal(err)
	}
	// The dfkv_s3_* series, as a node with the object store tier exports them.
	obj, err := objtier.Open(objtier.Options{Backing: newMemEngine(), Bucket: emptyBucket{}})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	s3m := newS3Metrics()
	s3m.tier = obj
	s3m.observe(objtier.OpGet, objtier.CallOK, time.Millisecond) // so the histogram has a series
	if err := reg.Register(&s3Collector{m: s3m}); err != nil {
		t.Fatal(err)
	}
	// dfkv_server_registered, as a node with server.mds exports it.
	if err := reg.Register((&register.Registrar{}).Gauge()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		have[name] = true
		if mf.GetType().String() == "HISTOGRAM" {
			have[name+"_bucket"], have[name+"_sum"], have[name+"_count"] = true, true, true
		}
	}
	for n := range mdsMetricNames {
		have[n] = true
	}
	re := regexp.MustCompile(`dfkv_[a-z0-9_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range re.FindAllString(tg.Expr, -1) {
				used++
				if !have[name] {
					t.Errorf("panel %q queries %s, which no dfkv role exports", p.Title, name)
				}
			}
		}
	}
	if used < 10 {
		t.Fatalf("dashboard queries only %d dfkv metrics", used)
	}
}

// TestSystemdUnits checks the units' key settings, and runs
// systemd-analyze verify where systemd is installed.
func TestSystemdUnits(t *testing.T) {
	for _, unit := range []string{"dfkv-server.service", "dfkv-mds.service"} {
		raw, err := os.ReadFile("../../contrib/systemd/" + unit)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		role := strings.TrimSuffix(strings.TrimPrefix(unit, "dfkv-"), ".service")
		// WorkingDirectory: the example config's relative paths must land
		// in the unit's writable state directory, not in / (read-only
		// under ProtectSystem=strict).
		for _, want := range []string{"ExecStart=/usr/local/bin/dfkv " + role + " --config", "LimitNOFILE=", "NoNewPrivileges=yes", "ProtectSystem=strict", "WorkingDirectory=/var/lib/"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", unit, want)
			}
		}
		if role == "server" && !strings.Contains(text, "LimitMEMLOCK=infinity") {
			t.Errorf("%s lacks LimitMEMLOCK for the RAM tier and RDMA", unit)
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed; unit syntax not verified")
		return
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", "../../contrib/systemd/dfkv-server.service", "../../contrib/systemd/dfkv-mds.service").CombinedOutput()
	// verify complains about the missing binary and user on a test box;
	// only syntax complaints count.
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Unknown key") || strings.Contains(l, "Failed to parse") || strings.Contains(l, "Invalid") {
			t.Errorf("systemd-analyze: %s", l)
		}
	}
	_ = err
}

// emptyBucket is an object store that holds nothing.
type emptyBucket struct{}

func (emptyBucket) Get(context.Context, string, int64, func(int) []byte) ([]byte, error) {
	return nil, objtier.ErrNotExist
}
func (emptyBucket) Head(context.Context, string) (int64, error) { return 0, objtier.ErrNotExist }
func (emptyBucket) Put(context.Context, string, []byte) error   { return nil }
func (emptyBucket) Delete(context.Context, string) error        { return nil }
func (emptyBucket) String() string                              { return "empty bucket" }
func (emptyBucket) Close() error                                { return nil }

// dashboardExprs returns the expressions of the dashboard panel titled
// title.
func dashboardExprs(t *testing.T, title string) []string {
	t.Helper()
	raw, err := os.ReadFile("../../contrib/grafana/dfkv.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if p.Title == title {
			var out []string
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			return out
		}
	}
	t.Fatalf("the dashboard has no panel %q", title)
	return nil
}

// TestGrafanaHitRateCountsRAMTier: the dashboard's "Hit rate" panel (the
// one the README's "a falling hit rate" alert points at) counts the GETs a
// node with the RAM tier serves, hits and misses: the per-disk engine
// counters never see a GET the RAM tier answers.
func TestGrafanaHitRateCountsRAMTier(t *testing.T) {
	exprs := dashboardExprs(t, "Hit rate")
	if len(exprs) != 1 {
		t.Fatalf("Hit rate panel has %d queries, want 1", len(exprs))
	}
	num, den, ok := strings.Cut(exprs[0], " / ")
	if !ok {
		t.Fatalf("Hit rate %q is not hits / (hits + misses)", exprs[0])
	}
	dir := t.TempDir()
	addr, httpAddr, _ := runNode(t, withRAMTier(map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}}))
	cl := ramClient(t, addr)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("hot"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := cl.GetAuto(ctx, []byte("hot")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.GetAuto(ctx, []byte("never-stored")); err == nil {
		t.Fatal("GET of a key never stored found it")
	}
	mf := scrape(t, httpAddr)
	hits, total := sumSelectors(t, mf, num), sumSelectors(t, mf, den)
	if hits < 3 || total < hits+1 {
		t.Errorf("after 3 GET hits and 1 miss served by the RAM tier, the Hit rate panel reads %v hits of %v reads (%q)", hits, total, exprs[0])
	}
}

// sumSelectors adds up, over every metric selector in expr (name and
// {label matchers}), the values of the series in mf it selects: what the
// expression's rate()s see on a node whose counters started at 0.
// $instance matches any instance.
func sumSelectors(t *testing.T, mf map[string]*dto.MetricFamily, expr string) float64 {
	t.Helper()
	sel := regexp.MustCompile(`(dfkv_[a-z0-9_]+)(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	var sum float64
	for _, s := range sel.FindAllStringSubmatch(expr, -1) {
		f := mf[s[1]]
		if f == nil {
			continue
		}
	series:
		for _, m := range f.Metric {
			have := map[string]string{}
			for _, lp := range m.Label {
				have[lp.GetName()] = lp.GetValue()
			}
			for _, mm := range matcher.FindAllStringSubmatch(s[2], -1) {
				name, op, want := mm[1], mm[2], strings.ReplaceAll(mm[3], "$instance", ".*")
				if name == "instance" {
					continue
				}
				var ok bool
				switch op {
				case "=", "!=":
					ok = have[name] == want
				default:
					ok = regexp.MustCompile("^(?:" + want + ")$").MatchString(have[name])
				}
				if ok != (op == "=" || op == "=~") {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				sum += m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// TestGrafanaMDSSeriesNotFilteredByNode: the dashboard's $instance
// variable lists the instances of dfkv_build_info, which only nodes export,
// so an MDS series filtered by instance=~"$instance" disappears as soon as
// one node is picked instead of All.
func TestGrafanaMDSSeriesNotFilteredByNode(t *testing.T) {
	raw, err := os.ReadFile("../../contrib/grafana/dfkv.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var source string
	for _, v := range dash.Templating.List {
		if v.Name == "instance" {
			source = v.Query
		}
	}
	m := regexp.MustCompile(`label_values\((dfkv_[a-z0-9_]+)`).FindStringSubmatch(source)
	if m == nil {
		t.Fatalf("$instance comes from %q, not label_values(a dfkv metric, instance)", source)
	}
	if mdsMetricNames[m[1]] {
		return // the variable lists the MDS's instances too
	}
	sel := regexp.MustCompile(`(dfkv_mds_[a-z0-9_]+)\{([^}]*)\}`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, s := range sel.FindAllStringSubmatch(tg.Expr, -1) {
				if strings.Contains(s[2], "$instance") {
					t.Errorf("panel %q filters the MDS's %s by $instance, whose values (from %s) are nodes only: the series vanish once a node is picked", p.Title, s[1], m[1])
				}
			}
		}
	}
}
