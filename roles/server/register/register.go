// Package register keeps a cache node in its group's membership at the
// MDS, which is how clients that discover members through the MDS learn
// where to route keys. It registers at start and again whenever the MDS
// forgets the node, heartbeats within the MDS's TTL, leaves when the node
// stops or can no longer serve, and exports whether the node is currently
// registered, so a node no client can find is something to alert on.
package register

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/roles/server/internal/ratelog"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// Registrar keeps a node registered with the MDS: it registers at start
// (retrying until an MDS answers), heartbeats at a third of the TTL the
// MDS gives, registers again when the MDS no longer knows the node (it
// expired, or the MDS's directory was reset), and deregisters when its
// context ends, so clients stop routing to a node that is shutting down.
type Registrar struct {
	mds  *client.MDSClient
	info wire.MemberInfo
	log  *slog.Logger
	// serving reports whether the node can still serve anything: false
	// once every disk failed closed. Such a node is deregistered, so
	// clients route its keys elsewhere (misses, then re-cached on healthy
	// nodes) instead of getting IO_ERROR for them until someone restarts
	// it; it registers again if it serves again. nil: always.
	serving func() bool
	// current is true while the node is registered and its heartbeats are
	// answered: what dfkv_server_registered exports, so a node that never
	// joined (clients discovering through the MDS never route to it) is
	// something to alert on, not only one WARN at startup.
	current atomic.Bool
	// left is set once the node's last act, deregistering, succeeded.
	left atomic.Bool
	// draw returns a duration uniformly in [0, d): rand.N, or a seeded
	// source in tests.
	draw func(d time.Duration) time.Duration
}

// New returns a Registrar that registers info through mds once Run is
// called. serving (nil: always) reports whether the node can still serve
// anything; while it cannot, the node stays out of the membership.
func New(mds *client.MDSClient, info wire.MemberInfo, serving func() bool, log *slog.Logger) *Registrar {
	return &Registrar{mds: mds, info: info, serving: serving, log: log, draw: rand.N[time.Duration]}
}

// SetJitter replaces the source of the retry waits (jitter) before Run:
// draw returns a duration uniformly in [0, d). A deterministic simulation
// passes a seeded one.
func (r *Registrar) SetJitter(draw func(d time.Duration) time.Duration) { r.draw = draw }

// A registration that fails is retried after a wait that starts at
// firstRetry and doubles up to maxRetry.
const (
	firstRetry = 200 * time.Millisecond
	maxRetry   = 5 * time.Second
)

// jitter is the wait before a retry whose back-off has reached d: drawn
// uniformly from [0, d) ("full jitter"). An MDS restart fails every
// node's heartbeat and registration at the same moment; with fixed waits
// they would all retry, and register again, in lock-step for as long as
// they back off, each round a burst at the MDS.
func (r *Registrar) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r.draw == nil {
		return rand.N(d)
	}
	return r.draw(d)
}

// Gauge is dfkv_server_registered, for the node's registry. A zero
// Registrar's reads 0.
func (r *Registrar) Gauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dfkv_server_registered",
		Help: "1 while this node is registered with the MDS and its heartbeats are answered; 0 while it registers or they fail (exported only with server.mds).",
	}, func() float64 {
		if r.current.Load() {
			return 1
		}
		return 0
	})
}

// stillFailingEvery is how often a registration or heartbeat that keeps
// failing is logged again, with how long it has failed.
const stillFailingEvery = 30 * time.Second

// failureLog logs the first failure of a run of them, and then one line
// per stillFailingEvery while the run lasts, with how long it has lasted:
// a node retrying every few seconds for hours writes a line every 30 s,
// not thousands, and never goes quiet while it is still not registered.
// The caller clears failing when a call succeeds.
type failureLog struct {
	failing bool
	since   time.Time
	lines   ratelog.Limiter
}

func (f *failureLog) fail(log *slog.Logger, now time.Time, msg string, args ...any) {
	if !f.failing {
		f.failing, f.since = true, now
		f.lines.Every = stillFailingEvery
		f.lines.Reset() // a new run of failures: its first line at once
	} else {
		args = append(args, "failing_for", now.Sub(f.since).Round(time.Second).String())
	}
	f.lines.Warn(log, now, msg, args...)
}

// AdvertiseAddr is the address registered for the node: the configured
// advertise address, or the listen address if it is specific.
func AdvertiseAddr(configured string, listen net.Addr) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, port, err := net.SplitHostPort(listen.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return "", fmt.Errorf("listen address %s is not one clients can dial; set server.advertise_addr (DFKV_SERVER_ADVERTISE_ADDR) to register with the MDS", listen)
	}
	return net.JoinHostPort(host, port), nil
}

// Run keeps the node registered until ctx ends, then deregisters it
// and returns.
func (r *Registrar) Run(ctx context.Context) {
	ttl := time.Duration(0)
	registered := false
	unsure := false // stopped while a REGISTER was on its way
	var failures failureLog
	fail := func(msg string, err error) {
		failures.fail(r.log, time.Now(), msg, "id", r.info.ID, "group", r.mds.Group(), "error", err.Error())
	}
	backoff := firstRetry
	benched := false // deregistered because no disk serves
	for {
		wait := backoff
		if r.serving != nil && !r.serving() {
			if !benched {
				benched = true
				r.current.Store(false)
				r.log.Error("every disk of this node failed closed: leaving the MDS so clients route its keys to other nodes; fix the disks and restart it", "id", r.info.ID)
				if registered {
					r.deregister()
					registered = false
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if benched {
			benched = false
			r.log.Info("a disk serves again: registering with the MDS", "id", r.info.ID)
		}
		if !registered {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			sent := time.Now()
			rep, err := r.mds.Register(rctx, r.info)
			took := time.Since(sent)
			cancel()
			if err == nil {
				registered, unsure = true, false
				failures.failing = false
				backoff = firstRetry
				ttl = time.Duration(rep.HeartbeatTTLMS) * time.Millisecond
				if ttl <= 0 {
					ttl = 10 * time.Second
				}
				r.log.Info("registered with the MDS", "id", r.info.ID, "addr", r.info.Addr, "group", r.mds.Group(), "epoch", rep.Epoch, "heartbeat_ttl", ttl.String())
				wait = ttl / 3
				if took < wait {
					r.current.Store(true)
				} else {
					// The answer took longer than a heartbeat interval (a
					// slow or cut link): the MDS may have expired the
					// registration while the answer was on its way. A
					// heartbeat at once says which; until it is answered
					// the node does not call itself registered.
					wait = 0
				}
			} else if ctx.Err() != nil {
				// Stopped with the REGISTER on its way: the MDS may have
				// applied it, so leave as a registered node would (a
				// DEREGISTER of an id it does not list changes nothing).
				unsure = true
			} else {
				// A REGISTER that timed out may have been applied, its
				// answer late (an MDS waiting on a slow etcd): stopped
				// before the retry, the node leaves all the same.
				unsure = unsure || mayHaveLanded(err)
				fail("cannot register with the MDS; retrying (clients that discover members through it do not route here)", err)
				wait = r.jitter(backoff)
				backoff = min(backoff*2, maxRetry)
			}
		} else {
			hctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Second))
			rep, err := r.mds.Heartbeat(hctx, r.info.ID)
			cancel()
			switch {
			case err == nil:
				if failures.failing {
					r.log.Info("MDS heartbeats answered again", "id", r.info.ID)
					failures.failing = false
				}
				if t := time.Duration(rep.HeartbeatTTLMS) * time.Millisecond; t > 0 && t != ttl {
					r.log.Info("the MDS's heartbeat TTL changed; heartbeating at a third of it", "id", r.info.ID, "heartbeat_ttl", t.String(), "was", ttl.String())
					ttl = t
				}
				r.current.Store(true)
				wait = ttl / 3
			case ctx.Err() != nil:
			case wire.StatusOf(err) == wire.StatusNotFound:
				r.log.Warn("the MDS no longer knows this node; registering again", "id", r.info.ID)
				registered = false
				r.current.Store(false)
				wait = 0
			default:
				r.current.Store(false)
				fail("MDS heartbeat failed; retrying", err)
				wait = r.jitter(min(ttl/6, time.Second))
			}
		}
		select {
		case <-ctx.Done():
			r.current.Store(false)
			if registered || unsure {
				r.deregister()
			}
			return
		case <-time.After(wait):
		}
	}
}

// mayHaveLanded reports whether a failed call may have been applied by
// the MDS all the same: it timed out waiting for the answer, rather than
// being refused or never reaching it.
func mayHaveLanded(err error) bool {
	return wire.StatusOf(err) == wire.StatusTimeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// Current reports whether the node is registered and its last heartbeat
// was answered (what dfkv_server_registered exports).
func (r *Registrar) Current() bool { return r.current.Load() }

// Left reports whether the node deregistered when Run ended: clients then
// learn at their next poll that it is gone. Valid once Run has returned.
func (r *Registrar) Left() bool { return r.left.Load() }

// deregister leaves the MDS, so clients stop routing here at once.
func (r *Registrar) deregister() {
	dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := r.mds.DeregisterAt(dctx, r.info.ID, r.info.Addr)
	if wire.StatusOf(err) == wire.StatusNotFound {
		// Not listed (a REGISTER cut short that never landed, or a
		// registration that expired): nothing to leave.
		r.left.Store(true)
		return
	}
	if err != nil {
		r.log.Warn("could not deregister from the MDS; it drops this node after the heartbeat TTL", "error", err.Error())
		return
	}
	r.left.Store(true)
	r.log.Info("deregistered from the MDS", "id", r.info.ID)
}
