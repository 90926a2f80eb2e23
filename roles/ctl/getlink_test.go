package ctl

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGetThroughLinkIntoLockedDir: FILE is a symlink (in a directory the
// user can write) to a writable file in a directory where no file can be
// created (here chattr +i, which binds root too, standing for a directory
// the user may not write). As a shell's `> FILE` would, ctl writes the
// target in place.
func TestGetThroughLinkIntoLockedDir(t *testing.T) {
	members := "--members=" + startNode(t, nil)
	if code, _, errs := runCtl(t, "value", members, "put", "k"); code != 0 {
		t.Fatalf("put: exit %d %s", code, errs)
	}
	base, err := os.MkdirTemp("/var/tmp", "getlink")
	if err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(base, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(locked, "out")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", locked).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", locked).Run(); _ = os.RemoveAll(base) })
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCtl(t, "", members, "get", "k", link)
	got, _ := os.ReadFile(link)
	if code != 0 || string(got) != "value" {
		t.Fatalf("ctl get k LINK (-> a writable file in a directory that takes no new file): exit %d stdout %q stderr %q; LINK reads %q",
			code, out, errs, got)
	}
}
