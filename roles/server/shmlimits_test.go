package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestShmClientFollowsANodeRestart: a client that used a node's shared
// memory goes on using it after that node restarts (same address, same
// socket, a new instance, which refuses the old one): it looks the socket
// up again at once, rather than failing (shm = on) or reading over TCP
// until the retry interval passes (shm = auto).
func TestShmClientFollowsANodeRestart(t *testing.T) {
	flags, _ := shmNodeFlags(t, nil)
	addr := freeAddr(t)
	_, _, stop := runNodeAt(t, flags, addr)
	ctx := context.Background()
	on := shmClient(t, addr, client.ShmOn)
	auto := shmClient(t, addr, client.ShmAuto)
	val := bytes.Repeat([]byte("r"), 64<<10)
	if err := on.Put(ctx, []byte("k"), val); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(val))
	for name, cl := range map[string]*client.Client{"on": on, "auto": auto} {
		if _, _, err := cl.Get(ctx, []byte("k"), dst); err != nil {
			t.Fatalf("%s: GET before the restart: %v", name, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	runNodeAt(t, flags, addr)

	_, _, errOn := on.Get(ctx, []byte("k"), dst)

	// The auto client: write a value (resident in RAM) and read it; over
	// shared memory the read is a lease.
	if err := auto.Put(ctx, []byte("k2"), val); err != nil {
		t.Fatal(err)
	}
	if _, _, err := auto.Get(ctx, []byte("k2"), dst); err != nil || !bytes.Equal(dst, val) {
		t.Fatalf("auto: GET after the restart: %v", err)
	}
	st := nodeStats(t, addr).Shm
	if errOn != nil {
		t.Errorf("shm = on: the first GET after a node restart failed although the restarted node offers shared memory: %v", errOn)
	}
	if st == nil || st.Conns == 0 || st.Leases.Granted == 0 {
		t.Errorf("shm = auto: after the restart the client reads over TCP (restarted node's shm stats %+v: no shared-memory connection, no lease)", st)
	}
}

// TestShmLeasesOfOneKeyLeaveItReadable: the lease table bounds the
// leases live on the node (server.lease_max, 65,536 by default), not per
// key, while a RAM-tier slot holds at most 65,534 pins. One connection
// that leases one key over and over without releasing must not push its
// slot to that cap: leases stop short of it, and every other client's
// GET of the key is still served.
func TestShmLeasesOfOneKeyLeaveItReadable(t *testing.T) {
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	val := []byte("a hot prefix block")
	k := putResident(t, addr, "hot", val)
	r := dialShm(t, sock, 0)
	keys := make([]wire.BlockKey, 4096)
	for i := range keys {
		keys[i] = k
	}
	for range 16 { // 65,536 items: as many as the node's default lease_max
		r.leaseGet(t, 0, nil, keys...)
	}
	st := nodeStats(t, addr).Shm.Leases
	got, err := shmClient(t, addr, client.ShmOff).GetAuto(context.Background(), []byte("hot"))
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("another client's GET over TCP while one connection holds %d leases of the key: %q, %v", st.Live, got, err)
	}
}

// TestShmFullLeaseTableCountsOneHitPerRead: dfkv_ram_hit_total counts
// GETs answered from RAM. A LEASE_GET item of a resident value that finds
// every lease live is answered once, inline, from RAM, and counts one
// hit, not one for the lease it could not have and one for the read.
func TestShmFullLeaseTableCountsOneHitPerRead(t *testing.T) {
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-max": {"1"}, "lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	k1 := putResident(t, addr, "one", []byte("first value"))
	k2 := putResident(t, addr, "two", []byte("second value"))
	holder, reader := dialShm(t, sock, 0), dialShm(t, sock, 0)
	if rec := holder.leaseGet(t, 0, nil, k1)[0]; rec.Kind != wire.LeaseArena {
		t.Fatalf("holder: %+v, want the one lease", rec)
	}
	before := nodeStats(t, addr)
	if rec := reader.leaseGet(t, 0, nil, k2)[0]; rec.Kind != wire.LeaseInline || rec.Status != wire.StatusOK {
		t.Fatalf("reader: %+v, want the value inline (every lease live)", rec)
	}
	after := nodeStats(t, addr)
	if after.Shm.Leases.Full != before.Shm.Leases.Full+1 {
		t.Fatalf("lease table full count %d -> %d, want one more", before.Shm.Leases.Full, after.Shm.Leases.Full)
	}
	if d := after.RAM.Hits - before.RAM.Hits; d != 1 {
		t.Fatalf("one read served from RAM counted as %d RAM hits (dfkv_ram_hit_total)", d)
	}
}

// TestShmOneConnectionHoldsAtMostItsShareOfLeases: a connection that
// leases and never releases is held to an eighth of server.lease_max
// (here 16: two leases); its further values come inline on its socket
// and are counted, while another connection is still granted leases.
// Releasing one of its leases lets it lease again.
func TestShmOneConnectionHoldsAtMostItsShareOfLeases(t *testing.T) {
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-max": {"16"}, "lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	var keys []wire.BlockKey
	for i := range 3 {
		keys = append(keys, putResident(t, addr, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("value %d", i))))
	}
	hog, other := dialShm(t, sock, 0), dialShm(t, sock, 0)
	before := nodeStats(t, addr).Shm.Leases
	recs := hog.leaseGet(t, 0, nil, keys...)
	if recs[0].Kind != wire.LeaseArena || recs[1].Kind != wire.LeaseArena {
		t.Fatalf("first two items: %+v, %+v, want leases", recs[0], recs[1])
	}
	if recs[2].Kind != wire.LeaseInline || recs[2].Status != wire.StatusOK || recs[2].Length != uint64(len("value 2")) {
		t.Fatalf("third item past the connection's share of 2: %+v, want the value inline", recs[2])
	}
	if rec := other.leaseGet(t, 0, nil, keys[2])[0]; rec.Kind != wire.LeaseArena {
		t.Fatalf("another connection, while the first holds its share: %+v, want a lease", rec)
	}
	after := nodeStats(t, addr).Shm.Leases
	if after.OwnerFull != before.OwnerFull+1 || after.Full != before.Full {
		t.Fatalf("lease stats %+v -> %+v: want one refusal for the connection's share, none for a full table", before, after)
	}
	if rec := hog.leaseGet(t, 0, []wire.LeaseID{recs[0].Lease}, keys[2])[0]; rec.Kind != wire.LeaseArena {
		t.Fatalf("after releasing one of its two leases: %+v, want a lease", rec)
	}
}
