package server

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/version"
	"github.com/dfkv/dfkv/wire"
)

// Metrics are a node's Prometheus metrics. Request counters and latency
// histograms are resolved per (op, status) once at startup, so recording a
// request costs a few atomic adds and no allocation; engine and disk
// numbers are read from engine.Stats at scrape time (the client_golang
// dbstats-collector pattern), so the engines import no Prometheus.
type Metrics struct {
	requests [wire.LastOp + 1][wire.LastStatus + 1]prometheus.Counter
	latency  [wire.LastOp + 1]prometheus.Observer
}

// latencyBuckets span 10 µs (a RAM or page-cache hit on loopback) to about
// 10 s (a stalled disk): 21 doubling buckets.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2, 21)

// TopTenants bounds the tenant label: only the N tenants with the most
// committed bytes get their own series; the rest are summed as "other".
const TopTenants = 20

// NewMetrics registers a node's metrics on reg: request, byte, latency,
// connection and deadline metrics from srv, disk and tenant metrics from
// group (quotas may be nil), build info and the Go runtime.
func NewMetrics(reg prometheus.Registerer, srv *Server, group *engine.Group) (*Metrics, error) {
	m := &Metrics{}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "dfkv", Name: "requests_total",
		Help: "Requests answered, by op and status.",
	}, []string{"op", "status"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "dfkv", Name: "request_duration_seconds",
		Help:    "Time from a request's prefix being read to its response being queued, by op.",
		Buckets: latencyBuckets,
	}, []string{"op"})
	for op := wire.OpPing; op <= wire.LastOp; op++ {
		m.latency[op] = lat.WithLabelValues(op.String())
		for st := wire.StatusOK; st <= wire.LastStatus; st++ {
			m.requests[op][st] = reqs.WithLabelValues(op.String(), st.String())
		}
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "dfkv", Name: "build_info",
		Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "commit", "goversion"})
	build.WithLabelValues(version.Version, version.CommitID(), runtime.Version()).Set(1)
	cs := []prometheus.Collector{
		reqs, lat, build,
		&nodeCollector{srv: srv, group: group},
		&shmCollector{srv: srv},
		authCollector{srv: srv},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one answered request.
func (m *Metrics) observe(op wire.Op, st wire.Status, start time.Time) {
	if m == nil || op > wire.LastOp || st > wire.LastStatus {
		return
	}
	m.requests[op][st].Inc()
	m.latency[op].Observe(time.Since(start).Seconds())
}

// nodeCollector turns the server's counters and the group's Stats into
// metrics at scrape time.
type nodeCollector struct {
	srv   *Server
	group *engine.Group
}

var (
	descConns       = prometheus.NewDesc("dfkv_open_connections", "Open data-plane connections.", nil, nil)
	descServing     = prometheus.NewDesc("dfkv_serving_connections", "Open connections serving requests now; the others wait on their clients and hold no working memory.", nil, nil)
	descAccepted    = prometheus.NewDesc("dfkv_connections_accepted_total", "Data-plane connections accepted.", nil, nil)
	descRefused     = prometheus.NewDesc("dfkv_connections_refused_total", "Connections refused at max_conns or during shutdown.", nil, nil)
	descIdleClosed  = prometheus.NewDesc("dfkv_connections_idle_closed_total", "Idle connections closed at max_conns to admit a new one.", nil, nil)
	descStalledCut  = prometheus.NewDesc("dfkv_connections_stalled_closed_total", "Connections closed for being blocked on their client, holding payload buffers, while other requests waited for them.", nil, nil)
	descBudget      = prometheus.NewDesc("dfkv_buffer_budget_bytes", "Payload buffer bytes all connections may hold at once (server.buffer_budget_bytes).", nil, nil)
	descBudgetUsed  = prometheus.NewDesc("dfkv_buffer_in_use_bytes", "Payload buffer bytes connections hold now.", nil, nil)
	descBudgetWaits = prometheus.NewDesc("dfkv_buffer_waits_total", "Requests that found the payload buffer budget spent and waited for it.", nil, nil)
	descBudgetBusy  = prometheus.NewDesc("dfkv_buffer_wait_timeouts_total", "Requests answered UNAVAILABLE after waiting their whole timeout for payload buffer budget.", nil, nil)
	descAcceptErrs  = prometheus.NewDesc("dfkv_accept_errors_total", "Accept failures the node waited out and retried (out of file descriptors or kernel memory, or a handshake that failed); steady growth means LimitNOFILE is too low for the connections.", nil, nil)
	descFirstReq    = prometheus.NewDesc("dfkv_first_request_timeouts_total", "Connections closed for not sending a complete first request within the deadline.", nil, nil)
	descFirstReqMS  = prometheus.NewDesc("dfkv_tcp_first_req_ms", "Resolved first-request deadline (DFKV_SERVER_FIRST_REQUEST_MS); 0 = off.", nil, nil)
	descFrameErrors = prometheus.NewDesc("dfkv_frame_errors_total", "Malformed requests answered with an error and closed.", nil, nil)
	descBytesIn     = prometheus.NewDesc("dfkv_received_bytes_total", "Request bytes received (prefixes and bodies).", nil, nil)
	descBytesOut    = prometheus.NewDesc("dfkv_sent_bytes_total", "Response bytes sent.", nil, nil)
	descNodeHits    = prometheus.NewDesc("dfkv_hits_total", "Reads the node answered with their value, from RAM, a disk or the object store (dfkv_engine_hits_total counts one disk's own, which RAM hits never reach).", nil, nil)
	descNodeMisses  = prometheus.NewDesc("dfkv_misses_total", "Reads of values the node holds nowhere.", nil, nil)

	diskLabels     = []string{"disk", "engine"}
	descCapacity   = prometheus.NewDesc("dfkv_disk_capacity_bytes", "Bytes a disk may hold.", diskLabels, nil)
	descUsed       = prometheus.NewDesc("dfkv_disk_used_bytes", "Value bytes stored on a disk.", diskLabels, nil)
	descObjects    = prometheus.NewDesc("dfkv_disk_objects", "Blocks stored on a disk.", diskLabels, nil)
	descEvictions  = prometheus.NewDesc("dfkv_disk_evictions_total", "Blocks evicted to make room.", diskLabels, nil)
	descMoves      = prometheus.NewDesc("dfkv_disk_extent_moves_total", "Slab extents moved to another size class, each evicting the values it held; steady growth means the disk has too few extents for its mix of value sizes.", diskLabels, nil)
	descIOErrors   = prometheus.NewDesc("dfkv_disk_io_errors_total", "Disk I/O errors.", diskLabels, nil)
	descChecksum   = prometheus.NewDesc("dfkv_disk_checksum_failures_total", "Values read from a disk whose bytes failed their payload checksum (flipped bits, extent files swapped or overwritten); each was dropped and answered as a miss, never served. Any increase means the disk, or something writing to its files, corrupts data.", diskLabels, nil)
	descScrubbed   = prometheus.NewDesc("dfkv_disk_scrub_bytes_total", "Slot bytes the background scrub read and verified against their payload checksums (corrupt values it found count in dfkv_disk_checksum_failures_total).", diskLabels, nil)
	descScrubPass  = prometheus.NewDesc("dfkv_disk_scrub_passes_total", "Full scrub passes completed over a disk.", diskLabels, nil)
	descSecTables  = prometheus.NewDesc("dfkv_disk_section_tables_total", "Ranged reads (one layer of a block) that read their value whole and kept its section checksums for the ranges after it: a value's first range since it was written or the node started. About one per block is expected; many per dfkv_disk_section_reads_total means ranges rarely repeat before the table cache (16,384 values per disk) forgets them.", diskLabels, nil)
	descSecReads   = prometheus.NewDesc("dfkv_disk_section_reads_total", "Ranged reads served by reading and checking only the sections of the value they touch.", diskLabels, nil)
	descSecMisses  = prometheus.NewDesc("dfkv_disk_section_misses_total", "Ranged reads whose sections failed their checksums and went back to the whole-value check (a stale table after an overwrite, or a corrupt value, which then counts in dfkv_disk_checksum_failures_total).", diskLabels, nil)
	descHits       = prometheus.NewDesc("dfkv_engine_hits_total", "Reads that found their block.", diskLabels, nil)
	descMisses     = prometheus.NewDesc("dfkv_engine_misses_total", "Reads that did not find their block.", diskLabels, nil)
	descHealthy    = prometheus.NewDesc("dfkv_disk_healthy", "1 while a disk's engine serves; 0 once it failed closed.", diskLabels, nil)
	descDirectIO   = prometheus.NewDesc("dfkv_disk_direct_io", "1 when a disk's payload I/O uses O_DIRECT.", diskLabels, nil)
	descTenant     = prometheus.NewDesc("dfkv_tenant_committed_bytes", "Committed bytes of the tenants with the most bytes (the name a tenant is listed by in the quotas file, else its hash in hex; \"other\" sums the rest).", []string{"tenant"}, nil)
	descTenantQuot = prometheus.NewDesc("dfkv_tenant_quota_bytes", "Quota of the tenants listed in dfkv_tenant_committed_bytes (0 = unlimited).", []string{"tenant"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConns, descServing, descAccepted, descRefused, descIdleClosed, descStalledCut, descAcceptErrs, descBudget, descBudgetUsed, descBudgetWaits, descBudgetBusy, descFirstReq, descFirstReqMS, descFrameErrors,
		descBytesIn, descBytesOut, descNodeHits, descNodeMisses, descCapacity, descUsed, descObjects, descEvictions, descMoves, descIOErrors, descChecksum, descScrubbed, descScrubPass, descSecTables, descSecReads, descSecMisses, descHits, descMisses,
		descHealthy, descDirectIO, descTenant, descTenantQuot} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := &c.srv.stats
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge(descConns, float64(s.conns.Load()))
	gauge(descServing, float64(s.serving.Load()))
	counter(descAccepted, float64(s.accepted.Load()))
	counter(descRefused, float64(s.refused.Load()))
	counter(descIdleClosed, float64(s.idleClosed.Load()))
	counter(descStalledCut, float64(s.stalledCut.Load()))
	counter(descAcceptErrs, float64(s.acceptErrors.Load()))
	b := c.srv.budget
	gauge(descBudget, float64(b.total))
	gauge(descBudgetUsed, float64(b.inUse.Load()))
	counter(descBudgetWaits, float64(b.waits.Load()))
	counter(descBudgetBusy, float64(b.timeouts.Load()))
	counter(descFirstReq, float64(s.firstReqTimeouts.Load()))
	gauge(descFirstReqMS, float64(c.srv.opts.FirstRequest.Milliseconds()))
	counter(descFrameErrors, float64(s.frameErrors.Load()))
	counter(descBytesIn, float64(s.bytesIn.Load()))
	counter(descBytesOut, float64(s.bytesOut.Load()))
	if e := c.srv.opts.Engine; e != nil {
		st := e.Stats()
		counter(descNodeHits, float64(st.Hits))
		counter(descNodeMisses, float64(st.Misses))
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	names := c.group.Names()
	for i, st := range c.group.Disks() {
		l := []string{names[i], st.Engine}
		gauge(descCapacity, float64(st.CapacityBytes), l...)
		gauge(descUsed, float64(st.UsedBytes), l...)
		gauge(descObjects, float64(st.Objects), l...)
		counter(descEvictions, float64(st.Evictions), l...)
		counter(descMoves, float64(st.ExtentMoves), l...)
		counter(descIOErrors, float64(st.IOErrors), l...)
		counter(descChecksum, float64(st.ChecksumFailures), l...)
		counter(descScrubbed, float64(st.ScrubbedBytes), l...)
		counter(descScrubPass, float64(st.ScrubPasses), l...)
		counter(descSecTables, float64(st.SectionTables), l...)
		counter(descSecReads, float64(st.SectionReads), l...)
		counter(descSecMisses, float64(st.SectionMisses), l...)
		counter(descHits, float64(st.Hits), l...)
		counter(descMisses, float64(st.Misses), l...)
		gauge(descHealthy, b2f(st.Healthy), l...)
		gauge(descDirectIO, b2f(st.DirectIO), l...)
	}
	if q := c.group.Quotas(); q != nil {
		type tu struct {
			t uint64
			n int64
		}
		var all []tu
		for t, n := range q.Usage() {
			all = append(all, tu{t, n})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].t < all[j].t })
		var other int64
		for i, x := range all {
			if i >= TopTenants {
				other += x.n
				continue
			}
			name := q.Label(x.t)
			gauge(descTenant, float64(x.n), name)
			gauge(descTenantQuot, float64(q.Limit(x.t)), name)
		}
		if len(all) > TopTenants {
			gauge(descTenant, float64(other), "other")
		}
	}
}
