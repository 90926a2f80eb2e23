package mds

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// boltDir keeps the directory in an embedded bbolt file, for a single MDS
// that needs nothing else installed. Members and epochs survive an MDS
// restart. Heartbeats live in memory (writing the file on every heartbeat
// would buy nothing): after a restart every restored member gets one full
// TTL to heartbeat before it expires.
//
// Layout: one bucket per group ("g/<group>"), holding "epoch" (u64 BE) and
// one key per member ("m/<id>", JSON MemberInfo).
//
// Expiry against heartbeats and registrations: a heartbeat records itself
// before it looks the member up, a registration records itself inside its
// write transaction, and the sweeper deletes a member only if, inside its
// own write transaction (bbolt runs them one at a time), the member's last
// heartbeat is still the lapsed one it chose. So a heartbeat answered OK
// was never followed by the sweeper dropping it, and a registration is
// never deleted by a sweep that began before it. A heartbeat record is
// forgotten only while nothing has refreshed it.
type boltDir struct {
	db    *bolt.DB
	ttl   time.Duration
	clock engine.Clock
	log   *slog.Logger

	mu   sync.Mutex
	seen map[string]map[string]time.Time // group → id → last heartbeat
	// removing counts, per group and id (removalKey), removals a write
	// transaction has decided on and not yet ended: a heartbeat meanwhile
	// is not answered OK, since its read sees the member still there.
	removing map[string]int

	stop  chan struct{}
	done  chan struct{}
	hooks boltHooks
}

// boltHooks are what a boltDir tells its owner, or asks of a simulation.
type boltHooks struct {
	// expired counts members dropped for a lapsed heartbeat.
	expired func(n int)
	// stall, when set, is called between two steps of the directory that
	// other requests may run between (see Deps.Stall).
	stall func(point string)
	// decided, when set, runs inside a removal's write transaction once it
	// has chosen what to delete (tests).
	decided func()
}

func (h boltHooks) pause(point string) {
	if h.stall != nil {
		h.stall(point)
	}
}

func openBoltDir(path string, ttl time.Duration, clock engine.Clock, log *slog.Logger, hooks boltHooks) (d *boltDir, err error) {
	// bbolt panics on some corrupt pages (a failed assertion, an invalid
	// freelist page): an MDS that cannot read its file says which file,
	// as it does for the damage bbolt reports as an error.
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			// The file stays open and locked otherwise (err was still nil
			// when the deferred close below ran).
			if db != nil {
				_ = db.Close()
			}
			d, err = nil, fmt.Errorf("MDS database %s is corrupt (%v); move it away to start empty (members register again within one heartbeat)", path, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open MDS database %s (mds.db_path / DFKV_MDS_DB_PATH): %w; is another dfkv mds using it?", path, err)
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	d = &boltDir{db: db, ttl: ttl, clock: clock, log: log, seen: map[string]map[string]time.Time{}, removing: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{}), hooks: hooks}
	now := clock.Now()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if len(name) < 3 || string(name[:2]) != "g/" {
				return fmt.Errorf("unexpected bucket %q", name)
			}
			g := string(name[2:])
			return b.ForEach(func(k, v []byte) error {
				if len(k) > 2 && string(k[:2]) == "m/" {
					d.touch(g, string(k[2:]), now)
				}
				return nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("MDS database %s is not a dfkv directory: %w; move it away to start empty", path, err)
	}
	go d.sweep()
	return d, nil
}

func (d *boltDir) touch(group, id string, t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.touchLocked(group, id, t)
}

// touchLocked is touch with d.mu held.
func (d *boltDir) touchLocked(group, id string, t time.Time) {
	m := d.seen[group]
	if m == nil {
		m = map[string]time.Time{}
		d.seen[group] = m
	}
	m[id] = t
}

func bucketName(group string) []byte { return []byte("g/" + group) }

// bump increments the group's epoch inside tx and returns it. A group
// with no epoch yet (a new one, or a new database file) starts from the
// clock's microseconds, not from 1: a client holding a list from an
// earlier database at some epoch must not be told "unchanged" when the
// new one happens to reach that number. (Microseconds, not nanoseconds:
// the epoch gauge is a float64, exact only below 2^53.)
func bump(b *bolt.Bucket, now time.Time) (uint64, error) {
	e := uint64(max(now.UnixMicro(), 0))
	if v := b.Get([]byte("epoch")); len(v) == 8 {
		e = binary.BigEndian.Uint64(v)
	}
	e++
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], e)
	return e, b.Put([]byte("epoch"), buf[:])
}

func epochOf(b *bolt.Bucket) uint64 {
	if b == nil {
		return 0
	}
	if v := b.Get([]byte("epoch")); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *boltDir) Register(_ context.Context, group string, m wire.MemberInfo, admit Admission) (uint64, error) {
	now := d.clock.Now()
	m.LastHeartbeatUnixMS, m.LeaseLive = 0, false // kept in memory, filled in by Members
	val, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	var epoch uint64
	var refused error
	err = d.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketName(group))
		if err != nil {
			return err
		}
		if admit != nil {
			// In the write transaction: bbolt runs one at a time, so no
			// other REGISTER commits between this check and our write.
			// A record it cannot read does not block registrations (a
			// MEMBERS read fails naming it; etcd skips such records).
			members, _ := membersOf(b, func(key []byte, err error) {
				d.log.Warn("MDS: REGISTER admission skips an unreadable member record", "group", group, "key", string(key), "error", err.Error())
			})
			if refused = admit(members); refused != nil {
				return refused
			}
		}
		key := []byte("m/" + m.ID)
		d.touch(group, m.ID, now) // before the commit: a sweep's transaction after ours sees it
		if old := b.Get(key); old != nil && string(old) == string(val) {
			epoch = epochOf(b) // same registration again: no change
			return nil
		}
		if err := b.Put(key, val); err != nil {
			return err
		}
		epoch, err = bump(b, now)
		return err
	})
	if refused != nil {
		return 0, refused
	}
	if err != nil {
		return 0, backendErr("register", err)
	}
	return epoch, nil
}

func (d *boltDir) Heartbeat(_ context.Context, group, id string) (uint64, error) {
	// Recorded before the lookup: a sweep that has not yet chosen to
	// delete the member sees it and keeps it; one that has deleted it and
	// committed, our read sees; one that has chosen to and not yet
	// committed (our read would still find the member) is in removing.
	d.mu.Lock()
	removing := d.removing[removalKey(group, id)] > 0
	d.touchLocked(group, id, d.clock.Now())
	d.mu.Unlock()
	var epoch uint64
	found := false
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName(group))
		if b == nil {
			return nil
		}
		epoch = epochOf(b)
		found = b.Get([]byte("m/"+id)) != nil
		return nil
	})
	if err != nil {
		return 0, backendErr("heartbeat", err)
	}
	if !found || removing {
		return epoch, ErrUnknownMember
	}
	return epoch, nil
}

// removalKey names id of group in boltDir.removing.
func removalKey(group, id string) string { return group + "\x00" + id }

func (d *boltDir) Deregister(_ context.Context, group, id string) (uint64, error) {
	epoch, removed, err := d.remove(group, []string{id}, nil)
	if err != nil {
		return 0, backendErr("deregister", err)
	}
	if removed == 0 {
		return epoch, ErrUnknownMember
	}
	return epoch, nil
}

// remove deletes ids from group in one transaction, bumping the epoch once
// if anything was removed. With lapsed (the sweeper), an id is deleted
// only if its last heartbeat is still the one lapsed holds: a heartbeat or
// registration since keeps it. Heartbeat records are forgotten, after the
// commit, only where nothing refreshed them meanwhile.
func (d *boltDir) remove(group string, ids []string, lapsed map[string]time.Time) (epoch uint64, removed int, err error) {
	last := map[string]time.Time{} // the records to forget, as they were when checked
	var deleting []string          // removalKeys this transaction counted in d.removing
	defer func() {
		d.mu.Lock()
		for _, k := range deleting {
			if d.removing[k]--; d.removing[k] <= 0 {
				delete(d.removing, k)
			}
		}
		d.mu.Unlock()
	}()
	err = d.db.Update(func(tx *bolt.Tx) error {
		clear(last)
		removed = 0
		b := tx.Bucket(bucketName(group))
		d.mu.Lock()
		for _, id := range ids {
			t := d.seen[group][id]
			if lapsed != nil && !t.Equal(lapsed[id]) {
				continue // heartbeat or registration since the sweep chose it
			}
			last[id] = t
			k := []byte("m/" + id)
			if b != nil && b.Get(k) != nil {
				if err := b.Delete(k); err != nil {
					d.mu.Unlock()
					return err
				}
				removed++
				deleting = append(deleting, removalKey(group, id))
				d.removing[removalKey(group, id)]++
			}
		}
		d.mu.Unlock()
		if d.hooks.decided != nil {
			d.hooks.decided()
		}
		if b == nil {
			return nil
		}
		if removed > 0 {
			epoch, err = bump(b, d.clock.Now())
			return err
		}
		epoch = epochOf(b)
		return nil
	})
	if err == nil {
		d.hooks.pause("bolt.remove.committed")
		d.mu.Lock()
		for id, t := range last {
			if d.seen[group][id].Equal(t) {
				delete(d.seen[group], id)
			}
		}
		if len(d.seen[group]) == 0 {
			delete(d.seen, group)
		}
		d.mu.Unlock()
	}
	return epoch, removed, err
}

func (d *boltDir) Members(_ context.Context, group string) (uint64, []wire.MemberInfo, error) {
	var epoch uint64
	var out []wire.MemberInfo
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName(group))
		if b == nil {
			return nil
		}
		epoch = epochOf(b)
		var err error
		out, err = membersOf(b, nil)
		return err
	})
	if err != nil {
		return 0, nil, backendErr("members", err)
	}
	d.mu.Lock()
	for i := range out {
		out[i].LastHeartbeatUnixMS = d.seen[group][out[i].ID].UnixMilli()
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return epoch, out, nil
}

// membersOf decodes the member records of a group's bucket. A record it
// cannot decode goes to skip, or, with skip nil, fails the read.
func membersOf(b *bolt.Bucket, skip func(key []byte, err error)) ([]wire.MemberInfo, error) {
	var out []wire.MemberInfo
	c := b.Cursor()
	prefix := []byte("m/")
	for k, v := c.Seek(prefix); len(k) > 2 && string(k[:2]) == "m/"; k, v = c.Next() {
		var m wire.MemberInfo
		if err := json.Unmarshal(v, &m); err != nil {
			if skip == nil {
				return nil, fmt.Errorf("member %q: %w", k, err)
			}
			skip(k, err)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

func (d *boltDir) Epoch(_ context.Context, group string) (uint64, error) {
	var epoch uint64
	err := d.db.View(func(tx *bolt.Tx) error {
		epoch = epochOf(tx.Bucket(bucketName(group)))
		return nil
	})
	if err != nil {
		return 0, backendErr("epoch", err)
	}
	return epoch, nil
}

func (d *boltDir) Probe(context.Context) error { return nil }

// sweep drops members whose heartbeat lapsed, checking a few times per TTL.
func (d *boltDir) sweep() {
	defer close(d.done)
	t := time.NewTicker(max(d.ttl/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		lapsed := d.lapsed(d.clock.Now())
		if len(lapsed) > 0 {
			d.hooks.pause("bolt.sweep.chosen")
		}
		d.drop(lapsed)
	}
}

// lapsed is the sweep's choice: the members, by group, whose last
// heartbeat is more than a TTL before now, with that heartbeat's time.
func (d *boltDir) lapsed(now time.Time) map[string]map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	lapsed := map[string]map[string]time.Time{}
	for g, ids := range d.seen {
		for id, last := range ids {
			if now.Sub(last) > d.ttl {
				if lapsed[g] == nil {
					lapsed[g] = map[string]time.Time{}
				}
				lapsed[g][id] = last
			}
		}
	}
	return lapsed
}

// drop removes the members lapsed chose, each only if its last heartbeat
// is still the one it was chosen for (remove), and logs and counts them.
func (d *boltDir) drop(lapsed map[string]map[string]time.Time) {
	for g, at := range lapsed {
		ids := make([]string, 0, len(at))
		for id := range at {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		epoch, n, err := d.remove(g, ids, at)
		if err != nil {
			d.log.Error("MDS: cannot drop expired members", "group", g, "error", err.Error())
			continue
		}
		if n > 0 {
			d.log.Warn("MDS: dropped members whose heartbeat lapsed", "group", g, "members", ids, "ttl", d.ttl.String(), "epoch", epoch)
			if d.hooks.expired != nil {
				d.hooks.expired(n)
			}
		}
	}
}

func (d *boltDir) Close() error {
	close(d.stop)
	<-d.done
	return d.db.Close()
}
