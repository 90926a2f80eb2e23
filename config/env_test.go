package config

import (
	"strings"
	"testing"

	"github.com/dfkv/dfkv/rdma"
)

func TestUnknownEnv(t *testing.T) {
	environ := []string{
		"PATH=/bin",
		"DFKV_SERVER_LISTEN=127.0.0.1:1", // a setting
		"DFKV_CLIENT_MEMBERS=a:1",        // a setting of another role: still known
		"DFKV_CONFIG=/x.toml",            // the config file
		"DFKV_RDMA_NUMA=1",               // a feature not built yet: warned as such
		"DFKV_RDMA_DEV=mlx5_0",           // read by package rdma
		"DFKV_LIBRARY=/lib/libdfkv.so",
		"DFKV_TEST_OUT=/tmp/x", // the test harness
		"DFKV_BIN=/tmp/dfkv",
		"DFKV_LISTN=127.0.0.1:1", // typo
		"DFKV_BOGUS",             // no '='
		"DFKV_ZZZ_WHAT=1",
		"dfkv_listen=x", // not DFKV_
	}
	got := unknownEnv(environ)
	want := []string{
		"environment variable DFKV_BOGUS is not a dfkv setting and is ignored; dfkv.example.toml lists every setting with its env name",
		"environment variable DFKV_LISTN is not a dfkv setting and is ignored; did you mean DFKV_SERVER_LISTEN?",
		"environment variable DFKV_RDMA_NUMA belongs to a feature this build does not have yet; it is ignored",
		"environment variable DFKV_ZZZ_WHAT is not a dfkv setting and is ignored; dfkv.example.toml lists every setting with its env name",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("unknownEnv:\n got %q\nwant %q", got, want)
	}
}

// TestLoadWarnsUnknownEnv: Load reads the process environment for unknown
// DFKV_* names and warns, without failing.
func TestLoadWarnsUnknownEnv(t *testing.T) {
	t.Setenv("DFKV_LISTEN_ADDR", "127.0.0.1:1")
	_, r, err := runRole(t, "server", nil, nil)
	if err != nil {
		t.Fatalf("unknown DFKV_ variable failed the load: %v", err)
	}
	found := false
	for _, w := range r.Warnings() {
		if strings.Contains(w, "DFKV_LISTEN_ADDR is not a dfkv setting") {
			found = true
		}
	}
	if !found {
		t.Fatalf("warnings %q do not mention DFKV_LISTEN_ADDR", r.Warnings())
	}
	// Warnings returns a copy.
	if w := r.Warnings(); len(w) > 0 {
		w[0] = "x"
		if r.Warnings()[0] == "x" {
			t.Fatal("Warnings shares its slice")
		}
	}
}

// TestRDMASwitchRefused: DFKV_RDMA set to a true value stops a node with
// an error that says why it cannot have the transport (a build without
// the ibverbs tag: how to build one; a host without a device: the verbs
// library's reason) and how to serve over TCP, and so does a value that
// is not a boolean or a malformed RDMA setting; a false value passes, and
// a client role only warns.
func TestRDMASwitchRefused(t *testing.T) {
	env := func(vals ...string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			for i := 0; i+1 < len(vals); i += 2 {
				if vals[i] == name {
					return vals[i+1], true
				}
			}
			return "", false
		}
	}
	why := "go build -tags ibverbs" // the reason of a build without verbs
	if _, err := rdma.DefaultProvider(); err == nil {
		why = "RDMA" // a tag build: no device here, or the role does not start it
	}
	for _, v := range []string{"1", "true", "on", "YES"} {
		_, _, err := runRole(t, "server", nil, env("DFKV_RDMA", v))
		if err == nil || !strings.Contains(err.Error(), "DFKV_RDMA="+v) || !strings.Contains(err.Error(), why) ||
			!strings.Contains(err.Error(), "serve over TCP") {
			t.Errorf("server with DFKV_RDMA=%s: %v, want a refusal naming it, saying %q", v, err, why)
		}
	}
	if _, _, err := runRole(t, "server", nil, env("DFKV_RDMA", "maybe")); err == nil || !strings.Contains(err.Error(), "is not a boolean") {
		t.Errorf("server with DFKV_RDMA=maybe: %v, want it called not a boolean", err)
	}
	if _, _, err := runRole(t, "server", nil, env("DFKV_RDMA", "1", "DFKV_RDMA_OP_TIMEOUT_MS", "soon")); err == nil ||
		!strings.Contains(err.Error(), "DFKV_RDMA_OP_TIMEOUT_MS") {
		t.Errorf("server with a malformed RDMA timeout: %v, want it named", err)
	}
	for _, v := range []string{"0", "false", "f", "off", ""} {
		if _, _, err := runRole(t, "server", nil, env("DFKV_RDMA", v, "DFKV_RDMA_OP_TIMEOUT_MS", "soon")); err != nil {
			t.Errorf("server with DFKV_RDMA=%q: %v", v, err)
		}
	}
	for _, role := range []string{"ctl", "bench", "smoke"} {
		if _, _, err := runRole(t, role, nil, env("DFKV_RDMA", "1")); err != nil {
			t.Errorf("%s with DFKV_RDMA=1: %v; a client role only warns", role, err)
		}
	}
	// Client roles read the switch themselves (rdma.ClientFromEnv): the
	// configuration neither refuses it nor warns of it.
}

// TestLoopbackRegistrationWarned: a node that registers a loopback
// address with an MDS (as `--advertise-addr $(hostname -i):7600` does on
// a host whose name resolves to 127.0.x.x) is warned, naming the setting;
// without an MDS, with a routable address, or with the MDS on loopback too
// (a cluster on one host), it is not.
func TestLoopbackRegistrationWarned(t *testing.T) {
	warned := func(args ...string) string {
		t.Helper()
		_, r, err := runRole(t, "server", args, nil)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, w := range r.Warnings() {
			if strings.Contains(w, "loopback address") {
				return w
			}
		}
		return ""
	}
	if w := warned("--mds", "10.0.0.1:7700", "--advertise-addr", "127.0.1.1:7600"); !strings.Contains(w, "server.advertise_addr") {
		t.Errorf("loopback advertise address with an MDS: warning %q", w)
	}
	if w := warned("--mds", "10.0.0.1:7700"); !strings.Contains(w, "server.listen") {
		t.Errorf("default loopback listen address registered with an MDS: warning %q", w)
	}
	if w := warned("--mds", "10.0.0.1:7700", "--advertise-addr", "10.0.0.21:7600"); w != "" {
		t.Errorf("routable advertise address warned: %q", w)
	}
	if w := warned(); w != "" {
		t.Errorf("no MDS, warned: %q", w)
	}
	if w := warned("--mds", "127.0.0.1:7700", "--listen", "127.0.0.1:7601"); w != "" {
		t.Errorf("a cluster on one host (MDS on loopback too) warned: %q", w)
	}
}
