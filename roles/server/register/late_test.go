package register

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// pipeMDS is an MDS over net.Pipe that answers REGISTER after regDelay and
// HEARTBEAT at once, with a TTL of ttl, and notes when each heartbeat
// came and whether the node called itself registered then.
type pipeMDS struct {
	regDelay, ttl time.Duration
	r             *Registrar
	answeredAt    time.Time // when the last REGISTER was answered
	firstBeat     time.Time // when the first HEARTBEAT after it came
	currentAtBeat atomic.Bool
}

func (m *pipeMDS) DialContext(context.Context, string, string) (net.Conn, error) {
	c, s := net.Pipe()
	go m.serve(s)
	return c, nil
}

func (m *pipeMDS) serve(c net.Conn) {
	defer c.Close()
	var p [wire.RequestPrefixLen]byte
	if _, err := io.ReadFull(c, p[:]); err != nil {
		return
	}
	op, _, n, err := wire.DecodeMDSRequest(p[:])
	if err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
		return
	}
	switch op {
	case wire.OpMDSRegister:
		time.Sleep(m.regDelay)
		m.answeredAt = time.Now()
	case wire.OpMDSHeartbeat:
		if m.firstBeat.IsZero() {
			m.firstBeat = time.Now()
			m.currentAtBeat.Store(m.r.Current())
		}
	}
	body, _ := json.Marshal(wire.MDSReply{Epoch: 1, HeartbeatTTLMS: m.ttl.Milliseconds()})
	_, _ = c.Write(append(wire.AppendMDSResponse(nil, wire.StatusOK, 1, len(body)), body...))
}

// TestLateRegistrationIsConfirmedAtOnce: a registration whose answer took
// longer than a heartbeat interval may have expired at the MDS before the
// answer arrived (the simulation saw a node whose answer sat behind a cut
// link call itself registered while the MDS had dropped it). Such a node
// heartbeats at once and calls itself registered only once that is
// answered; a prompt registration is current at once and heartbeats a
// third of the TTL later.
func TestLateRegistrationIsConfirmedAtOnce(t *testing.T) {
	for _, c := range []struct {
		name        string
		regDelay    time.Duration
		wantCurrent bool          // at the first heartbeat
		wantGap     time.Duration // from the answer to the first heartbeat
	}{
		{"late", 250 * time.Millisecond, false, 0},
		{"prompt", 0, true, 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &pipeMDS{regDelay: c.regDelay, ttl: 300 * time.Millisecond}
				mc, err := client.NewMDSClient([]string{"mds:7700"}, "g", m, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				m.r = New(mc, wire.MemberInfo{ID: "n1", Addr: "10.0.0.1:7600"}, nil, slog.New(slog.DiscardHandler))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { m.r.Run(ctx); close(done) }()
				time.Sleep(c.regDelay + 200*time.Millisecond)
				synctest.Wait()
				if m.firstBeat.IsZero() {
					t.Fatal("no heartbeat followed the registration")
				}
				if got := m.currentAtBeat.Load(); got != c.wantCurrent {
					t.Errorf("registered (Current) when the first heartbeat came: %v, want %v", got, c.wantCurrent)
				}
				if gap := m.firstBeat.Sub(m.answeredAt); gap != c.wantGap {
					t.Errorf("first heartbeat %s after the registration's answer, want %s", gap, c.wantGap)
				}
				if !m.r.Current() {
					t.Error("not registered after an answered heartbeat")
				}
				cancel()
				<-done
			})
		})
	}
}
