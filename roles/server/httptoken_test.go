package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
)

// With server.http_token_file, /metrics needs the token and the probes
// do not.
func TestMetricsNeedTheToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("metrics-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, httpAddr, _ := runNode(t, map[string][]string{"disks": {filepath.Join(t.TempDir(), "d")}, "disk-capacity-bytes": {"64MiB"},
		"http-token-file": {tok}, "pprof": {"1"}})
	get := func(path, auth string) int {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", 401}, {"/metrics", "Bearer wrong-token-0123456789", 401}, {"/metrics", "Bearer metrics-token-0123456789", 200},
		{"/debug/pprof/", "", 401}, {"/debug/pprof/", "Bearer metrics-token-0123456789", 200},
		{"/healthz", "", 200}, {"/readyz", "", 200},
	} {
		if got := get(c.path, c.auth); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, got, c.want)
		}
	}
}

// A token file that cannot be used stops the start, naming it.
func TestBadTokenFileRefusesStart(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{"disks": {filepath.Join(t.TempDir(), "d")},
		"disk-capacity-bytes": {"64MiB"}, "listen": {"127.0.0.1:0"}, "http-listen": {"127.0.0.1:0"}, "http-token-file": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	err = Run(t.Context(), cfg, Deps{})
	if err == nil || !strings.Contains(err.Error(), "server.http_token_file") || !strings.Contains(err.Error(), tok) {
		t.Fatalf("start with a 5-byte token: %v", err)
	}
}
