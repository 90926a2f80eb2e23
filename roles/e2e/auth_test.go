package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

const (
	aliceTok = "alice-e2e-token-0123456789abcdef"
	bobTok   = "bob-e2e-token-0123456789abcdefgh"
	carolTok = "carol-e2e-token-0123456789abcdef"
)

func credential(name, token, tenant string, allow ...string) string {
	sum := sha256.Sum256([]byte(token))
	return fmt.Sprintf("[[credential]]\nname = %q\ntoken_sha256 = %q\ntenants = [%q]\nallow = [\"%s\"]\n\n",
		name, hex.EncodeToString(sum[:]), tenant, strings.Join(allow, `", "`))
}

// dfkvEnv is dfkv with extra environment variables.
func dfkvEnv(t *testing.T, env []string, stdin []byte, args ...string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), out.Bytes(), errb.String()
}

// TestCredentialsProcess: a node process with a credentials file and a
// quotas file. A client with a valid token for one tenant can neither
// read nor write another's blocks nor spend its quota; a tool without a
// token is refused; SIGHUP and a change of the file take effect on a
// running node; a broken file keeps the credentials in force; no token
// appears in the node's log or the tools' output.
func TestCredentialsProcess(t *testing.T) {
	dir := t.TempDir()
	credFile := filepath.Join(dir, "credentials.toml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(credFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(credential("alice", aliceTok, "acme", "read", "write", "remove") +
		credential("bob", bobTok, "globex", "read", "write", "remove", "stats"))
	quotas := filepath.Join(dir, "quotas.toml")
	if err := os.WriteFile(quotas, []byte("[tenants]\n\"globex\" = \"300KiB\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, httpAddr := freePort(t), freePort(t)
	srv := startChild(t, "server", "http://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr,
		"--disk-capacity-bytes", "1GiB", "--disks", filepath.Join(dir, "d0"),
		"--credentials-file", credFile, "--tenant-quotas-file", quotas)
	// The log reaches the test through a pipe, perhaps after /readyz
	// already answers.
	waitFor(t, "the start line saying the node requires tokens", 10*time.Second, func() bool {
		return strings.Contains(srv.logs.String(), "tokens required: 2 credentials")
	})
	ctl := func(token, namespace string, stdin []byte, args ...string) (int, []byte, string) {
		t.Helper()
		a := []string{"ctl", "--members", addr, "--namespace", namespace}
		if token != "" {
			a = append(a, "--token", token)
		}
		return dfkv(t, stdin, append(a, args...)...)
	}
	value := bytes.Repeat([]byte("g"), 100<<10)

	if code, _, errs := ctl("", "acme", nil, "get", "k", "-"); code == 0 || !strings.Contains(errs, "UNAUTHENTICATED") {
		t.Fatalf("a tool without a token (exit %d): %s", code, errs)
	}
	// Mallory holds alice's token and writes under globex: more than
	// globex's whole quota, all refused.
	for i := range 5 {
		if code, _, errs := ctl(aliceTok, "globex", value, "put", fmt.Sprintf("m%d", i), "-"); code == 0 || !strings.Contains(errs, "FORBIDDEN") {
			t.Fatalf("a PUT under another tenant (exit %d): %s", code, errs)
		}
	}
	// Bob's own quota is whole: two values of 100 KiB fit in 300 KiB.
	for i := range 2 {
		if code, out, errs := dfkvEnv(t, []string{"DFKV_TOKEN=" + bobTok}, value, "ctl", "--members", addr, "--namespace", "globex", "put", fmt.Sprintf("b%d", i), "-"); code != 0 {
			t.Fatalf("bob's PUT %d with DFKV_TOKEN (exit %d): %s %s", i, code, out, errs)
		}
	}
	if code, _, errs := ctl(aliceTok, "globex", nil, "get", "b0", "-"); code == 0 || !strings.Contains(errs, "FORBIDDEN") {
		t.Fatalf("a GET of another tenant's key (exit %d): %s", code, errs)
	}
	if code, _, errs := ctl(aliceTok, "globex", nil, "rm", "b0"); code == 0 || !strings.Contains(errs, "FORBIDDEN") {
		t.Fatalf("a REMOVE of another tenant's key (exit %d): %s", code, errs)
	}
	if code, out, errs := ctl(bobTok, "globex", nil, "get", "b0", "-"); code != 0 || !bytes.Equal(out, value) {
		t.Fatalf("bob's value after the attempts (exit %d, %d bytes): %s", code, len(out), errs)
	}
	if code, _, errs := ctl(aliceTok, "acme", nil, "stats"); code == 0 || !strings.Contains(errs, "FORBIDDEN") {
		t.Fatalf("STATS without the stats right (exit %d): %s", code, errs)
	}
	// bob's stats right names globex: he sees its row, nothing node-wide.
	if code, out, errs := ctl(bobTok, "globex", nil, "stats"); code != 0 || !strings.Contains(string(out), "node-wide figures need stats on") ||
		!strings.Contains(string(out), "globex ") || strings.Contains(string(out), "acme") || strings.Contains(string(out), "tokens required") {
		t.Fatalf("STATS with the stats right on one tenant (exit %d): %s %s", code, out, errs)
	}

	// SIGHUP: alice is withdrawn, carol added.
	write(credential("bob", bobTok, "globex", "read", "write", "remove", "stats") + credential("carol", carolTok, "acme", "read", "write"))
	_ = srv.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the reload", 10*time.Second, func() bool {
		return strings.Contains(srv.logs.String(), "credentials file (server.credentials_file) reloaded")
	})
	if code, _, errs := ctl(aliceTok, "acme", []byte("x"), "put", "a", "-"); code == 0 || !strings.Contains(errs, "UNAUTHENTICATED") {
		t.Fatalf("a withdrawn token (exit %d): %s", code, errs)
	}
	if code, _, errs := ctl(carolTok, "acme", []byte("carol's"), "put", "c", "-"); code != 0 {
		t.Fatalf("a token added by SIGHUP (exit %d): %s", code, errs)
	}
	// A change without a signal is noticed too; a broken file is not
	// taken, and the node keeps serving with what it had.
	write("[[credential]\nthis is not TOML")
	waitFor(t, "the broken file's error", 10*time.Second, func() bool { return strings.Contains(srv.logs.String(), "could not be reloaded") })
	if code, out, errs := ctl(carolTok, "acme", nil, "get", "c", "-"); code != 0 || string(out) != "carol's" {
		t.Fatalf("after a broken reload (exit %d): %q %s", code, out, errs)
	}
	srv.stop(t)
	for _, tok := range []string{aliceTok, bobTok, carolTok} {
		if strings.Contains(srv.logs.String(), tok) {
			t.Fatalf("the node logged a token:\n%s", srv.logs.String())
		}
	}
}

// TestSecuredClusterProcesses: an MDS process with node credentials and
// a member list that needs a token, two node processes that require
// tenant tokens and register with their own node tokens. A rogue REGISTER
// (the heaviest weight, to take every key), a REGISTER that reuses a live
// node's id, and a DEREGISTER of another host's node are refused, and a
// tool holding the one token its team was given works through the MDS.
func TestSecuredClusterProcesses(t *testing.T) {
	const (
		hostA  = "host-a-node-token-0123456789"
		hostB  = "host-b-node-token-0123456789"
		team   = "team-token-for-ctl-0123456789"
		nobody = "rogue-token-0123456789abcdef"
	)
	dir := t.TempDir()
	sum := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	nodeCreds := filepath.Join(dir, "nodes.toml")
	if err := os.WriteFile(nodeCreds, []byte(fmt.Sprintf(
		"[[credential]]\nname = \"host-a\"\ntoken_sha256 = %q\nnodes = [\"a-*\"]\n\n"+
			"[[credential]]\nname = \"host-b\"\ntoken_sha256 = %q\nnodes = [\"b-*\"]\n\n"+
			"[[credential]]\nname = \"team\"\ntoken_sha256 = %q\nmembers = true\n", sum(hostA), sum(hostB), sum(team))), 0o600); err != nil {
		t.Fatal(err)
	}
	tenantCreds := filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(tenantCreds, []byte(credential("team", team, "dfkv-tools", "read", "write", "remove")), 0o600); err != nil {
		t.Fatal(err)
	}
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	mds := startChild(t, "mds", "http://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--db-path", filepath.Join(dir, "mds.db"), "--heartbeat-ttl-ms", "10000",
		"--node-credentials-file", nodeCreds, "--members-need-token")
	addrs := map[string]string{}
	for id, tok := range map[string]string{"a-1": hostA, "b-1": hostB} {
		addr, httpAddr := freePort(t), freePort(t)
		addrs[id] = addr
		startChild(t, id, "http://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr,
			"--disks", filepath.Join(dir, id), "--disk-capacity-bytes", "1GiB", "--mds", mdsAddr, "--id", id,
			"--mds-token", tok, "--credentials-file", tenantCreds)
	}
	waitFor(t, "both nodes registered", 30*time.Second, func() bool { return len(mdsMembers(t, mdsHTTP)) == 2 })

	ctx := context.Background()
	mc, err := client.NewMDSClient([]string{mdsAddr}, "default", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rogue := wire.MemberInfo{ID: "rogue", Addr: "127.0.0.1:1", Weight: 1000, CapacityBytes: 1 << 40}
	for _, tok := range []string{"", nobody, hostB} {
		mc.SetToken(tok)
		if _, err := mc.Register(ctx, rogue); err == nil {
			t.Fatalf("a rogue REGISTER with token %q was taken", tok)
		}
	}
	mc.SetToken(hostB)
	twin := wire.MemberInfo{ID: "a-1", Addr: "127.0.0.1:2", Weight: 1000, CapacityBytes: 1 << 40}
	if _, err := mc.Register(ctx, twin); !errors.Is(err, wire.StatusForbidden) {
		t.Fatalf("host-b replacing host-a's node: %v", err)
	}
	if err := mc.Deregister(ctx, "a-1"); !errors.Is(err, wire.StatusForbidden) {
		t.Fatalf("host-b removing host-a's node: %v", err)
	}
	if got := strings.Join(mdsMembers(t, mdsHTTP), ","); got != "a-1,b-1" {
		t.Fatalf("members after the attempts: %s", got)
	}

	if code, _, errs := dfkv(t, nil, "ctl", "--mds", mdsAddr, "members"); code == 0 || !strings.Contains(errs, "UNAUTHENTICATED") {
		t.Fatalf("a tool without a token asking the MDS (exit %d): %s", code, errs)
	}
	// Every op, batches and edge sizes on both nodes, in one process.
	if code, out, errs := dfkv(t, nil, "smoke", "--mds", mdsAddr, "--token", team, "--max-block-bytes", "4MiB"); code != 0 || !bytes.Contains(out, []byte(" 0 failed")) {
		t.Fatalf("smoke through the MDS with the team's token (exit %d):\n%s\n%s", code, out, errs)
	}
	for _, tok := range []string{hostA, hostB, team} {
		if strings.Contains(mds.logs.String(), tok) {
			t.Fatal("the MDS logged a token")
		}
	}
}
