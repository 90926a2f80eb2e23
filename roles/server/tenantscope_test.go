package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// quotaCredNode runs a whole node (a 64 MiB disk) that requires
// the credentials in credentials (TOML) and gives each tenant quota, and
// returns its address.
func quotaCredNode(t *testing.T, credentials, quota string) string {
	t.Helper()
	dir := t.TempDir()
	cpath := filepath.Join(dir, "credentials.toml")
	if err := os.WriteFile(cpath, []byte(credentials), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := runNode(t, map[string][]string{
		"disk": {dir + "/d0"}, "disk-capacity": {"64MiB"}, "tenant-default-quota": {quota},
		"credentials-file": {cpath},
	})
	return addr
}

// TestStatsCredentialSeesOnlyItsTenants: bob's credential grants read,
// write, remove and stats on "globex" only. STATS does not tell him what
// tenant "acme" stores: not its committed bytes, nor the node's totals,
// which on a quiet node move by the stored length of each block acme
// writes. He sees his own tenant's row.
func TestStatsCredentialSeesOnlyItsTenants(t *testing.T) {
	addr := quotaCredNode(t, credentialsText(aliceToken, bobToken), "1GiB")
	ctx := context.Background()
	alice := openAs(t, addr, "acme", aliceToken)
	bob := openAs(t, addr, "globex", bobToken)

	acmeLabel := fmt.Sprintf("0x%016x", wire.TenantHash([]byte("acme")))
	acmeUsed := func() (int64, bool) {
		t.Helper()
		body, err := bob.Stats(ctx, addr)
		if err != nil {
			t.Fatalf("bob's STATS: %v", err)
		}
		var st StatsReply
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		for _, u := range st.Tenants {
			if u.Tenant == acmeLabel || u.Tenant == "acme" {
				return u.UsedBytes, true
			}
		}
		return 0, false
	}

	if err := alice.Put(ctx, []byte("prompt-1"), bytes.Repeat([]byte("a"), 12345)); err != nil {
		t.Fatal(err)
	}
	before, seen := acmeUsed()
	if err := alice.Put(ctx, []byte("secret-prompt"), bytes.Repeat([]byte("b"), 4321)); err != nil {
		t.Fatal(err)
	}
	after, _ := acmeUsed()
	if seen {
		t.Fatalf("a stats credential scoped to globex reads tenant acme's usage over STATS: %d bytes, then %d after one PUT of acme's: the block's stored length is %d",
			before, after, after-before)
	}
	if err := bob.Put(ctx, []byte("own"), []byte("globex's")); err != nil {
		t.Fatal(err)
	}
	body, err := bob.Stats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var st StatsReply
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Scope != "tenants" || st.Engine.UsedBytes != 0 || st.Engine.Objects != 0 || st.Server.BytesIn != 0 || len(st.Tenants) != 1 || st.Tenants[0].UsedBytes != 8 {
		t.Fatalf("bob's STATS: scope %q, node-wide used %d bytes in %d objects, %d bytes in; tenants %+v; want only globex's 8 bytes",
			st.Scope, st.Engine.UsedBytes, st.Engine.Objects, st.Server.BytesIn, st.Tenants)
	}
}

// TestWriteOnlyCredentialCannotProbeKeys: a credential that may write
// tenant acme's keys but not read them does not learn from PUT which keys
// exist or how long they are, as a remove-only one does not from REMOVE
// (TestRemoveWithoutReadRightsLearnsNothing). A PUT refused for the
// tenant's quota answers alike for a key that holds 30000 bytes and one
// that does not exist, and stores nothing either way.
func TestWriteOnlyCredentialCannotProbeKeys(t *testing.T) {
	const writerToken = "writer-token-0123456789abcd"
	text := credentialsText(aliceToken) + fmt.Sprintf("[[credential]]\ntoken_sha256 = %q\nname = \"writer\"\ntenants = [\"acme\"]\nallow = [\"write\"]\n", sumOf(writerToken))
	addr := quotaCredNode(t, text, "100000")
	ctx := context.Background()
	alice := openAs(t, addr, "acme", aliceToken)
	if err := alice.Put(ctx, []byte("secret-prompt"), bytes.Repeat([]byte("s"), 30000)); err != nil {
		t.Fatal(err)
	}
	km, err := wire.NewKeyMapper([]byte("acme"))
	if err != nil {
		t.Fatal(err)
	}
	present, _ := km.BlockKey([]byte("secret-prompt"))
	absent, _ := km.BlockKey([]byte("never-written"))

	c := rawAuthed(t, addr, writerToken)
	answer := func(k wire.BlockKey) (wire.Status, string) {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: k}, bytes.Repeat([]byte("w"), 100001))
		h, body := readResp(t, c)
		return h.Status, string(body)
	}
	sp, mp := answer(present)
	sa, ma := answer(absent)
	t.Logf("PUT of the existing key: %s %q", sp, mp)
	t.Logf("PUT of an absent key:    %s %q", sa, ma)
	if sp != sa || mp != ma {
		t.Fatalf("a write-only credential tells an existing key (%s %q) from an absent one (%s %q): the difference is the stored length",
			sp, mp, sa, ma)
	}
	if got, err := alice.GetAuto(ctx, []byte("secret-prompt")); err != nil || len(got) != 30000 {
		t.Fatalf("alice's value after the probe: %d bytes, %v", len(got), err)
	}
}

// TestPipelinedReAuthHolds: AUTH as alice, requests on globex
// and a second AUTH as bob, all in one write before any reply. The
// globex requests are FORBIDDEN with identical answers for a key that
// exists and one that does not, and the second AUTH ends the connection
// without serving what follows it.
func TestPipelinedReAuthHolds(t *testing.T) {
	n, _, _ := credNode(t, nil)
	globex := wire.TenantHash([]byte("globex"))
	have := wire.BlockKey{Tenant: globex, ID: [16]byte{1}}
	none := wire.BlockKey{Tenant: globex, ID: [16]byte{2}}
	if err := n.srv.opts.Engine.Put(have, []byte("bob's secret")); err != nil {
		t.Fatal(err)
	}
	var b []byte
	req := func(h wire.RequestHeader, body []byte) {
		h.BodyLen = uint64(len(body))
		b = append(wire.AppendRequest(b, &h), body...)
	}
	req(wire.RequestHeader{Op: wire.OpAuth}, []byte(aliceToken))
	req(wire.RequestHeader{Op: wire.OpGet, Key: have}, nil)
	req(wire.RequestHeader{Op: wire.OpGet, Key: none}, nil)
	req(wire.RequestHeader{Op: wire.OpExist, Key: have}, nil)
	req(wire.RequestHeader{Op: wire.OpExist, Key: none}, nil)
	req(wire.RequestHeader{Op: wire.OpAuth}, []byte(bobToken))
	req(wire.RequestHeader{Op: wire.OpGet, Key: have}, nil)
	c := dial(t, n.addr)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if h, _ := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 1 {
		t.Fatalf("AUTH: %+v", h)
	}
	var prev string
	for i := range 4 {
		h, body := readResp(t, c)
		got := fmt.Sprintf("%s/%d/%s", h.Status, h.Stored, body)
		if h.Status != wire.StatusForbidden || (i%2 == 1 && got != prev) {
			t.Fatalf("request %d: %s (previous %s)", i, got, prev)
		}
		prev = got
	}
	if h, _ := readResp(t, c); h.Status != wire.StatusInvalid {
		t.Fatalf("second AUTH: %+v", h)
	}
	expectClosed(t, c)
}

// TestStatsOnEveryTenantSeesTheNode: a credential with stats on "*" (an
// operator's, a monitoring agent's) gets the whole node's STATS.
func TestStatsOnEveryTenantSeesTheNode(t *testing.T) {
	const opsToken = "ops-token-0123456789abcdefgh"
	text := credentialsText(aliceToken) + fmt.Sprintf("[[credential]]\ntoken_sha256 = %q\nname = \"ops\"\ntenants = [\"*\"]\nallow = [\"stats\"]\n", sumOf(opsToken))
	addr := quotaCredNode(t, text, "1GiB")
	ctx := context.Background()
	alice := openAs(t, addr, "acme", aliceToken)
	if err := alice.Put(ctx, []byte("k"), bytes.Repeat([]byte("a"), 5000)); err != nil {
		t.Fatal(err)
	}
	ops := openAs(t, addr, "anything", opsToken)
	body, err := ops.Stats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var st StatsReply
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Scope != "" || st.Engine.Objects != 1 || len(st.Tenants) != 1 || st.Auth.Credentials != 2 {
		t.Fatalf("the operator's STATS: scope %q, %d objects, tenants %+v, auth %+v; want the whole node", st.Scope, st.Engine.Objects, st.Tenants, st.Auth)
	}
}
