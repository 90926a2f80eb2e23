package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// These tests run main.go's dispatch and argument handling in-process;
// the tests that build the binary and start processes are in roles/e2e.

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
	f([]string{"dfkv", "server", "--max-block-bytes", "9TiB", "--print-config"}, 2, "DFKV_SERVER_MAX_BLOCK_BYTES")
	// --print-config checks the quotas file the configuration names, as
	// the start would.
	f([]string{"dfkv", "server", "--tenant-quotas-file", filepath.Join(t.TempDir(), "missing.toml"), "--print-config"}, 2, "server.tenant_quotas_file")
	f([]string{"dfkv", "--help"}, 0, "smoke")
	f([]string{"dfkv", "help", "nosuch"}, 2, "unknown role")
	// A binary renamed for a release still takes its role as the first
	// argument; a mistyped symlink is still named in the error.
	f([]string{"/tmp/dfkv-linux-amd64", "mds", "--print-config"}, 0, "mds.listen = ")
	f([]string{"/tmp/dfkv-linux-amd64", "--version"}, 0, "dfkv ")
	f([]string{"/usr/bin/dfkv-sever", "--listen", ":1"}, 2, "unknown role name \"dfkv-sever\"")

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
	f(2, `dfkv version: unexpected argument "extra"`, "version", "extra")
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

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRenamedBinaryMistypedRole: a release binary named dfkv-linux-amd64
// runs in the subcommand form (`dfkv-linux-amd64 server …`), and a
// mistyped role (`dfkv-linux-amd64 serve`) is answered as `dfkv serve`
// is, naming the role and the valid ones, not blaming the binary's name.
func TestRenamedBinaryMistypedRole(t *testing.T) {
	code, out, errs := runIn("/tmp/dfkv-linux-amd64", "serve")
	if code != 2 || !strings.Contains(errs, `unknown role "serve"`) || strings.Contains(errs, "unknown role name") {
		t.Errorf("dfkv-linux-amd64 serve: exit %d\nstdout %q\nstderr %q\nwant exit 2 naming the role \"serve\" and the valid roles", code, out, errs)
	}
}
