package ctl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestGetToFIFO: `dfkv ctl get KEY PATH` where PATH is a named pipe
// (mkfifo; a consumer reading it) delivers the value through the pipe,
// as a shell redirection would, and leaves the pipe in place.
func TestGetToFIFO(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "value", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The consumer: O_RDWR so opening never blocks (Linux), a deadline
	// so the test ends whatever ctl does.
	rd, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	code, out, errs := runCtl(t, "", members, "get", "k", fifo)
	fi, _ := os.Lstat(fifo)
	_ = rd.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, rerr := io.ReadAtLeast(rd, buf, len("value"))
	reader := string(buf[:n])
	if rerr != nil {
		reader += " (" + rerr.Error() + ")"
	}
	if code != 0 || reader != "value" || fi == nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("ctl get k %s: exit %d stdout %q stderr %q\nthe pipe's reader got %q (want \"value\"); path is now %v",
			fifo, code, out, errs, reader, modeOf(fi))
	}
}

// TestGetToDevFd: `dfkv ctl get KEY /dev/fd/N` (bash process
// substitution: dfkv ctl get k >(sha256sum)) writes into the descriptor.
func TestGetToDevFd(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "value", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := fmt.Sprintf("/dev/fd/%d", w.Fd())
	code, out, errs := runCtl(t, "", members, "get", "k", path)
	w.Close()
	b, _ := io.ReadAll(r)
	if code != 0 || string(b) != "value" {
		t.Fatalf("ctl get k %s: exit %d stdout %q stderr %q; the pipe got %q, want \"value\"", path, code, out, errs, b)
	}
}

func modeOf(fi os.FileInfo) string {
	if fi == nil {
		return "missing"
	}
	return fi.Mode().String()
}

// TestGetKeepsPrivateFile: an output file the operator made private
// (values can hold data derived from prompts) stays private when the
// value replaces its contents, whatever the umask.
func TestGetKeepsPrivateFile(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "secret", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(dst, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	if code, _, errs := runCtl(t, "", members, "get", "k", dst); code != 0 {
		t.Fatalf("get: exit %d %s", code, errs)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the existing 0600 output file is now %v", fi.Mode().Perm())
	}
}

// TestGetThroughSymlink: an output path that is a symlink gets the
// value written to its target; the link stays a link.
func TestGetThroughSymlink(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "new", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCtl(t, "", members, "get", "k", link); code != 0 {
		t.Fatalf("get: exit %d %s", code, errs)
	}
	got, _ := os.ReadFile(target)
	fi, _ := os.Lstat(link)
	if string(got) != "new" {
		t.Fatalf("ctl get k %s (a symlink to %s): the target holds %q, want \"new\"; the link is now %v", link, target, got, modeOf(fi))
	}
}

// TestGetToDeviceNode: `dfkv ctl get k /dev/null` (discard the value,
// keep the exit status) run as root writes into the device and leaves
// the device node. Tried on a copy of /dev/null (char 1,3) made in a
// temporary directory, not on the real one.
func TestGetToDeviceNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mknod (as the real case needs root to write in /dev)")
	}
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "value", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	null := filepath.Join(t.TempDir(), "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Skip("mknod:", err)
	}
	code, _, errs := runCtl(t, "", members, "get", "k", null)
	fi, _ := os.Lstat(null)
	if fi == nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("ctl get k %s (a copy of /dev/null): exit %d %q; the device node is now %v", null, code, errs, modeOf(fi))
	}
}
