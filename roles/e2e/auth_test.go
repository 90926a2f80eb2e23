package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	if !strings.Contains(srv.logs.String(), "tokens required: 2 credentials") {
		t.Fatalf("the start does not say the node requires tokens:\n%s", srv.logs.String())
	}
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
	if code, out, errs := ctl(bobTok, "globex", nil, "stats"); code != 0 {
		t.Fatalf("STATS with the stats right (exit %d): %s %s", code, out, errs)
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
