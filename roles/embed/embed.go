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
	"sync"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire/client"
)

// DefaultRAMBytes is the RAM tier of an embedded store whose
// configuration does not size it.
const DefaultRAMBytes = 1 << 30

// Store is an embedded store: the client of an in-process node. Close
// closes both.
type Store struct {
	*client.Client
	ln     *pipeListener
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// Config loads an embedded store's configuration: text is TOML in the
// layout of dfkv.toml (its [server] table; "" for every default), then
// DFKV_* variables through lookup (nil: none). Unlike a node, an embedded
// store has no disk unless server.disks names one, and its RAM tier is on
// with DefaultRAMBytes unless the configuration says otherwise; the
// listeners and MDS settings do not apply.
func Config(text string, lookup func(string) (string, bool)) (*config.Config, error) {
	cfg, res, err := config.LoadText("server", "embedded configuration", text, lookup, nil)
	if err != nil {
		return nil, err
	}
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
	if len(sc.Disks) == 0 && sc.RAMTier != 1 {
		return nil, errors.New("embedded store: no disk (server.disks) and no RAM tier (server.ram_tier = 0): it would keep nothing; configure one of them")
	}
	if len(sc.Disks) == 0 && sc.RAMWriteMode == "writearound" {
		return nil, errors.New("embedded store: server.ram_write_mode = writearound sends PUTs to the disk, and there is none (server.disks): use writeback")
	}
	sc.HTTPListen, sc.MDS, sc.ShmSocket, sc.AdvertiseAddr = "", nil, "", ""
	return cfg, nil
}

// Open starts the node of cfg (from Config) in this process and a client
// of it with copts (namespace, timeouts; its members, MDS, dialer and
// transports are the store's own). log receives the node's log lines;
// nil discards them.
func Open(cfg *config.Config, copts client.Options, log *slog.Logger) (*Store, error) {
	if len(copts.Members) > 0 || len(copts.MDS) > 0 {
		return nil, errors.New("embedded store: the client options name members or an MDS; an embedded store is its own single member")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{ln: ln, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		s.done <- server.Run(ctx, cfg, server.Deps{Listener: ln, Logger: log, Ready: func(*server.Server) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-s.done:
		cancel()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	copts.Members = []string{Address}
	copts.Dialer = ln
	copts.SharedMemory = client.ShmOff
	copts.RDMA = nil
	if copts.MaxBlockBytes == 0 {
		copts.MaxBlockBytes = cfg.Server.MaxBlockBytes
	}
	cl, err := client.Open(copts)
	if err != nil {
		cancel()
		<-s.done
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	s.Client = cl
	return s, nil
}

// Close closes the client, then stops the node: it drains, flushes its
// RAM tier to disk, uploads what it queued for the object store (up to
// server.shutdown_timeout_ms) and releases the disk. It returns the
// node's error, if closing its engines failed.
func (s *Store) Close() error {
	s.once.Do(func() {
		_ = s.Client.Close()
		s.cancel()
		s.err = <-s.done
		s.ln.Close()
	})
	return s.err
}
