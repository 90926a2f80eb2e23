// Package mds is `dfkv mds`, the membership directory. Cache nodes register
// (address, weight, disks, capacity) and heartbeat; clients ask for the
// member list and its epoch and rebuild their ring when the epoch moves.
// The directory lives in etcd when endpoints are configured (several MDS
// processes share it) and otherwise in an embedded bbolt file, so a single
// MDS needs nothing else installed.
//
// # Members and leases
//
// On etcd each node is one key, <prefix>/groups/<group>/members/<id>, on a
// lease of mds.heartbeat_ttl_ms (default 10 s, at least 2 s); nodes
// heartbeat at a third of it. A node killed without a goodbye drops out
// when its lease lapses; a node stopped with SIGTERM deregisters at once.
// With bbolt the MDS expires silent nodes itself.
//
// # Epochs
//
// A group's epoch is the etcd revision of its last membership change, so
// it only grows, whichever MDS served the change. A list is always served
// with an epoch whose state it is: when an MDS's watch has not yet
// delivered a change its read already shows (a lease expiry, another MDS's
// deregister), or after a restart, the list carries the read's own
// revision, so a client refetches an unchanged list at worst and is never
// told "unchanged" about a changed one. Clients poll (client.mds_poll_ms)
// with the epoch they know; an unchanged epoch costs one small reply, and
// the encoded list is cached per epoch. A list over 1 MiB is refused,
// never truncated. Retries against etcd and the clients' polls while no
// MDS answers back off with jitter, so a fleet does not come back in
// lock-step after an outage.
//
// # Outages
//
// An MDS on etcd probes it every 2 s and logs losing it (one WARN) and
// getting it back (one INFO, with how long it was gone). While etcd is
// unreachable a starting client's MEMBERS gets the last list this MDS
// served (dfkv_mds_stale_member_replies_total), so an engine starting
// during the outage can still open; a client that already holds a list
// is told UNAVAILABLE rather than "unchanged", so it asks its next MDS,
// which may still reach etcd, and otherwise routes over its own list.
//
// # HTTP
//
// /healthz, /readyz (etcd reachability, probed at most every
// mds.probe_cache_ms), /members (JSON) and /metrics.
package mds

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/internal/httpauth"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/wire"
)

// Command is `dfkv mds`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "mds",
		Usage: "run the membership directory (etcd-backed, or an embedded bbolt file)",
		Description: "Serves the control protocol on --listen and /healthz, /readyz, /members, /metrics on --http-listen.\n" +
			"With --etcd-endpoints endpoints the directory lives in etcd; without, in the bbolt file --db-path.",
		Flags: config.Flags("mds"),
		Action: func(c *cli.Context) error {
			cfg, log, done, err := rolekit.Load(c, "mds")
			if err != nil {
				return err
			}
			if done {
				// --print-config checks the files the configuration names.
				if f := cfg.MDS.NodeCredentialsFile; f != "" {
					if _, err := creds.LoadNodes(f); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv mds: configuration: mds.node_credentials_file: %v", err), rolekit.ExitConfig)
					}
				}
				if m := cfg.MDS; m.TLSCert != "" {
					if _, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: m.TLSCert, Key: m.TLSKey, ClientCA: m.TLSClientCA, Setting: "mds.tls_cert / mds.tls_key"}, nil); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv mds: configuration: %v", err), rolekit.ExitConfig)
					}
				}
				if f := cfg.MDS.HTTPTokenFile; f != "" {
					if _, err := httpauth.Load(f, "mds.http_token_file", nil); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv mds: configuration: %v", err), rolekit.ExitConfig)
					}
				}
				return nil
			}
			ctx, stop := rolekit.SignalContext(c, log)
			defer stop()
			if err := Run(ctx, cfg, Deps{Logger: log}); err != nil {
				return rolekit.Failed(log, "mds", err)
			}
			return nil
		},
	}
}

// Deps are what a test may replace; zero values mean the real thing.
type Deps struct {
	Logger       *slog.Logger
	Listener     net.Listener // control protocol; nil = cfg.MDS.Listen
	HTTPListener net.Listener // nil = cfg.MDS.HTTPListen (none if empty)
	Clock        engine.Clock
	Ready        func()
	// Stall, when set, is called inside the bbolt directory between two
	// steps other requests can run between: after the sweeper chose the
	// members whose heartbeat lapsed and before it drops them, and after a
	// removal committed and before its heartbeat records are forgotten. On
	// a real disk a slow fsync or a busy writer lock holds those windows
	// open; a deterministic simulation sleeps there in virtual time, so
	// what races through them is decided by its seed. Nil in production.
	Stall func(point string)
}

// Run serves the directory until ctx ends.
func Run(ctx context.Context, cfg *config.Config, deps Deps) error {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = engine.SystemClock{}
	}
	mc := cfg.MDS
	if err := wire.ValidateGroup(cfg.Group); err != nil {
		return err
	}
	var guard *httpauth.Guard
	if mc.HTTPTokenFile != "" {
		var err error
		if guard, err = httpauth.Load(mc.HTTPTokenFile, "mds.http_token_file (DFKV_MDS_HTTP_TOKEN_FILE)", log); err != nil {
			return err
		}
	}
	var nodeCreds *creds.Watch[creds.Nodes]
	if path := mc.NodeCredentialsFile; path != "" {
		var err error
		if nodeCreds, err = creds.NewWatch(path, "node credentials file (mds.node_credentials_file)", creds.LoadNodes, log); err != nil {
			return fmt.Errorf("mds.node_credentials_file (DFKV_MDS_NODE_CREDENTIALS_FILE): %w", err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go nodeCreds.Run(wctx)
		defer rolekit.OnSIGHUP(nodeCreds.Reload)()
	}
	var expiries atomic.Uint64
	var dir Directory
	var backend string
	if len(mc.EtcdEndpoints) > 0 {
		d, err := openEtcdDir(mc.EtcdEndpoints, mc.EtcdPrefix, mc.HeartbeatTTL, log)
		if err != nil {
			return err
		}
		dir, backend = d, "etcd"
	} else {
		if dirName := filepath.Dir(mc.DBPath); dirName != "" {
			if err := mkdirAll(dirName); err != nil {
				return fmt.Errorf("MDS database directory %s: %w", dirName, err)
			}
		}
		d, err := openBoltDir(mc.DBPath, mc.HeartbeatTTL, deps.Clock, log, boltHooks{
			expired: func(n int) { expiries.Add(uint64(n)) }, stall: deps.Stall})
		if err != nil {
			return err
		}
		dir, backend = d, "bbolt"
	}
	defer dir.Close()

	ln := deps.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", mc.Listen); err != nil {
			return fmt.Errorf("listen on %s (mds.listen / DFKV_MDS_LISTEN): %w", mc.Listen, err)
		}
	}
	var tlsSrv *tlsconf.Server
	if mc.TLSCert != "" {
		min, err := tlsconf.MinVersion(mc.TLSMinVersion)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("mds.tls_min_version: %w", err)
		}
		if tlsSrv, err = tlsconf.NewServer(tlsconf.ServerFiles{Cert: mc.TLSCert, Key: mc.TLSKey, ClientCA: mc.TLSClientCA, MinVersion: min,
			Setting: "mds.tls_cert / mds.tls_key (DFKV_MDS_TLS_CERT, DFKV_MDS_TLS_KEY)"}, log); err != nil {
			_ = ln.Close()
			return err
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go tlsSrv.Run(wctx)
		defer rolekit.OnSIGHUP(tlsSrv.Reload)()
		ln = tls.NewListener(ln, tlsSrv.Config())
	}
	probe := &probeCache{dir: dir, ttl: mc.ProbeCache}
	cs := &controlServer{dir: dir, ln: ln, log: log, ttl: mc.HeartbeatTTL, firstReq: mc.FirstRequest, backendDown: probe.down,
		creds: nodeCreds, membersNeedToken: mc.MembersNeedToken == 1, maxConns: controlConnCap()}
	if backend == "etcd" {
		probe.recovered = cs.backendReturned // before any probe can run
		// A probe takes milliseconds; one that took a quarter of the TTL
		// waited out a stall that may have outlasted some leases.
		probe.slow = mc.HeartbeatTTL / 4
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), &mdsCollector{cs: cs, dir: dir, group: cfg.Group, probe: probe, expiries: &expiries, backend: backend})

	var httpSrv *http.Server
	if hln := deps.HTTPListener; hln != nil || mc.HTTPListen != "" {
		if hln == nil {
			var err error
			if hln, err = net.Listen("tcp", mc.HTTPListen); err != nil {
				_ = ln.Close()
				return fmt.Errorf("listen on %s (mds.http_listen / DFKV_MDS_HTTP_LISTEN): %w", mc.HTTPListen, err)
			}
		}
		httpSrv = newHTTP(dir, probe, reg, cfg.Group, mc.MetricsFirstRequest, guard)
		if mc.HTTPTLS == 1 && tlsSrv != nil {
			hln = tls.NewListener(hln, tlsSrv.HTTPConfig())
		}
		go func() {
			if err := httpSrv.Serve(hln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("MDS http listener failed", "error", err.Error())
			}
		}()
	}
	store := []any{"db", mc.DBPath}
	if backend == "etcd" {
		store = []any{"etcd", mc.EtcdEndpoints, "etcd_prefix", mc.EtcdPrefix}
	}
	auth := "open: any client may register, replace or remove any node (no mds.node_credentials_file)"
	if nodeCreds != nil {
		auth = fmt.Sprintf("node tokens required: %d credentials from %s", nodeCreds.Current().Len(), mc.NodeCredentialsFile)
		if cs.membersNeedToken {
			auth += "; MEMBERS too"
		}
	}
	tlsMode := "off"
	if tlsSrv != nil {
		tlsMode = "on, TLS " + mc.TLSMinVersion + "+"
		if tlsSrv.MutualTLS() {
			tlsMode += ", client certificates required"
		}
	}
	log.Info("dfkv mds listening", append([]any{"listen", ln.Addr().String(), "http", mc.HTTPListen, "backend", backend, "auth", auth, "tls", tlsMode, "max_control_conns", cs.maxConns},
		append(store, "heartbeat_ttl", mc.HeartbeatTTL.String(), "group", cfg.Group)...)...)
	if backend == "etcd" {
		go watchBackend(ctx, probe, checkEvery(mc.HeartbeatTTL), log)
	}
	if deps.Ready != nil {
		deps.Ready()
	}
	cs.serve(ctx)
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = httpSrv.Shutdown(sctx)
		cancel()
	}
	log.Info("dfkv mds stopped")
	return nil
}

// controlConnCap is the control port's connection cap: three quarters of
// the process's descriptor limit, leaving the rest to the backend, the
// HTTP listener and the database; 0 (no cap) where the limit is unknown.
func controlConnCap() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return int(max(16, min(lim.Cur, 1<<20)*3/4))
}

// backendCheckEvery is how often an MDS on etcd probes it, so that losing
// etcd and getting it back are logged (and dfkv_mds_backend_up kept
// fresh) even when nothing scrapes /readyz.
const backendCheckEvery = 2 * time.Second

// checkEvery is the probe period for a heartbeat TTL: at most half of it.
// A stall longer than the TTL (every lease runs out) then holds a probe
// that started in its first half TTL, and which so lasts at least half a
// TTL, past the quarter TTL (probeCache.slow) that opens the settle
// window, whatever the ticker's phase.
func checkEvery(ttl time.Duration) time.Duration {
	return max(min(backendCheckEvery, ttl/2), 100*time.Millisecond)
}

// watchBackend probes the backend every period until ctx ends and logs
// each change of reachability: one WARN when it is lost, with what the
// MDS does meanwhile, and one INFO when it returns, with how long it was
// gone.
func watchBackend(ctx context.Context, probe *probeCache, every time.Duration, log *slog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var downSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every+etcdOpTimeout)
		err := probe.checkNow(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && downSince.IsZero():
			downSince = time.Now()
			log.Warn("MDS: etcd unreachable; nodes cannot register or heartbeat until it returns (clients keep their member lists); check etcd",
				"error", err.Error())
		case err == nil && !downSince.IsZero():
			log.Info("MDS: etcd reachable again", "down_for", time.Since(downSince).Round(time.Second).String())
			downSince = time.Time{}
		}
	}
}

// probeCache debounces backend probes so a readiness scraper cannot turn
// into etcd read load (DFKV_MDS_PROBE_CACHE_MS; 0 probes every time).
// Callers that arrive while a probe is out share it rather than queue
// behind it: with etcd gone each probe takes its whole timeout, and
// probes one after another would keep every /readyz waiting for all the
// ones before it. A caller whose own deadline passes first stops waiting
// and leaves the probe to finish for the others.
type probeCache struct {
	dir Directory
	ttl time.Duration

	mu     sync.Mutex
	at     time.Time // when the last probe finished
	last   error
	flight *probeFlight // the probe out now; nil when none is
	failed atomic.Bool  // the last probe failed; false before the first
	// recovered, when set (before the first probe), runs when a probe
	// finds the backend back after a failed one, before down says so:
	// whichever probe sees it first (the watcher's, /readyz, a metrics
	// scrape), the settle window is open before MEMBERS reads the
	// backend again.
	recovered func(since time.Time)
	// slow: a probe that succeeded but took at least this long counts as
	// a return from an outage too (etcd paused or stalled for less than
	// the probe's timeout can still outlast the heartbeat TTL); 0: never.
	slow time.Duration
	// downSince is when the first probe of the current outage started.
	downSince time.Time
}

// probeFlight is one probe of the backend and the callers sharing it.
type probeFlight struct {
	done chan struct{}
	err  error // set before done closes
}

// probeTimeout bounds one shared probe: no caller's context governs it,
// since a caller that gives up must not cancel it for the others.
const probeTimeout = etcdOpTimeout + time.Second

// down reports that the last probe failed (false before the first). It
// does not wait for a probe in progress.
func (p *probeCache) down() bool { return p.failed.Load() }

func (p *probeCache) check(ctx context.Context) error { return p.probe(ctx, false) }

// checkNow probes whatever the cache holds (or joins the probe already
// out): the backend watcher's probe, which is what keeps down current.
func (p *probeCache) checkNow(ctx context.Context) error { return p.probe(ctx, true) }

func (p *probeCache) probe(ctx context.Context, now bool) error {
	p.mu.Lock()
	if !now && p.ttl > 0 && !p.at.IsZero() && time.Since(p.at) < p.ttl {
		err := p.last
		p.mu.Unlock()
		return err
	}
	f := p.flight
	if f == nil {
		f = &probeFlight{done: make(chan struct{})}
		p.flight = f
		go p.run(f)
	}
	p.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("backend probe: %w", ctx.Err())
	}
}

// run probes the backend, without holding mu, and hands the result to
// the cache and to every caller sharing f.
func (p *probeCache) run(f *probeFlight) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	start := time.Now()
	f.err = p.dir.Probe(ctx)
	cancel()
	if f.err != nil && !p.failed.Load() {
		p.downSince = start // one probe runs at a time
	}
	if f.err == nil && p.recovered != nil {
		switch {
		case p.failed.Load():
			p.recovered(p.downSince) // once per recovery
		case p.slow > 0 && time.Since(start) >= p.slow:
			p.recovered(start) // it answered, but only after a stall
		}
	}
	p.mu.Lock()
	p.last, p.at, p.flight = f.err, time.Now(), nil
	p.failed.Store(f.err != nil)
	p.mu.Unlock()
	close(f.done)
}

// newHTTP serves the probes to anyone, and /members and /metrics, which
// show the cluster, only with guard's token when there is a guard.
func newHTTP(dir Directory, probe *probeCache, reg *prometheus.Registry, group string, firstReq time.Duration, guard *httpauth.Guard) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := probe.check(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("/members", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := r.URL.Query().Get("group")
		if g == "" {
			g = group
		}
		if err := wire.ValidateGroup(g); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		epoch, members, err := dir.Members(r.Context(), g)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Group   string            `json:"group"`
			Epoch   uint64            `json:"epoch"`
			Members []wire.MemberInfo `json:"members"`
		}{g, epoch, members})
	})))
	mux.Handle("/metrics", guard.Wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	// firstReq (mds.metrics_first_request_ms) is the header deadline; 0 turns
	// it off, and headers stay bounded in size either way.
	return &http.Server{Handler: mux, ReadHeaderTimeout: firstReq, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
}

type mdsCollector struct {
	cs       *controlServer
	dir      Directory
	group    string
	probe    *probeCache
	expiries *atomic.Uint64
	backend  string
}

var (
	descMembers  = prometheus.NewDesc("dfkv_mds_members", "Members of the MDS's configured group.", []string{"group"}, nil)
	descEpoch    = prometheus.NewDesc("dfkv_mds_epoch", "Membership epoch of the MDS's configured group.", []string{"group"}, nil)
	descRegs     = prometheus.NewDesc("dfkv_mds_registrations_total", "REGISTER requests served.", nil, nil)
	descDeregs   = prometheus.NewDesc("dfkv_mds_deregistrations_total", "DEREGISTER requests served.", nil, nil)
	descExpiries = prometheus.NewDesc("dfkv_mds_heartbeat_expiries_total", "Members dropped because their heartbeat lapsed (bbolt backend; etcd expires leases itself).", nil, nil)
	descBackend  = prometheus.NewDesc("dfkv_mds_backend_up", "1 if the last (debounced) backend probe succeeded.", []string{"backend"}, nil)
	descFirstReq = prometheus.NewDesc("dfkv_mds_first_request_timeouts_total", "Control connections closed by the first-request deadline.", nil, nil)
	descStale    = prometheus.NewDesc("dfkv_mds_stale_member_replies_total", "MEMBERS requests answered with the last member list this MDS served because the backend (etcd) failed.", nil, nil)
	descUnauth   = prometheus.NewDesc("dfkv_mds_unauthenticated_total", "Control requests refused for a missing or unknown token (mds.node_credentials_file).", nil, nil)
	descForbid   = prometheus.NewDesc("dfkv_mds_forbidden_total", "Control requests refused because the token's credential does not cover the node id, or MEMBERS.", nil, nil)
	descDupIDs   = prometheus.NewDesc("dfkv_mds_duplicate_id_total", "REGISTERs refused because a live member holds the id at another address (two nodes share a server.id, or a node moved before its old registration lapsed).", nil, nil)
	descSettled  = prometheus.NewDesc("dfkv_mds_settled_member_replies_total", "MEMBERS answered with the list of before an etcd outage because fewer members were registered again yet (leases that ran out during the outage).", nil, nil)
	descShed     = prometheus.NewDesc("dfkv_mds_connections_shed_total", "Control connections closed at the connection cap (three quarters of the descriptor limit) to admit a new one: the longest idle, or the new one when none was idle. Growth means clients hold connections open without requests.", nil, nil)
	descAcceptEr = prometheus.NewDesc("dfkv_mds_accept_errors_total", "Accept failures the MDS waited out and retried (out of file descriptors or kernel memory, or a handshake that failed).", nil, nil)
)

func (c *mdsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descEpoch, descRegs, descDeregs, descExpiries, descBackend, descFirstReq, descAcceptEr, descShed, descStale, descUnauth, descForbid, descDupIDs, descSettled} {
		ch <- d
	}
}

func (c *mdsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if epoch, members, err := c.dir.Members(ctx, c.group); err == nil {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(len(members)), c.group)
		ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(epoch), c.group)
	}
	up := 0.0
	if c.probe.check(ctx) == nil {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descBackend, prometheus.GaugeValue, up, c.backend)
	ch <- prometheus.MustNewConstMetric(descRegs, prometheus.CounterValue, float64(c.cs.registrations.Load()))
	ch <- prometheus.MustNewConstMetric(descDeregs, prometheus.CounterValue, float64(c.cs.deregistrations.Load()))
	ch <- prometheus.MustNewConstMetric(descExpiries, prometheus.CounterValue, float64(c.expiries.Load()))
	ch <- prometheus.MustNewConstMetric(descFirstReq, prometheus.CounterValue, float64(c.cs.firstReqTimeouts.Load()))
	ch <- prometheus.MustNewConstMetric(descAcceptEr, prometheus.CounterValue, float64(c.cs.acceptErrors.Load()))
	ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(c.cs.shedConns.Load()))
	ch <- prometheus.MustNewConstMetric(descStale, prometheus.CounterValue, float64(c.cs.staleReplies.Load()))
	ch <- prometheus.MustNewConstMetric(descUnauth, prometheus.CounterValue, float64(c.cs.unauthenticated.Load()))
	ch <- prometheus.MustNewConstMetric(descForbid, prometheus.CounterValue, float64(c.cs.forbidden.Load()))
	ch <- prometheus.MustNewConstMetric(descDupIDs, prometheus.CounterValue, float64(c.cs.duplicateIDs.Load()))
	ch <- prometheus.MustNewConstMetric(descSettled, prometheus.CounterValue, float64(c.cs.settledReplies.Load()))
}
