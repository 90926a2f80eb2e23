package rolekit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/rdma"
)

// A tool asked for RDMA where it cannot run says so even at the ERROR
// level smoke and ctl log at, and goes on over TCP.
func TestRDMAThatCannotRunIsSaidAtError(t *testing.T) {
	t.Setenv(rdma.EnvSwitch, "1")
	if _, why := rdma.ClientFromEnv(func(k string) (string, bool) { return map[string]string{rdma.EnvSwitch: "1"}[k], k == rdma.EnvSwitch }); why == "" {
		t.Skip("RDMA can run here: nothing to say")
	}
	cfg, _, err := config.LoadFrom("smoke", "", func(string) (string, bool) { return "", false }, map[string][]string{"members": {"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cl, err := OpenClient(cfg, NewLogger(config.Log{Level: "error", Format: "text"}, &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if !strings.Contains(logs.String(), "using TCP") {
		t.Fatalf("nothing said at ERROR about RDMA not running: %q", logs.String())
	}
}
