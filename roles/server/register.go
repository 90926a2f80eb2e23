package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// registrar keeps a node registered with the MDS: it registers at start
// (retrying until an MDS answers), heartbeats at a third of the TTL the
// MDS gives, registers again when the MDS no longer knows the node (it
// expired, or the MDS's directory was reset), and deregisters when its
// context ends, so clients stop routing to a node that is shutting down.
type registrar struct {
	mds  *client.MDSClient
	info wire.MemberInfo
	log  *slog.Logger
	done chan struct{}
}

// advertiseAddr is the address registered for the node: the configured
// advertise address, or the listen address if it is specific.
func advertiseAddr(configured string, listen net.Addr) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, port, err := net.SplitHostPort(listen.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return "", fmt.Errorf("listen address %s is not one clients can dial; set server.advertise_addr (DFKV_ADVERTISE_ADDR) to register with the MDS", listen)
	}
	return net.JoinHostPort(host, port), nil
}

func (r *registrar) run(ctx context.Context) {
	defer close(r.done)
	ttl := time.Duration(0)
	registered := false
	failing := false
	backoff := 200 * time.Millisecond
	for {
		wait := backoff
		if !registered {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			rep, err := r.mds.Register(rctx, r.info)
			cancel()
			if err == nil {
				registered, failing = true, false
				ttl = time.Duration(rep.HeartbeatTTLMS) * time.Millisecond
				if ttl <= 0 {
					ttl = 10 * time.Second
				}
				r.log.Info("registered with the MDS", "id", r.info.ID, "addr", r.info.Addr, "group", r.mds.Group(), "epoch", rep.Epoch, "heartbeat_ttl", ttl.String())
				wait = ttl / 3
			} else if ctx.Err() == nil {
				if !failing {
					r.log.Warn("cannot register with the MDS; retrying", "group", r.mds.Group(), "error", err.Error())
					failing = true
				}
				backoff = min(backoff*2, 5*time.Second)
			}
		} else {
			hctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Second))
			_, err := r.mds.Heartbeat(hctx, r.info.ID)
			cancel()
			switch {
			case err == nil:
				if failing {
					r.log.Info("MDS heartbeats answered again", "id", r.info.ID)
					failing = false
				}
				wait = ttl / 3
			case ctx.Err() != nil:
			case wire.StatusOf(err) == wire.StatusNotFound:
				r.log.Warn("the MDS no longer knows this node; registering again", "id", r.info.ID)
				registered = false
				wait = 0
			default:
				if !failing {
					r.log.Warn("MDS heartbeat failed; retrying", "id", r.info.ID, "error", err.Error())
					failing = true
				}
				wait = min(ttl/6, time.Second)
			}
		}
		select {
		case <-ctx.Done():
			if registered {
				dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if err := r.mds.Deregister(dctx, r.info.ID); err != nil {
					r.log.Warn("could not deregister from the MDS; it drops this node after the heartbeat TTL", "error", err.Error())
				} else {
					r.log.Info("deregistered from the MDS", "id", r.info.ID)
				}
				cancel()
			}
			return
		case <-time.After(wait):
		}
	}
}
