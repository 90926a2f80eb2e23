// Package rolekit holds the few things every role does the same way:
// resolving configuration from a cli context, honouring --print-config,
// and building the role's structured logger.
package rolekit

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/wire/client"
)

// ExitConfig is the exit status of a role that could not start because of
// its configuration.
const ExitConfig = 2

// Load resolves role's configuration. When --print-config was given it
// prints the resolved settings with their sources and returns done=true:
// the role should exit 0 without doing anything else.
//
// Every role but ctl (whose verbs take KEY and FILE) refuses positional
// arguments: the flag parser stops at the first one, so a stray word would
// silently drop every flag after it too.
func Load(c *cli.Context, role string) (cfg *config.Config, log *slog.Logger, done bool, err error) {
	return LoadExplained(c, role, nil)
}

// LoadExplained is Load for a role whose automatic settings depend on the
// machine: explain, if not nil, records on the Resolved what they would
// resolve to (config.Resolved.SetAuto) before --print-config prints it.
func LoadExplained(c *cli.Context, role string, explain func(*config.Config, *config.Resolved)) (cfg *config.Config, log *slog.Logger, done bool, err error) {
	cfg, _, log, done, err = load(c, role, explain)
	return cfg, log, done, err
}

// LoadResolved is Load for a role whose checks depend on where a setting
// came from (config.Resolved.Origin): a flag typed for this run, or a
// file or variable shared with every tool.
func LoadResolved(c *cli.Context, role string) (cfg *config.Config, res *config.Resolved, log *slog.Logger, done bool, err error) {
	return load(c, role, nil)
}

func load(c *cli.Context, role string, explain func(*config.Config, *config.Resolved)) (cfg *config.Config, res *config.Resolved, log *slog.Logger, done bool, err error) {
	if role != "ctl" && c.NArg() > 0 {
		return nil, nil, nil, false, cli.Exit(fmt.Sprintf("dfkv %s: unexpected argument %q (it and everything after it, flags included, would be ignored); see dfkv %s --help",
			role, c.Args().First(), role), ExitConfig)
	}
	cfg, res, err = config.Load(c, role, os.LookupEnv)
	if err != nil {
		return nil, nil, nil, false, cli.Exit(fmt.Sprintf("dfkv %s: configuration: %v", role, err), ExitConfig)
	}
	if c.Bool("print-config") {
		if explain != nil {
			explain(cfg, res)
		}
		// The warnings (unknown DFKV_* variables) go to stderr here too:
		// --print-config is how an operator checks a configuration.
		for _, w := range res.Warnings() {
			fmt.Fprintf(c.App.ErrWriter, "dfkv %s: warning: %s\n", role, w)
		}
		if _, err := res.WriteTo(c.App.Writer); err != nil {
			return nil, nil, nil, false, err
		}
		return cfg, res, nil, true, nil
	}
	log = NewLogger(cfg.Log, c.App.ErrWriter).With("role", role)
	for _, w := range res.Warnings() {
		log.Warn(w)
	}
	return cfg, res, log, false, nil
}

// SignalContext is c's context, cancelled by SIGINT or SIGTERM, for a
// long-running role. The signal is logged before the context is cancelled
// (so the line comes before anything the shutdown logs, and the drain and
// sync that follow can take a while); stop releases the signals and must
// be deferred.
//
// SIGHUP never ends the process. Its default action would, at once: no
// drain, no flush of the RAM tier, no clean mark, so a slab disk would
// come back cold; it arrives when the terminal a node was started from
// closes, or from a habit of "kill -HUP to reload". It re-reads the files
// registered with OnSIGHUP (credentials); the rest of the configuration
// is read only at start, and the log line says so.
func SignalContext(c *cli.Context, log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(c.Context)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		stopping := false
		for {
			select {
			case sig := <-sigs:
				switch {
				case sig == syscall.SIGHUP:
					if n := reloadAll(); n > 0 {
						log.Info("SIGHUP: re-reading credentials files; the rest of the configuration is read only at start", "files", n)
					} else {
						log.Warn("SIGHUP ignored: dfkv reads its configuration only at start; restart it (SIGTERM, then start) to apply changes")
					}
				case stopping:
					// Said, not silently swallowed: an operator pressing
					// Ctrl-C again during a long flush learns why the
					// process is still there and what would end it.
					log.Warn("already shutting down; the drain and the flush go on (SIGKILL ends the process at once, losing what is not yet on disk)", "signal", sig.String())
				default:
					stopping = true
					log.Info("shutdown requested", "signal", sig.String())
					cancel(fmt.Errorf("%s received", sig))
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

var (
	reloadMu sync.Mutex
	reloads  = map[*func()]struct{}{}
)

// OnSIGHUP registers reload to run when the process gets SIGHUP (under
// SignalContext) and returns what unregisters it. A role registers the
// files it can re-read while it runs.
func OnSIGHUP(reload func()) (unregister func()) {
	key := &reload
	reloadMu.Lock()
	reloads[key] = struct{}{}
	reloadMu.Unlock()
	return func() {
		reloadMu.Lock()
		delete(reloads, key)
		reloadMu.Unlock()
	}
}

// reloadAll runs every registered reload and says how many ran.
func reloadAll() int {
	reloadMu.Lock()
	fns := make([]func(), 0, len(reloads))
	for k := range reloads {
		fns = append(fns, *k)
	}
	reloadMu.Unlock()
	for _, f := range fns {
		f()
	}
	return len(fns)
}

// Failed logs a role's fatal error as one structured line and returns the
// exit status for it, without printing the error a second time.
func Failed(log *slog.Logger, role string, err error) error {
	log.Error("dfkv "+role+" failed", "error", err.Error())
	return cli.Exit("", 1)
}

// NewLogger builds a slog logger from the [log] settings.
func NewLogger(lc config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(lc.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ConfigError is an OpenClient error in the configuration (a TLS file
// missing or unreadable), as opposed to a cluster that does not answer:
// the tools exit 2 for it, not 1.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// OpenClient opens a client on the [client] settings, over RDMA when
// DFKV_RDMA asks for it and it can run here.
func OpenClient(cfg *config.Config, log *slog.Logger) (*client.Client, error) {
	cc := cfg.Client
	rdmaOpts, why := rdma.ClientFromEnv(os.LookupEnv)
	if why != "" {
		// At ERROR: the operator asked for RDMA and does not get it,
		// and smoke and ctl show only errors by default.
		log.Error(why)
	}
	var tlsCfg *tls.Config
	if cc.TLS == 1 {
		var err error
		if tlsCfg, err = tlsconf.Client(tlsconf.ClientFiles{CA: cc.TLSCA, Cert: cc.TLSCert, Key: cc.TLSKey, ServerName: cc.TLSServerName}); err != nil {
			return nil, &ConfigError{fmt.Errorf("client TLS (client.tls_ca, tls_cert, tls_key): %w", err)}
		}
	}
	return client.Open(client.Options{
		TLS:              tlsCfg,
		RDMA:             rdmaOpts,
		Namespace:        []byte(cc.Namespace),
		Members:          cc.Members,
		MDS:              cc.MDS,
		Group:            cfg.Group,
		MDSPoll:          cc.MDSPoll,
		Timeout:          cc.Timeout,
		DialTimeout:      cc.DialTimeout,
		PoolSize:         cc.PoolSize,
		BatchConcurrency: cc.BatchConcurrency,
		MaxBlockBytes:    cfg.Server.MaxBlockBytes,
		SharedMemory:     cc.Shm,
		Token:            cc.Token,
		Logger:           log,
	})
}

// Sources returns the config file a role read (if any) and the resolved
// settings that did not come from defaults, one "key = value  # source"
// line each, for `dfkv ctl info`.
func Sources(c *cli.Context, role string) (file string, lines []string) {
	_, res, err := config.Load(c, role, os.LookupEnv)
	if err != nil {
		return "", nil
	}
	file, _ = res.File()
	var b strings.Builder
	_, _ = res.WriteTo(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if l == "" || strings.HasPrefix(l, "#") || strings.Contains(l, "# default") {
			continue
		}
		lines = append(lines, l)
	}
	return file, lines
}

// ToolLogger is the logger of a one-shot tool (ctl, smoke): errors only,
// unless log.level was asked for (DFKV_LOG_LEVEL or --log-level, info
// included, or a file naming a level other than the default: a file that
// spells out every default, as dfkv.example.toml does, chose nothing),
// because each failure such a tool reports says why already, and the
// client's warning about backing off from a node would say it twice.
func ToolLogger(c *cli.Context, role string, cfg *config.Config, res *config.Resolved, log *slog.Logger) *slog.Logger {
	if o, ok := res.Origin("log.level"); ok && (o.Layer == config.LayerEnv || o.Layer == config.LayerFlag || !o.Default) {
		return log
	}
	return NewLogger(config.Log{Level: "error", Format: cfg.Log.Format}, c.App.ErrWriter).With("role", role)
}
