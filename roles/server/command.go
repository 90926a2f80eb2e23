package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/internal/httpauth"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/roles/server/hostcheck"
	"github.com/dfkv/dfkv/roles/server/quota"
	"github.com/dfkv/dfkv/roles/server/register"
	"github.com/dfkv/dfkv/roles/version"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// Command is the `dfkv server` role.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "run a cache node: serve blocks from local disks over TCP",
		Description: "Starts a cache node on --listen with one storage engine per --disks directory.\n" +
			"With no configuration it serves 127.0.0.1:7600 from ./dfkv-data/disk0.\n" +
			"SIGTERM or SIGINT stops it gracefully: in-flight requests finish, disks are synced. SIGHUP re-reads server.credentials_file; the rest of the configuration is read only at start.",
		Flags: config.Flags("server"),
		Action: func(c *cli.Context) error {
			cfg, log, done, err := rolekit.LoadExplained(c, "server", ExplainAuto)
			if err != nil {
				return err
			}
			if done {
				// --print-config checks the configuration: the quotas
				// file it names is part of it.
				if _, err := quota.Load(cfg.Server.TenantQuotasFile, cfg.Server.TenantDefaultQuotaBytes); err != nil {
					return cli.Exit(fmt.Sprintf("dfkv server: configuration: %v", err), rolekit.ExitConfig)
				}
				if f := cfg.Server.CredentialsFile; f != "" {
					if _, err := creds.LoadTenants(f); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv server: configuration: server.credentials_file: %v", err), rolekit.ExitConfig)
					}
				}
				if sc := cfg.Server; sc.TLSCert != "" {
					if _, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: sc.TLSCert, Key: sc.TLSKey, ClientCA: sc.TLSClientCA, Setting: "server.tls_cert / server.tls_key"}, nil); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv server: configuration: %v", err), rolekit.ExitConfig)
					}
				}
				if f := cfg.Server.HTTPTokenFile; f != "" {
					if _, err := httpauth.Load(f, "server.http_token_file", nil); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv server: configuration: %v", err), rolekit.ExitConfig)
					}
				}
				if f := cfg.Server.MDSTLSCA; f != "" {
					if _, err := tlsconf.Client(tlsconf.ClientFiles{CA: f}); err != nil {
						return cli.Exit(fmt.Sprintf("dfkv server: configuration: server.mds_tls_ca: %v", err), rolekit.ExitConfig)
					}
				}
				return nil
			}
			file, sources := rolekit.Sources(c, "server")
			ctx, stop := rolekit.SignalContext(c, log)
			defer stop()
			if err := Run(ctx, cfg, Deps{Logger: log, ConfigFile: file, ConfigSources: sources}); err != nil {
				return rolekit.Failed(log, "server", err)
			}
			return nil
		},
	}
}

// Deps are the outside world a node runs against. Zero values mean the
// real thing; tests pass listeners, a file layer or a clock of their own.
type Deps struct {
	Logger   *slog.Logger
	Listener net.Listener // data plane; nil = listen on cfg.Server.Listen
	// HTTPListener serves /metrics, /healthz and /readyz; nil = listen on
	// cfg.Server.HTTPListen (or none when that is empty).
	HTTPListener net.Listener
	FS           vfs.FS
	Clock        engine.Clock
	// Ready, if set, is called with the server once it accepts connections.
	Ready func(*Server)
	// RDMAProvider, set by tests, serves RDMA over this verbs provider
	// (the in-process fake) whatever DFKV_RDMA says.
	RDMAProvider rdma.Provider
	// Dialer opens the node's connections to the MDS; nil dials TCP. A
	// simulated network passes its own.
	Dialer client.Dialer
	// Jitter draws the registrar's retry waits uniformly from [0, d);
	// nil: math/rand. A deterministic simulation passes a seeded source.
	Jitter func(d time.Duration) time.Duration
	// Registrar, if set, is handed the node's registrar once it exists
	// (with server.mds), so a simulation can watch its state.
	Registrar func(*register.Registrar)
	// ConfigFile and ConfigSources describe where the configuration came
	// from, for `dfkv ctl info`.
	ConfigFile    string
	ConfigSources []string
}

// Run opens the node's engines, serves until ctx ends, then shuts down
// gracefully and syncs the engines. It returns an error only when the node
// could not start or its engines failed to close cleanly.
func Run(ctx context.Context, cfg *config.Config, deps Deps) error {
	n := newNode(cfg, deps)
	if err := n.start(ctx); err != nil {
		n.failed = true
		_ = n.closers.run()
		return err
	}
	return n.serve(ctx)
}

// node is one run of a cache node: what its start opened, and in closers
// how to undo it.
type node struct {
	cfg     *config.Config
	sc      config.Server
	deps    Deps
	log     *slog.Logger
	started time.Time

	group *engine.Group
	obj   *objtier.Tier // nil without the object store tier
	s3m   *s3Metrics    // its metrics; nil without it
	tier  *ramtier.Tier // nil without the RAM tier
	// eng is what the server serves: the disk group, or the RAM tier in
	// front of it. Closing eng closes everything below it.
	eng     engine.StoreEngine
	ln      net.Listener
	shmLn   net.Listener // the shared-memory socket; nil without server.shm_socket
	srv     *Server
	prom    *prometheus.Registry
	regDone chan struct{}       // closed once registration has left the MDS; nil without server.mds
	reg     *register.Registrar // the registration; nil without server.mds
	stopReg context.CancelFunc  // ends the registration (it then leaves the MDS)
	hln     net.Listener        // HTTP listener; nil without one
	// httpGuard holds /metrics behind server.http_token_file; nil without one.
	httpGuard *httpauth.Guard
	// creds is server.credentials_file as last read; nil: the data port is open.
	creds *creds.Watch[creds.Tenants]
	// tls is server.tls_cert and its key as last read; nil: plain TCP.
	tls     *tlsconf.Server
	closers closers
	failed  bool // the start failed: closers also undo what it created on disk
}

// closers undo a node's start, last first: on a failed start, and at the
// end of a run once serving stopped.
type closers []func() error

func (c *closers) add(f func() error) { *c = append(*c, f) }

// run calls every closer, the last added first, and returns the first
// error one reported.
func (c closers) run() error {
	var first error
	for i := len(c) - 1; i >= 0; i-- {
		if err := c[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func newNode(cfg *config.Config, deps Deps) *node {
	started := time.Now()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.FS == nil {
		deps.FS = vfs.OS{}
	}
	if deps.Clock == nil {
		deps.Clock = engine.SystemClock{}
	}
	return &node{cfg: cfg, sc: cfg.Server, deps: deps, log: deps.Logger, started: started}
}

// start takes the node from its configuration to accepting connections.
// Each step adds to n.closers what undoes it; on an error the caller runs
// them.
//
// The ports are bound before any disk is touched, so a start that fails
// on a busy port formats and preallocates nothing; a start that fails
// later removes the disk directories it created (forgetDisks).
func (n *node) start(ctx context.Context) error {
	for _, step := range []func() error{n.checkHost, n.listen, n.listenHTTP, n.forgetDisks, n.openEngines, n.newServer, n.serveHTTP} {
		if err := step(); err != nil {
			return err
		}
	}
	st := n.group.Stats()
	n.logListening(st)
	return n.register(ctx, st.CapacityBytes)
}

// checkHost refuses a RAM tier the host cannot hold, before any disk is
// opened or formatted (a tier that cannot be had should not leave a
// half-started node behind), and warns about socket buffers the kernel
// caps.
func (n *node) checkHost() error {
	if n.sc.RAMTier == 1 {
		if n.sc.RAMTierBytes == 0 { // config.Load refuses it too; Run may get a Config built by hand
			return errors.New("server.ram_tier = 1 needs server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES), e.g. 8GiB")
		}
		if err := hostcheck.CheckRAMTier(n.sc.RAMTierBytes); err != nil {
			return err
		}
	}
	hostcheck.WarnSocketBuffers(n.log, n.sc.SocketBufferBytes)
	return nil
}

// openEngines opens the disks and, when configured, the RAM tier in
// front of them.
func (n *node) openEngines() error {
	group, err := OpenEngines(n.cfg, n.deps.FS, n.deps.Clock, n.log)
	if err != nil {
		return err
	}
	n.group, n.eng = group, group
	n.closers.add(func() error {
		if err := n.eng.Close(); err != nil {
			return fmt.Errorf("close engines: %w", err)
		}
		return nil
	})
	hostcheck.WarnFDLimit(n.log, n.sc.MaxConns) // after the open: the engines' files are counted
	if n.sc.StoreEngine == "slab" {
		// After the open: the directories exist, so stat finds their mounts.
		hostcheck.WarnOnlineDiscard(n.log, n.sc.Disks)
	}
	if n.sc.S3Endpoint != "" {
		n.s3m = newS3Metrics()
		obj, err := openObjectTier(n.sc, group, n.deps.Clock, n.log, n.s3m)
		if err != nil {
			return err
		}
		n.obj, n.eng = obj, obj
		n.s3m.tier = obj
	}
	if n.sc.RAMTier != 1 {
		return nil
	}
	tier, err := openRAMTier(n.sc, group, n.eng, n.log)
	if err != nil {
		return err
	}
	n.tier, n.eng = tier, tier
	return nil
}

// listen takes the data-plane listener from deps or opens one.
func (n *node) listen() error {
	n.ln = n.deps.Listener
	if n.ln == nil {
		ln, err := net.Listen("tcp", n.sc.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s (server.listen / DFKV_SERVER_LISTEN): %w", n.sc.Listen, err)
		}
		n.ln = ln
	}
	n.closers.add(func() error {
		_ = n.ln.Close() // after Serve: already closed
		return nil
	})
	if n.sc.ShmSocket == "" {
		return nil
	}
	ln, err := listenShm(n.sc.ShmSocket, n.sc.ShmSocketMode)
	if err != nil {
		return err
	}
	n.shmLn = ln
	n.closers.add(func() error {
		_ = n.shmLn.Close() // removes the socket file
		return nil
	})
	return nil
}

// newServer builds the protocol server over the engines, with what STATS
// reports about the node and the metrics it exports.
func (n *node) newServer() error {
	sc := n.sc
	if err := n.loadCredentials(); err != nil {
		return err
	}
	if err := n.loadTLS(); err != nil {
		return err
	}
	rn, err := n.startRDMA()
	if err != nil {
		return err
	}
	srv, err := New(Options{
		RDMA:            rn,
		Engine:          n.eng,
		Listener:        n.ln,
		Logger:          n.log,
		Clock:           n.deps.Clock,
		MaxBlockBytes:   sc.MaxBlockBytes,
		MaxBatchItems:   sc.MaxBatchItems,
		MaxConns:        sc.MaxConns,
		FirstRequest:    sc.FirstRequest,
		BodyTimeout:     sc.BodyTimeout,
		ShutdownTimeout: sc.ShutdownTimeout,
		SocketBuffer:    int(sc.SocketBufferBytes),
		BufferBudget:    sc.BufferBudgetBytes,
		Shm:             n.shmOptions(),
		LeaseTTL:        sc.Lease,
		LeaseMax:        sc.LeaseMax,
		Credentials:     n.creds,
		TLS:             n.dataTLS(),
	})
	if err != nil {
		return err
	}
	n.srv = srv
	srv.group = n.group
	srv.obj = n.obj
	srv.SetInfo(NodeInfo{
		ID: serverID(n.cfg, n.ln.Addr()), Group: n.cfg.Group, Listen: n.ln.Addr().String(), Engine: sc.StoreEngine,
		ConfigFile: n.deps.ConfigFile, ConfigSources: n.deps.ConfigSources, StartedUnixMS: n.started.UnixMilli(), MDS: sc.MDS,
	})
	n.prom = prometheus.NewRegistry()
	if srv.metrics, err = NewMetrics(n.prom, srv, n.group); err != nil {
		return err
	}
	if n.s3m != nil {
		if err := n.prom.Register(&s3Collector{m: n.s3m}); err != nil {
			return err
		}
	}
	if n.tier != nil {
		return n.prom.Register(&ramCollector{tier: n.tier})
	}
	return nil
}

// loadCredentials reads server.credentials_file, keeps it current (on
// SIGHUP and when the file changes) while the node runs, and refuses a
// start whose file is missing or broken.
func (n *node) loadCredentials() error {
	path := n.sc.CredentialsFile
	if path == "" {
		return nil
	}
	w, err := creds.NewWatch(path, "credentials file (server.credentials_file)", creds.LoadTenants, n.log)
	if err != nil {
		return fmt.Errorf("server.credentials_file (DFKV_SERVER_CREDENTIALS_FILE): %w", err)
	}
	n.creds = w
	n.keepReading(w.Run, w.Reload)
	return nil
}

// loadTLS reads server.tls_cert and its key (and client CA), and keeps
// them current while the node runs, as loadCredentials does.
func (n *node) loadTLS() error {
	sc := n.sc
	if sc.TLSCert == "" {
		return nil
	}
	min, err := tlsconf.MinVersion(sc.TLSMinVersion)
	if err != nil {
		return fmt.Errorf("server.tls_min_version: %w", err)
	}
	t, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: sc.TLSCert, Key: sc.TLSKey, ClientCA: sc.TLSClientCA, MinVersion: min,
		Setting: "server.tls_cert / server.tls_key (DFKV_SERVER_TLS_CERT, DFKV_SERVER_TLS_KEY)"}, n.log)
	if err != nil {
		return err
	}
	n.tls = t
	n.keepReading(t.Run, t.Reload)
	return nil
}

// keepReading keeps files the node read at start current while it runs:
// run watches them for changes until its context ends, reload rereads
// them on SIGHUP. Both stop when the node does.
func (n *node) keepReading(run func(context.Context), reload func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	unregister := rolekit.OnSIGHUP(reload)
	n.closers.add(func() error {
		unregister()
		cancel()
		<-done
		return nil
	})
}

// dataTLS is the data port's TLS configuration, or nil for plain TCP.
func (n *node) dataTLS() *tls.Config {
	if n.tls == nil {
		return nil
	}
	return n.tls.Config()
}

// listenHTTP takes the HTTP listener from deps or opens one, unless the
// node has none.
func (n *node) listenHTTP() error {
	n.hln = n.deps.HTTPListener
	if n.hln == nil && n.sc.HTTPListen == "" {
		return nil
	}
	if n.sc.HTTPTokenFile != "" {
		g, err := httpauth.Load(n.sc.HTTPTokenFile, "server.http_token_file (DFKV_SERVER_HTTP_TOKEN_FILE)", n.log)
		if err != nil {
			return err
		}
		n.httpGuard = g
	}
	if n.hln == nil {
		ln, err := net.Listen("tcp", n.sc.HTTPListen)
		if err != nil {
			return fmt.Errorf("listen on %s (server.http_listen / DFKV_SERVER_HTTP_LISTEN): %w", n.sc.HTTPListen, err)
		}
		n.hln = ln
	}
	n.closers.add(func() error {
		_ = n.hln.Close() // after Shutdown: already closed
		return nil
	})
	return nil
}

// forgetDisks arranges for a failed start to remove what it is about to
// create on disk, so it leaves no new files behind: disk directories that
// did not exist, and the contents of ones that were empty. A directory
// that held anything before the start is never touched.
func (n *node) forgetDisks() error {
	var created, emptied []string
	for _, dir := range n.sc.Disks {
		if top := firstMissing(dir); top != "" {
			created = append(created, top)
		} else if entries, err := os.ReadDir(dir); err == nil && len(entries) == 0 {
			emptied = append(emptied, dir)
		}
	}
	n.closers.add(func() error {
		if !n.failed {
			return nil
		}
		for _, dir := range created {
			n.removeCreated(dir)
		}
		for _, dir := range emptied {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				n.removeCreated(filepath.Join(dir, e.Name()))
			}
		}
		return nil
	})
	return nil
}

func (n *node) removeCreated(path string) {
	if err := os.RemoveAll(path); err != nil {
		n.log.Warn("could not remove what this failed start created", "path", path, "error", err.Error())
	}
}

// firstMissing returns the outermost directory of path that does not exist
// yet (what creating path would create), or "" when path exists.
func firstMissing(path string) string {
	path = filepath.Clean(path)
	missing := ""
	for p := path; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			return missing
		}
		missing = p
		if parent := filepath.Dir(p); parent == p {
			return missing
		}
	}
}

// serveHTTP starts /metrics, /healthz and /readyz on the HTTP listener,
// unless the node has none.
func (n *node) serveHTTP() error {
	hln := n.hln
	if hln == nil {
		return nil
	}
	httpSrv := newHTTPServer(n.srv, n.eng, n.prom, n.sc.MetricsFirstRequest, n.sc.PProf == 1, n.httpGuard)
	if n.sc.HTTPTLS == 1 && n.tls != nil {
		hln = tls.NewListener(hln, n.tls.HTTPConfig())
	}
	go func() {
		if err := httpSrv.Serve(hln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http listener failed", "addr", n.sc.HTTPListen, "error", err.Error())
		}
	}()
	n.closers.add(func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
		return nil
	})
	return nil
}

// logListening says the node is up, and how its RAM tier came out.
func (n *node) logListening(st engine.Stats) {
	sc := n.sc
	if n.tier != nil {
		r := n.tier.RAM()
		n.log.Info("RAM tier on", "bytes", r.BudgetBytes, "arena_bytes", r.ArenaBytes, "large_reserve_bytes", r.LargeReserveBytes,
			"write_mode", sc.RAMWriteMode, "put_ack_mode", sc.PutAckMode, "flush_threads", r.FlushThreads,
			"shards", r.Shards, "flush_queues", r.FlushQueues, "numa", r.NUMA, "read_coalesce", sc.ReadCoalesce == 1)
	}
	auth := "open: any client may address every tenant (no server.credentials_file)"
	if n.creds != nil {
		auth = fmt.Sprintf("tokens required: %d credentials from %s", n.creds.Current().Len(), n.sc.CredentialsFile)
	}
	tlsMode := "off"
	if n.tls != nil {
		tlsMode = "on, TLS " + sc.TLSMinVersion + "+"
		if n.tls.MutualTLS() {
			tlsMode += ", client certificates required"
		}
		if sc.HTTPTLS == 1 {
			tlsMode += ", HTTP too"
		}
	}
	n.log.Info("dfkv server listening",
		"id", serverID(n.cfg, n.ln.Addr()),
		"auth", auth,
		"tls", tlsMode,
		"listen", n.ln.Addr().String(),
		"http", sc.HTTPListen,
		"engine", sc.StoreEngine,
		"disks", sc.Disks,
		"capacity_bytes", st.CapacityBytes,
		"objects", st.Objects,
		"used_bytes", st.UsedBytes,
		"direct_io", st.DirectIO,
		"max_block_bytes", sc.MaxBlockBytes,
		"started_in", time.Since(n.started).Round(time.Millisecond).String(),
		"stop", "Ctrl-C or SIGTERM (finishes requests, syncs the disks)",
		"reset", "stop, then remove the disk directories",
	)
}

// register starts keeping the node registered with the MDS, when
// server.mds names one. It is the last step of a start: once its
// goroutine runs, nothing can fail and need it stopped.
func (n *node) register(ctx context.Context, capacity uint64) error {
	sc := n.sc
	if len(sc.MDS) == 0 {
		return nil
	}
	addr, err := register.AdvertiseAddr(sc.AdvertiseAddr, n.ln.Addr())
	if err != nil {
		return err
	}
	mc, err := client.NewMDSClient(sc.MDS, n.cfg.Group, n.deps.Dialer, 5*time.Second)
	if err != nil {
		return fmt.Errorf("server.mds (DFKV_SERVER_MDS): %w", err)
	}
	mc.SetToken(sc.MDSToken)
	if sc.MDSTLSCA != "" {
		cfg, err := tlsconf.Client(tlsconf.ClientFiles{CA: sc.MDSTLSCA})
		if err != nil {
			return fmt.Errorf("server.mds_tls_ca (DFKV_SERVER_MDS_TLS_CA): %w", err)
		}
		if n.tls != nil {
			// The node's own certificate, as reloaded, if the MDS asks.
			cfg.GetClientCertificate = n.tls.ClientCertificate
		}
		mc, err = client.NewMDSClient(sc.MDS, n.cfg.Group, client.NewTLSDialer(n.deps.Dialer, cfg), 5*time.Second)
		if err != nil {
			return fmt.Errorf("server.mds (DFKV_SERVER_MDS): %w", err)
		}
		mc.SetToken(sc.MDSToken)
	}
	info := wire.MemberInfo{
		ID: serverID(n.cfg, n.ln.Addr()), Addr: addr, Weight: sc.Weight, Disks: sc.Disks,
		CapacityBytes: capacity, Version: version.Version,
	}
	if err := wire.ValidateMemberID(info.ID); err != nil {
		return fmt.Errorf("server.id (DFKV_SERVER_ID): %w", err)
	}
	reg := register.New(mc, info, anyDiskHealthy(n.group), n.log)
	if n.deps.Jitter != nil {
		reg.SetJitter(n.deps.Jitter)
	}
	if n.deps.Registrar != nil {
		n.deps.Registrar(reg)
	}
	if err := n.prom.Register(reg.Gauge()); err != nil {
		return err
	}
	n.reg = reg
	n.regDone = make(chan struct{})
	// Its own context: a node whose data port stopped accepting leaves
	// the MDS too, not only one that was told to stop.
	regCtx, stopReg := context.WithCancel(ctx)
	n.stopReg = stopReg
	go func() {
		defer close(n.regDone)
		reg.Run(regCtx)
	}()
	return nil
}

// serve serves until ctx ends, then stops: the node leaves the MDS, the
// HTTP side stops, and the engines are synced and closed.
func (n *node) serve(ctx context.Context) error {
	if n.deps.Ready != nil {
		n.deps.Ready(n.srv)
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	go func() {
		select {
		case <-ctx.Done():
		case <-serveCtx.Done():
			return // Serve ended on its own (an accept failure)
		}
		n.drain(serveCtx)
		stopServing()
	}()
	serveErr := n.srv.Serve(serveCtx)
	if n.regDone != nil {
		n.stopReg() // leaves the MDS if accepting failed on its own
		<-n.regDone
	}
	n.log.Info("dfkv server stopped accepting; syncing engines")
	closeErr := n.closers.run()
	// After the close: a RAM tier's flush has landed on the disks by now.
	final := n.group.Stats()
	if serveErr != nil {
		return fmt.Errorf("accept on %s: %w", n.ln.Addr(), serveErr)
	}
	if closeErr != nil {
		return closeErr
	}
	n.log.Info("dfkv server stopped cleanly", "objects", final.Objects, "used_bytes", final.UsedBytes)
	return nil
}

// drain runs between SIGTERM and the end of accepting: a node registered
// with an MDS leaves it first (the registration loop deregisters when the
// run's context ends) and then serves on for server.drain_ms, so clients,
// which learn of the departure at their next poll of the MDS, move its
// keys elsewhere before it stops accepting. Their calls then see misses
// while it is away, not refused connections. A node without an MDS has
// nobody to tell and stops at once.
func (n *node) drain(ctx context.Context) {
	if n.regDone == nil || n.sc.Drain <= 0 {
		return
	}
	n.srv.SetDraining()
	select {
	case <-n.regDone:
	case <-ctx.Done():
		return
	}
	if !n.reg.Left() {
		// Clients cannot learn of a departure the MDS did not take
		// (it is down): waiting would only delay the stop.
		n.log.Warn("could not leave the MDS, so clients will not move off; stopping without the drain")
		return
	}
	n.log.Info("left the MDS; serving while clients move off", "drain", n.sc.Drain.String())
	t := time.NewTimer(n.sc.Drain)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func serverID(cfg *config.Config, addr net.Addr) string {
	if cfg.Server.ID != "" {
		return cfg.Server.ID
	}
	host, _ := os.Hostname()
	return host + "/" + addr.String()
}

// anyDiskHealthy reports whether at least one of the group's disks still
// serves (has not failed closed).
func anyDiskHealthy(g *engine.Group) func() bool {
	return func() bool {
		for _, st := range g.Disks() {
			if st.Healthy {
				return true
			}
		}
		return false
	}
}
