package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
	"github.com/dfkv/dfkv/wire/shm"
)

// shmNodeFlags are a node with the RAM tier and a shared-memory socket.
func shmNodeFlags(t testing.TB, extra map[string][]string) (map[string][]string, string) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "dfkv.sock")
	flags := withRAMTier(map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}, "shm-socket": {sock}})
	for k, v := range extra {
		flags[k] = v
	}
	return flags, sock
}

func shmClient(t *testing.T, addr, mode string) *client.Client {
	t.Helper()
	cl, err := client.Open(client.Options{Namespace: []byte("ram"), Members: []string{addr}, Timeout: 10 * time.Second, SharedMemory: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// nodeStats asks the node at addr for STATS.
func nodeStats(t *testing.T, addr string) StatsReply {
	t.Helper()
	c := dial(t, addr)
	defer c.Close()
	writeReq(t, c, wire.RequestHeader{Op: wire.OpStats}, nil)
	h, body := readResp(t, c)
	var r StatsReply
	if h.Status != wire.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("STATS: %s %s", h.Status, body)
	}
	return r
}

// TestShmServesThroughLeases: a client on the node's host reads resident
// values out of the arena under leases and writes through its staging
// region; what it stores reads back the same over TCP and the other way
// round, ranges included; values not in the arena (larger than an extent)
// come inline; every lease ends when the client closes.
func TestShmServesThroughLeases(t *testing.T) {
	flags, _ := shmNodeFlags(t, nil)
	addr, _, _ := runNode(t, flags)
	viaShm := shmClient(t, addr, client.ShmOn)
	viaTCP := shmClient(t, addr, client.ShmOff)
	ctx := context.Background()
	vals := map[string][]byte{}
	for i, n := range []int{1, 4097, 1 << 20, 17 << 20} {
		v := make([]byte, n)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		vals[fmt.Sprint("k", i)] = v
	}
	i := 0
	for k, v := range vals {
		w := viaShm
		if i%2 == 1 {
			w = viaTCP
		}
		i++
		if err := w.Put(ctx, []byte(k), v); err != nil {
			t.Fatalf("PUT %s (%d bytes): %v", k, len(v), err)
		}
	}
	for k, v := range vals {
		for _, cl := range []*client.Client{viaShm, viaTCP} {
			dst := make([]byte, len(v))
			n, stored, err := cl.Get(ctx, []byte(k), dst)
			if err != nil || stored != uint64(len(v)) || !bytes.Equal(dst[:n], v) {
				t.Fatalf("GET %s: %d of %d bytes, %v", k, n, stored, err)
			}
		}
		if len(v) > 10 {
			dst := make([]byte, 7)
			n, _, err := viaShm.GetRange(ctx, []byte(k), 3, 7, dst)
			if err != nil || !bytes.Equal(dst[:n], v[3:10]) {
				t.Fatalf("GetRange %s: %v %q", k, err, dst[:n])
			}
		}
	}
	keys := [][]byte{[]byte("k0"), []byte("nope"), []byte("k2"), []byte("k3"), []byte("k1")}
	res := viaShm.GetBatch(ctx, keys, nil)
	for j, r := range res {
		want, ok := vals[string(keys[j])]
		if !ok {
			if wire.StatusOf(r.Err) != wire.StatusNotFound {
				t.Fatalf("batch item %s: %v, want NOT_FOUND", keys[j], r.Err)
			}
			continue
		}
		if r.Err != nil || !bytes.Equal(r.Data, want) {
			t.Fatalf("batch item %s: %d bytes, %v", keys[j], len(r.Data), r.Err)
		}
	}
	errs := viaShm.PutBatch(ctx, [][]byte{[]byte("b0"), []byte("b1")}, [][]byte{vals["k1"], vals["k2"]})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("PutBatch: %v", err)
		}
	}
	got, err := viaTCP.GetAuto(ctx, []byte("b1"))
	if err != nil || !bytes.Equal(got, vals["k2"]) {
		t.Fatalf("a value stored through staging, read over TCP: %v", err)
	}
	st := nodeStats(t, addr).Shm
	if st == nil || st.Leases.Granted < 5 || st.Conns < 1 {
		t.Fatalf("shared-memory stats %+v: want leases granted and a connection open", st)
	}
	viaShm.Close()
	eventually(t, "every lease released once the client closed", func() bool {
		s := nodeStats(t, addr).Shm
		return s.Leases.Live == 0 && s.Conns == 0
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // bounds a hang; not a speed check
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawShm is a hand-driven shared-memory connection.
type rawShm struct {
	c     *net.UnixConn
	w     wire.LeaseWelcome
	words []byte
	arena []byte
	stage []byte
}

func dialShm(t *testing.T, path string, instance uint64) *rawShm {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawShm{c: nc.(*net.UnixConn)}
	t.Cleanup(func() { r.c.Close() })
	if _, err := nc.Write(wire.AppendLeaseHello(nil, wire.LeaseHello{Instance: instance})); err != nil {
		t.Fatal(err)
	}
	w, files, err := shm.ReceiveWelcome(r.c)
	if err != nil {
		t.Fatalf("lease bootstrap: %v", err)
	}
	r.w = w
	if r.words, err = shm.Map(files[shm.FileWords], w.LeaseWords*8, false); err != nil {
		t.Fatal(err)
	}
	if r.arena, err = shm.Map(files[shm.FileArena], w.ArenaBytes, false); err != nil {
		t.Fatal(err)
	}
	if r.stage, err = shm.Map(files[shm.FileStaging], w.StagingBytes, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	t.Cleanup(func() { shm.Unmap(r.words); shm.Unmap(r.arena); shm.Unmap(r.stage) })
	return r
}

func (r *rawShm) word(id wire.LeaseID) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.words[uint64(id.Index())*8])))
}

// leaseGet sends a LEASE_GET of whole values with releases first.
func (r *rawShm) leaseGet(t *testing.T, flags uint64, release []wire.LeaseID, keys ...wire.BlockKey) []wire.LeaseRecord {
	t.Helper()
	body := []byte{}
	for _, id := range release {
		body = binary.LittleEndian.AppendUint64(body, uint64(id))
	}
	for _, k := range keys {
		body = wire.AppendGetItem(body, k, 0, 0)
	}
	writeReq(t, r.c, wire.RequestHeader{Op: wire.OpLeaseGet, Key: wire.BlockKey{Tenant: flags}, Offset: uint64(len(release)), Length: uint64(len(keys)), BodyLen: uint64(len(body))}, body)
	h, _ := readResp(t, r.c)
	if h.Status != wire.StatusOK || h.Stored != uint64(len(keys)) {
		t.Fatalf("LEASE_GET answered %s with %d records", h.Status, h.Stored)
	}
	out := make([]wire.LeaseRecord, len(keys))
	for i := range keys {
		var b [wire.LeaseRecordLen]byte
		if _, err := io.ReadFull(r.c, b[:]); err != nil {
			t.Fatal(err)
		}
		rec, err := wire.DecodeLeaseRecord(b[:])
		if err != nil {
			t.Fatal(err)
		}
		if rec.Kind == wire.LeaseInline {
			if _, err := io.CopyN(io.Discard, r.c, int64(rec.Length)); err != nil {
				t.Fatal(err)
			}
		}
		out[i] = rec
	}
	return out
}

// release sends RELEASE and returns how many the node ended.
func (r *rawShm) release(t *testing.T, ids ...wire.LeaseID) uint64 {
	t.Helper()
	var body []byte
	for _, id := range ids {
		body = binary.LittleEndian.AppendUint64(body, uint64(id))
	}
	writeReq(t, r.c, wire.RequestHeader{Op: wire.OpRelease, Offset: uint64(len(ids)), BodyLen: uint64(len(body))}, body)
	h, _ := readResp(t, r.c)
	if h.Status != wire.StatusOK {
		t.Fatalf("RELEASE answered %s", h.Status)
	}
	return h.Stored
}

// putResident stores v under k over TCP and leases it once, so it is in
// the arena; it returns the key as the node sees it.
func putResident(t *testing.T, addr string, name string, v []byte) wire.BlockKey {
	t.Helper()
	cl := shmClient(t, addr, client.ShmOff)
	if err := cl.Put(context.Background(), []byte(name), v); err != nil {
		t.Fatal(err)
	}
	k, err := cl.BlockKey([]byte(name))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestShmLeaseExpiresForHungClient: a client that leases and never
// releases pins nothing past server.lease_ms: the lease ends, its word
// clears (so a late copy is detected), and a release afterwards ends
// nothing.
func TestShmLeaseExpiresForHungClient(t *testing.T) {
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-ms": {"50"}})
	addr, _, _ := runNode(t, flags)
	k := putResident(t, addr, "hung", bytes.Repeat([]byte("h"), 100000))
	r := dialShm(t, sock, 0)
	recs := r.leaseGet(t, 0, nil, k)
	if recs[0].Kind != wire.LeaseArena || recs[0].Length != 100000 {
		t.Fatalf("record %+v, want a lease on 100000 arena bytes", recs[0])
	}
	id := recs[0].Lease
	if r.word(id) != uint64(id) {
		t.Fatal("the lease word does not hold the live lease's id")
	}
	if got := r.arena[recs[0].Offset : recs[0].Offset+recs[0].Length]; !bytes.Equal(got, bytes.Repeat([]byte("h"), 100000)) {
		t.Fatal("the leased arena bytes are not the value")
	}
	eventually(t, "the unreleased lease expired", func() bool { return r.word(id) == 0 })
	st := nodeStats(t, addr).Shm.Leases
	if st.Expired < 1 || st.Live != 0 {
		t.Fatalf("lease stats %+v: want it expired and none live", st)
	}
	if n := r.release(t, id); n != 0 {
		t.Fatalf("a release of an expired lease ended %d", n)
	}
}

// TestShmLeaseIDsCannotBeForged: a connection cannot release another's
// lease, nor one that never existed; the holder's lease stays live.
func TestShmLeaseIDsCannotBeForged(t *testing.T) {
	flags, sock := shmNodeFlags(t, nil)
	addr, _, _ := runNode(t, flags)
	k := putResident(t, addr, "mine", []byte("value of a"))
	a, b := dialShm(t, sock, 0), dialShm(t, sock, 0)
	id := a.leaseGet(t, 0, nil, k)[0].Lease
	if id == 0 {
		t.Fatal("no lease")
	}
	forged := []wire.LeaseID{id, id + 1, wire.LeaseID(uint64(1<<30)<<32 | 1), 0}
	if n := b.release(t, forged...); n != 0 {
		t.Fatalf("another connection released %d of the holder's or forged leases", n)
	}
	if a.word(id) != uint64(id) {
		t.Fatal("the holder's lease ended")
	}
	if st := nodeStats(t, addr).Shm.Leases; st.Refused < 2 || st.Live != 1 {
		t.Fatalf("lease stats %+v: want the foreign and out-of-range ids refused, 1 live", st)
	}
	// The holder's release rides on its next request.
	next := a.leaseGet(t, 0, []wire.LeaseID{id}, k)[0].Lease
	if a.word(id) == uint64(id) || next == id {
		t.Fatal("the piggybacked release did not end the lease")
	}
	if st := nodeStats(t, addr).Shm.Leases; st.Live != 1 || st.Released != 1 {
		t.Fatalf("lease stats %+v: want the old lease released and the new one live", st)
	}
}

// TestShmPromoteLeasesColdValue: a LEASE_GET with the promote flag reads
// a value that is only on disk into RAM and leases it; without the flag
// it comes inline.
func TestShmPromoteLeasesColdValue(t *testing.T) {
	dir := t.TempDir()
	base := map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}}
	addr, _, stop := runNode(t, base)
	k := putResident(t, addr, "cold", bytes.Repeat([]byte("c"), 50000))
	k2 := putResident(t, addr, "cold2", bytes.Repeat([]byte("d"), 50000))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	addr, _, _ = runNode(t, withRAMTier(map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}, "shm-socket": {sock}}))
	r := dialShm(t, sock, 0)
	if rec := r.leaseGet(t, 0, nil, k)[0]; rec.Kind != wire.LeaseInline || rec.Length != 50000 {
		t.Fatalf("cold value without promote: %+v, want it inline", rec)
	}
	if rec := r.leaseGet(t, wire.LeaseFlagPromote, nil, k2)[0]; rec.Kind != wire.LeaseArena || rec.Length != 50000 {
		t.Fatalf("cold value with promote: %+v, want it leased", rec)
	} else if !bytes.Equal(r.arena[rec.Offset:rec.Offset+rec.Length], bytes.Repeat([]byte("d"), 50000)) {
		t.Fatal("the promoted value's arena bytes are wrong")
	}
	_ = addr
}

// TestShmRefusals: lease ops on the TCP port, a TCP frame or an old
// epoch on the shared-memory socket, and a stale node instance are each
// refused with a status that says so; the node keeps serving.
func TestShmRefusals(t *testing.T) {
	flags, sock := shmNodeFlags(t, nil)
	addr, _, _ := runNode(t, flags)
	c := dial(t, addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpRelease, Offset: 1, BodyLen: 8}, make([]byte, 8))
	h, body := readResp(t, c)
	if h.Status != wire.StatusUnsupported || !strings.Contains(string(body), "shared-memory socket") {
		t.Fatalf("RELEASE on the TCP port: %s %q", h.Status, body)
	}
	expectClosed(t, c)
	refused := func(first []byte, want wire.Status, msg string) {
		t.Helper()
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(first)
		_, _, err = shm.ReceiveWelcome(nc.(*net.UnixConn))
		if wire.StatusOf(err) != want || !strings.Contains(err.Error(), msg) {
			t.Fatalf("first bytes %x: %v, want %s mentioning %q", first[:2], err, want, msg)
		}
	}
	refused(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing}), wire.StatusEpochMismatch, "data port")
	refused(wire.AppendLeaseHello(nil, wire.LeaseHello{Epoch: 6}), wire.StatusEpochMismatch, "lease protocol epoch 6")
	refused(wire.AppendLeaseHello(nil, wire.LeaseHello{Instance: 12345}), wire.StatusUnavailable, "restarted")
	r := dialShm(t, sock, 0)
	if got := r.leaseGet(t, 0, nil, wire.BlockKey{Tenant: 1})[0]; got.Status != wire.StatusNotFound {
		t.Fatalf("after the refusals, a LEASE_GET of a missing key: %+v", got)
	}
}

// TestShmSocketPath: a stale socket file of a stopped node is replaced, a
// live one or a file that is not a socket refuses the start with the
// reason, and the socket gets the configured mode.
func TestShmSocketPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // a stale socket file, as a killed node leaves it
	got, err := listenShm(path, "0640")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("socket mode %v, want 0640", fi.Mode().Perm())
	}
	if _, err := listenShm(path, "0600"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a live socket: %v, want in use", err)
	}
	got.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket file outlived its listener: %v", err)
	}
	os.WriteFile(path, []byte("x"), 0o600)
	if _, err := listenShm(path, "0600"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a regular file: %v, want not a socket", err)
	}
	if _, _, err := config.LoadFrom("server", "", nil, map[string][]string{"shm-socket": {"relative.sock"}}); err == nil {
		t.Fatal("a relative socket path was accepted")
	}
}

// TestShmClientKilledMidRead: a client process SIGKILLed while it holds
// leases pins nothing: its connection closes and the node ends its
// leases at once, long before they would expire.
func TestShmClientKilledMidRead(t *testing.T) {
	if os.Getenv("DFKV_TEST_SHM_HOLDER") != "" {
		holdLeases(t)
		return
	}
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	putResident(t, addr, "held", bytes.Repeat([]byte("x"), 1<<20))
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmClientKilledMidRead$", "-test.v")
	cmd.Env = append(os.Environ(), "DFKV_TEST_SHM_HOLDER="+sock, "DFKV_TEST_SHM_ADDR="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var seen string
	for !strings.Contains(seen, "HOLDING") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("holder ended before it held leases: %v (%s)", err, seen)
		}
		seen += string(buf[:n])
	}
	if st := nodeStats(t, addr).Shm.Leases; st.Live < 1 {
		t.Fatalf("the holder holds no lease: %+v", st)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	eventually(t, "the killed client's leases ended", func() bool { return nodeStats(t, addr).Shm.Leases.Live == 0 })
	if st := nodeStats(t, addr).Shm.Leases; st.Expired != 0 {
		t.Fatalf("leases expired (%+v): they should have ended with the connection", st)
	}
}

// holdLeases is the child of TestShmClientKilledMidRead: it leases the
// value, says so, and waits to be killed in the middle of "reading" it.
func holdLeases(t *testing.T) {
	r := dialShm(t, os.Getenv("DFKV_TEST_SHM_HOLDER"), 0)
	cl := shmClient(t, os.Getenv("DFKV_TEST_SHM_ADDR"), client.ShmOff)
	k, _ := cl.BlockKey([]byte("held"))
	if rec := r.leaseGet(t, 0, nil, k)[0]; rec.Kind != wire.LeaseArena {
		t.Fatalf("holder: %+v", rec)
	}
	fmt.Println("HOLDING")
	time.Sleep(time.Hour)
}

// FuzzShmConn: whatever a client sends on the shared-memory socket after
// its hello (malformed lease frames, lying item tables, staging ranges
// out of bounds, forged lease ids), the node answers or closes that
// connection and keeps serving the next one.
func FuzzShmConn(f *testing.F) {
	flags, sock := shmNodeFlags(f, map[string][]string{"shm-staging-bytes": {"1MiB"}})
	addr, _, _ := runNode(f, flags)
	seed := func(h wire.RequestHeader, body []byte) []byte { return append(wire.AppendRequest(nil, &h), body...) }
	f.Add(seed(wire.RequestHeader{Op: wire.OpLeaseGet, Length: 1, BodyLen: wire.LeaseItemLen}, wire.AppendGetItem(nil, wire.BlockKey{Tenant: 1}, 0, 0)))
	f.Add(seed(wire.RequestHeader{Op: wire.OpLeasePut, Length: 1, BodyLen: wire.LeaseItemLen}, wire.AppendGetItem(nil, wire.BlockKey{Tenant: 1}, 1<<20-3, 9)))
	f.Add(seed(wire.RequestHeader{Op: wire.OpLeasePut, Length: 1, BodyLen: wire.LeaseItemLen}, wire.AppendGetItem(nil, wire.BlockKey{Tenant: 1}, 1<<63, 1<<63)))
	f.Add(seed(wire.RequestHeader{Op: wire.OpRelease, Offset: 2, BodyLen: 16}, bytes.Repeat([]byte{0xff}, 16)))
	f.Add(seed(wire.RequestHeader{Op: wire.OpLeaseGet, Offset: 1, Length: 1, BodyLen: 8}, nil))
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("the node stopped accepting: %v", err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(300 * time.Millisecond))
		nc.Write(wire.AppendLeaseHello(nil, wire.LeaseHello{}))
		if _, files, err := shm.ReceiveWelcome(nc.(*net.UnixConn)); err != nil {
			t.Fatalf("bootstrap: %v", err)
		} else {
			for _, fl := range files {
				fl.Close()
			}
		}
		nc.Write(data)
		_ = nc.(*net.UnixConn).CloseWrite() // the node reads to the end, answers, and closes
		_, _ = io.Copy(io.Discard, nc)
		if n++; n%50 == 1 {
			r := dialShm(t, sock, 0)
			if got := r.leaseGet(t, 0, nil, wire.BlockKey{Tenant: 9})[0]; got.Status != wire.StatusNotFound {
				t.Fatalf("a fresh connection after the input: %+v", got)
			}
			r.c.Close()
			_ = addr
		}
	})
}

// BenchmarkShm compares one client's GET and PUT of 1 MiB over shared
// memory and over loopback TCP against the same node, and one thread's
// memory copy (1 MiB chunks over 1 GiB, DRAM to DRAM), in one run:
//
//	go test -run XXX -bench Shm -benchtime 3s ./roles/server/
func BenchmarkShm(b *testing.B) {
	b.Run("memcpy-1MiB", func(b *testing.B) {
		src, dst := make([]byte, 1<<30), make([]byte, 1<<30)
		for i := range src {
			src[i] = byte(i) // touched: a copy measures DRAM, not page faults
		}
		copy(dst, src)
		b.SetBytes(1 << 20)
		for i := 0; b.Loop(); i++ {
			at := (i % 1024) << 20
			copy(dst[at:at+1<<20], src[at:at+1<<20])
		}
	})
	flags, _ := shmNodeFlags(b, map[string][]string{"ram-tier-bytes": {"512MiB"}})
	addr, _, _ := runNode(b, flags)
	const size = 1 << 20
	val := bytes.Repeat([]byte("v"), size)
	ctx := context.Background()
	for _, mode := range []string{client.ShmOn, client.ShmOff} {
		cl, err := client.Open(client.Options{Namespace: []byte("ram"), Members: []string{addr}, SharedMemory: mode})
		if err != nil {
			b.Fatal(err)
		}
		keys := make([][]byte, 64)
		for i := range keys {
			keys[i] = []byte(fmt.Sprint("bench", i))
			if err := cl.Put(ctx, keys[i], val); err != nil {
				b.Fatal(err)
			}
		}
		dst := make([]byte, size)
		b.Run("get-1MiB/"+mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				if _, _, err := cl.Get(ctx, keys[i%len(keys)], dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("put-1MiB/"+mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				if err := cl.Put(ctx, keys[i%len(keys)], val); err != nil {
					b.Fatal(err)
				}
			}
		})
		cl.Close()
	}
}

// TestExistPinKeepsValuesInRAM: a BATCH_EXIST with the pin flag keeps
// what it found resident through eviction pressure until a GET reads it
// (from another client here: pins are the node's), and a pin nobody reads
// ends after server.lease_ms.
func TestExistPinKeepsValuesInRAM(t *testing.T) {
	dir := t.TempDir()
	flags := map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"1GiB"}, "ram-tier": {"1"}, "ram-tier-bytes": {"64MiB"},
		"ram-tier-large-reserve-bytes": {"0"}, "lease-ms": {"600000"}}
	addr, _, _ := runNode(t, flags)
	ctx := context.Background()
	a, b := shmClient(t, addr, client.ShmOff), shmClient(t, addr, client.ShmOff)
	val := bytes.Repeat([]byte("p"), 1<<20)
	if err := a.Put(ctx, []byte("pinned"), val); err != nil {
		t.Fatal(err)
	}
	res := a.ExistBatchPinned(ctx, [][]byte{[]byte("pinned"), []byte("absent")})
	if res[0].Err != nil || res[0].Stored != 1<<20 || wire.StatusOf(res[1].Err) != wire.StatusNotFound {
		t.Fatalf("pinned lookup: %+v", res)
	}
	if st := nodeStats(t, addr).Pins; st == nil || st.Live != 1 {
		t.Fatalf("pins %+v, want 1 live", st)
	}
	// Three times the arena in other values: unpinned, "pinned" would be
	// evicted from RAM long before the end.
	for i := range 192 {
		// CACHE_FULL: the disk is behind the write-back (a loaded
		// machine); a client waits and sends the PUT again.
		err := a.Put(ctx, []byte(fmt.Sprint("filler", i)), val)
		for tries := 0; wire.StatusOf(err) == wire.StatusCacheFull && tries < 200; tries++ {
			time.Sleep(10 * time.Millisecond)
			err = a.Put(ctx, []byte(fmt.Sprint("filler", i)), val)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	before := nodeStats(t, addr).RAM.BackingReads
	got, err := b.GetAuto(ctx, []byte("pinned"))
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("GET of the pinned value: %v", err)
	}
	after := nodeStats(t, addr)
	if after.RAM.BackingReads != before {
		t.Fatalf("the pinned value was read from disk (%d backing reads): it left RAM", after.RAM.BackingReads-before)
	}
	if after.Pins.Live != 0 || after.Pins.Released != 1 {
		t.Fatalf("pins after the GET %+v: want it ended by the read", after.Pins)
	}
	// Evicted by the same pressure without a pin: the control.
	before = after.RAM.BackingReads
	if _, err := b.GetAuto(ctx, []byte("filler0")); err != nil {
		t.Fatal(err)
	}
	if nodeStats(t, addr).RAM.BackingReads == before {
		t.Fatal("an unpinned value written as long ago is still in RAM: the pressure evicted nothing, so the test proves nothing")
	}
}

// TestExistPinExpires: a pin nobody reads ends after server.lease_ms.
func TestExistPinExpires(t *testing.T) {
	flags, _ := shmNodeFlags(t, map[string][]string{"lease-ms": {"50"}})
	addr, _, _ := runNode(t, flags)
	ctx := context.Background()
	a := shmClient(t, addr, client.ShmOff)
	if err := a.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ExistPrefixPinned(ctx, [][]byte{[]byte("k")}); n != 1 || err != nil {
		t.Fatalf("ExistPrefixPinned: %d, %v", n, err)
	}
	eventually(t, "the unread pin expired", func() bool {
		st := nodeStats(t, addr).Pins
		return st.Live == 0 && st.Expired == 1
	})
}

// TestExistPinOncePerRequest: a key named many times in one pinned
// BATCH_EXIST is answered every time but pinned once, so one frame
// cannot fill the node's pin table with one key (or walk its pin list
// once per copy); separate requests each pin it, and a GET ends one.
func TestExistPinOncePerRequest(t *testing.T) {
	flags, _ := shmNodeFlags(t, map[string][]string{"lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	ctx := context.Background()
	a := shmClient(t, addr, client.ShmOff)
	if err := a.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	same := make([][]byte, 500)
	for i := range same {
		same[i] = []byte("k")
	}
	for i, r := range a.ExistBatchPinned(ctx, same) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("copy %d of the key: %+v", i, r)
		}
	}
	if st := nodeStats(t, addr).Pins; st.Live != 1 {
		t.Fatalf("%d live pins after one request naming the key 500 times, want 1", st.Live)
	}
	for range 3 {
		a.ExistBatchPinned(ctx, [][]byte{[]byte("k")})
	}
	if st := nodeStats(t, addr).Pins; st.Live != 4 {
		t.Fatalf("%d live pins after four requests, want 4", st.Live)
	}
	if _, err := a.GetAuto(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if st := nodeStats(t, addr).Pins; st.Live != 3 || st.Released != 1 {
		t.Fatalf("pins after a GET %+v, want 3 live and 1 released", st)
	}
}

// TestShmPutKeepsQuotas: a PUT through the staging region is charged to
// its tenant's quota like a TCP PUT: past it, QUOTA_EXCEEDED, and what
// was refused is not stored.
func TestShmPutKeepsQuotas(t *testing.T) {
	flags, _ := shmNodeFlags(t, map[string][]string{"tenant-default-quota": {"1MiB"}})
	addr, _, _ := runNode(t, flags)
	cl := shmClient(t, addr, client.ShmOn)
	val := bytes.Repeat([]byte("q"), 400<<10)
	keys := [][]byte{[]byte("q0"), []byte("q1"), []byte("q2"), []byte("q3")}
	errs := cl.PutBatch(context.Background(), keys, [][]byte{val, val, val, val})
	over := 0
	for i, err := range errs {
		switch wire.StatusOf(err) {
		case wire.StatusOK:
		case wire.StatusQuotaExceeded:
			over++
			if _, err := cl.Exist(context.Background(), keys[i]); wire.StatusOf(err) != wire.StatusNotFound {
				t.Fatalf("%s was refused for quota but is stored: %v", keys[i], err)
			}
		default:
			t.Fatalf("%s: %v", keys[i], err)
		}
	}
	if over < 2 {
		t.Fatalf("4 × 400 KiB under a 1 MiB quota: %d refused, want at least 2 (%v)", over, errs)
	}
}

// A client on the socket is handed the arena and the lease words to read
// only, and cannot get around it: reopening either descriptor for writing
// through /proc (which a memfd's inode allows) gives neither a writable
// mapping nor write(2). A client that could would rewrite other tenants'
// values in place, or put back a lease word to defeat another client's
// check after its copy.
func TestShmArenaAndWordsCannotBeWritten(t *testing.T) {
	probe, err := shm.MemfdForReaders("dfkv-seal-probe", 4096)
	if err != nil {
		t.Fatal(err)
	}
	sealable := shm.SealWrites(probe) == nil
	probe.Close()
	if !sealable {
		t.Skip("this kernel cannot seal a memfd against writes (Linux 5.1)")
	}
	flags, sock := shmNodeFlags(t, nil)
	addr, _, _ := runNode(t, flags)
	putResident(t, addr, "mine", []byte("value of a"))
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(wire.AppendLeaseHello(nil, wire.LeaseHello{})); err != nil {
		t.Fatal(err)
	}
	w, files, err := shm.ReceiveWelcome(nc.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range []struct {
		name string
		f    *os.File
		size uint64
	}{{"arena", files[shm.FileArena], w.ArenaBytes}, {"lease words", files[shm.FileWords], w.LeaseWords * 8}} {
		rw, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(c.f.Fd())), os.O_RDWR, 0)
		if err != nil {
			continue // not even reopened: nothing to write with
		}
		size := (c.size + 4095) &^ 4095
		if m, err := unix.Mmap(int(rw.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
			unix.Munmap(m)
			rw.Close()
			t.Fatalf("a client mapped the %s writable", c.name)
		}
		if _, err := rw.WriteAt([]byte("EVIL"), 0); err == nil {
			rw.Close()
			t.Fatalf("a client wrote the %s", c.name)
		}
		rw.Close()
	}
	got, err := shmClient(t, addr, client.ShmOff).GetAuto(context.Background(), []byte("mine"))
	if err != nil || string(got) != "value of a" {
		t.Fatalf("the value after the attempts: %q, %v", got, err)
	}
}

// A node made with no lease count leases one at a time and says so in
// its welcome: announcing no lease words would make every arena lease
// read as lapsed (a miss) on the client.
func TestShmDefaultLeaseCountIsAnnounced(t *testing.T) {
	n, err := newShmNode(&ShmOptions{StagingBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if n.opts.LeaseMax != 1 {
		t.Fatalf("the welcome would announce %d lease words, want the default 1", n.opts.LeaseMax)
	}
}
