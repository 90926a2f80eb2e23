package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
)

// The C side (exports, struct_size rules, every status path against real
// servers) is tested by test/dfkv_test.c through scripts/test-contrib.sh;
// Go test files cannot use cgo, so these cover the plain Go layer, against
// a node started in this process where a test needs one.

func TestOpenValidation(t *testing.T) {
	ns := []byte("ns\x00")
	f := func(o openOptions, want wire.Status, msg string) {
		t.Helper()
		h, err := open(o)
		if err == nil {
			release(h)
			t.Fatalf("%+v: opened, want %s", o, want)
		}
		if wire.StatusOf(err) != want || !strings.Contains(err.Error(), msg) {
			t.Fatalf("%+v: %v (status %s), want %s containing %q", o, err, wire.StatusOf(err), want, msg)
		}
	}
	f(openOptions{namespace: ns}, wire.StatusInvalid, "no membership")
	f(openOptions{members: " , ", namespace: ns}, wire.StatusInvalid, "no membership")
	f(openOptions{members: "a:1", mds: "b:2", namespace: ns}, wire.StatusInvalid, "exactly one")
	f(openOptions{members: "a:1", group: "g", namespace: ns}, wire.StatusInvalid, "only meaningful with mds_addrs")
	f(openOptions{members: "a:1"}, wire.StatusInvalid, "namespace")
	f(openOptions{members: "not-an-address", namespace: ns}, wire.StatusInvalid, "not host:port")
	f(openOptions{members: "a:1", namespace: ns, timeoutMS: 1 << 40}, wire.StatusInvalid, "over a day")

	h, err := open(openOptions{members: "127.0.0.1:1, 127.0.0.1:2", namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	s, err := lookup(h)
	if err != nil || len(s.c.Members()) != 2 || s.maxBlock != 64<<20 {
		t.Fatalf("lookup: %v, %+v", err, s)
	}
	if _, err := release(h); err != nil {
		t.Fatal(err)
	}
	// A released, never-issued or zero handle fails closed.
	for _, bad := range []uintptr{h, 0, h + 1000} {
		if _, err := lookup(bad); !errors.Is(err, wire.StatusInvalid) {
			t.Fatalf("lookup(%d) after release: %v", bad, err)
		}
		if _, err := release(bad); !errors.Is(err, wire.StatusInvalid) {
			t.Fatalf("release(%d): %v", bad, err)
		}
	}
}

func TestStatusOf(t *testing.T) {
	if statusOf(nil) != 0 || statusOf(errors.New("x")) != int(wire.StatusInternal) ||
		statusOf(itemErr(3, wire.StatusTooLarge)) != int(wire.StatusTooLarge) {
		t.Fatal("statusOf mapping")
	}
	if err := itemErr(3, wire.StatusNotFound); !strings.HasPrefix(err.Error(), "item 3: ") {
		t.Fatal(err)
	}
}

// TestHeaderStatusCodes: the status numbers of the hand-written dfkv.h are
// wire.Status values, every one of them, with the same names: the C ABI
// returns the same numbers as the wire protocol's status byte.
func TestHeaderStatusCodes(t *testing.T) {
	h, err := os.ReadFile("dfkv.h")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^#define DFKV_([A-Z_]+)\s+(\d+)\b`)
	seen := map[wire.Status]bool{}
	for _, m := range re.FindAllStringSubmatch(string(h), -1) {
		n, _ := strconv.Atoi(m[2])
		st := wire.Status(n)
		if !st.Known() || st.String() != m[1] {
			t.Errorf("dfkv.h: DFKV_%s = %d, but wire.Status(%d) is %s", m[1], n, n, st)
		}
		seen[st] = true
	}
	for st := wire.Status(0); st.Known(); st++ {
		if !seen[st] {
			t.Errorf("dfkv.h has no DFKV_%s (%d)", st, st)
		}
	}
}

// TestErrSlotPerThread: a message set on one OS thread is read back on
// that thread, whatever other threads set meanwhile; a thread with none of
// its own reads the latest; the per-thread map stays bounded.
func TestErrSlotPerThread(t *testing.T) {
	var e errSlot
	onThread := func(f func()) {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // the goroutine's thread dies with it: a new tid each time
			f()
			close(done)
		}()
		<-done
	}
	ready, proceed := make(chan struct{}), make(chan struct{})
	got := make(chan string)
	go func() {
		runtime.LockOSThread() // never unlocked: no other goroutine gets this thread
		e.set("first thread's failure")
		close(ready)
		<-proceed
		got <- e.get()
	}()
	<-ready
	onThread(func() { e.set("second thread's failure") })
	close(proceed)
	if m := <-got; m != "first thread's failure" {
		t.Fatalf("first thread read %q after another thread failed", m)
	}
	onThread(func() {
		if m := e.get(); m != "second thread's failure" {
			t.Errorf("a thread without a failure read %q, want the latest", m)
		}
	})
	// With the map full, a live thread's message outlives a thousand
	// threads failing after it: the bound evicts the oldest first (a
	// random victim would take it in about two runs of three).
	for i := range maxErrThreads {
		onThread(func() { e.set("old failure " + strconv.Itoa(i)) })
	}
	ready2, proceed2 := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		e.set("long-lived thread's failure")
		close(ready2)
		<-proceed2
		got <- e.get()
	}()
	<-ready2
	for i := range 1000 {
		onThread(func() { e.set("failure " + strconv.Itoa(i)) })
	}
	close(proceed2)
	if m := <-got; m != "long-lived thread's failure" {
		t.Fatalf("after 1,000 other threads failed, a live thread read %q", m)
	}
	for i := range maxErrThreads + 10 {
		onThread(func() { e.set("failure " + strconv.Itoa(i)) })
	}
	if n := len(e.byThread); n > maxErrThreads {
		t.Fatalf("%d threads' messages kept, bound %d", n, maxErrThreads)
	}
}

// TestHeaderDeclaresEveryExport: each //export of this package, and
// dfkv_status_name of status.c, has a prototype in dfkv.h, and the header
// declares no function the library lacks.
func TestHeaderDeclaresEveryExport(t *testing.T) {
	h, err := os.ReadFile("dfkv.h")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("exports.go")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{"dfkv_status_name": true}
	for _, m := range regexp.MustCompile(`(?m)^//export (\w+)$`).FindAllStringSubmatch(string(src), -1) {
		exported[m[1]] = true
	}
	declared := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\w[\w ]*?\**\s*\b(dfkv_\w+)\(`).FindAllStringSubmatch(string(h), -1) {
		declared[m[1]] = true
	}
	if !exported["dfkv_chain_keys"] || !declared["dfkv_open_v2"] {
		t.Fatalf("parsing went wrong: exported %v, declared %v", exported, declared)
	}
	for f := range exported {
		if !declared[f] {
			t.Errorf("%s is exported but has no prototype in dfkv.h", f)
		}
	}
	for f := range declared {
		if !exported[f] {
			t.Errorf("dfkv.h declares %s, which the library does not export", f)
		}
	}
}

// TestHeaderChainConstants: the chain key prefixes and hash size of dfkv.h
// are wire's.
func TestHeaderChainConstants(t *testing.T) {
	h, err := os.ReadFile("dfkv.h")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"DFKV_CHAIN_BLOCK_KEY_PREFIX": `"` + wire.ChainBlockKeyPrefix + `"`,
		"DFKV_CHAIN_TAIL_KEY_PREFIX":  `"` + wire.ChainTailKeyPrefix + `"`,
	} {
		m := regexp.MustCompile(`(?m)^#define ` + name + `\s+(.*)$`).FindStringSubmatch(string(h))
		if m == nil || strings.TrimSpace(m[1]) != want {
			t.Errorf("dfkv.h: %s = %v, want %s", name, m, want)
		}
	}
	if !strings.Contains(string(h), "DFKV_CHAIN_HASH_BYTES = "+strconv.Itoa(wire.ChainHashSize)+" ") {
		t.Errorf("dfkv.h: DFKV_CHAIN_HASH_BYTES is not %d", wire.ChainHashSize)
	}
}

// TestChainCount: the size checks of dfkv_chain_keys.
func TestChainCount(t *testing.T) {
	for _, c := range []struct {
		n, bt, capacity, want uint64
		st                    wire.Status
		msg                   string
	}{
		{0, 16, 0, 0, wire.StatusOK, ""},
		{15, 16, 0, 0, wire.StatusOK, ""},
		{32, 16, 2, 2, wire.StatusOK, ""},
		{33, 16, 5, 2, wire.StatusOK, ""},
		{33, 16, 1, 2, wire.StatusTooLarge, "pass room for 2 hashes (64 bytes)"},
		{3, 1, 0, 3, wire.StatusTooLarge, "make 3 full blocks"},
		{5, 0, 10, 0, wire.StatusInvalid, "block_tokens is 0"},
		{0, 0, 0, 0, wire.StatusInvalid, "block_tokens is 0"},
		{maxChainTokens + 1, 1 << 40, 0, 0, wire.StatusInvalid, "n_tokens 4294967297 is over the limit"},
		{maxChainTokens, 1 << 63, 0, 0, wire.StatusOK, ""},
	} {
		got, err := chainCount(c.n, c.bt, c.capacity)
		if got != c.want || wire.StatusOf(err) != c.st || (err != nil && !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("chainCount(%d, %d, %d) = %d, %v; want %d, %s containing %q", c.n, c.bt, c.capacity, got, err, c.want, c.st, c.msg)
		}
	}
}

// TestChainInto: the Go side of dfkv_chain_keys writes in place and
// equals wire.ChainKeys, also for block lengths past int and the tokens.
func TestChainInto(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 0xffffffff, 7}
	for _, bt := range []uint64{1, 2, 3, 7, 8, 1 << 40, 1<<64 - 1} {
		n, err := chainCount(uint64(len(toks)), bt, 100)
		if err != nil {
			t.Fatal(err)
		}
		hashes := make([][wire.ChainHashSize]byte, n)
		tail, err := chainInto(9, toks, bt, hashes)
		if err != nil {
			t.Fatalf("block tokens %d: %v", bt, err)
		}
		want, err := wire.ChainKeys(9, toks, int(min(bt, 8)))
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Blocks) != len(hashes) || (want.Tail == nil) != (tail == nil) || (tail != nil && *tail != *want.Tail) {
			t.Fatalf("block tokens %d: %d hashes, tail %+v; want %d, %+v", bt, len(hashes), tail, len(want.Blocks), want.Tail)
		}
		for i := range hashes {
			if hashes[i] != want.Blocks[i] {
				t.Fatalf("block tokens %d: hash %d differs", bt, i)
			}
		}
	}
	if tail, err := chainInto(9, nil, 16, nil); tail != nil || err != nil {
		t.Fatalf("no tokens: %+v, %v", tail, err)
	}
}

// TestStatusNamesInC: dfkv_status_name (status.c) names every status of
// wire, as wire names it.
func TestStatusNamesInC(t *testing.T) {
	src, err := os.ReadFile("status.c")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]string{}
	for _, m := range regexp.MustCompile(`case DFKV_([A-Z_]+): return "([A-Z_]+)";`).FindAllStringSubmatch(string(src), -1) {
		named[m[1]] = m[2]
	}
	for st := wire.Status(0); st.Known(); st++ {
		if named[st.String()] != st.String() {
			t.Errorf("status.c: dfkv_status_name(DFKV_%s) is not %q", st, st.String())
		}
	}
}

// The tokens of the credentials tests: alice may read, write and remove
// tenant "acme", bob tenant "globex"; strangerToken is well formed and in
// no credential.
const (
	aliceToken    = "alice-token-0123456789abcdef"
	bobToken      = "bob-token-0123456789abcdefgh"
	strangerToken = "stranger-token-0123456789abc"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestResolveToken: the field, else $DFKV_CLIENT_TOKEN, else $DFKV_TOKEN;
// an empty one counts as unset.
func TestResolveToken(t *testing.T) {
	for _, c := range []struct {
		field     string
		env       map[string]string
		tok, from string
	}{
		{aliceToken, map[string]string{envToken: bobToken, envTokenOld: strangerToken}, aliceToken, tokenField},
		{"", map[string]string{envToken: bobToken, envTokenOld: strangerToken}, bobToken, envToken},
		{"", map[string]string{envToken: "", envTokenOld: strangerToken}, strangerToken, envTokenOld},
		{"", map[string]string{envTokenOld: strangerToken}, strangerToken, envTokenOld},
		{"", map[string]string{envToken: "", envTokenOld: ""}, "", ""},
		{"", nil, "", ""},
	} {
		tok, from := resolveToken(c.field, envOf(c.env))
		if tok != c.tok || from != c.from {
			t.Errorf("resolveToken(%q, %v) = %q from %q; want %q from %q", c.field, c.env, tok, from, c.tok, c.from)
		}
	}
}

// TestMalformedTokenRefusedAtOpen: a token no node would take fails the
// open with INVALID, naming where it came from and never showing it.
func TestMalformedTokenRefusedAtOpen(t *testing.T) {
	for _, c := range []struct{ tok, from, msg string }{
		{"short-secret", tokenField, "the token from dfkv_client_options_v2.token is 12 bytes"},
		{strings.Repeat("s3cret", 43), envToken, "the token from $DFKV_CLIENT_TOKEN is 258 bytes"},
		{"has a space-0123456789", envTokenOld, "the token from $DFKV_TOKEN holds a space or control character at byte 4"},
		{"tab\tsecret-0123456789", tokenField, "control character at byte 4"},
		{"del\x7fsecret-0123456789", tokenField, "control character at byte 4"},
	} {
		h, err := open(openOptions{members: "127.0.0.1:1", namespace: []byte("acme"), token: c.tok, tokenFrom: c.from})
		if err == nil {
			release(h)
			t.Fatalf("token %q from %s opened", c.tok, c.from)
		}
		if wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), c.msg) || strings.Contains(err.Error(), c.tok[:6]) {
			t.Errorf("token from %s: %v; want INVALID containing %q and not the token", c.from, err, c.msg)
		}
	}
	// Embedded stores check it too.
	empty := ""
	if _, err := open(openOptions{namespace: []byte("acme"), embedded: &empty, token: "short", tokenFrom: tokenField}); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("embedded with a short token: %v", err)
	}
}

// credNode starts a real cache node in this process that requires the
// tests' credentials and returns its data address.
func credNode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	credFile := filepath.Join(dir, "credentials.toml")
	text := fmt.Sprintf(`[[credential]]
name = "alice"
token_sha256 = %q
tenants = ["acme"]
allow = ["read", "write", "remove"]

[[credential]]
name = "bob"
token_sha256 = %q
tenants = ["globex"]
allow = ["read", "write", "remove"]
`, sha256Hex(aliceToken), sha256Hex(bobToken))
	if err := os.WriteFile(credFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return startNode(t, map[string][]string{"credentials-file": {credFile}})
}

// startNode starts a real cache node in this process, configured as
// `dfkv server` with these flags would be, and returns its data address.
func startNode(t *testing.T, flags map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	all := map[string][]string{
		"disks": {filepath.Join(dir, "d0")}, "disk-capacity-bytes": {"256MiB"}, "ram-tier": {"1"},
		"ram-tier-bytes": {"64MiB"}, "http-listen": {""}}
	for k, v := range flags {
		all[k] = v
	}
	cfg, _, err := config.LoadFrom("server", "", nil, all)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Deps{Listener: ln, Ready: func(*server.Server) { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	return ln.Addr().String()
}

// openAs opens a handle on namespace with the token found as the C
// options (field, then environment) give it, and returns its state.
func openAs(t *testing.T, addr, namespace, field string, env map[string]string) *state {
	t.Helper()
	o := openOptions{members: addr, namespace: []byte(namespace), timeoutMS: 10000, shm: 1}
	o.token, o.tokenFrom = resolveToken(field, envOf(env))
	h, err := open(o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := release(h); err == nil {
			s.close()
		}
	})
	return s
}

// lastErr records err as an export does and returns the status the C
// caller gets and the message dfkv_last_error gives it.
func lastErr(s *state, err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	s.setErr(err)
	return statusOf(err), s.getErr()
}

// TestTokenAgainstNodeRequiringCredentials: with the right token (from the
// field or the environment) every call works; a wrong or missing token is
// UNAUTHENTICATED, reads included (not a miss), with a message that names
// the token setting and never shows the token; a token of another tenant
// is FORBIDDEN on every call, scalar and batch, and leaves that tenant's
// blocks as its owner wrote them.
func TestTokenAgainstNodeRequiringCredentials(t *testing.T) {
	addr := credNode(t)
	keys := [][]byte{[]byte("k\x000"), []byte("k\x001"), []byte("k\x002")}
	vals := [][]byte{[]byte("value zero"), []byte("value one"), []byte("value two")}
	buf := make([]byte, 64)

	// The right token, from the field and from the environment.
	alice := openAs(t, addr, "acme", aliceToken, nil)
	if err := alice.put(keys[0], vals[0]); err != nil {
		t.Fatalf("put with the right token: %v", err)
	}
	if n, err := alice.get(keys[0], buf); err != nil || string(buf[:n]) != string(vals[0]) {
		t.Fatalf("get with the right token: %q, %v", buf[:n], err)
	}
	fromEnv := openAs(t, addr, "acme", "", map[string]string{envTokenOld: aliceToken})
	if n, err := fromEnv.exist(keys[0]); err != nil || n != uint64(len(vals[0])) {
		t.Fatalf("exist with the token from $DFKV_TOKEN: %d, %v", n, err)
	}
	for i, err := range fromEnv.putBatch(keys[1:], vals[1:]) {
		if err != nil {
			t.Fatalf("put batch item %d: %v", i, err)
		}
	}
	if err := fromEnv.remove(keys[2]); err != nil {
		t.Fatalf("remove: %v", err)
	}

	// A wrong token and none at all: UNAUTHENTICATED on reads and writes.
	for _, c := range []struct {
		name, field string
		env         map[string]string
		msg         string
	}{
		{"wrong token", strangerToken, nil, "token from dfkv_client_options_v2.token (libdfkv takes dfkv_client_options_v2.token, else $DFKV_CLIENT_TOKEN"},
		{"wrong token from the environment", "", map[string]string{envToken: strangerToken}, "token from $DFKV_CLIENT_TOKEN"},
		{"no token", "", nil, "no token set (libdfkv takes dfkv_client_options_v2.token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openAs(t, addr, "acme", c.field, c.env)
			check := func(op string, err error) {
				t.Helper()
				st, msg := lastErr(s, err)
				if st != int(wire.StatusUnauthenticated) || !strings.Contains(msg, c.msg) || strings.Contains(msg, strangerToken[:8]) {
					t.Errorf("%s: status %d, message %q; want %d containing %q, without the token", op, st, msg, wire.StatusUnauthenticated, c.msg)
				}
			}
			_, err := s.get(keys[0], buf)
			check("get", err)
			_, err = s.exist(keys[0])
			check("exist", err)
			check("put", s.put(keys[0], vals[0]))
			check("remove", s.remove(keys[0]))
			for i, r := range s.existBatch(keys, false) {
				check("exist batch item "+strconv.Itoa(i), r.Err)
			}
			for i, err := range s.putBatch(keys, vals) {
				check("put batch item "+strconv.Itoa(i), err)
			}
		})
	}

	// Bob's blocks in globex, then alice's valid token used on globex.
	bob := openAs(t, addr, "globex", bobToken, nil)
	for i, err := range bob.putBatch(keys, vals) {
		if err != nil {
			t.Fatalf("bob's put, item %d: %v", i, err)
		}
	}
	mallory := openAs(t, addr, "globex", aliceToken, nil)
	forbidden := func(op string, err error) {
		t.Helper()
		if st, msg := lastErr(mallory, err); st != int(wire.StatusForbidden) || strings.Contains(msg, aliceToken[:8]) {
			t.Errorf("%s across tenants: status %d (%q), want FORBIDDEN", op, st, msg)
		}
	}
	absent := []byte("never-written")
	for _, k := range [][]byte{keys[0], absent} {
		_, err := mallory.get(k, buf)
		forbidden("get", err)
		_, _, err = mallory.getRange(k, 1, 2, buf)
		forbidden("get_range", err)
		_, err = mallory.getSG(k, [][]byte{buf[:4], buf[4:]})
		forbidden("get_sg", err)
		_, err = mallory.exist(k)
		forbidden("exist", err)
		forbidden("put", mallory.put(k, []byte("overwritten")))
		forbidden("put_sg", mallory.putSG(k, [][]byte{[]byte("over"), []byte("written")}))
		forbidden("remove", mallory.remove(k))
	}
	both := append(append([][]byte{}, keys...), absent)
	for i, err := range mallory.putBatch(both, [][]byte{[]byte("x"), []byte("x"), []byte("x"), []byte("x")}) {
		forbidden("put batch item "+strconv.Itoa(i), err)
	}
	dsts := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	for i, r := range mallory.getBatch(both, dsts) {
		forbidden("get batch item "+strconv.Itoa(i), r.Err)
	}
	for _, pin := range []bool{false, true} {
		for i, r := range mallory.existBatch(both, pin) {
			forbidden(fmt.Sprintf("exist batch (pin %v) item %d", pin, i), r.Err)
		}
		hits, err := mallory.existPrefix(both, pin)
		forbidden(fmt.Sprintf("exist prefix (pin %v)", pin), err)
		if hits != 0 {
			t.Errorf("exist prefix (pin %v) across tenants counted %d hits", pin, hits)
		}
	}
	for i, err := range mallory.removeBatch(both) {
		forbidden("remove batch item "+strconv.Itoa(i), err)
	}
	// Globex holds what bob wrote, and nothing more.
	for i, k := range keys {
		if n, err := bob.get(k, buf); err != nil || string(buf[:n]) != string(vals[i]) {
			t.Errorf("bob's %q after the refused calls: %q, %v", k, buf[:n], err)
		}
	}
	if _, err := bob.exist(absent); !errors.Is(err, wire.StatusNotFound) {
		t.Errorf("a key only mallory tried to write: %v", err)
	}
}
