package bench

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// step is one exchange a scripted server expects: the exact request bytes,
// then the reply it writes (or, with hangup, a close instead; with
// thenClose, a close after the reply).
type step struct {
	want      string
	reply     string
	hangup    bool
	thenClose bool
}

// scripted returns a dial function whose every call connects (over
// net.Pipe) to a server playing the next script. Mismatched requests fail
// the test with both byte strings.
func scripted(t *testing.T, scripts ...[]step) (dial func() (net.Conn, error), dials *int) {
	t.Helper()
	n := 0
	return func() (net.Conn, error) {
		if n >= len(scripts) {
			return nil, errors.New("connection refused (no more scripts)")
		}
		script := scripts[n]
		n++
		cli, srv := net.Pipe()
		go func() {
			defer srv.Close()
			for i, s := range script {
				got := make([]byte, len(s.want))
				if _, err := io.ReadFull(srv, got); err != nil {
					t.Errorf("script step %d: reading request: %v", i, err)
					return
				}
				if string(got) != s.want {
					t.Errorf("script step %d: request\n%q\nwant\n%q", i, got, s.want)
					return
				}
				if s.hangup {
					return
				}
				if _, err := srv.Write([]byte(s.reply)); err != nil {
					t.Errorf("script step %d: writing reply: %v", i, err)
					return
				}
				if s.thenClose {
					return
				}
			}
			// Keep the connection open until the client closes it.
			_, _ = io.Copy(io.Discard, srv)
		}()
		return cli, nil
	}, &n
}

func newPeer(proto string, dial func() (net.Conn, error)) conn {
	pc := &peerConn{addr: "fake:1", timeout: 5 * time.Second, dial: dial}
	if proto == "redis" {
		return &respConn{peerConn: pc}
	}
	return &metaConn{peerConn: pc}
}

func wantClass(t *testing.T, what string, err error, class string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want class %s", what, class)
	}
	if got := errClass(err); got != class {
		t.Fatalf("%s: error class %s (%v), want %s", what, got, err, class)
	}
}

func TestRESPCodec(t *testing.T) {
	val := []byte("hello\r\nworld") // CRLF inside a value is data
	set := "*3\r\n$3\r\nSET\r\n$3\r\nk/1\r\n$12\r\nhello\r\nworld\r\n"
	get := "*2\r\n$3\r\nGET\r\n$3\r\nk/1\r\n"
	exists := "*2\r\n$6\r\nEXISTS\r\n$3\r\nk/1\r\n"
	dial, dials := scripted(t,
		[]step{
			{want: set, reply: "+OK\r\n"},
			{want: get, reply: "$12\r\nhello\r\nworld\r\n"},
			{want: get, reply: "$-1\r\n"},
			{want: exists, reply: ":1\r\n"},
			{want: exists, reply: ":0\r\n"},
			{want: set, reply: "-OOM command not allowed when used memory > 'maxmemory'\r\n"},
			// a value longer than the buffer: the rest is skipped and the
			// connection stays aligned for the next command
			{want: get, reply: "$20\r\n0123456789abcdefghij\r\n"},
			{want: get, reply: "$12\r\nhello\r\nworld\r\n"},
			// a reply that breaks the protocol drops the connection
			{want: exists, reply: "+QUEUED\r\n"},
		},
		[]step{
			{want: get, hangup: true},
		},
		[]step{
			{want: get, reply: "$12\r\nhello\r\nworl", thenClose: true}, // closes mid-value
		},
	)
	c := newPeer("redis", dial)
	defer c.Close()
	k := []byte("k/1")
	if err := c.Put(k, val); err != nil {
		t.Fatalf("SET: %v", err)
	}
	dst := make([]byte, len(val))
	if n, err := c.Get(k, dst); err != nil || n != len(val) || !bytes.Equal(dst, val) {
		t.Fatalf("GET: %d %q %v", n, dst, err)
	}
	_, err := c.Get(k, dst)
	wantClass(t, "GET of a missing key", err, "NOT_FOUND")
	if !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("a miss does not wrap wire.StatusNotFound: %v", err)
	}
	if err := c.Exist(k); err != nil {
		t.Fatalf("EXISTS hit: %v", err)
	}
	wantClass(t, "EXISTS miss", c.Exist(k), "NOT_FOUND")
	err = c.Put(k, val)
	wantClass(t, "SET refused by the server", err, "REDIS_OOM")
	if !strings.Contains(err.Error(), "maxmemory") {
		t.Fatalf("the server's message is lost: %v", err)
	}
	n, err := c.Get(k, dst)
	wantClass(t, "GET of a longer value", err, classWrongSize)
	if n != len(dst) || string(dst) != "0123456789ab" {
		t.Fatalf("GET of a longer value: %d %q", n, dst)
	}
	if n, err := c.Get(k, dst); err != nil || n != len(val) {
		t.Fatalf("GET after a too-long value: the stream is misaligned: %d %v", n, err)
	}
	wantClass(t, "EXISTS answered +QUEUED", c.Exist(k), classProtocol)
	if *dials != 1 {
		t.Fatalf("%d dials before the protocol error, want 1", *dials)
	}
	_, err = c.Get(k, dst)
	wantClass(t, "GET on a connection the server closes", err, "UNAVAILABLE")
	if !strings.Contains(err.Error(), "closed the connection") {
		t.Fatalf("error does not say the server closed: %v", err)
	}
	_, err = c.Get(k, dst)
	wantClass(t, "GET cut off in the value", err, "UNAVAILABLE")
	_, err = c.Get(k, dst)
	wantClass(t, "GET with the server gone", err, "UNAVAILABLE")
	if *dials != 3 {
		t.Fatalf("%d dials, want 3 (one per broken connection)", *dials)
	}
}

func TestMetaCodec(t *testing.T) {
	val := []byte("v\r\nalue")
	ms := "ms k/2 7\r\nv\r\nalue\r\n"
	mgv := "mg k/2 v\r\n"
	mg := "mg k/2\r\n"
	dial, dials := scripted(t,
		[]step{
			{want: ms, reply: "HD\r\n"},
			{want: mgv, reply: "VA 7\r\nv\r\nalue\r\n"},
			{want: mgv, reply: "VA 7 f0 t-1\r\nv\r\nalue\r\n"}, // flags after the size
			{want: mgv, reply: "EN\r\n"},
			{want: mg, reply: "HD\r\n"},
			{want: mg, reply: "EN\r\n"},
			{want: ms, reply: "NS\r\n"},
			{want: ms, reply: "SERVER_ERROR out of memory storing object\r\n"},
			{want: mgv, reply: "CLIENT_ERROR bad command line format\r\n"},
			{want: mgv, reply: "VA 9\r\n123456789\r\n"},
			{want: mg, reply: "HD\r\n"},
			{want: mg, reply: "VA 3\r\n"}, // a value to a value-less get: protocol error
		},
		[]step{
			{want: ms, hangup: true},
		},
	)
	c := newPeer("memcache", dial)
	defer c.Close()
	k := []byte("k/2")
	if err := c.Put(k, val); err != nil {
		t.Fatalf("ms: %v", err)
	}
	dst := make([]byte, len(val))
	for i := 0; i < 2; i++ {
		clear(dst)
		if n, err := c.Get(k, dst); err != nil || n != len(val) || !bytes.Equal(dst, val) {
			t.Fatalf("mg v #%d: %d %q %v", i, n, dst, err)
		}
	}
	_, err := c.Get(k, dst)
	wantClass(t, "mg v miss", err, "NOT_FOUND")
	if err := c.Exist(k); err != nil {
		t.Fatalf("mg hit: %v", err)
	}
	wantClass(t, "mg miss", c.Exist(k), "NOT_FOUND")
	wantClass(t, "ms not stored", c.Put(k, val), "MEMCACHED_NOT_STORED")
	err = c.Put(k, val)
	wantClass(t, "ms server error", err, "MEMCACHED_SERVER_ERROR")
	if !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("the server's message is lost: %v", err)
	}
	_, err = c.Get(k, dst)
	wantClass(t, "mg client error", err, "MEMCACHED_CLIENT_ERROR")
	_, err = c.Get(k, dst)
	wantClass(t, "mg v of a longer value", err, classWrongSize)
	if err := c.Exist(k); err != nil {
		t.Fatalf("mg after a too-long value: the stream is misaligned: %v", err)
	}
	wantClass(t, "mg answered with a value", c.Exist(k), classProtocol)
	wantClass(t, "ms on a connection the server closes", c.Put(k, val), "UNAVAILABLE")
	wantClass(t, "ms with the server gone", c.Put(k, val), "UNAVAILABLE")
	if *dials != 2 {
		t.Fatalf("%d dials, want 2", *dials)
	}
}

// TestPeerTimeout: a server that never answers turns into TIMEOUT, not a
// hang.
func TestPeerTimeout(t *testing.T) {
	cli, srv := net.Pipe()
	defer srv.Close()
	go func() { _, _ = io.Copy(io.Discard, srv) }()
	used := false
	pc := &peerConn{addr: "fake:1", timeout: 50 * time.Millisecond, dial: func() (net.Conn, error) {
		if used {
			return nil, errors.New("refused")
		}
		used = true
		return cli, nil
	}}
	c := &respConn{peerConn: pc}
	wantClass(t, "GET from a silent server", func() error { _, err := c.Get([]byte("k"), make([]byte, 4)); return err }(), "TIMEOUT")
}

// TestPeerOpsDoNotAllocate checks the claim of peers.go over real
// loopback TCP against servers that answer from fixed buffers.
func TestPeerOpsDoNotAllocate(t *testing.T) {
	val := bytes.Repeat([]byte("x"), 4096)
	for _, proto := range []string{"redis", "memcache"} {
		t.Run(proto, func(t *testing.T) {
			addr := startFakePeer(t, proto)
			c, err := (&peerTarget{proto: proto, addr: addr, dialTimeout: time.Second, timeout: 5 * time.Second}).Dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			k := []byte("bench/alloc")
			dst := make([]byte, len(val))
			if err := c.Put(k, val); err != nil { // dial outside the measurement
				t.Fatal(err)
			}
			// The worker's own steps around the call (key choice, timing,
			// histogram) must not allocate either.
			r := newRun(Options{Workload: wGet, Keys: 1, KeyPrefix: "bench/alloc", ValueSize: len(val)}, nil)
			w := &worker{c: c, rng: rand.New(rand.NewPCG(1, 2)), val: val, dst: dst, epoch: &r.epoch, ser: &r.ser}
			w.record(opGet, 1, 0) // allocate the histograms outside the measurement
			w.record(opPut, 1, 0)
			w.record(opExist, 1, 0)
			for _, op := range []struct {
				name string
				fn   func() error
			}{
				{"put", func() error { return c.Put(k, val) }},
				{"get", func() error { _, err := c.Get(k, dst); return err }},
				{"exist", func() error { return c.Exist(k) }},
				{"worker put", func() error { return r.put(w, true) }},
				{"worker get", func() error { return r.get(w, true) }},
				{"worker exist", func() error { return r.exist(w, true) }},
			} {
				var opErr error
				n := testing.AllocsPerRun(200, func() {
					if err := op.fn(); err != nil {
						opErr = err
					}
				})
				if opErr != nil {
					t.Fatalf("%s: %v", op.name, opErr)
				}
				if n > 0 {
					t.Errorf("%s allocates %.1f times per operation", op.name, n)
				}
			}
		})
	}
}
