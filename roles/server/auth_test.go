package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/internal/testcerts"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// The tokens of the tests' credentials file: alice may read, write and
// remove tenant "acme"; bob all of that and stats on "globex"; reader
// may only read "acme"; janitor may only remove "acme"'s keys.
const (
	aliceToken  = "alice-token-0123456789abcdef"
	bobToken    = "bob-token-0123456789abcdefgh"
	readerToken = "reader-token-0123456789abcd"
	janitorTok  = "janitor-token-0123456789ab"
)

func sumOf(tok string) string {
	s := creds.SumOf([]byte(tok))
	return hex.EncodeToString(s[:])
}

func credentialsText(tokens ...string) string {
	grants := map[string]string{
		aliceToken:  `name = "alice"` + "\ntenants = [\"acme\"]\nallow = [\"read\", \"write\", \"remove\"]\n",
		bobToken:    `name = "bob"` + "\ntenants = [\"globex\"]\nallow = [\"read\", \"write\", \"remove\", \"stats\"]\n",
		readerToken: `name = "reader"` + "\ntenants = [\"acme\"]\nallow = [\"read\"]\n",
		janitorTok:  `name = "janitor"` + "\ntenants = [\"acme\"]\nallow = [\"remove\"]\n",
	}
	var b strings.Builder
	for _, tok := range tokens {
		fmt.Fprintf(&b, "[[credential]]\ntoken_sha256 = %q\n%s\n", sumOf(tok), grants[tok])
	}
	return b.String()
}

// credNode starts a node over a memory engine that requires the tests'
// credentials, and returns it with its credentials file.
func credNode(t *testing.T, mutate func(*Options)) (*testNode, *creds.Watch[creds.Tenants], string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials.toml")
	if err := os.WriteFile(path, []byte(credentialsText(aliceToken, bobToken, readerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := creds.NewWatch(path, "credentials file", creds.LoadTenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, newMemEngine(), func(o *Options) {
		o.Credentials = w
		if mutate != nil {
			mutate(o)
		}
	})
	return n, w, path
}

func openAs(t *testing.T, addr, namespace, token string) *client.Client {
	t.Helper()
	cl, err := client.Open(client.Options{Members: []string{addr}, Namespace: []byte(namespace), Token: token,
		MaxBlockBytes: testMaxBlock, SharedMemory: client.ShmOff, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func forbidden(err error) bool { return errors.Is(err, wire.StatusForbidden) }

// TestRemoveWithoutReadRightsLearnsNothing: a token that may remove but
// not read acme's keys gets the same answer, OK, for a key that was there
// and one that was not, by REMOVE and BATCH_REMOVE; the keys are gone.
// A token that may read gets NOT_FOUND for the absent one, as before.
func TestRemoveWithoutReadRightsLearnsNothing(t *testing.T) {
	n, w, path := credNode(t, nil)
	if err := os.WriteFile(path, []byte(credentialsText(aliceToken, janitorTok)), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Reload()
	ctx := context.Background()
	alice, janitor := openAs(t, n.addr, "acme", aliceToken), openAs(t, n.addr, "acme", janitorTok)
	for _, k := range []string{"one", "two", "three"} {
		if err := alice.Put(ctx, []byte(k), []byte("secret")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"one", "absent"} {
		if err := janitor.Remove(ctx, []byte(k)); err != nil {
			t.Fatalf("janitor's REMOVE of %q: %v, want OK whether or not it existed", k, err)
		}
	}
	for i, err := range janitor.RemoveBatch(ctx, [][]byte{[]byte("two"), []byte("also absent"), []byte("three")}) {
		if err != nil {
			t.Fatalf("janitor's BATCH_REMOVE item %d: %v, want OK whether or not it existed", i, err)
		}
	}
	for _, k := range []string{"one", "two", "three"} {
		if _, err := alice.Exist(ctx, []byte(k)); !errors.Is(err, wire.StatusNotFound) {
			t.Fatalf("%q after the janitor removed it: %v", k, err)
		}
	}
	if err := alice.Remove(ctx, []byte("absent")); !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("alice's REMOVE of an absent key: %v, want NOT_FOUND (she may read)", err)
	}
}

// TestHostileClientCannotCrossTenants: a client holding alice's valid
// token for tenant acme addresses tenant globex by every op, batch op,
// range, vectored and prefix call. Every one is refused FORBIDDEN, the
// same for a key that exists and one that does not, and afterwards
// globex's blocks are exactly what bob wrote.
func TestHostileClientCannotCrossTenants(t *testing.T) {
	n, _, _ := credNode(t, nil)
	ctx := context.Background()
	bob := openAs(t, n.addr, "globex", bobToken)
	victim := map[string][]byte{}
	var keys [][]byte
	for i := range 6 {
		k := fmt.Appendf(nil, "prompt-%d", i)
		v := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
		if err := bob.Put(ctx, k, v); err != nil {
			t.Fatalf("bob's own PUT: %v", err)
		}
		victim[string(k)], keys = v, append(keys, k)
	}
	absent := []byte("never-written")

	mallory := openAs(t, n.addr, "globex", aliceToken) // a valid token, another tenant
	buf := make([]byte, 64<<10)
	for _, k := range [][]byte{keys[0], absent} {
		check := func(op string, err error) {
			t.Helper()
			if !forbidden(err) {
				t.Errorf("%s of %q across tenants: %v, want FORBIDDEN", op, k, err)
			}
		}
		_, _, err := mallory.Get(ctx, k, buf)
		check("GET", err)
		_, _, err = mallory.GetRange(ctx, k, 10, 20, buf)
		check("GET range", err)
		_, err = mallory.GetAuto(ctx, k)
		check("GET (auto)", err)
		_, err = mallory.Exist(ctx, k)
		check("EXIST", err)
		check("REMOVE", mallory.Remove(ctx, k))
		check("PUT", mallory.Put(ctx, k, []byte("poison")))
		check("PUT (vectored)", mallory.PutV(ctx, k, [][]byte{[]byte("poi"), []byte("son")}))
		_, _, err = mallory.GetV(ctx, k, [][]byte{buf[:100], buf[100:200]})
		check("GET (vectored)", err)
	}
	for i, err := range mallory.PutBatch(ctx, keys, [][]byte{[]byte("p"), []byte("p"), []byte("p"), []byte("p"), []byte("p"), []byte("p")}) {
		if !forbidden(err) {
			t.Errorf("BATCH_PUT item %d: %v", i, err)
		}
	}
	for i, r := range mallory.GetBatch(ctx, append(keys, absent), nil) {
		if !forbidden(r.Err) || len(r.Data) != 0 || r.Stored != 0 {
			t.Errorf("BATCH_GET item %d: %v, %d bytes, stored %d", i, r.Err, len(r.Data), r.Stored)
		}
	}
	for name, res := range map[string][]client.ExistResult{
		"BATCH_EXIST": mallory.ExistBatch(ctx, append(keys, absent)), "BATCH_EXIST (pinned)": mallory.ExistBatchPinned(ctx, keys),
	} {
		for i, r := range res {
			if !forbidden(r.Err) || r.Stored != 0 {
				t.Errorf("%s item %d: %v stored %d", name, i, r.Err, r.Stored)
			}
		}
	}
	if got, err := mallory.ExistPrefix(ctx, keys); got != 0 || !forbidden(err) {
		t.Errorf("prefix count across tenants: %d, %v", got, err)
	}
	for i, r := range mallory.GetBatchRangeV(ctx, keys[:2], []uint64{5, 5}, [][][]byte{{buf[:10]}, {buf[10:20]}}) {
		if !forbidden(r.Err) {
			t.Errorf("BATCH_GET range (vectored) item %d: %v", i, r.Err)
		}
	}
	for i, err := range mallory.RemoveBatch(ctx, keys) {
		if !forbidden(err) {
			t.Errorf("BATCH_REMOVE item %d: %v", i, err)
		}
	}
	if _, err := mallory.Stats(ctx, n.addr); !forbidden(err) {
		t.Errorf("STATS without the stats right: %v", err)
	}

	for k, want := range victim {
		got, err := bob.GetAuto(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("bob's %q after the attack: %v (%d bytes, want %d)", k, err, len(got), len(want))
		}
	}
	if _, err := bob.Exist(ctx, absent); !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("the attacker's PUT of a new key landed: %v", err)
	}
	st := n.srv.AuthStats()
	if !st.Required || st.Forbidden["unlisted"] != 0 || st.Forbidden["globex"] < 20 || st.Forbidden["(stats)"] != 1 {
		t.Fatalf("refusals are not counted per tenant: %+v", st)
	}
	body, err := bob.Stats(ctx, n.addr)
	if err != nil {
		t.Fatalf("STATS with the stats right: %v", err)
	}
	// bob's stats right names his tenant: the reply is scoped to it.
	var reply StatsReply
	if err := json.Unmarshal(body, &reply); err != nil || reply.Scope != "tenants" || !reply.Auth.Required || reply.Auth.Credentials != 0 {
		t.Fatalf("STATS of a credential with stats on one tenant: scope %q, auth %+v, %v", reply.Scope, reply.Auth, err)
	}
}

// TestGrantsAreByRight: a read-only credential reads its tenant and can
// neither write nor remove there; the owner's own ops work.
func TestGrantsAreByRight(t *testing.T) {
	n, _, _ := credNode(t, nil)
	ctx := context.Background()
	alice := openAs(t, n.addr, "acme", aliceToken)
	reader := openAs(t, n.addr, "acme", readerToken)
	if err := alice.Put(ctx, []byte("k"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	if got, err := reader.GetAuto(ctx, []byte("k")); err != nil || string(got) != "value" {
		t.Fatalf("reader GET: %q %v", got, err)
	}
	if err := reader.Put(ctx, []byte("k"), []byte("other")); !forbidden(err) {
		t.Fatalf("reader PUT: %v", err)
	}
	if err := reader.Remove(ctx, []byte("k")); !forbidden(err) {
		t.Fatalf("reader REMOVE: %v", err)
	}
	if got, err := alice.GetAuto(ctx, []byte("k")); err != nil || string(got) != "value" {
		t.Fatalf("after the reader's attempts: %q %v", got, err)
	}
	if err := alice.Remove(ctx, []byte("k")); err != nil {
		t.Fatalf("owner REMOVE: %v", err)
	}
}

// rawAuthed dials n and authenticates with token on the raw wire.
func rawAuthed(t *testing.T, addr, token string) net.Conn {
	t.Helper()
	c := dial(t, addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte(token))
	if h, body := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 1 {
		t.Fatalf("AUTH: %+v %s", h, body)
	}
	return c
}

// TestMixedTenantBatchesAnswerPerItem: one frame may carry keys of
// several tenants; each item is answered for its own tenant, in order.
func TestMixedTenantBatchesAnswerPerItem(t *testing.T) {
	n, _, _ := credNode(t, nil)
	acme, globex := wire.TenantHash([]byte("acme")), wire.TenantHash([]byte("globex"))
	k := func(tenant uint64, i byte) wire.BlockKey { return wire.BlockKey{Tenant: tenant, ID: [16]byte{i}} }
	c := rawAuthed(t, n.addr, aliceToken)
	// BATCH_PUT: acme, globex, acme.
	items := []wire.BlockKey{k(acme, 1), k(globex, 2), k(acme, 3)}
	var tbl, vals []byte
	for i, key := range items {
		tbl = wire.AppendPutItem(tbl, key, uint64(i+1))
		vals = append(vals, bytes.Repeat([]byte{byte('x' + i)}, i+1)...)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 3}, append(tbl, vals...))
	if h, _ := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 3 {
		t.Fatalf("BATCH_PUT: %+v", h)
	}
	var st [3]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		t.Fatal(err)
	}
	if want := [3]byte{0, byte(wire.StatusForbidden), 0}; st != want {
		t.Fatalf("BATCH_PUT statuses %v, want %v", st, want)
	}
	// BATCH_EXIST interleaved, with a globex key that exists (written by
	// the node's engine directly, as bob would have).
	eng := n.srv.opts.Engine
	if err := eng.Put(k(globex, 9), []byte("bob's")); err != nil {
		t.Fatal(err)
	}
	keys := []wire.BlockKey{k(globex, 9), k(acme, 1), k(globex, 2), k(acme, 4), k(acme, 3), k(globex, 9)}
	tbl = nil
	for _, key := range keys {
		tbl = wire.AppendKeyItem(tbl, key)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchExist, Length: uint64(len(keys))}, tbl)
	if h, _ := readResp(t, c); h.Stored != uint64(len(keys)) {
		t.Fatalf("BATCH_EXIST: %+v", h)
	}
	want := []struct {
		s      wire.Status
		stored uint64
	}{{wire.StatusForbidden, 0}, {wire.StatusOK, 1}, {wire.StatusForbidden, 0}, {wire.StatusNotFound, 0}, {wire.StatusOK, 3}, {wire.StatusForbidden, 0}}
	for i, w := range want {
		var rec [wire.BatchExistRecLen]byte
		if _, err := io.ReadFull(c, rec[:]); err != nil {
			t.Fatal(err)
		}
		s, stored := wire.DecodeExistRecord(rec[:])
		if s != w.s || stored != w.stored {
			t.Errorf("BATCH_EXIST item %d: %s stored %d, want %s stored %d", i, s, stored, w.s, w.stored)
		}
	}
	// The connection is still usable, and globex's key is untouched.
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PING after refusals: %+v", h)
	}
	if _, err := eng.Exist(k(globex, 2)); !errors.Is(err, wire.StatusNotFound) {
		t.Fatal("a forbidden BATCH_PUT item was stored")
	}
}

// TestBadAuthenticationInput: every malformed or wrong authentication
// is answered and closes only its own connection, within its deadlines;
// the node goes on serving.
func TestBadAuthenticationInput(t *testing.T) {
	n, w, path := credNode(t, func(o *Options) { o.FirstRequest = 300 * time.Millisecond })
	statusThenClosed := func(t *testing.T, c net.Conn, want wire.Status) {
		t.Helper()
		h, body := readResp(t, c)
		if h.Status != want {
			t.Fatalf("status %s (%s), want %s", h.Status, body, want)
		}
		expectClosed(t, c)
	}
	t.Run("request before AUTH", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
		statusThenClosed(t, c, wire.StatusUnauthenticated)
	})
	t.Run("PUT before AUTH", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, bytes.Repeat([]byte("v"), 100000))
		statusThenClosed(t, c, wire.StatusUnauthenticated)
	})
	t.Run("PING before AUTH", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
		if h, _ := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("PING: %+v", h)
		}
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(1)}, nil)
		statusThenClosed(t, c, wire.StatusUnauthenticated)
	})
	t.Run("wrong token", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte("not-a-token-anyone-has-given-out"))
		statusThenClosed(t, c, wire.StatusUnauthenticated)
	})
	t.Run("token of the wrong case", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte(strings.ToUpper(aliceToken)))
		statusThenClosed(t, c, wire.StatusUnauthenticated)
	})
	t.Run("oversized token", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, bytes.Repeat([]byte("t"), wire.MaxTokenBytes+1))
		statusThenClosed(t, c, wire.StatusInvalid)
	})
	t.Run("empty token", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, nil)
		statusThenClosed(t, c, wire.StatusInvalid)
	})
	t.Run("truncated token", func(t *testing.T) {
		c := dial(t, n.addr)
		h := wire.RequestHeader{Op: wire.OpAuth, BodyLen: 40}
		if _, err := c.Write(append(wire.AppendRequest(nil, &h), aliceToken[:10]...)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c) // by the first-request deadline, not the test's 30 s
	})
	t.Run("AUTH twice", func(t *testing.T) {
		c := rawAuthed(t, n.addr, aliceToken)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte(bobToken))
		statusThenClosed(t, c, wire.StatusInvalid)
	})
	t.Run("token withdrawn while connected", func(t *testing.T) {
		c := rawAuthed(t, n.addr, readerToken)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: wire.BlockKey{Tenant: wire.TenantHash([]byte("acme"))}}, nil)
		if h, _ := readResp(t, c); h.Status != wire.StatusNotFound {
			t.Fatalf("EXIST before the reload: %+v", h)
		}
		if err := os.WriteFile(path, []byte(credentialsText(aliceToken, bobToken)), 0o600); err != nil {
			t.Fatal(err)
		}
		w.Reload()
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: wire.BlockKey{Tenant: wire.TenantHash([]byte("acme"))}}, nil)
		statusThenClosed(t, c, wire.StatusUnauthenticated)
		c2 := dial(t, n.addr)
		writeReq(t, c2, wire.RequestHeader{Op: wire.OpAuth}, []byte(readerToken))
		statusThenClosed(t, c2, wire.StatusUnauthenticated)
	})
	// After all of it the node serves a well-behaved client.
	alice := openAs(t, n.addr, "acme", aliceToken)
	if err := alice.Put(context.Background(), []byte("still"), []byte("up")); err != nil {
		t.Fatalf("the node after the bad input: %v", err)
	}
	st := n.srv.AuthStats()
	for _, r := range []string{"no_token", "bad_token", "withdrawn", "auth_twice"} {
		if st.Failures[r] == 0 {
			t.Errorf("failure %q not counted: %+v", r, st.Failures)
		}
	}
}

// TestClientAuthErrors: the Go client's token errors say what is wrong
// and are never answered as misses (a read of an unreachable node is a
// miss, which an engine would silently recompute around for ever).
func TestClientAuthErrors(t *testing.T) {
	n, _, _ := credNode(t, nil)
	ctx := context.Background()
	wrong := openAs(t, n.addr, "acme", "a-token-no-one-has-issued-1234")
	_, err := wrong.Exist(ctx, []byte("k"))
	if !errors.Is(err, client.ErrAuth) || !errors.Is(err, wire.StatusUnauthenticated) || errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("wrong token: %v", err)
	}
	if !strings.Contains(err.Error(), "client.token") || strings.Contains(err.Error(), "a-token-no-one") {
		t.Fatalf("the error should name the setting and never the token: %v", err)
	}
	none := openAs(t, n.addr, "acme", "")
	if _, err := none.Exist(ctx, []byte("k")); !errors.Is(err, wire.StatusUnauthenticated) || errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("no token: %v", err)
	}
	// A token against an open node is accepted and unchecked.
	open := startNode(t, newMemEngine(), nil)
	cl := openAs(t, open.addr, "acme", aliceToken)
	if err := cl.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("a token against an open node: %v", err)
	}
	c := dial(t, open.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpAuth}, []byte("anything"))
	if h, _ := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 0 {
		t.Fatalf("AUTH on an open node: %+v (want OK, stored 0: not checked)", h)
	}
}

// TestCredentialsExcludeOneSidedReads: a server refuses credentials
// together with the shared-memory transport.
func TestCredentialsExcludeOneSidedReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	_ = os.WriteFile(path, []byte(credentialsText(aliceToken)), 0o600)
	w, err := creds.NewWatch(path, "credentials file", creds.LoadTenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	shm, _ := net.Listen("tcp", "127.0.0.1:0")
	defer shm.Close()
	_, err = New(Options{Engine: newMemEngine(), Listener: ln, MaxBlockBytes: testMaxBlock, Credentials: w, Shm: &ShmOptions{Listener: shm}})
	if err == nil || !strings.Contains(err.Error(), "shared memory") {
		t.Fatalf("credentials with shared memory: %v", err)
	}
}

// BenchmarkAuthCost measures what credentials cost a request: GET of a
// 4 KiB value and EXIST, each on two nodes over a memory engine, one open
// and one requiring tokens, through the Go client on loopback from 16
// goroutines. The two are interleaved in rounds of 2000 requests within
// one run, so the machine's drift falls on both; auth/open is the ratio
// of time per request.
//
//	go test ./roles/server -run '^$' -bench AuthCost -benchtime 200000x
func BenchmarkAuthCost(b *testing.B) {
	for _, op := range []string{"GET", "EXIST"} {
		b.Run(op, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "c.toml")
			_ = os.WriteFile(path, []byte(credentialsText(aliceToken)), 0o600)
			w, err := creds.NewWatch(path, "credentials file", creds.LoadTenants, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			val := bytes.Repeat([]byte("v"), 4096)
			var cls [2]*client.Client
			for i, opts := range []func(*Options){nil, func(o *Options) { o.Credentials = w }} {
				ln, _ := net.Listen("tcp", "127.0.0.1:0")
				o := Options{Engine: newMemEngine(), Listener: ln, MaxBlockBytes: testMaxBlock}
				if opts != nil {
					opts(&o)
				}
				srv, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				sctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- srv.Serve(sctx) }()
				b.Cleanup(func() { cancel(); <-done })
				cl, err := client.Open(client.Options{Members: []string{ln.Addr().String()}, Namespace: []byte("acme"), Token: aliceToken, SharedMemory: client.ShmOff, PoolSize: 16})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cl.Close() })
				if err := cl.Put(ctx, []byte("k"), val); err != nil {
					b.Fatal(err)
				}
				cls[i] = cl
			}
			var spent [2]time.Duration
			var count [2]int
			const round = 2000
			b.ResetTimer()
			for done, r := 0, 0; done < b.N; r++ {
				for j := range cls {
					i := j ^ (r & 1) // each round flips the order, so neither side always goes first
					cl := cls[i]
					n := min(round, b.N-done)
					start := time.Now()
					runConcurrent(b, 16, n, func(buf []byte) error {
						if op == "GET" {
							_, _, err := cl.Get(ctx, []byte("k"), buf)
							return err
						}
						_, err := cl.Exist(ctx, []byte("k"))
						return err
					}, 4096)
					spent[i] += time.Since(start)
					count[i] += n
				}
				done += min(round, b.N-done)
			}
			open, auth := float64(spent[0])/float64(count[0]), float64(spent[1])/float64(count[1])
			b.ReportMetric(open, "open-ns/op")
			b.ReportMetric(auth, "auth-ns/op")
			b.ReportMetric(auth/open, "auth/open")
		})
	}
}

// TestStartRefusesBadCredentialsOrCertificates: a node whose credentials
// file or certificate does not load does not start, and says which file
// and, for a TOML error, which line.
func TestStartRefusesBadCredentialsOrCertificates(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(bad, []byte("[[credential]]\nname = \"x\"\ntoken_sha256 = \"abc\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testcerts.NewCA(t, "x")
	p := ca.Server(t, "n")
	for name, c := range map[string]struct {
		flags map[string][]string
		want  []string
	}{
		"credentials":  {map[string][]string{"credentials-file": {bad}}, []string{"server.credentials_file", bad, "line 3"}},
		"missing file": {map[string][]string{"credentials-file": {filepath.Join(dir, "none.toml")}}, []string{"server.credentials_file", "no such file"}},
		"key mismatch": {map[string][]string{"tls-cert": {p.Cert}, "tls-key": {ca.File}}, []string{"server.tls_cert", p.Cert}},
	} {
		t.Run(name, func(t *testing.T) {
			flags := map[string][]string{"disks": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity-bytes": {"256MiB"}}
			for k, v := range c.flags {
				flags[k] = v
			}
			cfg, _, err := config.LoadFrom("server", "", nil, flags)
			if err != nil {
				t.Fatal(err)
			}
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			err = Run(context.Background(), cfg, Deps{Listener: ln})
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("Run: %v, want an error naming %q", err, w)
				}
			}
		})
	}
}
