package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPrintConfigSources: --print-config names the layer of every value.
func TestPrintConfigSources(t *testing.T) {
	path := writeTOML(t, "[server]\nlisten = \"10.0.0.1:7600\"\nmax_conns = 5\n[client]\nmembers = [\"x:1\"]\n")
	env := envOf(map[string]string{"DFKV_SERVER_MAX_CONNS": "10", "DFKV_LOG_FORMAT": "json"})
	flags := map[string][]string{"disks": {"/d1", "/d2"}, "max-block-bytes": {"1048576"}}
	_, r, err := LoadFrom("server", path, env, flags)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d bytes", n, err, buf.Len())
	}
	out := buf.String()
	for _, line := range []string{
		"# dfkv server: resolved configuration (defaults < file < env < flags)",
		"# config file: " + path + " (from --config)",
		`group = "default"  # default (DFKV_GROUP)`,
		`server.id = ""  # default (DFKV_SERVER_ID)`,
		`server.listen = "10.0.0.1:7600"  # file (DFKV_SERVER_LISTEN)`,
		`server.max_conns = 10  # env (DFKV_SERVER_MAX_CONNS)`,
		`server.disks = ["/d1", "/d2"]  # flag (DFKV_SERVER_DISKS)`,
		`server.max_block_bytes = "1MiB"  # flag (DFKV_SERVER_MAX_BLOCK_BYTES)`,
		`server.disk_capacity_bytes = 0  # default (DFKV_SERVER_DISK_CAPACITY_BYTES)`,
		`server.first_request_ms = 30000  # default (DFKV_SERVER_FIRST_REQUEST_MS)`,
		`log.format = "json"  # env (DFKV_LOG_FORMAT)`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("print-config lacks line\n\t%s\nin\n%s", line, out)
		}
	}
	// Only the role's settings, one line each.
	if strings.Contains(out, "client.") {
		t.Errorf("server print-config shows client settings:\n%s", out)
	}
	if got, want := strings.Count(out, "\n")-2, len(r.values); got != want {
		t.Errorf("print-config has %d setting lines; want %d", got, want)
	}
}

// TestPrintConfigRoles: each role prints exactly its own settings.
func TestPrintConfigRoles(t *testing.T) {
	for _, rn := range roleNames {
		_, r, err := LoadFrom(rn.name, "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := r.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		for i := range settings {
			s := &settings[i]
			has := strings.Contains(buf.String(), "\n"+s.key+" = ")
			if want := s.roles&rn.bit != 0; has != want {
				t.Errorf("%s print-config shows %s: %v; want %v", rn.name, s.key, has, want)
			}
		}
	}
}

// TestPrintConfigRoundTrip: the printout is a config file that loads back to
// the same Config, like pebble's Options.String and Parse.
func TestPrintConfigRoundTrip(t *testing.T) {
	flags := map[string][]string{
		"group": {"g"}, "id": {`node-"1"\x`}, "listen": {"[::1]:0"}, "http-listen": {""},
		"disks": {"/a", "/b c"}, "disk-capacity-bytes": {"1000001"}, "store-engine": {"slab"},
		"max-block-bytes": {"4KiB"}, "max-batch-items": {"1"}, "max-conns": {"1000000"},
		"first-request-ms": {"0"}, "shutdown-timeout-ms": {"1"}, "log-level": {"debug"}, "log-format": {"json"},
		"ram-tier-large-reserve-bytes": {"4097"},
	}
	got, want, r2, printed := roundTrip(t, "server", flags)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\nprinted:\n%s", got, want, printed)
	}
	for _, rv := range r2.values {
		if rv.src.kind != fromFile {
			t.Errorf("%s came from %s; want file", rv.s.key, rv.src.kind)
		}
	}
}

// roundTrip loads role with flags, writes --print-config's output to a
// file and loads that file: got should equal want, every value from the
// file (r2 tells where each came from).
func roundTrip(t *testing.T, role string, flags map[string][]string) (got, want *Config, r2 *Resolved, printed string) {
	t.Helper()
	want, r, err := LoadFrom(role, "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "printed.toml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, r2, err = LoadFrom(role, path, nil, nil)
	if err != nil {
		t.Fatalf("print-config output does not load: %v\n%s", err, buf.String())
	}
	return got, want, r2, buf.String()
}

// TestPrintConfigIsASnapshot: the role changing its Config after Load (say,
// deriving server.id) does not change what --print-config shows was loaded.
func TestPrintConfigIsASnapshot(t *testing.T) {
	cfg, r, err := LoadFrom("server", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = "changed:1"
	cfg.Server.Disks[0] = "/changed"
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "changed") {
		t.Fatalf("print-config shows changes made after Load:\n%s", buf.String())
	}
}

// TestPrintConfigShowsAutoValues: a setting left to its automatic value
// prints what that resolves to, and one given a value of its own does not.
func TestPrintConfigShowsAutoValues(t *testing.T) {
	_, r, err := LoadFrom("server", "", nil, map[string][]string{"max-conns": {"10"}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetAuto("server.disk_capacity_bytes", "2GiB")
	r.SetAuto("server.max_conns", "never shown")
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "server.disk_capacity_bytes = 0  # default, auto (= 2GiB) (DFKV_SERVER_DISK_CAPACITY_BYTES)") {
		t.Errorf("automatic capacity not explained:\n%s", out)
	}
	if strings.Contains(out, "never shown") {
		t.Errorf("a value set by a flag was annotated as automatic:\n%s", out)
	}
}

// TestOrigins: a role can tell which layer set each setting, under which
// name, and whether the value is the default anyway (a file spelling it
// out), so it can refuse what the user typed without refusing what a
// shared file or environment holds.
func TestOrigins(t *testing.T) {
	path := writeTOML(t, "[client]\nmembers = [\"127.0.0.1:7600\"]\ntls = 1\n[bench]\nduration = \"5s\"\n")
	env := envOf(map[string]string{"DFKV_TOKEN": "0123456789abcdef0123", "DFKV_BENCH_OPS": "7"})
	_, r, err := LoadFrom("bench", path, env, map[string][]string{"c": {"3"}, "workload": {"put"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Origin{
		{Key: "client.members", Env: "DFKV_CLIENT_MEMBERS", Flag: "members", Layer: LayerFile, From: "file " + path, Default: true},
		{Key: "client.tls", Env: "DFKV_CLIENT_TLS", Flag: "tls", Layer: LayerFile, From: "file " + path},
		{Key: "bench.duration", Env: "DFKV_BENCH_DURATION", Flag: "duration", Layer: LayerFile, From: "file " + path},
		{Key: "client.token", Env: "DFKV_CLIENT_TOKEN", Flag: "token", Layer: LayerEnv, From: "env DFKV_TOKEN"},
		{Key: "bench.ops", Env: "DFKV_BENCH_OPS", Flag: "ops", Layer: LayerEnv, From: "env"},
		{Key: "bench.concurrency", Env: "DFKV_BENCH_CONCURRENCY", Flag: "concurrency", Layer: LayerFlag, From: "flag --concurrency"},
		{Key: "bench.workload", Env: "DFKV_BENCH_WORKLOAD", Flag: "workload", Layer: LayerFlag, From: "flag --workload", Default: true},
		{Key: "bench.keys", Env: "DFKV_BENCH_KEYS", Flag: "keys", Layer: LayerDefault, From: "default", Default: true},
	} {
		if got, ok := r.Origin(want.Key); !ok || got != want {
			t.Errorf("Origin(%s) = %+v, %v\nwant %+v", want.Key, got, ok, want)
		}
	}
	if _, ok := r.Origin("server.listen"); ok {
		t.Error("bench has an origin for server.listen, a setting it does not take")
	}
	all := r.Origins()
	if len(all) != len(r.values) {
		t.Fatalf("Origins lists %d settings; the role takes %d", len(all), len(r.values))
	}
	for i, o := range all {
		if o.Key != r.values[i].s.key {
			t.Fatalf("Origins[%d] is %s; want %s, in table order", i, o.Key, r.values[i].s.key)
		}
	}
	if !(LayerDefault < LayerFile && LayerFile < LayerEnv && LayerEnv < LayerFlag) {
		t.Error("the layers are not in the order they apply")
	}
}
