package server

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestPProfOnlyWhenAsked: the profiler is on the HTTP listener with
// server.pprof = 1 (a goroutine dump that names the node's own code) and
// not there by default.
func TestPProfOnlyWhenAsked(t *testing.T) {
	get := func(httpAddr, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, on := range []bool{false, true} {
		flags := map[string][]string{"disk": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity": {"256MiB"}}
		if on {
			flags["pprof"] = []string{"1"}
		}
		_, httpAddr, stop := runNode(t, flags)
		code, body := get(httpAddr, "/debug/pprof/goroutine?debug=1")
		switch {
		case on && (code != 200 || !strings.Contains(body, "roles/server")):
			t.Fatalf("pprof on: %d %.200s", code, body)
		case !on && code != http.StatusNotFound:
			t.Fatalf("pprof off: /debug/pprof/ answered %d, want 404", code)
		}
		if code, _ := get(httpAddr, "/healthz"); code != 200 {
			t.Fatalf("healthz %d", code)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}
