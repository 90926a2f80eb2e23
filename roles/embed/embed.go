// Package embed opens a dfkv store inside the calling process: a whole
// cache node (its RAM tier, an optional local slab disk and an optional
// object store tier, with the node's own code and semantics) and a client
// connected to it through in-memory connections instead of sockets. An
// inference engine that runs alone on a host gets the cache with no server
// to deploy and no port to open; the client API is the one it would use
// against a cluster, so moving to a cluster later is a change of options.
//
// The disk directory is single-owner: a second process opening it gets an
// error naming the process that holds it. Sharing across processes and
// hosts goes through the object store, which any number of embedded stores
// and nodes may use at once.
package embed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire/client"
)

// DefaultRAMBytes is the RAM tier of an embedded store whose
// configuration does not size it.
const DefaultRAMBytes = 1 << 30

// Node is a cache node running inside this process, reachable only
// through the clients it makes. Several clients (one per namespace, say)
// share one node.
type Node struct {
	cfg    *config.Config
	srv    *server.Server
	ln     *pipeListener
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// Store is an embedded store: a node of its own and one client of it.
// Close closes both.
type Store struct {
	*client.Client
	node *Node
	once sync.Once
	err  error
}

// ServerConfig loads an embedded store's configuration for a tool run
// with client.embedded: the [server] table of the tool's config file
// (file as --config gives it; "" consults DFKV_CONFIG) and DFKV_SERVER_*
// through lookup, then the server flags the tool passes on (flags), with
// the embedded store's defaults (see Config).
func ServerConfig(file string, lookup func(string) (string, bool), flags map[string][]string) (*config.Config, error) {
	cfg, res, err := config.LoadFrom("server", file, lookup, flags)
	if err != nil {
		return nil, err
	}
	return embedDefaults(cfg, res)
}

// ToolClient opens the client a tool (bench, smoke, ctl) runs on: the
// cluster's, or with client.embedded an embedded store's (its
// configuration from configFile, see ServerConfig); closing the client
// then stops the store.
func ToolClient(cfg *config.Config, configFile string, log *slog.Logger) (*client.Client, error) {
	if cfg.Client.Embedded != 1 {
		return rolekit.OpenClient(cfg, log)
	}
	// The tool's max_block_bytes (its --max-block-bytes too, which sized
	// its own checks) is the store's.
	scfg, err := ServerConfig(configFile, os.LookupEnv,
		map[string][]string{"max-block-bytes": {strconv.FormatUint(cfg.Server.MaxBlockBytes, 10)}})
	if err != nil {
		return nil, err
	}
	// The node logs as an embedded store does (warnings and errors unless
	// log.level says otherwise), not at the tool's level.
	n, err := StartNode(scfg, rolekit.NewLogger(scfg.Log, os.Stderr).With("embedded", true))
	if err != nil {
		return nil, err
	}
	cc := cfg.Client
	cl, err := n.Client(client.Options{
		Namespace: []byte(cc.Namespace), Timeout: cc.Timeout, PoolSize: cc.PoolSize,
		BatchConcurrency: cc.BatchConcurrency, MaxBlockBytes: scfg.Server.MaxBlockBytes, Logger: log,
		AfterClose: n.Close,
	})
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return cl, nil
}

// Config loads an embedded store's configuration: text is TOML in the
// layout of dfkv.toml (its [server] table; "" for every default), then
// DFKV_* variables through lookup (nil: none). Unlike a node, an embedded
// store has no disk unless server.disks names one, its RAM tier is on
// with DefaultRAMBytes unless the configuration says otherwise, it logs
// warnings and errors only unless log.level says otherwise, and the
// listeners and MDS settings do not apply.
func Config(text string, lookup func(string) (string, bool)) (*config.Config, error) {
	cfg, res, err := config.LoadText("server", "embedded configuration", text, lookup, nil)
	if err != nil {
		return nil, err
	}
	return embedDefaults(cfg, res)
}

// embedDefaults gives what the user left at a node's default the
// embedded store's default, and checks what cannot work.
func embedDefaults(cfg *config.Config, res *config.Resolved) (*config.Config, error) {
	sc := &cfg.Server
	if res.FromDefault("server.disks") {
		sc.Disks = nil
	}
	if res.FromDefault("server.ram_tier") {
		sc.RAMTier = 1
	}
	if sc.RAMTier == 1 && res.FromDefault("server.ram_tier_bytes") {
		sc.RAMTierBytes = DefaultRAMBytes
	}
	if len(sc.Disks) == 0 && sc.RAMTier == 1 && res.FromDefault("server.ram_tier_large_reserve_bytes") &&
		2*sc.MaxBlockBytes <= sc.RAMTierBytes/2 {
		// Without a disk RAM is the only place for a value, so room for
		// two of the largest is kept (a node's default, two 16 MiB arena
		// extents, would refuse values over 32 MiB).
		sc.RAMTierLargeReserve = int64(2 * sc.MaxBlockBytes)
	}
	if len(sc.Disks) == 0 && sc.RAMTier != 1 {
		return nil, errors.New("embedded store: no disk (server.disks) and no RAM tier (server.ram_tier = 0): it would keep nothing; configure one of them")
	}
	if len(sc.Disks) == 0 && sc.RAMWriteMode == "writearound" {
		return nil, errors.New("embedded store: server.ram_write_mode = writearound sends PUTs to the disk, and there is none (server.disks): use writeback")
	}
	if sc.CredentialsFile != "" {
		return nil, errors.New("embedded store: server.credentials_file is for a node's data port, and an embedded store has none (only this process reaches it): unset it in the embedded configuration")
	}
	if res.FromDefault("log.level") {
		// A library in someone else's process: warnings and errors only,
		// unless asked (log.level, DFKV_LOG_LEVEL).
		cfg.Log.Level = "warn"
	}
	sc.HTTPListen, sc.MDS, sc.ShmSocket, sc.AdvertiseAddr = "", nil, "", ""
	return cfg, nil
}

// StartNode starts the node of cfg (from Config) in this process. log
// receives its log lines; nil discards them.
func StartNode(cfg *config.Config, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, ln: ln, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		n.done <- server.Run(ctx, cfg, server.Deps{Listener: ln, Logger: log, Ready: func(srv *server.Server) { n.srv = srv; close(ready) }})
	}()
	select {
	case <-ready:
		return n, nil
	case err := <-n.done:
		cancel()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, fmt.Errorf("embedded store: %w", err)
	}
}

// Client opens a client of the node with copts (namespace, timeouts;
// its members, MDS, dialer and transports are the node's own).
func (n *Node) Client(copts client.Options) (*client.Client, error) {
	if len(copts.Members) > 0 || len(copts.MDS) > 0 {
		return nil, errors.New("embedded store: the client options name members or an MDS; an embedded store is its own single member")
	}
	copts.Members = []string{Address}
	copts.Dialer = n.ln
	copts.SharedMemory = client.ShmOff
	copts.RDMA = nil
	// Values in RAM are copied straight out of the arena; the rest (and
	// every write) go through the connection, to the same node.
	copts.Local = n.srv.LocalRead
	if copts.MaxBlockBytes == 0 {
		copts.MaxBlockBytes = n.MaxBlockBytes()
	}
	cl, err := client.Open(copts)
	if err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	return cl, nil
}

// MaxBlockBytes is the largest value the node takes
// (server.max_block_bytes), what its clients default to.
func (n *Node) MaxBlockBytes() uint64 { return n.cfg.Server.MaxBlockBytes }

// Close stops the node: it drains, flushes its RAM tier to disk, uploads
// what it queued for the object store (up to
// server.shutdown_timeout_ms) and releases the disk. It returns the
// node's error, if closing its engines failed. Close the node's clients
// first.
func (n *Node) Close() error {
	n.once.Do(func() {
		n.cancel()
		n.err = <-n.done
		n.ln.Close()
	})
	return n.err
}

// Open starts a node of cfg and a client of it with copts.
func Open(cfg *config.Config, copts client.Options, log *slog.Logger) (*Store, error) {
	if len(copts.Members) > 0 || len(copts.MDS) > 0 {
		return nil, errors.New("embedded store: the client options name members or an MDS; an embedded store is its own single member")
	}
	n, err := StartNode(cfg, log)
	if err != nil {
		return nil, err
	}
	cl, err := n.Client(copts)
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return &Store{Client: cl, node: n}, nil
}

// Close closes the client, then the node.
func (s *Store) Close() error {
	s.once.Do(func() {
		_ = s.Client.Close()
		s.err = s.node.Close()
	})
	return s.err
}

// The process's shared nodes, by configuration: every handle an engine
// opens with the same configuration (a connector per namespace, a
// scheduler and a worker in one process) reaches the same cache, as
// handles to one cluster would, rather than each getting a cache of its
// own, or failing on the disk the first one holds. Configurations are
// compared as resolved (defaults, environment and all), so texts that
// differ only in spelling, order or an explicit default share a node.
var shared struct {
	mu    sync.Mutex
	nodes map[string]*sharedNode
}

type sharedNode struct {
	node *Node
	refs int
	// closed is made when the last user releases the node and closed
	// once its Close returned: a user arriving meanwhile waits for it,
	// rather than start a second node that the first still holds the
	// disk from.
	closed chan struct{}
}

// Shared returns the process's node for configuration text (Config's
// text and lookup), starting it on first use, and a release func that
// stops it when the last user releases it. Each user opens its own
// client with Node.Client.
func Shared(text string, lookup func(string) (string, bool)) (*Node, func() error, error) {
	cfg, err := Config(text, lookup)
	if err != nil {
		return nil, nil, err
	}
	key := fmt.Sprintf("%#v", *cfg)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for {
		sn := shared.nodes[key]
		if sn == nil {
			break
		}
		if sn.closed == nil {
			sn.refs++
			return sn.node, releaser(key, sn), nil
		}
		shared.mu.Unlock()
		<-sn.closed
		shared.mu.Lock()
	}
	// Started under the lock: a second user of the same configuration
	// waits for this start rather than racing it for the disk.
	n, err := StartNode(cfg, rolekit.NewLogger(cfg.Log, os.Stderr))
	if err != nil {
		return nil, nil, err
	}
	if shared.nodes == nil {
		shared.nodes = map[string]*sharedNode{}
	}
	sn := &sharedNode{node: n, refs: 1}
	shared.nodes[key] = sn
	return n, releaser(key, sn), nil
}

func releaser(key string, sn *sharedNode) func() error {
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			shared.mu.Lock()
			sn.refs--
			last := sn.refs == 0
			if last {
				sn.closed = make(chan struct{})
			}
			shared.mu.Unlock()
			if !last {
				return
			}
			err = sn.node.Close()
			shared.mu.Lock()
			delete(shared.nodes, key)
			shared.mu.Unlock()
			close(sn.closed)
		})
		return err
	}
}
