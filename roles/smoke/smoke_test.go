package smoke

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/roletest"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// startNode runs a whole dfkv node (file engine) in-process and returns
// its address.
func startNode(t *testing.T) string {
	addr, _ := roletest.StartNode(t, map[string][]string{"store-engine": {"file"}})
	return addr
}

// deadAddr is a loopback address nothing listens on: connections to it
// are refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runSmoke runs `dfkv smoke args…` in-process and returns the exit status
// and both outputs, as main.go would print them.
func runSmoke(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return roletest.Run(t, Command(), "", args...)
}

// TestSmokeStopsAtADeadMember: a member that does not answer PING ends
// the run there, with one line naming it and why and a non-zero exit,
// instead of every later check failing for the same reason; the live
// members are left untouched.
func TestSmokeStopsAtADeadMember(t *testing.T) {
	live, dead := startNode(t), deadAddr(t)
	for _, c := range []struct {
		name, members, stdout string
	}{
		{"dead node alone", dead, ""},
		{"dead node after a live one", live + "," + dead, "ok   ping " + live + "\n"},
	} {
		code, out, errs := runSmoke(t, "--members", c.members, "--run-id", "dead")
		want := "dfkv smoke: member " + dead + " does not answer PING: "
		if code == 0 || out != c.stdout || strings.Count(errs, "\n") != 1 ||
			!strings.HasPrefix(errs, want) || !strings.Contains(errs, "connection refused") {
			t.Errorf("%s: exit %d (want non-zero)\nstdout %q (want %q)\nstderr %q (want one line starting %q, saying why)",
				c.name, code, out, c.stdout, errs, want)
		}
	}
	// Nothing was put on the live node.
	cl, err := client.Open(client.Options{Members: []string{live}, Namespace: []byte("dfkv-tools"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Exist(context.Background(), []byte("smoke/dead/scalar-1")); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("the stopped run stored its first key on the live node: %v", err)
	}
}
