package client

import (
	"context"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// exchange runs fn on a connection to p under the call's deadline. A
// connection whose stream is still aligned afterwards goes back to the
// pool; a broken one is closed. When a pooled connection fails before any
// response byte arrived (the node closed it while idle, e.g. across a
// restart), the exchange is retried once on a fresh connection: the node
// never starts a request it has not fully received, so nothing ran twice.
func (c *Client) exchange(ctx context.Context, p *peer, deadline time.Time, fn func(cc *cconn) error) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return connError(p.addr, err)
		}
		cc, reused, err := p.get(ctx, deadline)
		if err != nil {
			return err
		}
		cc.got, cc.broken = false, false
		_ = cc.nc.SetDeadline(deadline)
		stop := context.AfterFunc(ctx, func() { _ = cc.nc.SetDeadline(time.Unix(1, 0)) })
		err = fn(cc)
		stopped := stop()
		if !cc.broken && stopped {
			p.put(cc)
			return err
		}
		_ = cc.nc.Close()
		if err == nil {
			// The context ended just as fn succeeded; the result stands.
			return nil
		}
		if reused && !cc.got && attempt == 0 {
			continue
		}
		if ctx.Err() != nil {
			return connError(p.addr, ctx.Err())
		}
		return connError(p.addr, err)
	}
}

// keyOf maps an object key, validating it.
func (c *Client) keyOf(key []byte) (wire.BlockKey, error) { return c.mapper.BlockKey(key) }
