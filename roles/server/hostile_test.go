package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/internal/testcerts"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// The data port under clients that misbehave: what they leave behind and
// what the node says and counts about them.

// heapAfterGC is the live heap after the pools have been emptied.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	for range 4 { // sync.Pool keeps a victim generation: two GCs empty it
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestIdleConnectionsKeepNoBatchScratch: a connection that answered one
// BATCH_EXIST of max_batch_items keys and then went idle keeps none of
// the per-item slices it used for it: they go back with the batch
// tables. (Kept, one client opening max_conns connections and sending
// one large batch on each would make the node hold max_conns × ~200 KiB
// outside the payload budget while every connection is idle.)
func TestIdleConnectionsKeepNoBatchScratch(t *testing.T) {
	const items, conns = 4096, 24
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBatchItems = items })
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(t, n.addr)
		writeReq(t, cs[i], wire.RequestHeader{Op: wire.OpPing}, nil)
		readResp(t, cs[i])
	}
	waitUntil(t, 10*time.Second, func() error {
		if k := n.srv.Stats().Serving; k != 0 {
			return fmt.Errorf("%d connections serving", k)
		}
		return nil
	})
	before := heapAfterGC()

	exist := make([]byte, 0, items*wire.BatchKeyItemLen)
	for j := range items {
		var k wire.BlockKey
		k.ID[0], k.ID[1] = byte(j), byte(j>>8)
		exist = wire.AppendKeyItem(exist, k)
	}
	for _, c := range cs {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchExist, Length: items}, exist)
		h, _ := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != items {
			t.Fatalf("BATCH_EXIST: %v, %d records", h.Status, h.Stored)
		}
		recs := make([]byte, items*wire.BatchExistRecLen)
		if _, err := readFullConn(c, recs); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, func() error {
		if k := n.srv.Stats().Serving; k != 0 {
			return fmt.Errorf("%d connections serving", k)
		}
		return nil
	})
	after := heapAfterGC()
	var per int64
	if after > before {
		per = int64(after-before) / conns
	}
	retained := countRetained(n)
	t.Logf("heap %d -> %d bytes: %d bytes more per idle connection; batch scratch held by idle connections: %d bytes", before, after, per, retained)
	if per > 32<<10 || retained > 0 {
		t.Fatalf("each idle connection that once answered a %d-key BATCH_EXIST still holds ~%d KiB of heap (%d KiB of batch scratch over %d connections); idle connections should hold no working memory",
			items, per>>10, retained>>10, conns)
	}
}

// countRetained sums the batch scratch the node's connections hold,
// read under their locks (their goroutines wrote it before end()).
func countRetained(n *testNode) int64 {
	var sum int64
	countConns(n, func(c *conn) bool {
		sum += int64(cap(c.existKeys))*24 + int64(cap(c.existStored))*8 + int64(cap(c.existErrs))*16 + int64(cap(c.existIdx))*4
		sum += int64(cap(c.keys))*24 + int64(cap(c.vals))*24 + int64(cap(c.errs))*16 + int64(cap(c.held))*8
		return true
	})
	return sum
}

func readFullConn(c net.Conn, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		k, err := c.Read(b[got:])
		got += k
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// TestTLSNodeAtMaxConnsRefusalReadableByTLSClient: a TLS node at
// max_conns says so through TLS. Written in clear, the refusal reads to a
// TLS client as a peer that does not speak TLS: the configuration error
// (ErrAuth) that fails calls at once instead of backing off a busy node.
func TestTLSNodeAtMaxConnsRefusalReadableByTLSClient(t *testing.T) {
	ca := testcerts.NewCA(t, "a")
	n := tlsNode(t, ca, "", func(o *Options) { o.MaxConns = 1 })
	cfg, err := tlsconf.Client(tlsconf.ClientFiles{CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	d := client.NewTLSDialer(nil, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The one slot is busy: a TLS connection in the middle of a PUT body.
	hold, err := d.DialContext(ctx, "tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	writeReq(t, hold, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, hold)
	req := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(1), BodyLen: 100})
	if _, err := hold.Write(append(req, 'x')); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() error {
		if countConns(n, func(c *conn) bool { return c.busy && !c.inPrefix }) != 1 {
			return errors.New("the holding connection is not in its PUT body yet")
		}
		return nil
	})

	nc, err := d.DialContext(ctx, "tcp", n.addr)
	if err != nil {
		t.Fatalf("a TLS client of a TLS node at max_conns failed its handshake (ErrAuth: %v), not told the node is full: %v",
			errors.Is(err, client.ErrAuth), err)
	}
	defer nc.Close()
	h, body := readResp(t, nc)
	if h.Status != wire.StatusUnavailable || !strings.Contains(string(body), "max_conns") {
		t.Fatalf("refusal at max_conns over TLS: %v %q, want UNAVAILABLE naming max_conns", h.Status, body)
	}
}

// TestBytesInCountsOnlyBytesReceived: dfkv_received_bytes_total counts
// the bytes that arrived, not the body length a prefix declares: one
// BATCH_PUT prefix declaring ~64 MiB, followed by a close, counts its
// prefix.
func TestBytesInCountsOnlyBytesReceived(t *testing.T) {
	n := startNode(t, newMemEngine(), nil) // max_block_bytes 1 MiB, 64 batch items
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, c)
	h := wire.RequestHeader{Op: wire.OpBatchPut, Length: 64, BodyLen: 64*wire.BatchPutItemLen + 64*testMaxBlock}
	if _, err := c.Write(wire.AppendRequest(nil, &h)); err != nil {
		t.Fatal(err)
	}
	waitStats(t, n, "the BATCH_PUT prefix decoded", func(st Stats) bool { return st.Ops["BATCH_PUT"] == 1 }, nil)
	c.Close()
	waitStats(t, n, "the connection to end", func(st Stats) bool { return st.OpenConns == 0 }, nil)
	sent := uint64(2 * wire.RequestPrefixLen)
	if got := n.srv.Stats().BytesIn; got > sent {
		t.Fatalf("bytes_in %d after the client sent %d bytes and left", got, sent)
	}
}

// metricsNode is startNode with request metrics on (set before Serve).
func metricsNode(t *testing.T, eng engine.StoreEngine, mutate func(*Options)) (*testNode, *Metrics) {
	t.Helper()
	g, err := engine.NewGroup([]engine.StoreEngine{eng}, []string{"mem"})
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, eng, mutate, func(srv *Server) {
		if srv.metrics, err = NewMetrics(prometheus.NewRegistry(), srv, g); err != nil {
			t.Fatal(err)
		}
	})
	return n, n.srv.metrics
}

// TestRequestMetricsCountRefusalsByTheirStatus: dfkv_requests_total
// counts a request refused with a frame error under the status it was
// answered with: a GET before AUTH and an AUTH with an unknown token
// (UNAUTHENTICATED), a BATCH_PUT whose table does not add up (INVALID).
func TestRequestMetricsCountRefusalsByTheirStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.toml")
	if err := os.WriteFile(path, []byte(credentialsText(aliceToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := creds.NewWatch(path, "credentials file", creds.LoadTenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, m := metricsNode(t, newMemEngine(), func(o *Options) { o.Credentials = w })

	// A GET before AUTH.
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	if h, _ := readResp(t, c); h.Status != wire.StatusUnauthenticated {
		t.Fatalf("GET before AUTH: %v", h.Status)
	}
	expectClosed(t, c)
	// A token the node does not know.
	c = dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte("not-a-token"))
	if h, _ := readResp(t, c); h.Status != wire.StatusUnauthenticated {
		t.Fatalf("AUTH with a bad token: %v", h.Status)
	}
	expectClosed(t, c)
	// A BATCH_PUT table whose values do not add up to the body.
	c = rawAuthed(t, n.addr, aliceToken)
	acme := wire.TenantHash([]byte("acme"))
	body := wire.AppendPutItem(nil, wire.BlockKey{Tenant: acme, ID: [16]byte{1}}, 5)
	body = append(body, "abc"...) // 3 bytes of value where the table says 5
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 1}, body)
	if h, _ := readResp(t, c); h.Status != wire.StatusInvalid {
		t.Fatalf("inconsistent BATCH_PUT: %v", h.Status)
	}
	expectClosed(t, c)
	waitStats(t, n, "the connections to end", func(st Stats) bool { return st.OpenConns == 0 }, nil)

	get := func(op wire.Op, st wire.Status) float64 { return testutil.ToFloat64(m.requests[op][st]) }
	report := fmt.Sprintf("GET{OK}=%v GET{UNAUTHENTICATED}=%v AUTH{OK}=%v AUTH{UNAUTHENTICATED}=%v BATCH_PUT{OK}=%v BATCH_PUT{INVALID}=%v",
		get(wire.OpGet, wire.StatusOK), get(wire.OpGet, wire.StatusUnauthenticated),
		get(wire.OpAuth, wire.StatusOK), get(wire.OpAuth, wire.StatusUnauthenticated),
		get(wire.OpBatchPut, wire.StatusOK), get(wire.OpBatchPut, wire.StatusInvalid))
	t.Log(report)
	if get(wire.OpGet, wire.StatusOK) != 0 || get(wire.OpBatchPut, wire.StatusOK) != 0 || get(wire.OpAuth, wire.StatusOK) != 1 {
		t.Fatalf("refused requests counted as answered OK: %s (want GET and BATCH_PUT 0 OK, AUTH 1 OK: alice's)", report)
	}
}

// TestIdleConnectionsKeepNoBatchPutScratch: the same for BATCH_PUT: a
// batch of max_batch_items small values is one run, and the run's slices
// (keys, vals, errs, held: 72 bytes an item) do not stay with the
// connection once it is idle.
func TestIdleConnectionsKeepNoBatchPutScratch(t *testing.T) {
	const items, conns = 4096, 8
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBatchItems = items })
	body := make([]byte, 0, items*(wire.BatchPutItemLen+1))
	for j := range items {
		var k wire.BlockKey
		k.ID[0], k.ID[1] = byte(j), byte(j>>8)
		body = wire.AppendPutItem(body, k, 1)
	}
	for range items {
		body = append(body, 'v')
	}
	for range conns {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: items}, body)
		h, _ := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != items {
			t.Fatalf("BATCH_PUT: %v, %d records", h.Status, h.Stored)
		}
		if _, err := readFullConn(c, make([]byte, items)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, func() error {
		if k := n.srv.Stats().Serving; k != 0 {
			return fmt.Errorf("%d connections serving", k)
		}
		return nil
	})
	if retained := countRetained(n); retained > 0 {
		t.Fatalf("%d idle connections that each answered one %d-item BATCH_PUT hold %d KiB of batch scratch (%d KiB each); idle connections should hold no working memory",
			conns, items, retained>>10, retained>>10/conns)
	}
}
