// Package client is the Go client of dfkv: it maps (namespace, object key)
// to a BlockKey, routes the block to a node by Ketama, and speaks the TCP
// frame protocol of package wire over pooled connections.
//
// A Client is safe for concurrent use. Every call takes a context; a call
// without a deadline gets Options.Timeout. Failures are errors wrapping a
// wire.Status (errors.Is(err, wire.StatusNotFound) for a miss), so callers
// and the C ABI see the same codes as the server.
package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// Dialer opens connections to nodes. *net.Dialer satisfies it; tests and an
// in-process node pass their own (DESIGN.md §8).
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Options configure a Client.
type Options struct {
	// Namespace is the immutable binary namespace every key of this client
	// lives in (a wire.NamespaceDescriptor encoding, or any other bytes).
	Namespace []byte
	// Members are the nodes' host:port addresses (static membership).
	Members []string
	// Timeout applies to a call whose context has no deadline.
	Timeout time.Duration
	// DialTimeout bounds connecting to one node.
	DialTimeout time.Duration
	// PoolSize is how many idle connections are kept per node.
	PoolSize int
	// BatchConcurrency is how many nodes a batch call talks to at once.
	BatchConcurrency int
	// MaxBatchItems splits batches into frames of at most this many items;
	// it must not exceed the nodes' max_batch_items.
	MaxBatchItems int
	// MaxBlockBytes is the largest value the client will send or accept.
	MaxBlockBytes uint64
	Dialer        Dialer
	Logger        *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 16
	}
	if o.BatchConcurrency <= 0 {
		o.BatchConcurrency = 8
	}
	if o.MaxBatchItems <= 0 {
		o.MaxBatchItems = 1024
	}
	if o.MaxBlockBytes == 0 {
		o.MaxBlockBytes = 64 << 20
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Client talks to one dfkv cluster in one namespace.
type Client struct {
	opts   Options
	mapper *wire.KeyMapper
	ring   *wire.Ring
	peers  []*peer

	closeOnce sync.Once
}

// Open validates opts and returns a Client. It does not connect: nodes are
// dialed on first use, so a client can be opened before its cluster is up.
func Open(opts Options) (*Client, error) {
	opts.setDefaults()
	mapper, err := wire.NewKeyMapper(opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("client: namespace: %w", err)
	}
	if len(opts.Members) == 0 {
		return nil, fmt.Errorf("client: no members: give at least one node address host:port: %w", wire.StatusInvalid)
	}
	members := make([]wire.Member, len(opts.Members))
	peers := make([]*peer, len(opts.Members))
	for i, addr := range opts.Members {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("client: member %q is not host:port: %v: %w", addr, err, wire.StatusInvalid)
		}
		members[i] = wire.Member{ID: addr, Addr: addr, Weight: 1}
		peers[i] = newPeer(addr, &opts)
	}
	ring, err := wire.NewRing(members, 0)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{opts: opts, mapper: mapper, ring: ring, peers: peers}, nil
}

// Close closes idle connections. Calls in flight finish on their own.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		for _, p := range c.peers {
			p.close()
		}
	})
	return nil
}

// BlockKey returns the native identity of key in the client's namespace.
func (c *Client) BlockKey(key []byte) (wire.BlockKey, error) { return c.mapper.BlockKey(key) }

// route returns the node owning k.
func (c *Client) route(k wire.BlockKey) *peer { return c.peers[c.ring.Get(k.RouteHash())] }

// Owner returns the address of the node that owns key.
func (c *Client) Owner(key []byte) (string, error) {
	k, err := c.mapper.BlockKey(key)
	if err != nil {
		return "", err
	}
	return c.route(k).addr, nil
}

// Members returns the node addresses the client routes over.
func (c *Client) Members() []string {
	out := make([]string, len(c.peers))
	for i, p := range c.peers {
		out[i] = p.addr
	}
	return out
}

func (c *Client) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(c.opts.Timeout)
}

// ErrBufferTooSmall is returned by Get when the stored value is longer
// than the destination; the stored length is returned with it so the
// caller can retry with a large enough buffer (or use GetAuto).
var ErrBufferTooSmall = fmt.Errorf("destination buffer smaller than the stored value: %w", wire.StatusTooLarge)

func checkValue(v []byte, max uint64) error {
	if len(v) == 0 {
		return fmt.Errorf("zero-byte value: dfkv stores only non-empty values: %w", wire.StatusInvalid)
	}
	if uint64(len(v)) > max {
		return fmt.Errorf("value of %d bytes exceeds max_block_bytes %d: %w", len(v), max, wire.StatusTooLarge)
	}
	return nil
}
