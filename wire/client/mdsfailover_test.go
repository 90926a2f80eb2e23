package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// scriptMDS is a Dialer playing several MDS addresses over net.Pipe. All
// addresses serve the same directory (epoch, members), as MDS processes
// sharing etcd do; an address marked silent takes the connection (and the
// request) and never answers, as a SIGSTOPped MDS or a black-holed route
// does.
type scriptMDS struct {
	mu      sync.Mutex
	epoch   uint64
	members []wire.MemberInfo
	silent  map[string]bool
	dials   map[string]int
}

func newScriptMDS(epoch uint64, members ...wire.MemberInfo) *scriptMDS {
	return &scriptMDS{epoch: epoch, members: members, silent: map[string]bool{}, dials: map[string]int{}}
}

func (s *scriptMDS) set(epoch uint64, members ...wire.MemberInfo) {
	s.mu.Lock()
	s.epoch, s.members = epoch, members
	s.mu.Unlock()
}

func (s *scriptMDS) setSilent(addr string, v bool) {
	s.mu.Lock()
	s.silent[addr] = v
	s.mu.Unlock()
}

func (s *scriptMDS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	s.dials[addr]++
	silent := s.silent[addr]
	epoch, members := s.epoch, s.members
	s.mu.Unlock()
	cli, srv := net.Pipe()
	go func() {
		defer srv.Close()
		var hdr [wire.RequestPrefixLen]byte
		if _, err := io.ReadFull(srv, hdr[:]); err != nil {
			return
		}
		_, known, n, err := wire.DecodeMDSRequest(hdr[:])
		if err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, srv, int64(n)); err != nil {
			return
		}
		if silent {
			_, _ = io.Copy(io.Discard, srv) // until the client gives up and closes
			return
		}
		var body []byte
		if known != epoch {
			body, _ = json.Marshal(wire.MDSReply{Epoch: epoch, Members: members})
		}
		_, _ = srv.Write(append(wire.AppendMDSResponse(nil, wire.StatusOK, epoch, len(body)), body...))
	}()
	return cli, nil
}

var (
	mfN1 = wire.MemberInfo{ID: "n1", Addr: "n1.test:1", Weight: 1}
	mfN2 = wire.MemberInfo{ID: "n2", Addr: "n2.test:1", Weight: 1}
)

// TestOpenSkipsSilentMDS: with two MDS addresses of which the first
// takes connections but never answers, Open discovers the members from
// the second: a silent address may use only its share of the call.
func TestOpenSkipsSilentMDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newScriptMDS(7, mfN1)
		d.setSilent("mds1.test:7000", true)
		cl, err := Open(Options{Namespace: []byte("rv"), MDS: []string{"mds1.test:7000", "mds2.test:7000"},
			MDSPoll: 500 * time.Millisecond, Timeout: time.Second, Dialer: d})
		if err != nil {
			d.mu.Lock()
			t.Fatalf("Open with a silent first MDS and a healthy second: %v (dials %v)", err, d.dials)
		}
		cl.Close()
	})
}

// TestFollowSkipsSilentMDS: a client follows two MDS addresses; the
// first (the one it has been using) stops answering, and the members
// change. The second answers, and the client sees the change.
func TestFollowSkipsSilentMDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newScriptMDS(7, mfN1)
		cl, err := Open(Options{Namespace: []byte("rv"), MDS: []string{"mds1.test:7000", "mds2.test:7000"},
			MDSPoll: 500 * time.Millisecond, Timeout: time.Second, Dialer: d})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		d.setSilent("mds1.test:7000", true)
		d.set(8, mfN1, mfN2)
		time.Sleep(time.Minute)
		d.mu.Lock()
		dials := map[string]int{"mds1": d.dials["mds1.test:7000"], "mds2": d.dials["mds2.test:7000"]}
		d.mu.Unlock()
		if e := cl.Epoch(); e != 8 || len(cl.Members()) != 2 {
			t.Fatalf("a minute after MDS 1 went silent: epoch %d, members %v; want epoch 8 with 2 members from MDS 2 (dials %v)", e, cl.Members(), dials)
		}
	})
}

// TestCloseNotHeldBySilentMDS: a poll in flight to an MDS that does not
// answer does not hold Close for the poll's whole Timeout.
func TestCloseNotHeldBySilentMDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newScriptMDS(7, mfN1)
		cl, err := Open(Options{Namespace: []byte("rv"), MDS: []string{"mds1.test:7000"},
			MDSPoll: 500 * time.Millisecond, Timeout: 10 * time.Second, Dialer: d})
		if err != nil {
			t.Fatal(err)
		}
		d.setSilent("mds1.test:7000", true)
		time.Sleep(time.Second) // a poll (every 0.25–0.75 s) is now waiting on the silent MDS
		start := time.Now()
		cl.Close()
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Close took %v behind a poll of a silent MDS; want it prompt", took)
		}
	})
}

var _ = errors.New

// countHandler counts the records whose message contains substr.
type countHandler struct {
	mu     sync.Mutex
	substr string
	n      int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) count() int                         { h.mu.Lock(); defer h.mu.Unlock(); return h.n }

// TestHoldWarnedPerIncident: the MDS lists no members (the client
// holds its list and warns), then lists the same members again at a new
// epoch (the nodes re-registered), then lists none again. The second
// incident is warned about as the first was.
func TestHoldWarnedPerIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newScriptMDS(7, mfN1, mfN2)
		h := &countHandler{substr: "lists no members"}
		cl, err := Open(Options{Namespace: []byte("rv"), MDS: []string{"mds1.test:7000"},
			MDSPoll: 500 * time.Millisecond, Timeout: time.Second, Dialer: d, Logger: slog.New(h)})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		d.set(8) // every heartbeat lapsed
		time.Sleep(5 * time.Second)
		if h.count() != 1 {
			t.Fatalf("first incident: %d warnings, want 1", h.count())
		}
		d.set(9, mfN1, mfN2) // the nodes registered again: the same list
		time.Sleep(5 * time.Second)
		if e := cl.Epoch(); e != 9 {
			t.Fatalf("epoch %d after the members came back, want 9", e)
		}
		d.set(10) // a second incident
		time.Sleep(5 * time.Second)
		if e, m := cl.Epoch(), cl.Members(); e != 9 || len(m) != 2 {
			t.Fatalf("second incident: epoch %d members %v; want the list of epoch 9 held", e, m)
		}
		if h.count() != 2 {
			t.Fatalf("second incident: %d warnings in all, want 2 (one per incident)", h.count())
		}
	})
}
