package mds

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
)

// With mds.http_token_file, /members and /metrics need the token; the
// probes do not.
func TestMembersAndMetricsNeedTheToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("mds-http-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, httpAddr, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}, "http-token-file": {tok}})
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/members", "", 401}, {"/members", "Bearer mds-http-token-0123456789", 200},
		{"/metrics", "", 401}, {"/metrics", "Bearer not-the-token-0123456789", 401}, {"/metrics", "Bearer mds-http-token-0123456789", 200},
		{"/healthz", "", 200}, {"/readyz", "", 200},
	} {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.auth, resp.StatusCode, c.want)
		}
	}
	// A token file that cannot be used stops the start, naming it.
	cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "m2.db")},
		"listen": {"127.0.0.1:0"}, "http-listen": {"127.0.0.1:0"}, "http-token-file": {filepath.Join(t.TempDir(), "missing")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(t.Context(), cfg, Deps{}); err == nil || !strings.Contains(err.Error(), "mds.http_token_file") {
		t.Fatalf("start with a missing token file: %v", err)
	}
}
