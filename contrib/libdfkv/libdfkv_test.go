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
