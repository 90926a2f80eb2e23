package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/file"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
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
		Description: "Starts a cache node on --listen with one storage engine per --disk directory.\n" +
			"With no configuration it serves 127.0.0.1:7600 from ./dfkv-data/disk0.\n" +
			"SIGTERM or SIGINT stops it gracefully: in-flight requests finish, disks are synced. SIGHUP is logged and ignored.",
		Flags: config.Flags("server"),
		Action: func(c *cli.Context) error {
			cfg, log, done, err := rolekit.Load(c, "server")
			if err != nil {
				return err
			}
			if done {
				// --print-config checks the configuration: the quotas
				// file it names is part of it.
				if _, err := quota.Load(cfg.Server.TenantQuotasFile, cfg.Server.TenantDefaultQuotaBytes); err != nil {
					return cli.Exit(fmt.Sprintf("dfkv server: configuration: %v", err), rolekit.ExitConfig)
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
	// ConfigFile and ConfigSources describe where the configuration came
	// from, for `dfkv ctl info`.
	ConfigFile    string
	ConfigSources []string
}

// Run opens the node's engines, serves until ctx ends, then shuts down
// gracefully and syncs the engines. It returns an error only when the node
// could not start or its engines failed to close cleanly.
func Run(ctx context.Context, cfg *config.Config, deps Deps) error {
	start := time.Now()
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if deps.FS == nil {
		deps.FS = vfs.OS{}
	}
	if deps.Clock == nil {
		deps.Clock = engine.SystemClock{}
	}
	sc := cfg.Server
	if sc.RAMTier == 1 {
		// Before any disk is opened or formatted: a tier that cannot be
		// had should not leave a half-started node behind.
		if sc.RAMTierBytes == 0 { // config.Load refuses it too; Run may get a Config built by hand
			return errors.New("server.ram_tier = 1 needs server.ram_tier_bytes (DFKV_RAM_TIER_BYTES), e.g. 8GiB")
		}
		if err := hostcheck.CheckRAMTier(sc.RAMTierBytes); err != nil {
			return err
		}
	}

	hostcheck.WarnSocketBuffers(log, sc.SocketBufferBytes)

	group, err := OpenEngines(cfg, deps.FS, deps.Clock, log)
	if err != nil {
		return err
	}
	hostcheck.WarnFDLimit(log, sc.MaxConns) // after the open: the engines' files are counted
	if sc.StoreEngine == "slab" {
		// After the open: the directories exist, so stat finds their mounts.
		hostcheck.WarnOnlineDiscard(log, sc.Disks)
	}
	// eng is what the server serves: the disk group, or the RAM tier in
	// front of it. Closing eng closes everything below it.
	var eng engine.StoreEngine = group
	var tier *ramtier.Tier
	if sc.RAMTier == 1 {
		if tier, err = openRAMTier(sc, group, log); err != nil {
			_ = group.Close()
			return err
		}
		eng = tier
	}
	closeGroup := func() error {
		if err := eng.Close(); err != nil {
			return fmt.Errorf("close engines: %w", err)
		}
		return nil
	}

	ln := deps.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", sc.Listen)
		if err != nil {
			_ = closeGroup()
			return fmt.Errorf("listen on %s (server.listen / DFKV_LISTEN): %w", sc.Listen, err)
		}
	}
	srv, err := New(Options{
		Engine:          eng,
		Listener:        ln,
		Logger:          log,
		Clock:           deps.Clock,
		MaxBlockBytes:   sc.MaxBlockBytes,
		MaxBatchItems:   sc.MaxBatchItems,
		MaxConns:        sc.MaxConns,
		FirstRequest:    sc.FirstRequest,
		BodyTimeout:     sc.BodyTimeout,
		ShutdownTimeout: sc.ShutdownTimeout,
		SocketBuffer:    int(sc.SocketBufferBytes),
		BufferBudget:    sc.BufferBudgetBytes,
	})
	if err != nil {
		_ = ln.Close()
		_ = closeGroup()
		return err
	}

	srv.group = group
	srv.SetInfo(NodeInfo{
		ID: serverID(cfg, ln.Addr()), Group: cfg.Group, Listen: ln.Addr().String(), Engine: sc.StoreEngine,
		ConfigFile: deps.ConfigFile, ConfigSources: deps.ConfigSources, StartedUnixMS: start.UnixMilli(), MDS: sc.MDS,
	})
	promReg := prometheus.NewRegistry()
	if srv.metrics, err = NewMetrics(promReg, srv, group); err == nil && tier != nil {
		err = promReg.Register(&ramCollector{tier: tier})
	}
	if err != nil {
		_ = ln.Close()
		_ = closeGroup()
		return err
	}

	var httpSrv *http.Server
	if hln := deps.HTTPListener; hln != nil || sc.HTTPListen != "" {
		if hln == nil {
			if hln, err = net.Listen("tcp", sc.HTTPListen); err != nil {
				_ = ln.Close()
				_ = closeGroup()
				return fmt.Errorf("listen on %s (server.http_listen / DFKV_HTTP_LISTEN): %w", sc.HTTPListen, err)
			}
		}
		httpSrv = newHTTPServer(srv, eng, promReg, sc.MetricsFirstRequest, sc.PProf == 1)
		go func() {
			if err := httpSrv.Serve(hln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http listener failed", "addr", sc.HTTPListen, "error", err.Error())
			}
		}()
	}

	st := group.Stats()
	if tier != nil {
		r := tier.RAM()
		log.Info("RAM tier on", "bytes", r.BudgetBytes, "arena_bytes", r.ArenaBytes, "large_reserve_bytes", r.LargeReserveBytes,
			"write_mode", sc.RAMWriteMode, "put_ack_mode", sc.PutAckMode, "flush_threads", r.FlushThreads,
			"shards", r.Shards, "flush_queues", r.FlushQueues, "numa", r.NUMA, "read_coalesce", sc.ReadCoalesce == 1)
	}
	log.Info("dfkv server listening",
		"id", serverID(cfg, ln.Addr()),
		"listen", ln.Addr().String(),
		"http", sc.HTTPListen,
		"engine", sc.StoreEngine,
		"disks", sc.Disks,
		"capacity_bytes", st.CapacityBytes,
		"objects", st.Objects,
		"used_bytes", st.UsedBytes,
		"direct_io", st.DirectIO,
		"max_block_bytes", sc.MaxBlockBytes,
		"started_in", time.Since(start).Round(time.Millisecond).String(),
	)
	var reg *register.Registrar
	regDone := make(chan struct{})
	if len(sc.MDS) > 0 {
		addr, err := register.AdvertiseAddr(sc.AdvertiseAddr, ln.Addr())
		if err != nil {
			_ = ln.Close()
			_ = closeGroup()
			return err
		}
		mc, err := client.NewMDSClient(sc.MDS, cfg.Group, nil, 5*time.Second)
		if err != nil {
			_ = ln.Close()
			_ = closeGroup()
			return fmt.Errorf("server.mds (DFKV_MDS_ADDRS): %w", err)
		}
		info := wire.MemberInfo{
			ID: serverID(cfg, ln.Addr()), Addr: addr, Weight: sc.Weight, Disks: sc.Disks,
			CapacityBytes: st.CapacityBytes, Version: version.Version,
		}
		if err := wire.ValidateMemberID(info.ID); err != nil {
			_ = ln.Close()
			_ = closeGroup()
			return fmt.Errorf("server.id (DFKV_SERVER_ID): %w", err)
		}
		reg = register.New(mc, info, anyDiskHealthy(group), log)
		if err := promReg.Register(reg.Gauge()); err != nil {
			_ = ln.Close()
			_ = closeGroup()
			return err
		}
		go func() {
			defer close(regDone)
			reg.Run(ctx)
		}()
	}
	if deps.Ready != nil {
		deps.Ready(srv)
	}

	serveErr := srv.Serve(ctx)
	if reg != nil {
		<-regDone
	}
	log.Info("dfkv server stopped accepting; syncing engines")
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = httpSrv.Shutdown(sctx)
		cancel()
	}
	closeErr := closeGroup()
	// After the close: a RAM tier's flush has landed on the disks by now.
	final := group.Stats()
	if serveErr != nil {
		return fmt.Errorf("accept on %s: %w", ln.Addr(), serveErr)
	}
	if closeErr != nil {
		return closeErr
	}
	log.Info("dfkv server stopped cleanly", "objects", final.Objects, "used_bytes", final.UsedBytes)
	return nil
}

// OpenEngines opens one engine per configured disk and the group routing
// over them. On failure it closes whatever it opened.
func OpenEngines(cfg *config.Config, fs vfs.FS, clock engine.Clock, log *slog.Logger) (*engine.Group, error) {
	sc := cfg.Server
	if sc.StoreEngine != "slab" && sc.StoreEngine != "file" {
		return nil, fmt.Errorf("unknown store engine %q (server.store_engine / DFKV_STORE_ENGINE); valid: slab, file", sc.StoreEngine)
	}
	quotas, err := quota.Load(sc.TenantQuotasFile, sc.TenantDefaultQuotaBytes)
	if err != nil {
		return nil, err
	}
	if sc.TenantQuotasFile != "" && (quotas == nil || quotas.Listed() == 0) {
		// Legal (a fleet's template before any tenant is capped), but
		// as likely the wrong file or one emptied by mistake: say so
		// rather than run uncapped in silence.
		log.Warn("tenant quotas file lists no tenants: only server.tenant_default_quota_bytes applies (0 = none); a file of quotas holds a [tenants] table of \"name\" = \"size\"",
			"file", sc.TenantQuotasFile, "default_quota_bytes", sc.TenantDefaultQuotaBytes)
	}
	var acct engine.Accounting = engine.NoAccounting{}
	if quotas != nil {
		acct = quotas
	}
	var engines []engine.StoreEngine
	closeAll := func() {
		for _, e := range engines {
			_ = e.Close()
		}
	}
	if err := checkSharedSpace(sc, fs); err != nil {
		return nil, err
	}
	for _, dir := range sc.Disks {
		e, err := openDisk(sc, dir, fs, clock, log, acct)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("open disk %s (server.disks / DFKV_DISKS): %w%s", dir, err, diskHint(err))
		}
		engines = append(engines, e)
	}
	names := make([]string, len(sc.Disks))
	for i, d := range sc.Disks {
		names[i] = filepath.Clean(d)
	}
	g, err := engine.NewGroup(engines, names)
	if err != nil {
		closeAll()
		return nil, err
	}
	if quotas != nil {
		g.SetQuotas(quotas)
		log.Info("tenant quotas on", "file", sc.TenantQuotasFile, "default_quota_bytes", sc.TenantDefaultQuotaBytes)
		quota.WarnOver(log, quotas)
	}
	return g, nil
}

// writable refuses a disk whose directory (or, before it is made, its
// nearest existing parent) cannot be written: a read-only filesystem (a
// systemd unit's ProtectSystem, a mount gone read-only) or no permission.
// Checked first, since otherwise the first symptom is a free-space or
// preallocation error that names the wrong cause. A path that does not
// exist on this host (a test's stand-in filesystem) is left to the engine.
func writable(path string) error {
	err := unix.Access(path, unix.W_OK)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	abs, _ := filepath.Abs(path)
	return fmt.Errorf("%s is not writable (%v): a disk needs a directory this user can write on a read-write filesystem", abs, err)
}

// openRAMTier puts the RAM tier in front of group.
func openRAMTier(sc config.Server, group *engine.Group, log *slog.Logger) (*ramtier.Tier, error) {
	threads := sc.RAMFlushThreads
	if threads == 0 {
		threads = min(4*len(sc.Disks), 16)
	}
	// NB: a write-back PUT is acknowledged before its flush meets the
	// quota check, so a flush refused for quota would drop an acknowledged
	// value. Limited tells the tier which tenants have a quota; their PUTs
	// skip write-back and get the quota's answer synchronously.
	var limited func(uint64) bool
	if q := group.Quotas(); q != nil {
		limited = func(tenant uint64) bool { return q.Limit(tenant) != 0 }
	}
	t, err := ramtier.Open(ramtier.Options{
		Backing: group, Bytes: sc.RAMTierBytes, Mode: sc.RAMWriteMode, AckMode: sc.PutAckMode,
		FlushThreads: threads, FlushDelay: sc.RAMFlushDelay, MaxValueBytes: sc.MaxBlockBytes, Logger: log,
		LargeReserveBytes: largeReserve(sc.RAMTierLargeReserve), Shards: sc.RAMTierShards, NUMA: sc.RAMTierNUMA,
		ReadCoalesce: sc.ReadCoalesce == 1, DiskOf: group.DiskOf, Disks: len(group.Names()), Limited: limited,
	})
	if err != nil {
		// NB: the tier's errors name the problem (budget, reserve, NUMA
		// policy); the settings behind them all start with ram_tier.
		return nil, fmt.Errorf("RAM tier (server.ram_tier_* / DFKV_RAM_TIER_*): %w", err)
	}
	return t, nil
}

// largeReserve maps server.ram_tier_large_reserve_bytes to
// ramtier.Options.LargeReserveBytes, whose zero value means the default:
// auto is 0 there, and the operator's 0 ("no reserve") is NoLargeReserve.
func largeReserve(v int64) int64 {
	switch v {
	case config.SizeAuto:
		return 0
	case 0:
		return ramtier.NoLargeReserve
	}
	return v
}

// Automatic slab sizing: a new disk gets a quarter of its free space, at
// most autoSlabMax, rounded down to whole extents. Production nodes set
// server.disk_capacity_bytes; the automatic size is for trying dfkv out
// without filling a shared disk.
const autoSlabMax = 8 << 30

// openDisk opens one disk's engine. Without a configured capacity, a slab
// disk keeps the geometry it was formatted with (so a restart never trips
// the geometry check) and a new one is sized from its free space; the file
// engine, which preallocates nothing, takes half the filesystem.
func openDisk(sc config.Server, dir string, fs vfs.FS, clock engine.Clock, log *slog.Logger, acct engine.Accounting) (engine.StoreEngine, error) {
	if err := writable(vfs.ExistingAncestor(fs, dir)); err != nil {
		return nil, err
	}
	capacity := sc.DiskCapacityBytes
	if sc.StoreEngine == "slab" {
		c, e, formatted, err := slab.Existing(fs, dir)
		if err != nil {
			return nil, fmt.Errorf("%w; set server.disk_capacity_bytes or point at an empty directory", err)
		}
		extent := slabExtent(sc, capacity)
		switch {
		case formatted:
			// The disk's own geometry, unless configured otherwise (which
			// the engine then refuses, naming the difference).
			if capacity == 0 {
				capacity = c
			}
			if sc.SlabExtentBytes == 0 {
				extent = e
			}
		case capacity == 0:
			// Sized on the filesystem the directory will be made on;
			// the engine makes it (and warns that it had to).
			u, err := fs.Usage(vfs.ExistingAncestor(fs, dir))
			if err != nil {
				return nil, fmt.Errorf("size it with server.disk_capacity_bytes: %w", err)
			}
			capacity = min(u.Free/4, autoSlabMax)
			extent = slabExtent(sc, capacity)
			capacity = capacity / extent * extent
			if capacity < extent {
				return nil, fmt.Errorf("only %d bytes free, less than one %d-byte extent; free space or set server.disk_capacity_bytes", u.Free, extent)
			}
			log.Info("disk capacity not configured; formatting a quarter of the free space (at most 8GiB)",
				"disk", dir, "capacity_bytes", capacity, "extent_bytes", extent)
		}
		return slab.Open(slab.Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: extent, MaxValueBytes: sc.MaxBlockBytes,
			FS: fs, Clock: clock, Logger: log, DirectIO: true, Accounting: acct,
			Scrub: slab.ScrubOptions{BytesPerSecond: sc.ScrubBytesPerSecond, Interval: time.Duration(sc.ScrubIntervalHours) * time.Hour},
			URing: sc.URing == 1})
	}
	if capacity == 0 {
		u, err := fs.Usage(vfs.ExistingAncestor(fs, dir))
		if err != nil {
			return nil, fmt.Errorf("size it with server.disk_capacity_bytes: %w", err)
		}
		// Half the filesystem: stable across restarts (unlike free space,
		// which shrinks as the cache fills), and the ENOSPC
		// evict-and-retry covers a disk shared with other data.
		capacity = u.Total / 2
		log.Info("disk capacity not configured; using half of the filesystem", "disk", dir, "capacity_bytes", capacity)
	}
	return file.Open(file.Options{Dir: dir, CapacityBytes: capacity, FS: fs, Clock: clock, Logger: log, DirectIO: true, Accounting: acct})
}

// slabExtent is the extent size a new slab disk of capacity bytes is
// formatted with: server.slab_extent_bytes, or the engine's choice for its
// capacity (values larger than an extent are stored in pieces).
func slabExtent(sc config.Server, capacity uint64) uint64 {
	if sc.SlabExtentBytes != 0 {
		return sc.SlabExtentBytes
	}
	return slab.ExtentFor(capacity)
}

// checkSharedSpace refuses, before any disk is opened, new slab disks of a
// configured capacity that share a filesystem too small for all of them.
// Each engine checks its own disk against the free space, but one at a
// time: the first would be formatted in full before the second found no
// room, and a retry with a smaller capacity would then trip the first's
// geometry check. Disks already formatted are left to their engines.
func checkSharedSpace(sc config.Server, fsys vfs.FS) error {
	if sc.StoreEngine != "slab" || sc.DiskCapacityBytes == 0 || len(sc.Disks) < 2 {
		return nil
	}
	extent := slabExtent(sc, sc.DiskCapacityBytes)
	need := sc.DiskCapacityBytes / extent * extent
	type shared struct {
		free  uint64
		disks []string
	}
	byFS := map[[3]uint64]*shared{}
	var order [][3]uint64
	for _, dir := range sc.Disks {
		if _, _, formatted, err := slab.Existing(fsys, dir); err != nil || formatted {
			continue // formatted (its engine checks what it still needs), or its engine reports the problem
		}
		u, err := fsys.Usage(vfs.ExistingAncestor(fsys, dir))
		if err != nil {
			continue // its engine reports it
		}
		key := [3]uint64{u.FS, 0, 0}
		if u.FS == 0 {
			key = [3]uint64{0, u.Total, u.Free} // no filesystem id: same size and free space, same filesystem
		}
		if byFS[key] == nil {
			byFS[key] = &shared{free: u.Free}
			order = append(order, key)
		}
		byFS[key].disks = append(byFS[key].disks, dir)
	}
	for _, key := range order {
		g := byFS[key]
		if n := uint64(len(g.disks)); n > 1 && need*n > g.free {
			fit := g.free / n / extent * extent
			return fmt.Errorf("disks %s share one filesystem with %d bytes free, but %d disks of server.disk_capacity_bytes (--disk-capacity, DFKV_DISK_CAPACITY_BYTES) %s need %d bytes; nothing was written: lower it to %d (fills the filesystem; leave room if it is shared) or give each disk a filesystem of its own: %w",
				strings.Join(g.disks, ", "), g.free, n, config.FormatSize(sc.DiskCapacityBytes), need*n, fit, wire.StatusInvalid)
		}
	}
	return nil
}

// diskHint says what to check when a disk directory cannot be used for a
// reason of the filesystem's, not dfkv's.
func diskHint(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "; the filesystem is mounted read-only: remount it read-write or point server.disks elsewhere"
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("; the node runs as uid %d: give it the directory (chown) or point server.disks elsewhere", os.Getuid())
	case errors.Is(err, syscall.ENOTDIR):
		return "; a path in server.disks names a file, not a directory"
	}
	return ""
}

func serverID(cfg *config.Config, addr net.Addr) string {
	if cfg.Server.ID != "" {
		return cfg.Server.ID
	}
	host, _ := os.Hostname()
	return host + "/" + addr.String()
}

// newHTTPServer serves /metrics, /healthz (the process is alive) and /readyz (it
// accepts connections and every engine is healthy), and with withPProf the
// Go profiler under /debug/pprof/ (server.pprof: off by default, since a
// profile costs CPU and shows the node's internals to whoever can reach
// the port). Header reads are bounded in time and size so a drip-feeding
// scraper cannot pin it.
func newHTTPServer(srv *Server, eng engine.StoreEngine, reg *prometheus.Registry, firstReq time.Duration, withPProf bool) *http.Server {
	mux := http.NewServeMux()
	if withPProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if srv.isClosing() {
			http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
			return
		}
		st := eng.Stats()
		if !st.Healthy {
			http.Error(w, "not ready: a storage engine failed closed; see the node's log", http.StatusServiceUnavailable)
			return
		}
		if st.DiskFull {
			http.Error(w, "not ready: a disk's filesystem is full even after eviction; free space on it or lower server.disk_capacity_bytes", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	// firstReq (DFKV_METRICS_FIRST_REQ_MS) is the header deadline; 0 turns
	// it off, and headers stay bounded in size either way.
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: firstReq,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
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
