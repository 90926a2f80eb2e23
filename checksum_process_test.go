package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// diskMetric returns the value of a per-disk series of a node's /metrics
// (the one disk's), as text.
func diskMetric(t *testing.T, httpAddr, name string) string {
	t.Helper()
	return scrapeSample(t, httpAddr, name+"{")
}

// TestServerProcessCorruptedExtent is the operator's view of a payload
// checksum: a byte flipped in an extent file while the node is stopped
// (dd conv=notrunc) makes `ctl get` of that block a miss (exit 1), never
// the wrong bytes; the node logs it, counts it in
// dfkv_disk_checksum_failures_total and stays healthy, and the other
// block still serves.
func TestServerProcessCorruptedExtent(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	d0 := filepath.Join(dir, "d0")
	srv := startServer(t, addr, httpAddr, d0)
	members := "--members=" + addr
	bad, good := make([]byte, 1<<20), make([]byte, 70000)
	_, _ = rand.Read(bad)
	_, _ = rand.Read(good)
	for k, v := range map[string][]byte{"bad": bad, "good": good} {
		if code, _, errs := dfkv(t, v, "ctl", members, "put", k); code != 0 {
			t.Fatalf("ctl put %s: %d %s", k, code, errs)
		}
	}
	srv.stop(t)

	paths, _ := filepath.Glob(filepath.Join(d0, "extents", "*.ext"))
	flipped := false
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, bad[:4096]); i >= 0 {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt([]byte{b[i+12345] ^ 0x20}, int64(i+12345))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			flipped = true
			break
		}
	}
	if !flipped {
		t.Fatal("the value's bytes are in no extent file")
	}

	srv = startServer(t, addr, httpAddr, d0)
	code, out, errs := dfkv(t, nil, "ctl", members, "get", "bad")
	if code != 1 || len(out) != 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("ctl get of the corrupted block: exit %d, %d bytes, %q; want exit 1, nothing, not found", code, len(out), errs)
	}
	if code, out, errs := dfkv(t, nil, "ctl", members, "get", "good"); code != 0 || !bytes.Equal(out, good) {
		t.Fatalf("ctl get of the intact block: exit %d, %d bytes: %s", code, len(out), errs)
	}
	if v := diskMetric(t, httpAddr, "dfkv_disk_checksum_failures_total"); v != "1" {
		t.Fatalf("dfkv_disk_checksum_failures_total %s, want 1", v)
	}
	if v := diskMetric(t, httpAddr, "dfkv_disk_healthy"); v != "1" {
		t.Fatalf("dfkv_disk_healthy %s, want 1 (one bad value does not fail the disk)", v)
	}
	srv.stop(t)
	if logs := srv.logs.String(); !strings.Contains(logs, "failed its payload checksum") || !strings.Contains(logs, d0) {
		t.Fatalf("no checksum warning naming the disk in the node's log:\n%s", logs)
	}
}
