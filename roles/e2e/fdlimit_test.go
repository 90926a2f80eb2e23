package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire/client"
)

// TestServerProcessOutlivesDescriptorExhaustion: a node whose file
// descriptors run out (here a limit of 64 and a client opening 100
// connections) keeps serving the connections it has and accepts again
// once they close. Before, the first EMFILE from accept shut the node
// down, so one client's connection leak took the cache from every other
// client.
func TestServerProcessOutlivesDescriptorExhaustion(t *testing.T) {
	addr, httpAddr := freePort(t), freePort(t)
	// The shell's ulimit sets the soft and the hard limit, so the Go
	// runtime cannot raise it again. The disk keeps one descriptor per
	// extent: four here.
	cmd := exec.Command("sh", "-c", `ulimit -n 64 && exec "$0" "$@"`, binPath, "server",
		"--listen", addr, "--http-listen", httpAddr, "--disks", filepath.Join(t.TempDir(), "d0"), "--disk-capacity-bytes", "256MiB", "--slab-extent-bytes", "64MiB")
	srv := startChildCmd(t, "server", "http://"+httpAddr+"/readyz", cmd)

	ctx := context.Background()
	// keeper holds one connection from before the flood; STATS over it
	// needs no new descriptor on the node.
	keeper, err := client.Open(client.Options{Namespace: []byte("fd"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	if err := keeper.Put(ctx, []byte("before"), bytes.Repeat([]byte{1}, 4096)); err != nil {
		t.Fatal(err)
	}
	acceptErrors := func() uint64 {
		t.Helper()
		body, err := keeper.Stats(ctx, addr)
		if err != nil {
			t.Fatalf("STATS over the kept connection: %v", err)
		}
		var st struct {
			Server struct {
				AcceptErrors uint64 `json:"accept_errors"`
			} `json:"server"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		return st.Server.AcceptErrors
	}

	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for range 100 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second) // the kernel's backlog takes what the node cannot accept
		if err != nil {
			t.Fatalf("dial %d: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	waitFor(t, "the node to run out of descriptors", 30*time.Second, func() bool { return acceptErrors() > 0 })

	// Out of descriptors, the node still serves the connection it has.
	if err := keeper.Put(ctx, []byte("during"), bytes.Repeat([]byte{2}, 4096)); err != nil {
		t.Fatalf("PUT over the kept connection while out of descriptors: %v", err)
	}
	for _, c := range flood {
		_ = c.Close()
	}
	flood = nil

	// The shortage over, a new client connects and finds both values.
	fresh, err := client.Open(client.Options{Namespace: []byte("fd"), Members: []string{addr}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for _, k := range []string{"before", "during"} {
		if _, err := fresh.Exist(ctx, []byte(k)); err != nil {
			t.Fatalf("EXIST %s over a new connection after the flood: %v", k, err)
		}
	}
	if got := scrapeGauge(t, httpAddr, "dfkv_accept_errors_total"); got < 1 {
		t.Fatalf("dfkv_accept_errors_total = %v after running out of descriptors", got)
	}
	// The log reaches the test through a pipe, perhaps after the metric.
	waitFor(t, "the retried accept's log line", 10*time.Second, func() bool {
		return strings.Contains(srv.logs.String(), "accept failed; retrying")
	})
	if logs := srv.logs.String(); strings.Contains(logs, "dfkv server failed") {
		t.Fatalf("the node failed after running out of descriptors:\n%s", logs)
	}
	srv.stop(t)
}
