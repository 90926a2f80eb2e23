package main

import (
	"errors"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// The C side (exports, struct_size rules, every status path against real
// servers) is tested by test/dfkv_test.c through scripts/test-contrib.sh;
// Go test files cannot use cgo, so these cover the plain Go layer.

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
