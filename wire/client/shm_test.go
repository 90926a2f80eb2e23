package client

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// The seqlock check: a copy counts only if the lease word still holds
// the lease's id afterwards.
func TestLeaseHeldChecksTheWord(t *testing.T) {
	m := &shmMaps{words: make([]byte, 8*4)}
	id := wire.LeaseID(uint64(2)<<32 | 7)
	binary.LittleEndian.PutUint64(m.words[16:], uint64(id))
	if !leaseHeld(m, id) {
		t.Fatal("a live lease reads as lapsed")
	}
	binary.LittleEndian.PutUint64(m.words[16:], 0)
	if leaseHeld(m, id) {
		t.Fatal("an ended lease reads as held")
	}
	binary.LittleEndian.PutUint64(m.words[16:], uint64(id+1))
	if leaseHeld(m, id) {
		t.Fatal("a lease whose slot was granted again reads as held")
	}
	if leaseHeld(m, wire.LeaseID(uint64(99)<<32|1)) {
		t.Fatal("a lease past the word region reads as held")
	}
}

func TestIsLocal(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:7600": true, "192.0.2.1:7600": false, "nohostport": false} {
		if got := isLocal(addr); got != want {
			t.Errorf("isLocal(%s) = %v", addr, got)
		}
	}
}

// shmNode is a fake node on this host: it answers SHM_INFO with answer
// (and closes, as an older node refusing an unknown op does, when close
// is set) and PING with OK, counting connections.
func shmFakeNode(t *testing.T, answer wire.Status, closeAfter bool, conns *atomic.Int32) string {
	return fakeNode(t, func(c net.Conn) {
		conns.Add(1)
		for {
			h, err := readRequest(c)
			if err != nil {
				return
			}
			if h.Op == wire.OpShmInfo {
				reply(c, wire.ResponseHeader{Status: answer}, []byte("no"))
				if closeAfter {
					return
				}
				continue
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
}

// A node without shared memory is used over TCP in auto mode (an older
// node that closes on SHM_INFO included), and refused in on mode with
// the reason.
func TestShmModesAgainstNodesWithout(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer wire.Status
		close  bool
	}{{"no socket", wire.StatusNotFound, false}, {"older node", wire.StatusUnsupported, true}} {
		t.Run(c.name, func(t *testing.T) {
			var conns atomic.Int32
			addr := shmFakeNode(t, c.answer, c.close, &conns)
			auto, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: 2 * time.Second, PoolSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer auto.Close()
			for range 3 {
				if err := auto.Ping(context.Background(), addr); err != nil {
					t.Fatalf("auto mode against a node without shared memory: %v", err)
				}
			}
			on, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: 2 * time.Second, SharedMemory: ShmOn})
			if err != nil {
				t.Fatal(err)
			}
			defer on.Close()
			_, err = on.Exist(context.Background(), []byte("k"))
			if err == nil || !strings.Contains(err.Error(), "shared memory is required") {
				t.Fatalf("on mode: %v, want a refusal naming shared memory", err)
			}
			// A misconfigured client, not a node gone: neither a miss
			// nor a reason to back the node off.
			if errors.Is(err, wire.StatusNotFound) || peerOf(t, on, addr).isDown(time.Now()) {
				t.Fatalf("on mode: the refusal read as a miss (%v) or backed the node off", err)
			}
			if n, err := on.ExistPrefix(context.Background(), [][]byte{[]byte("k")}); err == nil {
				t.Fatalf("on mode: a prefix count of %d with no error", n)
			}
		})
	}
	if _, err := Open(Options{Namespace: []byte("ns"), Members: []string{"127.0.0.1:1"}, SharedMemory: "maybe"}); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("an unknown mode: %v", err)
	}
}

// A node older than pins refuses BATCH_EXIST's pin flag as a malformed
// frame; the pinned lookup asks again without it and gets the answer.
func TestExistPinnedFallsBackOnOlderNodes(t *testing.T) {
	var refused atomic.Int32
	addr := fakeNode(t, func(c net.Conn) {
		for {
			h, err := readRequest(c)
			if err != nil {
				return
			}
			if h.Op == wire.OpBatchExist && h.Offset != 0 {
				refused.Add(1)
				reply(c, wire.ResponseHeader{Status: wire.StatusInvalid}, []byte("BATCH_EXIST carries a non-zero key or offset"))
				return
			}
			if h.Op != wire.OpBatchExist {
				reply(c, wire.ResponseHeader{Status: wire.StatusUnsupported}, nil)
				return
			}
			body := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusOK, Stored: h.Length})
			for range h.Length {
				body = wire.AppendExistRecord(body, wire.StatusOK, 5)
			}
			c.Write(body)
		}
	})
	cl := open(t, addr)
	n, err := cl.ExistPrefixPinned(context.Background(), [][]byte{[]byte("a"), []byte("b")})
	if n != 2 || err != nil || refused.Load() != 1 {
		t.Fatalf("pinned prefix against an older node: %d, %v (refusals %d)", n, err, refused.Load())
	}
}
