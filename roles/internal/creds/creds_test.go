package creds

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

func sumHex(token string) string {
	s := SumOf([]byte(token))
	return hex.EncodeToString(s[:])
}

func writeFile(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "credentials.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTenantsGrants(t *testing.T) {
	erin := wire.TenantHash([]byte("erin"))
	path := writeFile(t, t.TempDir(), fmt.Sprintf(`
[[credential]]
name = "team-a"
token_sha256 = %q
tenants = ["acme", "0x%016x"]
allow = ["read", "write"]

[[credential]]
name = "ops"
token_sha256 = %q
tenants = ["*"]
allow = ["stats", "remove"]
`, sumHex("token-of-team-a-0001"), erin, sumHex("token-of-ops-000002")))
	ts, err := LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Len() != 2 || strings.Join(ts.Names(), ",") != "ops,team-a" {
		t.Fatalf("credentials %v", ts.Names())
	}
	if ts.Lookup(SumOf([]byte("not a token at all"))) != nil {
		t.Fatal("an unknown token was granted")
	}
	a := ts.Lookup(SumOf([]byte("token-of-team-a-0001")))
	acme := wire.TenantHash([]byte("acme"))
	other := wire.TenantHash([]byte("globex"))
	for _, c := range []struct {
		tenant uint64
		r      Right
		want   bool
	}{
		{acme, Read, true}, {acme, Write, true}, {acme, Remove, false}, {acme, Stats, false},
		{erin, Read, true}, {other, Read, false}, {other, Write, false},
	} {
		if got := a.Allows(c.tenant, c.r); got != c.want {
			t.Errorf("team-a Allows(%x, %d) = %v, want %v", c.tenant, c.r, got, c.want)
		}
	}
	if a.Has(Stats) || !a.Has(Write) {
		t.Error("team-a's rights on some tenant are wrong")
	}
	ops := ts.Lookup(SumOf([]byte("token-of-ops-000002")))
	if !ops.Allows(other, Remove) || ops.Allows(other, Read) || !ops.Has(Stats) {
		t.Error(`"*" does not give the listed rights, and only them, on every tenant`)
	}
	if ts.TenantName(acme) != "acme" || ts.TenantName(erin) != "" {
		t.Error("tenant names for metrics: a name is kept, a hash has none")
	}
}

func TestLoadTenantsRefusesBadFiles(t *testing.T) {
	good := sumHex("some-token-0000001")
	for _, c := range []struct{ name, body, want string }{
		{"syntax", "[[credential]\nname = 1", "line 2"},
		{"short hash", "[[credential]]\ntoken_sha256 = \"abcd\"\ntenants=[\"a\"]\nallow=[\"read\"]", "line 2"},
		{"clear token", "[[credential]]\ntoken = \"secret\"\ntoken_sha256 = \"" + good + "\"\ntenants=[\"a\"]\nallow=[\"read\"]", `unknown key "credential.token"`},
		{"bad right", "[[credential]]\ntoken_sha256 = \"" + good + "\"\ntenants=[\"a\"]\nallow=[\"read\", \"admin\"]", `unknown right "admin"`},
		{"no tenants", "[[credential]]\ntoken_sha256 = \"" + good + "\"\nallow=[\"read\"]", "no tenants"},
		{"no allow", "[[credential]]\ntoken_sha256 = \"" + good + "\"\ntenants=[\"a\"]", "no allow"},
		{"no hash", "[[credential]]\ntenants=[\"a\"]\nallow=[\"read\"]", "exactly one of token_sha256"},
		{"hash and name", "[[credential]]\ntoken_sha256 = \"" + good + "\"\ncert_common_name = \"x\"\ntenants=[\"a\"]\nallow=[\"read\"]", "exactly one of token_sha256"},
		{"bad hash tenant", "[[credential]]\ntoken_sha256 = \"" + good + "\"\ntenants=[\"0xzz00000000000000\"]\nallow=[\"read\"]", "line 3"},
		{"duplicate", strings.Repeat("[[credential]]\ntoken_sha256 = \""+good+"\"\ntenants=[\"a\"]\nallow=[\"read\"]\n", 2), "same token_sha256"},
		{"empty", "# nothing\n", "no [[credential]]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), c.body)
			_, err := LoadTenants(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming the file and %q", err, c.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatal("the error repeats a token")
			}
		})
	}
	if _, err := LoadTenants(filepath.Join(t.TempDir(), "missing.toml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// TestWatchReloadsAndKeepsTheLastGoodReading: a change is picked up by
// the poll, a forced reload reads the file again, and a broken file
// keeps the credentials in force and is logged once, not per poll.
func TestWatchReloadsAndKeepsTheLastGoodReading(t *testing.T) {
	dir := t.TempDir()
	cred := func(token string) string {
		return fmt.Sprintf("[[credential]]\ntoken_sha256 = %q\ntenants = [\"a\"]\nallow = [\"read\"]\n", sumHex(token))
	}
	path := writeFile(t, dir, cred("first-token-000001"))
	var logs bytes.Buffer
	w, err := NewWatch(path, "credentials file", LoadTenants, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	has := func(token string) bool { return w.Current().Lookup(SumOf([]byte(token))) != nil }
	if !has("first-token-000001") {
		t.Fatal("the first reading is not in force")
	}
	writeFile(t, dir, cred("second-token-00002"))
	// The mtime may not move within the file system's resolution: set it.
	later := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(path, later, later)
	w.reload(false)
	if has("first-token-000001") || !has("second-token-00002") {
		t.Fatal("a changed file was not reloaded: a withdrawn token still works")
	}
	writeFile(t, dir, "[[credential]\nbroken")
	for range 3 {
		w.Reload()
	}
	if !has("second-token-00002") {
		t.Fatal("a broken file replaced the credentials in force")
	}
	if n := strings.Count(logs.String(), "could not be reloaded"); n != 1 {
		t.Fatalf("a broken file was logged %d times, want once:\n%s", n, logs.String())
	}
	writeFile(t, dir, cred("third-token-000003"))
	w.Reload()
	if !has("third-token-000003") {
		t.Fatal("a fixed file was not reloaded")
	}
}

func TestLoadNodes(t *testing.T) {
	path := writeFile(t, t.TempDir(), fmt.Sprintf(`
[[credential]]
name = "rack-a"
token_sha256 = %q
nodes = ["rack-a-*", "spare/10.0.0.9:7600"]

[[credential]]
name = "engines"
token_sha256 = %q
members = true
`, sumHex("rack-a-token-000001"), sumHex("engine-token-000002")))
	ns, err := LoadNodes(path)
	if err != nil {
		t.Fatal(err)
	}
	a := ns.Lookup(SumOf([]byte("rack-a-token-000001")))
	for id, want := range map[string]bool{"rack-a-1": true, "rack-a-host/10.0.0.1:7600": true, "rack-a-": true,
		"spare/10.0.0.9:7600": true, "spare/10.0.0.9:7601": false, "rack-b-1": false, "xrack-a-1": false} {
		if a.MayRegister(id) != want {
			t.Errorf("rack-a MayRegister(%q) = %v", id, !want)
		}
	}
	if a.Members {
		t.Error("members granted without being listed")
	}
	if !a.InGroup("any-group") {
		t.Error("a credential without groups refused a group")
	}
	e := ns.Lookup(SumOf([]byte("engine-token-000002")))
	if !e.Members || e.MayRegister("rack-a-1") {
		t.Error("a members-only credential")
	}
	for _, body := range []string{
		"[[credential]]\ntoken_sha256 = \"" + sumHex("x-token-00000001") + "\"\n",
		"[[credential]]\ntoken_sha256 = \"" + sumHex("x-token-00000001") + "\"\nnodes = [\"\"]\n",
		"[[credential]]\ntoken_sha256 = \"" + sumHex("x-token-00000001") + "\"\nnodes = [\"a\"]\ntenants = [\"b\"]\n",
		"[[credential]]\ntoken_sha256 = \"" + sumHex("x-token-00000001") + "\"\nnodes = [\"a\"]\ngroups = []\n",
		"[[credential]]\ntoken_sha256 = \"" + sumHex("x-token-00000001") + "\"\nnodes = [\"a\"]\ngroups = [\"\"]\n",
	} {
		if _, err := LoadNodes(writeFile(t, t.TempDir(), body)); err == nil {
			t.Errorf("accepted %q", body)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{{"*", "", true}, {"*", "anything/at:all", true}, {"a*c", "abbbc", true}, {"a*c", "ab", false},
		{"*-gpu-*", "rack1-gpu-7", true}, {"*-gpu-*", "rack1-cpu-7", false}, {"exact", "exact", true}, {"exact", "exactly", false}} {
		if globMatch(c.p, c.s) != c.want {
			t.Errorf("globMatch(%q, %q) != %v", c.p, c.s, c.want)
		}
	}
}
