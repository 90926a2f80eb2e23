package register

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// slowAckMDS applies a REGISTER at once and answers it after ackDelay (a
// slow link, an MDS waiting on a slow etcd); it applies DEREGISTER too.
type slowAckMDS struct {
	ackDelay time.Duration
	mu       sync.Mutex
	listed   map[string]bool
}

func (m *slowAckMDS) DialContext(context.Context, string, string) (net.Conn, error) {
	c, s := net.Pipe()
	go m.serve(s)
	return c, nil
}

func (m *slowAckMDS) serve(c net.Conn) {
	defer c.Close()
	var p [wire.RequestPrefixLen]byte
	if _, err := io.ReadFull(c, p[:]); err != nil {
		return
	}
	op, _, n, err := wire.DecodeMDSRequest(p[:])
	if err != nil {
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return
	}
	var req wire.MDSRequest
	_ = json.Unmarshal(body, &req)
	m.mu.Lock()
	switch op {
	case wire.OpMDSRegister:
		m.listed[req.Member.ID] = true
	case wire.OpMDSDeregister:
		delete(m.listed, req.ID)
	}
	m.mu.Unlock()
	if op == wire.OpMDSRegister {
		time.Sleep(m.ackDelay)
	}
	out, _ := json.Marshal(wire.MDSReply{Epoch: 1, HeartbeatTTLMS: 10_000})
	_, _ = c.Write(append(wire.AppendMDSResponse(nil, wire.StatusOK, 1, len(out)), out...))
}

// TestStopDuringRegisterLeavesTheMDS: a node stopped (SIGTERM) while its
// REGISTER is on its way may have been added by the MDS; Run, which cut
// the call short, deregisters anyway, so clients do not route to a node
// that is draining for a whole heartbeat TTL.
func TestStopDuringRegisterLeavesTheMDS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &slowAckMDS{ackDelay: time.Second, listed: map[string]bool{}}
		mc, err := client.NewMDSClient([]string{"mds:7700"}, "g", m, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := New(mc, wire.MemberInfo{ID: "n1", Addr: "10.0.0.1:7600", Weight: 1}, nil, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		time.Sleep(100 * time.Millisecond) // the REGISTER has been applied, its answer is on its way
		synctest.Wait()
		cancel() // SIGTERM
		<-done
		time.Sleep(2 * time.Second) // the late answer finds nobody waiting
		synctest.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.listed["n1"] {
			t.Fatalf("Run returned (Left=%v) while the MDS still lists the stopped node n1", r.Left())
		}
	})
}
