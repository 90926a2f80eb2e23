package bench

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// conn is one worker's view of the system under test. Only its worker
// calls it, so implementations keep per-connection buffers and allocate
// nothing per operation on success.
type conn interface {
	// Put stores val under key.
	Put(key, val []byte) error
	// Get reads key's value into dst and returns its length. A value
	// longer than dst is an error of class WRONG_SIZE; a miss wraps
	// wire.StatusNotFound.
	Get(key, dst []byte) (int, error)
	// Exist checks that key is stored without fetching its value: nil when
	// it is, an error wrapping wire.StatusNotFound when not.
	Exist(key []byte) error
	Close() error
}

// prefixConn is a conn with native forms of the inference lookups; conns
// without them get the generic loops of existPrefix and loadPages.
type prefixConn interface {
	ExistPrefix(keys [][]byte) (int, error)
	LoadPages(keys, dsts [][]byte) (int64, error)
}

// target opens conns to one system under test.
type target interface {
	Dial() (conn, error)
	Close() error
	// describe says what the system under test is, for the report.
	describe(ctx context.Context) *ServerInfo
}

// peerError is a failure a server reported (or a reply that broke the
// protocol): its class is what the error counts are keyed by.
type peerError struct {
	class string
	msg   string
}

func (e *peerError) Error() string {
	if e.msg == "" {
		return e.class
	}
	return e.class + ": " + e.msg
}

// Error classes bench adds to the wire statuses.
const (
	classWrongSize = "WRONG_SIZE" // a value came back with another length than was put
	classProtocol  = "PROTOCOL"   // the server's reply broke its protocol
)

// errClass is the key an error is counted under: a wire status name
// (NOT_FOUND, UNAVAILABLE, TIMEOUT, …) or a peerError class.
//
// The dfkv client answers a read of an unreachable node as a miss
// (its error wraps wire.StatusNotFound and client.ErrPeerDown), which is
// right for an inference engine and wrong for a benchmark: a node that
// cannot be reached counts as UNAVAILABLE (or TIMEOUT), never as a miss.
func errClass(err error) string {
	var pe *peerError
	if errors.As(err, &pe) {
		return pe.class
	}
	if errors.Is(err, client.ErrPeerDown) {
		if errors.Is(err, wire.StatusTimeout) {
			return wire.StatusTimeout.String()
		}
		return wire.StatusUnavailable.String()
	}
	return wire.StatusOf(err).String()
}

// ioError turns a connection failure into an error of class TIMEOUT or
// UNAVAILABLE that names the server.
func ioError(what, addr string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %v: %w", what, addr, err, wire.StatusTimeout)
	}
	return fmt.Errorf("%s %s: %v: %w", what, addr, err, wire.StatusUnavailable)
}

// dfkvTarget drives a dfkv cluster through the Go client.
type dfkvTarget struct {
	cl  *client.Client
	ctx context.Context
}

func (t *dfkvTarget) Dial() (conn, error) { return &dfkvConn{cl: t.cl, ctx: t.ctx}, nil }
func (t *dfkvTarget) Close() error        { return t.cl.Close() }

// dfkvConn shares the client (and its connection pool) with the other
// workers; the pool is sized to the concurrency, so each worker keeps one
// connection in practice.
type dfkvConn struct {
	cl  *client.Client
	ctx context.Context
}

func (c *dfkvConn) Put(key, val []byte) error { return c.cl.Put(c.ctx, key, val) }

func (c *dfkvConn) Get(key, dst []byte) (int, error) {
	n, stored, err := c.cl.Get(c.ctx, key, dst)
	if errors.Is(err, client.ErrBufferTooSmall) {
		return n, &peerError{class: classWrongSize, msg: fmt.Sprintf("key %q holds %d bytes, expected %d", key, stored, len(dst))}
	}
	return n, err
}

func (c *dfkvConn) Exist(key []byte) error {
	_, err := c.cl.Exist(c.ctx, key)
	return err
}

// ExistPrefix is client.ExistPrefix except that an unreachable node is an
// error, not the end of the prefix (see errClass).
func (c *dfkvConn) ExistPrefix(keys [][]byte) (int, error) {
	for i, r := range c.cl.ExistBatch(c.ctx, keys) {
		if r.Err == nil {
			continue
		}
		if errors.Is(r.Err, client.ErrPeerDown) || wire.StatusOf(r.Err) != wire.StatusNotFound {
			return i, fmt.Errorf("page %d: %w", i, r.Err)
		}
		return i, nil
	}
	return len(keys), nil
}

func (c *dfkvConn) LoadPages(keys, dsts [][]byte) (int64, error) {
	var total int64
	var first error
	for i, r := range c.cl.GetBatch(c.ctx, keys, dsts) {
		if r.Err != nil {
			if first == nil {
				first = fmt.Errorf("page %d: %w", i, r.Err)
			}
			continue
		}
		total += int64(len(r.Data))
	}
	return total, first
}

func (c *dfkvConn) Close() error { return nil }

// existPrefix counts the consecutive stored keys from the first.
func existPrefix(c conn, keys [][]byte) (int, error) {
	if pc, ok := c.(prefixConn); ok {
		return pc.ExistPrefix(keys)
	}
	for i, k := range keys {
		if err := c.Exist(k); err != nil {
			if wire.StatusOf(err) == wire.StatusNotFound {
				return i, nil
			}
			return i, err
		}
	}
	return len(keys), nil
}

// loadPages reads every key into its dst and returns the bytes read.
func loadPages(c conn, keys, dsts [][]byte) (int64, error) {
	if pc, ok := c.(prefixConn); ok {
		return pc.LoadPages(keys, dsts)
	}
	var total int64
	for i, k := range keys {
		n, err := c.Get(k, dsts[i])
		if err != nil {
			return total, fmt.Errorf("page %d: %w", i, err)
		}
		total += int64(n)
	}
	return total, nil
}
