package creds

import (
	"fmt"
	"os"
	"testing"
)

// TestWatchSeesSameSizeRewriteWithOldMtime: a token rotated out of the
// credentials file by a rewrite of the same size (one 64-hex-digit
// token_sha256 for another: exactly what a rotation is) whose
// modification time did not move (written within the file system's
// timestamp granularity of the last reading, or put in place by a tool
// that keeps mtimes: cp -p, rsync -a, tar, install -p) is reloaded by the
// next poll (w.reload(false)): the revoked token stops working.
func TestWatchSeesSameSizeRewriteWithOldMtime(t *testing.T) {
	dir := t.TempDir()
	cred := func(token string) string {
		return fmt.Sprintf("[[credential]]\nname = \"svc\"\ntoken_sha256 = %q\ntenants = [\"a\"]\nallow = [\"read\"]\n", sumHex(token))
	}
	old, rotated := cred("revoked-token-00001"), cred("current-token-00002")
	if len(old) != len(rotated) {
		t.Fatal("test setup: the two readings must have the same size")
	}
	path := writeFile(t, dir, old)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatch(path, "credentials file", LoadTenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, rotated)
	// The rewrite landed in the same timestamp tick as the first write
	// (or was copied in with its mtime kept): the mtime is unchanged.
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	w.reload(false) // what Run does every second
	if w.Current().Lookup(SumOf([]byte("revoked-token-00001"))) != nil {
		t.Fatal("the credentials file changed (the token was rotated out) but the poll kept the old reading: the revoked token still authenticates new connections")
	}
	if w.Current().Lookup(SumOf([]byte("current-token-00002"))) == nil {
		t.Fatal("the rotated-in token is not accepted")
	}
}
