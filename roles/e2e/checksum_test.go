package e2e

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

// extentHolding returns the extent file of the slab disk dir that holds
// needle, and where.
func extentHolding(t *testing.T, dir string, needle []byte) (string, int64) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "extents", "*.ext"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, needle); i >= 0 {
			return p, int64(i)
		}
	}
	t.Fatal("the value's bytes are in no extent file")
	return "", 0
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

	p, i := extentHolding(t, d0, bad[:4096])
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], i+12345); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	_, err = f.WriteAt(b[:], i+12345)
	f.Close()
	if err != nil {
		t.Fatal(err)
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
	if logs := srv.logs.String(); !strings.Contains(logs, "failed its checksum and was dropped") || !strings.Contains(logs, d0) {
		t.Fatalf("no checksum warning naming the disk in the node's log:\n%s", logs)
	}
}

// TestServerProcessDamagedFilesStillStart: files lost under a stopped node
// no longer keep it from starting. A removed extent file costs only the
// blocks it held (the other block serves); a slab_meta overwritten with
// garbage starts the disk cold, with one ERROR naming it, and the node
// serves new blocks.
func TestServerProcessDamagedFilesStillStart(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	d0 := filepath.Join(dir, "d0")
	srv := startServer(t, addr, httpAddr, d0)
	members := "--members=" + addr
	small, large := bytes.Repeat([]byte("s"), 5000), bytes.Repeat([]byte("L"), 3<<20)
	for k, v := range map[string][]byte{"small": small, "large": large} {
		if code, _, errs := dfkv(t, v, "ctl", members, "put", k); code != 0 {
			t.Fatalf("ctl put %s: %d %s", k, code, errs)
		}
	}
	srv.stop(t)

	// The two sizes are in two extents: remove the large one's.
	p, _ := extentHolding(t, d0, large[:4096])
	if b, err := os.ReadFile(p); err != nil || bytes.Contains(b, small) {
		t.Fatalf("both values in one extent file (%v)", err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, addr, httpAddr, d0)
	if code, out, errs := dfkv(t, nil, "ctl", members, "get", "small"); code != 0 || !bytes.Equal(out, small) {
		t.Fatalf("ctl get of the block in the remaining extent: exit %d, %d bytes: %s", code, len(out), errs)
	}
	if code, out, errs := dfkv(t, nil, "ctl", members, "get", "large"); code != 1 || len(out) != 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("ctl get of the block in the removed extent: exit %d, %d bytes, %q; want a miss", code, len(out), errs)
	}
	srv.stop(t)
	if logs := srv.logs.String(); !strings.Contains(logs, "extent files were missing or cut short") {
		t.Fatalf("no warning about the removed extent:\n%s", logs)
	}

	if err := os.WriteFile(filepath.Join(d0, "slab_meta"), bytes.Repeat([]byte{0xee}, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, addr, httpAddr, d0)
	if code, _, _ := dfkv(t, nil, "ctl", members, "get", "small"); code != 1 {
		t.Fatalf("ctl get after slab_meta was damaged: exit %d, want a miss (the disk starts cold)", code)
	}
	if code, _, errs := dfkv(t, small, "ctl", members, "put", "again"); code != 0 {
		t.Fatalf("ctl put after the cold start: %d %s", code, errs)
	}
	srv.stop(t)
	if logs := srv.logs.String(); strings.Count(logs, "level=ERROR") != 1 || !strings.Contains(logs, "slab_meta is damaged") {
		t.Fatalf("want exactly one ERROR, naming slab_meta:\n%s", logs)
	}
}
