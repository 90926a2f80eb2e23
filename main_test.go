package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binPath is the dfkv binary built once for the multi-process tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dfkv-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "dfkv")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dfkv for the multi-process tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runIn runs args through run() in-process and returns status and output.
func runIn(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDispatchInProcess(t *testing.T) {
	f := func(args []string, wantCode int, wantErr string) {
		t.Helper()
		code, out, errs := runIn(args...)
		if code != wantCode || !strings.Contains(errs+out, wantErr) {
			t.Fatalf("%v: code %d (want %d)\nstdout %s\nstderr %s", args, code, wantCode, out, errs)
		}
	}
	f([]string{"dfkv", "nosuch"}, 2, "valid roles: server, mds, smoke, bench, ctl, version")
	f([]string{"/usr/bin/dfkv-nosuch"}, 2, "dfkvctl")
	f([]string{"dfkv-mds", "--print-config"}, 0, "mds.listen = ")
	f([]string{"dfkv", "bench", "--workload", "scan"}, 2, "valid workloads are put, get, exist, mixed, prefix")
	f([]string{"dfkv", "version"}, 0, "dfkv ")
	f([]string{"/opt/x/dfkv_server", "--print-config"}, 0, "server.listen = ")
	f([]string{"dfkvctl", "--print-config"}, 0, "client.members = ")
	f([]string{"dfkv", "server", "--max-block-bytes", "9TiB", "--print-config"}, 2, "DFKV_MAX_BLOCK_BYTES")
	// --print-config checks the quotas file the configuration names, as
	// the start would.
	f([]string{"dfkv", "server", "--tenant-quotas-file", filepath.Join(t.TempDir(), "missing.toml"), "--print-config"}, 2, "server.tenant_quotas_file")
	f([]string{"dfkv", "--help"}, 0, "smoke")

	for alias, role := range aliases {
		got, err := dispatch([]string{"/some/dir/" + alias, "--x"})
		if err != nil || got[1] != role || got[2] != "--x" {
			t.Fatalf("%s: %v %v", alias, got, err)
		}
	}
}

// TestArgumentMistakes: what an operator mistypes gets a clear error and
// exit 2, never a role that silently ran without the flags after a stray
// word; the version and help are where an operator looks for them.
func TestArgumentMistakes(t *testing.T) {
	f := func(wantCode int, want string, args ...string) {
		t.Helper()
		code, out, errs := runIn(append([]string{"dfkv"}, args...)...)
		if code != wantCode || !strings.Contains(errs+out, want) {
			t.Fatalf("%v: code %d (want %d, output with %q)\nstdout %s\nstderr %s", args, code, wantCode, want, out, errs)
		}
	}
	// The flag parser stops at the first word; before this was refused,
	// `server --print-config stray --listen 1.2.3.4:5` printed the default
	// listen address and exited 0.
	f(2, `dfkv server: unexpected argument "stray"`, "server", "--print-config", "stray", "--listen", "1.2.3.4:5")
	f(2, `dfkv mds: unexpected argument "version"`, "mds", "version")
	f(2, `dfkv smoke: unexpected argument "x"`, "smoke", "x")
	f(2, `dfkv bench: unexpected argument "x"`, "bench", "x", "--print-config")
	f(2, `dfkv ctl get: unexpected argument "c"`, "ctl", "get", "a", "b", "c")
	f(2, `dfkv ctl exist: unexpected argument "b"`, "ctl", "exist", "a", "b")
	f(2, `"--members" after the verb: ctl's options go before it`, "ctl", "get", "k", "--members", "127.0.0.1:1")
	f(2, `dfkv ctl info: unexpected argument "x"`, "ctl", "info", "x")
	f(2, `"--key-hex" after the verb`, "ctl", "exist", "6b", "--key-hex")
	f(2, "--members; it is an option of dfkv ctl: give it before the verb", "ctl", "exist", "--members", "127.0.0.1:1", "k")
	// A key that starts with "-" is a key (this one is looked up on a
	// node nobody listens on: the error is about reaching it).
	f(2, "cannot reach the node", "ctl", "--members", freePort(t), "exist", "--", "-k")

	f(2, "--ops 5 and --duration 1s both given", "bench", "--ops", "5", "--duration", "1s")
	// A mistyped flag: one line with a suggestion, not the whole help.
	f(2, "dfkv server: flag provided but not defined: --lissten; did you mean --listen?", "server", "--lissten", "x")
	f(2, "dfkv ctl stats: flag provided but not defined: --jsn; did you mean --json?", "ctl", "stats", "--jsn")
	f(2, "dfkv bench: flag needs an argument: --duration", "bench", "--duration")
	f(2, "dfkv: flag provided but not defined: --listen (dfkv --help lists the roles; each role's flags come after it)", "--listen", "x", "server")
	if _, out, errs := runIn("dfkv", "mds", "--nope"); strings.Contains(out+errs, "USAGE") {
		t.Fatalf("an unknown flag printed the whole help:\n%s%s", out, errs)
	}
	f(0, "dfkv dev (commit ", "--version")
	f(0, "mds ", "help")

	t.Setenv("DFKV_NO_SUCH_SETTING", "1")
	f(0, "DFKV_NO_SUCH_SETTING is not a dfkv setting", "server", "--print-config")
}

// TestCtlUnreachableNode: ctl asked about a key on a node it cannot reach
// says so, once, and exits 2; it never reports "not found" (exit 1) for a
// key whose node could not be asked, though the client answers engines
// with a miss there.
func TestCtlUnreachableNode(t *testing.T) {
	dead := freePort(t) // closed again: connections are refused
	for _, verb := range []string{"get", "exist"} {
		code, out, errs := runIn("dfkv", "ctl", "--members", dead, verb, "k")
		if code != 2 || !strings.Contains(errs, "cannot reach the node") || strings.Contains(errs+out, "not found") || strings.Contains(errs, "level=WARN") {
			t.Fatalf("ctl %s against a dead node: exit %d (want 2)\nstdout %s\nstderr %s", verb, code, out, errs)
		}
	}
}

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

// cleanEnv is the environment without DFKV_* settings of the caller.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DFKV_") {
			env = append(env, kv)
		}
	}
	return env
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer starts `dfkv server` on addr with its HTTP on httpAddr and
// the given disks (1 GiB each) as a child process, ready to serve.
func startServer(t *testing.T, addr, httpAddr string, disks ...string) *child {
	t.Helper()
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disk-capacity", "1GiB"}
	for _, d := range disks {
		args = append(args, "--disk", d)
	}
	return startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
}

// stop sends SIGTERM and expects a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.signal(t, syscall.SIGTERM)
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM:\n%s", c.name, code, c.logs.String())
	}
}

// dfkv runs the binary with args and stdin, returning exit code and output.
func dfkv(t *testing.T, stdin []byte, args ...string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), out.Bytes(), errb.String()
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
	code, _, errs := dfkv(t, nil, "server", "--disk", filepath.Join(dir, "d"), "--listen", "nope")
	if code != 2 || !strings.Contains(errs, "DFKV_LISTEN") {
		t.Fatalf("bad listen: exit %d: %s", code, errs)
	}
	code, _, errs = dfkv(t, nil, "server", "--disk", filepath.Join(dir, "d"), "--store-engine", "lsm", "--listen", freePort(t), "--http-listen", "")
	if code != 2 || !strings.Contains(errs, "DFKV_STORE_ENGINE") {
		t.Fatalf("unknown engine: exit %d: %s", code, errs)
	}
	// A disk the file engine wrote is not silently reformatted by slab.
	fileDisk := filepath.Join(dir, "filedisk")
	if err := os.MkdirAll(filepath.Join(fileDisk, "blocks"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs = dfkv(t, nil, "server", "--disk", fileDisk, "--disk-capacity", "256MiB", "--listen", freePort(t), "--http-listen", "")
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
