package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSymlinkDispatch runs the built binary through real symlinks.
func TestSymlinkDispatch(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"dfkv-server", "dfkv_server", "dfkv-smoke", "dfkv-ctl", "dfkvctl", "dfkv-bench", "dfkv-mds", "dfkv_mds", "dfkv-bogus"} {
		if err := os.Symlink(binPath, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f := func(name string, args []string, wantCode int, want string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, name), args...)
		cmd.Env = cleanEnv()
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != wantCode || !strings.Contains(string(out), want) {
			t.Fatalf("%s %v: exit %d (want %d), output:\n%s", name, args, cmd.ProcessState.ExitCode(), wantCode, out)
		}
	}
	f("dfkv-server", []string{"--print-config"}, 0, "server.listen = \"127.0.0.1:7600\"")
	f("dfkv_server", []string{"--print-config"}, 0, "server.disks")
	f("dfkv-smoke", []string{"--print-config"}, 0, "client.members")
	f("dfkv-ctl", []string{"--print-config"}, 0, "client.namespace")
	f("dfkvctl", []string{"--print-config"}, 0, "client.namespace")
	f("dfkv-bench", []string{"--print-config"}, 0, "client.members")
	f("dfkv-mds", []string{"--print-config"}, 0, "mds.etcd_endpoints")
	f("dfkv_mds", []string{"--print-config"}, 0, "mds.db_path")
	f("dfkv-bogus", nil, 2, "unknown role name")
}

// TestCtlUnreachableNode: ctl asked about a key on a node it cannot reach
// says so, once, and exits 2; it never reports "not found" (exit 1) for a
// key whose node could not be asked, though the client answers engines
// with a miss there.
func TestCtlUnreachableNode(t *testing.T) {
	dead := freePort(t) // closed again: connections are refused
	for _, verb := range []string{"get", "exist"} {
		code, out, errs := dfkv(t, nil, "ctl", "--members", dead, verb, "k")
		if code != 2 || !strings.Contains(errs, "cannot reach the node") || strings.Contains(errs+string(out), "not found") || strings.Contains(errs, "level=WARN") {
			t.Fatalf("ctl %s against a dead node: exit %d (want 2)\nstdout %s\nstderr %s", verb, code, out, errs)
		}
	}
}

// TestServerProcessEndToEnd starts a real node on two disk directories,
// runs smoke and ctl against it, restarts it with SIGTERM and finds every
// block again, byte-exact.
func TestServerProcessEndToEnd(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	d0, d1 := filepath.Join(dir, "d0"), filepath.Join(dir, "d1")
	srv := startServer(t, addr, httpAddr, d0, d1)
	members := "--members=" + addr

	code, out, errs := dfkv(t, nil, "smoke", members, "--keep", "--run-id", "e2e")
	if code != 0 {
		t.Fatalf("smoke failed (%d):\n%s\n%s", code, out, errs)
	}
	if !bytes.Contains(out, []byte(" 0 failed")) {
		t.Fatalf("smoke summary missing:\n%s", out)
	}

	// ctl: values from stdin and from a file, binary bytes and a NUL key.
	values := map[string][]byte{}
	for i, n := range []int{1, 4097, 1 << 20, 3<<20 + 5} {
		v := make([]byte, n)
		_, _ = rand.Read(v)
		k := fmt.Sprintf("ctl/key-%d", i)
		values[k] = v
		if i%2 == 0 {
			if code, _, errs := dfkv(t, v, "ctl", members, "put", k); code != 0 {
				t.Fatalf("ctl put %s from stdin: %d %s", k, code, errs)
			}
		} else {
			f := filepath.Join(dir, "in.bin")
			_ = os.WriteFile(f, v, 0o644)
			if code, _, errs := dfkv(t, nil, "ctl", members, "put", k, f); code != 0 {
				t.Fatalf("ctl put %s from file: %d %s", k, code, errs)
			}
		}
	}
	if code, _, errs := dfkv(t, []byte("nul"), "ctl", members, "--key-hex", "put", "6b00ff"); code != 0 {
		t.Fatalf("ctl put hex key: %d %s", code, errs)
	}
	values["\x6b\x00\xff"] = []byte("nul")
	if code, _, errs := dfkv(t, nil, "ctl", members, "put", "empty-value"); code != 2 || !strings.Contains(errs, "INVALID") {
		t.Fatalf("ctl put of an empty value: %d %s", code, errs)
	}
	checkAll := func(when string) {
		t.Helper()
		for k, v := range values {
			args := []string{"ctl", members, "get", k}
			if strings.ContainsRune(k, 0) {
				args = []string{"ctl", members, "--key-hex", "get", fmt.Sprintf("%x", k)}
			}
			code, out, errs := dfkv(t, nil, args...)
			if code != 0 || !bytes.Equal(out, v) {
				t.Fatalf("%s: ctl get %q: exit %d, %d bytes (want %d): %s", when, k, code, len(out), len(v), errs)
			}
		}
		f := filepath.Join(dir, "out.bin")
		if code, _, errs := dfkv(t, nil, "ctl", members, "get", "ctl/key-2", f); code != 0 {
			t.Fatalf("%s: ctl get to file: %s", when, errs)
		}
		if got, _ := os.ReadFile(f); !bytes.Equal(got, values["ctl/key-2"]) {
			t.Fatalf("%s: file from ctl get differs", when)
		}
		umask := syscall.Umask(0)
		syscall.Umask(umask)
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != os.FileMode(0o666&^umask) {
			t.Fatalf("%s: file from ctl get: %v, mode %v; want 0666 less the umask %03o, like any output file", when, err, fi.Mode(), umask)
		}
		code, out, _ := dfkv(t, nil, "ctl", members, "exist", "ctl/key-3")
		if code != 0 || strings.TrimSpace(string(out)) != fmt.Sprint(3<<20+5) {
			t.Fatalf("%s: ctl exist: %d %q", when, code, out)
		}
		code, _, errs := dfkv(t, nil, "ctl", members, "get", "ctl/never-put")
		if code != 1 || !strings.Contains(errs, "not found") {
			t.Fatalf("%s: ctl get of a missing key: exit %d %q", when, code, errs)
		}
		// Blocks smoke left behind (--keep) are there too.
		code, out, _ = dfkv(t, nil, "ctl", members, "exist", "smoke/e2e/scalar-65537")
		if code != 0 || strings.TrimSpace(string(out)) != "65537" {
			t.Fatalf("%s: smoke block: %d %q", when, code, out)
		}
	}
	checkAll("before restart")

	code, out, _ = dfkv(t, nil, "ctl", members, "stats", "--json")
	var docs []struct {
		Node  string          `json:"node"`
		Stats json.RawMessage `json:"stats"`
	}
	if err := json.Unmarshal(out, &docs); code != 0 || err != nil || len(docs) != 1 || docs[0].Node == "" || !bytes.Contains(docs[0].Stats, []byte(`"objects"`)) {
		t.Fatalf("ctl stats --json: %d %v %s; want one JSON array with the node's document", code, err, out)
	}
	code, out, _ = dfkv(t, nil, "ctl", members, "stats")
	if code != 0 || !bytes.Contains(out, []byte("objects")) || !bytes.Contains(out, []byte("hits")) || bytes.Contains(out, []byte("ram tier")) {
		t.Fatalf("ctl stats (RAM tier off): %d %s", code, out)
	}
	code, out, _ = dfkv(t, nil, "ctl", members, "info")
	for _, want := range []string{"build      dfkv", "cpu ", "features", "engine     slab", "disk       " + d0, "disk       " + d1, "setting    server.disks"} {
		if code != 0 || !bytes.Contains(out, []byte(want)) {
			t.Fatalf("ctl info lacks %q (exit %d):\n%s", want, code, out)
		}
	}

	srv.stop(t)
	if logs := srv.logs.String(); !strings.Contains(logs, `msg="shutdown requested" role=server signal=terminated`) ||
		strings.Index(logs, "shutdown requested") > strings.Index(logs, "stopped accepting") {
		t.Fatalf("server log does not say SIGTERM started the shutdown, before the shutdown's own lines:\n%s", logs)
	}
	if !strings.Contains(srv.logs.String(), "dfkv server listening") || !strings.Contains(srv.logs.String(), "stopped cleanly") {
		t.Fatalf("server log lacks start/stop lines:\n%s", srv.logs.String())
	}
	srv = startServer(t, addr, httpAddr, d0, d1)
	checkAll("after restart")

	// A second smoke run against the restarted node, then remove.
	if code, out, errs := dfkv(t, nil, "smoke", members); code != 0 {
		t.Fatalf("smoke after restart (%d):\n%s\n%s", code, out, errs)
	}
	if code, _, errs := dfkv(t, nil, "ctl", members, "rm", "ctl/key-0"); code != 0 {
		t.Fatalf("ctl rm: %s", errs)
	}
	if code, _, _ := dfkv(t, nil, "ctl", members, "rm", "ctl/key-0"); code != 1 {
		t.Fatalf("ctl rm of a removed key exits %d, want 1", code)
	}
	srv.stop(t)
}

// TestServerRefusesBadConfig: a bad setting stops startup with a message
// naming it; nothing is created.
func TestServerRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := dfkv(t, nil, "server", "--disks", filepath.Join(dir, "d"), "--listen", "nope")
	if code != 2 || !strings.Contains(errs, "DFKV_SERVER_LISTEN") {
		t.Fatalf("bad listen: exit %d: %s", code, errs)
	}
	code, _, errs = dfkv(t, nil, "server", "--disks", filepath.Join(dir, "d"), "--store-engine", "lsm", "--listen", freePort(t), "--http-listen", "")
	if code != 2 || !strings.Contains(errs, "DFKV_SERVER_STORE_ENGINE") {
		t.Fatalf("unknown engine: exit %d: %s", code, errs)
	}
	// A disk the file engine wrote is not silently reformatted by slab.
	fileDisk := filepath.Join(dir, "filedisk")
	if err := os.MkdirAll(filepath.Join(fileDisk, "blocks"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs = dfkv(t, nil, "server", "--disks", fileDisk, "--disk-capacity-bytes", "256MiB", "--listen", freePort(t), "--http-listen", "")
	if code == 0 || !strings.Contains(errs, fileDisk) {
		t.Fatalf("slab on a file-engine disk: exit %d: %s", code, errs)
	}
	// One structured line says why, not that line and a plain copy of it.
	if n := strings.Count(errs, "is not a slab store"); n != 1 || !strings.Contains(errs, `msg="dfkv server failed"`) {
		t.Fatalf("slab on a file-engine disk: the error appears %d times (want once, as a log line):\n%s", n, errs)
	}
	if _, err := os.Stat(filepath.Join(fileDisk, "slab_meta")); err == nil {
		t.Fatal("slab wrote into a directory it refused")
	}
	cfg := filepath.Join(dir, "bad.toml")
	_ = os.WriteFile(cfg, []byte("[server]\nlisten = \"127.0.0.1:1\"\nlisten_port = 3\n"), 0o644)
	code, _, errs = dfkv(t, nil, "server", "--config", cfg)
	if code != 2 || !strings.Contains(errs, "listen_port") {
		t.Fatalf("unknown key: exit %d: %s", code, errs)
	}
	// --print-config checks the credentials files it names, as a start would.
	creds := filepath.Join(dir, "creds.toml")
	_ = os.WriteFile(creds, []byte("[[credential]]\nname = \"a\"\ntoken_sha256 = \"00\"\n"), 0o600)
	code, _, errs = dfkv(t, nil, "server", "--credentials-file", creds, "--print-config")
	if code != 2 || !strings.Contains(errs, "line 3") {
		t.Fatalf("print-config of a broken credentials file: exit %d: %s", code, errs)
	}
	code, _, errs = dfkv(t, nil, "mds", "--node-credentials-file", creds, "--print-config")
	if code != 2 || !strings.Contains(errs, "mds.node_credentials_file") {
		t.Fatalf("mds print-config of a broken node credentials file: exit %d: %s", code, errs)
	}
}

// TestBenchProcess runs the built `dfkv bench` against a child server:
// --json - puts pure JSON on stdout (the table goes to stderr); against
// the stopped server the run reports its errors and exits 1.
func TestBenchProcess(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	srv := startServer(t, addr, httpAddr, filepath.Join(dir, "d0"))
	args := []string{"bench", "--members=" + addr, "--workload", "get", "--value-size", "64KiB", "--keys", "8", "-c", "2", "--ops", "20", "--warmup", "0", "--json", "-"}
	code, out, errs := dfkv(t, nil, args...)
	var res struct {
		OK     bool              `json:"ok"`
		Errors map[string]uint64 `json:"errors"`
		Totals struct {
			Ops   uint64 `json:"ops"`
			Bytes uint64 `json:"bytes"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("bench --json - did not print JSON on stdout (exit %d): %v\n%s\nstderr:\n%s", code, err, out, errs)
	}
	if code != 0 || !res.OK || len(res.Errors) != 0 || res.Totals.Ops != 20 || res.Totals.Bytes != 20*65536 {
		t.Fatalf("bench get: exit %d, result %+v\nstderr:\n%s", code, res, errs)
	}
	if !strings.Contains(errs, "p99.9") {
		t.Fatalf("bench --json -: the table is not on stderr:\n%s", errs)
	}
	srv.stop(t)
	code, out, errs = dfkv(t, nil, args...)
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("bench against a stopped server: no JSON (exit %d): %v\n%s", code, err, out)
	}
	if code != 1 || res.OK || res.Errors["UNAVAILABLE"] == 0 || !strings.Contains(errs, "WARNING: ") {
		t.Fatalf("bench against a stopped server: exit %d, errors %v\nstderr:\n%s", code, res.Errors, errs)
	}
}

// The tools run against an embedded store in their own process, set up
// from the config file's [server] table: smoke passes every check, bench
// measures, and ctl reads what is on the store's disk.
func TestToolsEmbedded(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "dfkv.toml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("[server]\ndisks = [%q]\ndisk_capacity_bytes = \"1GiB\"\nram_tier_bytes = \"256MiB\"\n", filepath.Join(dir, "disk"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := dfkv(t, nil, "smoke", "--embedded", "--config", cfgPath); code != 0 || !bytes.Contains(out, []byte(", 0 failed")) {
		t.Fatalf("smoke --embedded exited %d:\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := dfkv(t, nil, "bench", "--embedded", "--config", cfgPath, "--workload", "get", "--value-size", "64KiB",
		"--keys", "32", "-c", "2", "--ops", "500", "--warmup", "0"); code != 0 || !bytes.Contains(out, []byte("get")) {
		t.Fatalf("bench --embedded exited %d:\n%s\n%s", code, out, errOut)
	}
	// The tool's --max-block-bytes is the store's too: values larger than
	// the default 64 MiB are stored, and the report names what it measured.
	if code, out, errOut := dfkv(t, nil, "bench", "--embedded", "--config", cfgPath, "--max-block-bytes", "96MiB", "--workload", "get",
		"--value-size", "80MiB", "--keys", "2", "-c", "1", "--ops", "2", "--warmup", "0"); code != 0 || !bytes.Contains(out, []byte("an embedded store")) {
		t.Fatalf("bench --embedded of 80 MiB values with --max-block-bytes 96MiB exited %d:\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := dfkv(t, []byte("on the disk"), "ctl", "--embedded", "--config", cfgPath, "put", "k"); code != 0 {
		t.Fatalf("ctl --embedded put exited %d: %s", code, errOut)
	}
	// A later process finds it on the disk.
	if code, out, errOut := dfkv(t, nil, "ctl", "--embedded", "--config", cfgPath, "get", "k"); code != 0 || string(out) != "on the disk" {
		t.Fatalf("ctl --embedded get exited %d: %q %s", code, out, errOut)
	}
}
