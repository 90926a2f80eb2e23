package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/ramtier"
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
