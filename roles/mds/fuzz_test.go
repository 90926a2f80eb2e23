package mds

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// FuzzControlPort sends arbitrary bytes to a running MDS's control port
// (prefixes of any epoch, op and length, bodies of broken or hostile
// JSON) and half-closes. Whatever arrives, the MDS answers with a
// well-formed control response (epoch 8, a known status, a body within
// its bound), always to a whole request at the start, or closes without
// one, and it goes on serving: a MEMBERS
// call from a real client succeeds after every input. A panic in a
// connection's goroutine would end the test binary.
func FuzzControlPort(f *testing.F) {
	ctrl, _, _ := runMDSB(f, map[string][]string{"db": {filepath.Join(f.TempDir(), "m.db")}, "first-request-ms": {"2000"}})
	probe := mdsClientB(f, ctrl)
	frame := func(op wire.Op, known uint64, req any) []byte {
		body, _ := json.Marshal(req)
		return append(wire.AppendMDSRequest(nil, op, known, len(body)), body...)
	}
	m := member(1)
	f.Add(frame(wire.OpMDSRegister, 0, wire.MDSRequest{Group: "default", Member: &m}))
	f.Add(frame(wire.OpMDSHeartbeat, 0, wire.MDSRequest{Group: "default", ID: m.ID}))
	f.Add(frame(wire.OpMDSMembers, 0, wire.MDSRequest{Group: "default"}))
	f.Add(frame(wire.OpMDSMembers, 7, wire.MDSRequest{Group: "other"}))
	f.Add(frame(wire.OpMDSDeregister, 0, wire.MDSRequest{Group: "default", ID: "nobody"}))
	f.Add(frame(wire.OpMDSRegister, 0, map[string]any{"group": "default", "member": map[string]any{"id": "x", "addr": "not an address", "weight": -1}}))
	f.Add(frame(wire.OpMDSRegister, 0, map[string]any{"group": 7, "member": []int{1}}))
	f.Add(append(wire.AppendMDSRequest(nil, wire.OpMDSMembers, 0, 9), []byte(`{"group":`)...))
	f.Add(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})) // a data-plane frame
	f.Add([]byte("GET /metrics HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", ctrl)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(data); err == nil {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		// Every reply until the MDS closes: each a well-formed prefix and
		// its body; at least one when data begins with a whole request.
		complete := false
		if _, _, n, err := wire.DecodeMDSRequest(data); err == nil && len(data) >= wire.RequestPrefixLen+n {
			complete = true
		}
		replies := 0
		for {
			var hb [wire.ResponsePrefixLen]byte
			if _, err := io.ReadFull(c, hb[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("the MDS neither answered nor closed within 10 s of a half-closed request %x", data)
				}
				break // closed (possibly mid-prefix: a reset); nothing misread
			}
			h, err := wire.DecodeMDSResponse(hb[:])
			if err != nil {
				t.Fatalf("malformed control response %x to %x: %v", hb, data, err)
			}
			if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
				break
			}
			replies++
		}
		if complete && replies == 0 {
			t.Fatalf("the MDS closed without answering the whole request %x", data)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, _, _, err := probe.Members(ctx, 0); err != nil {
			t.Fatalf("MEMBERS after input %x: %v", data, err)
		}
	})
}
