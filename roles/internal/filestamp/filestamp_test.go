package filestamp

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSameSizeRewriteWithOldTimeChangesTheStamp: a file rewritten with
// other bytes of the same length and its old modification time put back
// (as cp -p does) has another stamp; the same bytes keep it.
func TestSameSizeRewriteWithOldTimeChangesTheStamp(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("aaaaaaaa"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	before, err := Of(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("bbbbbbbb"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Time{}, st.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := Of(p)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatal("a same-size rewrite with its old modification time kept the stamp")
	}
	if again, _ := Of(p); again != after {
		t.Fatal("reading the same bytes twice gave two stamps")
	}
}

// TestFilesAreKeptApart: moving bytes between two files changes the
// stamp; a missing file is an error naming it; empty paths are skipped.
func TestFilesAreKeptApart(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "xy")
	write(b, "z")
	s1, _ := Of(a, "", b)
	write(a, "x")
	write(b, "yz")
	s2, _ := Of(a, b)
	if s1 == s2 {
		t.Fatal("a byte moved from one file to the next kept the stamp")
	}
	if _, err := Of(a, filepath.Join(dir, "missing")); err == nil || !os.IsNotExist(err) {
		t.Fatalf("a missing file: %v, want a not-exist error", err)
	}
}
