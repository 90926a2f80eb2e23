package mds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dfkv/dfkv/wire"
)

// etcdDir keeps the directory in etcd, the production set-up: several MDS
// processes serve one etcd cluster and agree because etcd is the only
// state. Each member is one key, attached to its own lease of the
// heartbeat TTL, so a node that stops heartbeating (or whose MDS died)
// ages out by itself:
//
//	<prefix>/groups/<group>/members/<id> = JSON MemberInfo (leased)
//
// A group's epoch is the etcd revision of the last change under its
// members prefix (a put, a delete, a lease expiry), learned from the
// initial read and a watch: revisions are global and only grow, so the
// epoch moves forward on every change whichever MDS made it. A member
// list is served with the epoch of the state it shows, never another
// (Members), since a client that holds a list at an epoch is told
// "unchanged" while the epoch is the same.
//
// Liveness is the lease alone: no heartbeat time is kept. Writing one to
// etcd would cost a write per node per TTL/3, and the time one MDS heard
// a node is not when the node last heartbeated, which it may do through
// any MDS. A member is listed with LeaseLive set and no heartbeat time.
type etcdDir struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	epochs map[string]uint64 // group → last change revision seen
	// watched is the revision through which the watch has delivered
	// every change under the prefix: the revision of its initial read,
	// then of each event it hands on and of each progress notice etcd
	// sends on request (writes elsewhere in etcd move the revision but
	// bring no event). Members trusts epochs only for a read at or below
	// it; advanced is closed (and replaced) each time it moves.
	watched  uint64
	advanced chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	// deregisterRead, when a test sets it, runs in Deregister between its
	// read of the member and its delete.
	deregisterRead func()
}

const etcdOpTimeout = 3 * time.Second

func openEtcdDir(endpoints []string, prefix string, ttl time.Duration, log *slog.Logger) (*etcdDir, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		// A partition that drops packets without a reset is otherwise
		// noticed only by the calls' own timeouts; the watch, which
		// makes none, would wait on it silently. (gRPC allows no less
		// than 10 s between pings.)
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// The client's warnings and errors (an endpoint it cannot
		// reach, a watch it had to cancel) join the MDS's log; its
		// info and debug chatter is dropped.
		Logger: zapToSlog(log, "MDS: etcd client: "),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v (mds.etcd_endpoints / DFKV_MDS_ETCD_ENDPOINTS): %w", endpoints, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &etcdDir{cli: cli, prefix: strings.TrimSuffix(prefix, "/"), ttl: ttl, log: log,
		epochs: map[string]uint64{}, cancel: cancel, done: make(chan struct{}), advanced: make(chan struct{})}
	go d.watch(ctx)
	return d, nil
}

func (d *etcdDir) groupPrefix(group string) string {
	return d.prefix + "/groups/" + group + "/members/"
}

func (d *etcdDir) memberKey(group, id string) string { return d.groupPrefix(group) + id }

// groupOf extracts the group from a member key.
func (d *etcdDir) groupOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, d.prefix+"/groups/")
	if !ok {
		return "", false
	}
	g, _, ok := strings.Cut(rest, "/members/")
	return g, ok
}

func (d *etcdDir) noteEpoch(group string, rev int64) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if uint64(rev) > d.epochs[group] {
		d.epochs[group] = uint64(rev)
	}
	return d.epochs[group]
}

// watchRetry paces the watch's attempts to read etcd again after a failed
// one: 0.5 s, doubling up to 5 s, each drawn from half to one and a half
// times that so the MDS processes sharing an etcd that restarts do not
// all come back at the same instant; reset once a read succeeds.
func watchRetry() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     500 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         5 * time.Second,
	}
}

// watch follows every change under the prefix so each group's epoch sees
// deletes and lease expiries too. It restarts after errors.
func (d *etcdDir) watch(ctx context.Context) {
	defer close(d.done)
	retry := watchRetry()
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		resp, err := d.cli.Get(rctx, d.prefix+"/groups/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			t := time.NewTimer(retry.NextBackOff())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				continue
			}
		}
		retry.Reset()
		// Changes made while no watch ran (at start, or between a broken
		// watch and this read: a lease expiry, say) are invisible in the
		// read, which shows only the keys left. So every group known or
		// seen takes this read's revision as its epoch: its clients fetch
		// the list once more, rather than keep one the epoch no longer
		// describes.
		rev := uint64(resp.Header.Revision)
		d.mu.Lock()
		for _, kv := range resp.Kvs {
			if g, ok := d.groupOf(string(kv.Key)); ok {
				d.epochs[g] = max(d.epochs[g], rev)
			}
		}
		for g := range d.epochs {
			d.epochs[g] = max(d.epochs[g], rev)
		}
		d.advanceLocked(rev)
		d.mu.Unlock()
		wch := d.cli.Watch(clientv3.WithRequireLeader(ctx), d.prefix+"/groups/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if g, ok := d.groupOf(string(ev.Kv.Key)); ok {
					d.noteEpoch(g, ev.Kv.ModRevision)
				}
			}
			d.mu.Lock()
			switch {
			case wr.IsProgressNotify():
				// Every event up to the header's revision has been sent.
				d.advanceLocked(uint64(wr.Header.Revision))
			case len(wr.Events) > 0:
				// Not the header's revision: while the watch catches up,
				// an event response carries the current revision before
				// all the events up to it have arrived.
				d.advanceLocked(uint64(wr.Events[len(wr.Events)-1].Kv.ModRevision))
			}
			d.mu.Unlock()
		}
	}
}

// advanceLocked moves watched to rev if that is further, waking
// catchUp's waiters. The caller holds d.mu.
func (d *etcdDir) advanceLocked(rev uint64) {
	if rev > d.watched {
		d.watched = rev
		close(d.advanced)
		d.advanced = make(chan struct{})
	}
}

// catchUpWait bounds how long Members waits for the watch to vouch for a
// read; past it the read's own revision is the epoch (readEpoch).
const catchUpWait = 200 * time.Millisecond

// catchUp waits, at most catchUpWait, until the watch has delivered every
// change up to rev, asking etcd for a progress notice so that writes
// outside the prefix (on an etcd other applications share) do not leave
// it behind for good. It reports whether it got there.
func (d *etcdDir) catchUp(ctx context.Context, rev uint64) bool {
	// Bound the request too: it blocks while the watch's stream is being
	// reopened. The context keeps its metadata (WithRequireLeader), so
	// the request still names the watch's stream.
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), catchUpWait)
	defer cancel()
	for {
		d.mu.Lock()
		if d.watched >= rev {
			d.mu.Unlock()
			return true
		}
		advanced := d.advanced
		d.mu.Unlock()
		// Asked again after each advance short of rev: the notice may
		// come from an etcd member a little behind the one that served
		// the read.
		if err := d.cli.RequestProgress(ctx); err != nil {
			return false
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return false
		}
	}
}

// registerAttempts bounds how often Register re-reads a group that changed
// between its read and its write (another node registering meanwhile).
const registerAttempts = 5

func (d *etcdDir) Register(ctx context.Context, group string, m wire.MemberInfo, admit Admission) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	m.LastHeartbeatUnixMS, m.LeaseLive = 0, false // the lease says it, not the record
	val, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	ttlSec := int64((d.ttl + time.Second - 1) / time.Second)
	lease, err := d.cli.Grant(ctx, ttlSec)
	if err != nil {
		return 0, backendErr("register: grant lease", err)
	}
	keep := false // the lease holds the key, or may (a write whose answer was lost)
	defer func() {
		if !keep {
			// A lease without a key would only lapse, but say so now. The
			// request's context may be spent: a short one of its own.
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = d.cli.Revoke(rctx, lease.ID)
			cancel()
		}
	}()
	prefix, key := d.groupPrefix(group), d.memberKey(group, m.ID)
	for attempt := range registerAttempts {
		if attempt > 0 {
			// Others registered meanwhile (a fleet starting): let them
			// through before reading again.
			select {
			case <-time.After(time.Duration(attempt) * time.Duration(5+rand.IntN(20)) * time.Millisecond):
			case <-ctx.Done():
				return 0, backendErr("register", ctx.Err())
			}
		}
		cur, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, backendErr("register", err)
		}
		var prevLease clientv3.LeaseID
		members := make([]wire.MemberInfo, 0, len(cur.Kvs))
		for _, kv := range cur.Kvs {
			if string(kv.Key) == key {
				prevLease = clientv3.LeaseID(kv.Lease)
			}
			if old, ok := d.decodeMember(kv.Key, kv.Value); ok {
				members = append(members, old)
			}
		}
		if admit != nil {
			if err := admit(members); err != nil {
				return 0, err
			}
		}
		// Written only if no member key of the group was put since the
		// read the check saw (MDS processes on one etcd race otherwise);
		// a removal since then only makes room.
		resp, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(prefix).WithPrefix(), "<", cur.Header.Revision+1)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease.ID))).
			Commit()
		if err != nil {
			keep = true // it may have landed; if not, the lease lapses alone
			return 0, backendErr("register", err)
		}
		if !resp.Succeeded {
			continue
		}
		keep = true
		// Revoke an earlier registration's lease, so a node restarting
		// quickly does not leave a second lease that would later delete
		// its fresh key.
		if prevLease != 0 && prevLease != lease.ID {
			_, _ = d.cli.Revoke(ctx, prevLease)
		}
		return d.noteEpoch(group, resp.Header.Revision), nil
	}
	return 0, backendErr("register", fmt.Errorf("group %q changed under each of %d attempts; the node registers again shortly", group, registerAttempts))
}

func (d *etcdDir) Heartbeat(ctx context.Context, group, id string) (uint64, error) {
	epoch, _, err := d.HeartbeatTTL(ctx, group, id)
	return epoch, err
}

// HeartbeatTTL is Heartbeat that also returns the TTL of the member's
// lease: the one it was granted at registration, whatever this MDS is
// configured with (an MDS restarted, or another beside it, with another
// heartbeat_ttl_ms). A node paces its heartbeats by it.
func (d *etcdDir) HeartbeatTTL(ctx context.Context, group, id string) (uint64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := d.cli.Get(ctx, d.memberKey(group, id))
	if err != nil {
		return 0, 0, backendErr("heartbeat", err)
	}
	epoch := d.epoch(group)
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return epoch, 0, ErrUnknownMember
	}
	ka, err := d.cli.KeepAliveOnce(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		if isLeaseNotFound(err) {
			return epoch, 0, ErrUnknownMember
		}
		return 0, 0, backendErr("heartbeat", err)
	}
	return epoch, time.Duration(ka.TTL) * time.Second, nil
}

// isLeaseNotFound reports etcd's answer for a lease it does not hold (it
// expired, or was revoked, between the read and the renewal).
func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

func (d *etcdDir) Deregister(ctx context.Context, group, id string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	key := d.memberKey(group, id)
	prev, err := d.cli.Get(ctx, key)
	if err != nil {
		return 0, backendErr("deregister", err)
	}
	if len(prev.Kvs) == 0 {
		return d.epoch(group), ErrUnknownMember
	}
	if d.deregisterRead != nil {
		d.deregisterRead()
	}
	// Only the registration read above: one the node made since (through
	// another MDS, while this request ran late) stays.
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", prev.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return 0, backendErr("deregister", err)
	}
	if !resp.Succeeded {
		return d.epoch(group), ErrUnknownMember
	}
	if l := prev.Kvs[0].Lease; l != 0 {
		_, _ = d.cli.Revoke(ctx, clientv3.LeaseID(l))
	}
	return d.noteEpoch(group, resp.Header.Revision), nil
}

// Epoch is the last change revision the watch saw for group. The watch
// trails etcd by milliseconds, so a reply cached at this epoch may miss a
// change for that long; the client's next poll sees it.
func (d *etcdDir) Epoch(_ context.Context, group string) (uint64, error) { return d.epoch(group), nil }

func (d *etcdDir) epoch(group string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epochs[group]
}

func (d *etcdDir) Members(ctx context.Context, group string) (uint64, []wire.MemberInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := d.cli.Get(ctx, d.groupPrefix(group), clientv3.WithPrefix())
	if err != nil {
		return 0, nil, backendErr("members", err)
	}
	read := uint64(resp.Header.Revision)
	d.catchUp(ctx, read) // lets readEpoch name the last change, not the read
	out := make([]wire.MemberInfo, 0, len(resp.Kvs))
	var lastPut uint64
	d.mu.Lock()
	for _, kv := range resp.Kvs {
		lastPut = max(lastPut, uint64(kv.ModRevision))
		m, ok := d.decodeMember(kv.Key, kv.Value)
		if !ok {
			continue
		}
		// The key exists, so its lease has not run out; when the node
		// last renewed it is not known here (an MDS before this one
		// stored its registration time, which is not that either).
		m.LastHeartbeatUnixMS, m.LeaseLive = 0, kv.Lease != 0
		out = append(out, m)
	}
	epoch := readEpoch(read, lastPut, d.epochs[group], d.watched)
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return epoch, out, nil
}

// decodeMember reads a member record, logging one it cannot read (which
// membership then skips).
func (d *etcdDir) decodeMember(key, val []byte) (wire.MemberInfo, bool) {
	var m wire.MemberInfo
	if err := json.Unmarshal(val, &m); err != nil {
		d.log.Warn("MDS: skipping unreadable member record in etcd", "key", string(key), "error", err.Error())
		return m, false
	}
	return m, true
}

// readEpoch is the epoch of a member list read at revision read, whose
// newest key was put at lastPut, given the group's last change revision
// and how far the watch has delivered changes. The list is the state at
// read; its epoch must name that state and no other. The last change at
// or before read does, when the watch has delivered every change up to
// read and none after it (a deletion leaves no key in the read, so only
// the watch knows its revision). Otherwise (the watch is behind the read,
// or already past it) read itself does: it is a revision whose state is
// this list. The price is a client fetching an unchanged list once more,
// never one kept past a change. (Writes to etcd outside the members
// prefix move read but bring the watch no event; Members asks etcd for a
// progress notice first, catchUp, so the watch vouches for the read.)
func readEpoch(read, lastPut, lastChange, watched uint64) uint64 {
	if watched >= read && lastChange <= read {
		return max(lastChange, lastPut)
	}
	return read
}

func (d *etcdDir) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	if _, err := d.cli.Get(ctx, d.prefix+"/probe", clientv3.WithCountOnly()); err != nil {
		return backendErr("etcd probe", err)
	}
	return nil
}

func (d *etcdDir) Close() error {
	d.cancel()
	<-d.done
	return errors.Join(d.cli.Close())
}
