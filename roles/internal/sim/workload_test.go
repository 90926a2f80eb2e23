package sim_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// A value names its key and version in a header and fills the rest from a
// stream those two seed, so any bytes a read returns can be checked: they
// are some version of this key, byte for byte, or they are wrong.
const (
	valueMagic  = "DFKVSIM1"
	valueHeader = 24
)

func keyHash(key []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(key)
	return h.Sum64()
}

func makeValue(key []byte, ver, size int) []byte {
	b := make([]byte, size)
	copy(b, valueMagic)
	binary.LittleEndian.PutUint64(b[8:], keyHash(key))
	binary.LittleEndian.PutUint32(b[16:], uint32(ver))
	binary.LittleEndian.PutUint32(b[20:], uint32(size))
	fill := rand.NewChaCha8(fillSeed(key, ver))
	_, _ = fill.Read(b[valueHeader:])
	return b
}

func fillSeed(key []byte, ver int) (s [32]byte) {
	binary.LittleEndian.PutUint64(s[:], keyHash(key))
	binary.LittleEndian.PutUint64(s[8:], uint64(ver))
	return s
}

// parseValue returns the version b holds of key, or why b is no value of
// key at all.
func parseValue(key, b []byte) (int, error) {
	if len(b) < valueHeader || string(b[:8]) != valueMagic {
		return 0, fmt.Errorf("%d bytes without the value header", len(b))
	}
	if h := binary.LittleEndian.Uint64(b[8:]); h != keyHash(key) {
		return 0, fmt.Errorf("the value of another key (hash %x)", h)
	}
	ver := int(binary.LittleEndian.Uint32(b[16:]))
	if size := int(binary.LittleEndian.Uint32(b[20:])); size != len(b) {
		return 0, fmt.Errorf("version %d cut or padded: %d bytes of %d", ver, len(b), size)
	}
	if !bytes.Equal(b, makeValue(key, ver, len(b))) {
		return 0, fmt.Errorf("version %d with corrupted bytes", ver)
	}
	return ver, nil
}

// errClass names an error for the log without text that may vary.
func errClass(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, client.ErrPeerDown) {
		return "unreachable"
	}
	for st := wire.Status(1); st <= wire.LastStatus; st++ {
		if errors.Is(err, st) {
			return strings.ToLower(st.String())
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	default:
		return "error"
	}
}

// isMiss reports a miss the node answered (not an unreachable node's).
func isMiss(err error) bool {
	return errors.Is(err, wire.StatusNotFound) && !errors.Is(err, client.ErrPeerDown)
}

const keysPerClient = 24

// run is the client's workload: one operation at a time, each chosen,
// keyed and sized by the client's own seeded source, until stop.
func (c *clientProc) run(stop <-chan struct{}) {
	w := c.w
	for {
		select {
		case <-stop:
			return
		case <-w.stopped:
			return
		default:
		}
		time.Sleep(between(c.rng, 5*time.Millisecond, 65*time.Millisecond))
		switch pick := c.rng.IntN(100); {
		case pick < 25:
			c.put()
		case pick < 50:
			c.get()
		case pick < 60:
			c.putBatch()
		case pick < 70:
			c.getBatch()
		case pick < 77:
			c.exist()
		case pick < 82:
			c.prefix()
		case pick < 93:
			c.remove()
		default:
			c.removeBatch()
		}
	}
}

func (c *clientProc) key() *keyState { return c.keys[c.rng.IntN(len(c.keys))] }

func (c *clientProc) size() int {
	if c.rng.IntN(4) == 0 {
		return 1024 + c.rng.IntN(15*1024)
	}
	return valueHeader + c.rng.IntN(232)
}

func (c *clientProc) logf(format string, args ...any) {
	c.w.log.add(c.w.now(), c.name, fmt.Sprintf(format, args...))
}

// newVersion starts a write of a new version of k.
func (c *clientProc) newVersion(k *keyState) (int, []byte) {
	k.next++
	v := k.next
	size := c.size()
	k.written[v] = &version{start: c.w.now(), size: size, unsure: true}
	return v, makeValue(k.key, v, size)
}

// settle records what a write's answer says about k.
func (c *clientProc) settle(k *keyState, v int, err error) {
	if err == nil {
		k.written[v].unsure = false
		k.cur = v
	}
}

func (c *clientProc) removed(k *keyState, err error) {
	if err == nil || isMiss(err) {
		k.cur = 0
	}
}

func (c *clientProc) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// check verifies what a read of k returned.
func (c *clientProc) check(op string, k *keyState, data []byte, err error) string {
	if err != nil {
		if !isMiss(err) {
			return errClass(err)
		}
		return "miss"
	}
	v, perr := parseValue(k.key, data)
	if perr != nil {
		c.w.violation(c.name, "%s %s returned bytes no one wrote: %v", op, k.key, perr)
		return "corrupt"
	}
	if k.written[v] == nil {
		c.w.violation(c.name, "%s %s returned version %d, never written", op, k.key, v)
	} else if !c.legal(k, v) {
		c.w.violation(c.name, "%s %s returned version %d, but version %d was acknowledged since (written at %.6fs) and the membership has not changed",
			op, k.key, v, k.cur, k.written[v].start.Seconds())
	}
	return fmt.Sprintf("v%d", v)
}

func (c *clientProc) put() {
	k := c.key()
	v, val := c.newVersion(k)
	ctx, cancel := c.ctx()
	err := c.cl.Put(ctx, k.key, val)
	cancel()
	c.observeRing()
	c.settle(k, v, err)
	c.logf("put %s v%d %dB: %s", k.key, v, len(val), errClass(err))
}

const readBuf = 32 << 10

// bufs returns n read buffers of the client's, reused from call to call.
func (c *clientProc) bufs(n int) [][]byte {
	for len(c.readBufs) < n {
		c.readBufs = append(c.readBufs, make([]byte, readBuf))
	}
	return c.readBufs[:n]
}

func (c *clientProc) get() {
	k := c.key()
	buf := c.bufs(1)[0]
	ctx, cancel := c.ctx()
	n, _, err := c.cl.Get(ctx, k.key, buf)
	cancel()
	c.observeRing()
	c.logf("get %s: %s", k.key, c.check("GET", k, buf[:n], err))
}

// putBatch writes a batch in which one key repeats, across frames (the
// client splits batches into frames of two): the last item of a repeated
// key is the one that must win.
func (c *clientProc) putBatch() {
	n := 3 + c.rng.IntN(4)
	ks := make([]*keyState, n)
	for i := range ks {
		ks[i] = c.key()
	}
	ks[n-1] = ks[c.rng.IntN(n-1)]
	keys, vals, vers := make([][]byte, n), make([][]byte, n), make([]int, n)
	for i, k := range ks {
		vers[i], vals[i] = c.newVersion(k)
		keys[i] = k.key
	}
	ctx, cancel := c.ctx()
	errs := c.cl.PutBatch(ctx, keys, vals)
	cancel()
	c.observeRing()
	var out []string
	for i, k := range ks {
		c.settle(k, vers[i], errs[i])
		out = append(out, fmt.Sprintf("%s=v%d:%s", k.key, vers[i], errClass(errs[i])))
	}
	c.logf("putbatch %s", strings.Join(out, " "))
}

func (c *clientProc) getBatch() {
	n := 2 + c.rng.IntN(5)
	ks := make([]*keyState, n)
	keys, dsts := make([][]byte, n), c.bufs(n)
	for i := range ks {
		ks[i] = c.key()
		keys[i] = ks[i].key
	}
	ctx, cancel := c.ctx()
	res := c.cl.GetBatch(ctx, keys, dsts)
	cancel()
	c.observeRing()
	var out []string
	for i, k := range ks {
		out = append(out, fmt.Sprintf("%s=%s", k.key, c.check("GET_BATCH", k, res[i].Data, res[i].Err)))
	}
	c.logf("getbatch %s", strings.Join(out, " "))
}

// existOK checks an EXIST hit: some version the key may hold has the
// length the node reported.
func (c *clientProc) existOK(op string, k *keyState, stored uint64) bool {
	if k.cur != 0 && uint64(k.written[k.cur].size) == stored {
		return true
	}
	for v, wv := range k.written {
		if uint64(wv.size) == stored && c.legal(k, v) {
			return true
		}
	}
	c.w.violation(c.name, "%s %s found %d stored bytes, no version it may hold has that length (current v%d)", op, k.key, stored, k.cur)
	return false
}

func (c *clientProc) exist() {
	k := c.key()
	ctx, cancel := c.ctx()
	stored, err := c.cl.Exist(ctx, k.key)
	cancel()
	c.observeRing()
	if err == nil {
		c.existOK("EXIST", k, stored)
	}
	c.logf("exist %s: %s %d", k.key, errClass(err), stored)
}

// prefix asks how many leading keys of a run of the client's keys are
// stored: each of them must be a key that may be stored.
func (c *clientProc) prefix() {
	start := c.rng.IntN(len(c.keys))
	n := 1 + c.rng.IntN(6)
	var keys [][]byte
	for i := 0; i < n; i++ {
		keys = append(keys, c.keys[(start+i)%len(c.keys)].key)
	}
	// Half of them pin what they count, as an engine's connector does
	// before it loads the blocks: a node with the RAM tier holds each pin
	// until a GET of its key or the lease runs out.
	pinned := c.rng.IntN(2) == 0
	ctx, cancel := c.ctx()
	count, err := c.cl.ExistPrefix(ctx, keys)
	if pinned {
		count, err = c.cl.ExistPrefixPinned(ctx, keys)
	}
	cancel()
	c.observeRing()
	if err == nil {
		for i := 0; i < count && i < n; i++ {
			if k := c.keys[(start+i)%len(c.keys)]; !c.mayExist(k) {
				c.w.violation(c.name, "prefix count %d includes %s, removed (acknowledged) with no membership change since", count, k.key)
			}
		}
	}
	c.logf("prefix %s+%d: %s %d", c.keys[start].key, n, errClass(err), count)
}

func (c *clientProc) remove() {
	k := c.key()
	ctx, cancel := c.ctx()
	err := c.cl.Remove(ctx, k.key)
	cancel()
	c.observeRing()
	c.removed(k, err)
	c.logf("remove %s: %s", k.key, errClass(err))
}

func (c *clientProc) removeBatch() {
	n := 2 + c.rng.IntN(3)
	ks := make([]*keyState, n)
	keys := make([][]byte, n)
	for i := range ks {
		ks[i] = c.key()
		keys[i] = ks[i].key
	}
	ctx, cancel := c.ctx()
	errs := c.cl.RemoveBatch(ctx, keys)
	cancel()
	c.observeRing()
	var out []string
	for i, k := range ks {
		c.removed(k, errs[i])
		out = append(out, fmt.Sprintf("%s:%s", k.key, errClass(errs[i])))
	}
	c.logf("removebatch %s", strings.Join(out, " "))
}
