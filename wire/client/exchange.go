package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// ErrPeerDown is wrapped by the error of every call that could not reach
// its node: the connection failed, timed out, or the node is inside the
// back-off window of an earlier failure. Reads (GET, EXIST and their batch
// forms) of an unreachable node are answered as misses, so their errors
// also wrap wire.StatusNotFound (the engine recomputes, as for any miss);
// writes wrap wire.StatusUnavailable or wire.StatusTimeout.
var ErrPeerDown = errors.New("dfkv node unreachable")

// peerError is the error of a call that could not reach its node.
type peerError struct {
	addr  string
	cause error
	miss  bool
}

func (e *peerError) Error() string {
	if e.miss {
		return fmt.Sprintf("dfkv node %s unreachable, answered as a miss: %v", e.addr, e.cause)
	}
	return e.cause.Error()
}

func (e *peerError) Unwrap() []error {
	if e.miss {
		return []error{wire.StatusNotFound, ErrPeerDown, e.cause}
	}
	return []error{ErrPeerDown, e.cause}
}

// Per-peer back-off after a connection failure (the node's breaker): the
// first failure keeps the node out for minBackoff, each further one
// doubles it up to maxBackoff. Calls inside the window fail at once
// without dialing; the first call after it is the breaker's trial (the
// others still fail at once until it settles: peer.admit), and one
// success closes the breaker.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// exchange runs fn on a connection to p under the call's deadline. A
// connection whose stream is still aligned afterwards goes back to the
// pool; a broken one is closed. When a pooled connection fails before any
// response byte arrived (the node closed it while idle, e.g. across a
// restart), the exchange is retried once on a fresh connection: the node
// never starts a request it has not fully received, so nothing ran twice.
// read marks GET/EXIST calls, whose unreachable node is answered as a
// miss.
func (c *Client) exchange(ctx context.Context, p *peer, deadline time.Time, read bool, fn func(cc *cconn) error) error {
	if p == nil {
		return errNoMembers
	}
	now := time.Now()
	if !deadline.IsZero() && !now.Before(deadline) {
		// The call's time ran out before this node was asked (a batch
		// chunk that waited for a slot behind a slow node): TIMEOUT, and
		// nothing against the node, which was never contacted.
		return connError(p.addr, fmt.Errorf("the call's deadline passed before the request was sent: %w", context.DeadlineExceeded))
	}
	if silent, yes := p.stalled(now); yes {
		return &peerError{addr: p.addr, miss: read, cause: fmt.Errorf("dfkv node %s: has not answered the calls in flight for %s: %w", p.addr, silent.Round(time.Millisecond), wire.StatusUnavailable)}
	}
	ok, trial := p.admit(now, deadline)
	if !ok {
		return &peerError{addr: p.addr, miss: read, cause: fmt.Errorf("dfkv node %s: backing off after a connection failure (%s): %w", p.addr, p.lastFailure(), wire.StatusUnavailable)}
	}
	if trial != 0 {
		defer p.release(trial)
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return connError(p.addr, err)
		}
		cc, reused, err := p.get(ctx, deadline)
		if err != nil {
			if errors.Is(err, ErrAuth) || errors.Is(err, errShmRequired) {
				// The node is up and refused the token, or cannot give
				// the shared memory this client demands: not a miss to
				// recompute around, nor a reason to back it off.
				return err
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				// The caller cancelled while the node was being dialed:
				// its own doing, as on a pooled connection, so neither a
				// back-off of the node nor a miss (a prefix count would
				// read a miss as "nothing cached" and return no error).
				return connError(p.addr, fmt.Errorf("%w (while connecting: %v)", ctx.Err(), err))
			}
			p.fail(time.Now(), trial, err)
			return &peerError{addr: p.addr, miss: read, cause: err}
		}
		cc.got, cc.broken = false, false
		if cc.deadline.Move(deadline, c.deadlineSlack(ctx)) {
			_ = cc.nc.SetDeadline(deadline)
		}
		// Watch for cancellation only when the context can be cancelled:
		// a Background call (the common case for engines) skips the
		// registration and its allocation.
		stopped := true
		var stop func() bool
		if ctx.Done() != nil {
			stop = context.AfterFunc(ctx, func() { _ = cc.nc.SetDeadline(time.Unix(1, 0)) })
		}
		p.track(cc)
		err = fn(cc)
		p.untrack(cc)
		if stop != nil {
			stopped = stop()
		}
		if cc.cut.Load() {
			cc.broken = true // its deadline is in the past; the stream may be mid-frame
		}
		if !cc.broken && stopped {
			p.put(cc)
			p.succeed()
			return err
		}
		_ = cc.closeConn()
		if err == nil {
			// The context ended just as fn succeeded; the result stands.
			p.succeed()
			return nil
		}
		// A pooled connection that failed before any answer may have
		// been closed by the node (a restart): one retry on a fresh one.
		// The other idle connections were most likely closed by the same
		// restart, so they go too; retrying on the next of them would
		// fail the call as well. Not when the deadline cut it: the node
		// was silent, and the deadline has passed for a new connection too.
		if reused && !cc.got && attempt == 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
			p.dropIdle()
			continue
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			// The caller gave up; that says nothing about the node. A
			// deadline that passed, though, is a node too slow to answer,
			// and counts against it like a failed connection.
			return connError(p.addr, ctx.Err())
		}
		if tlsRefusal(err) {
			return tlsRefused(p.addr, err)
		}
		if isProtocolError(err) {
			// The node answered, but wrongly: it is up.
			return connError(p.addr, err)
		}
		p.fail(time.Now(), trial, err)
		return &peerError{addr: p.addr, miss: read, cause: connError(p.addr, err)}
	}
}

// isProtocolError reports an error that came from decoding a reply (the
// node is alive but said something wrong), as opposed to the connection
// failing.
func isProtocolError(err error) bool {
	var fe *wire.FrameError
	var st wire.Status
	return errors.As(err, &fe) || errors.As(err, &st)
}

// tlsRefusal reports whether err is a TLS alert the node sent: under TLS
// 1.3 a node that does not accept the client's certificate (or has none
// of it) says so after the client's handshake completed, on the first
// read. The node is up and the client misconfigured, so it is neither
// backed off nor answered as a miss.
func tlsRefusal(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// keyOf maps an object key, validating it.
func (c *Client) keyOf(key []byte) (wire.BlockKey, error) { return c.mapper.BlockKey(key) }
