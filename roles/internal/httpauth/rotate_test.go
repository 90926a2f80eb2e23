package httpauth

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestGuardSeesSameSizeRewriteWithOldMtime: a rotated HTTP token of the
// same length (openssl rand -hex 32 always gives 64 characters) written
// within the file system's timestamp granularity of the last reading, or
// copied in with its mtime kept, is taken up at the next look: the old
// token no longer opens /metrics and /debug/pprof.
func TestGuardSeesSameSizeRewriteWithOldMtime(t *testing.T) {
	const oldTok, newTok = "0123456789abcdef-old-token", "fedcba9876543210-new-token"
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, oldTok+"\n")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Load(path, "x.http_token_file", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	write(t, path, newTok+"\n")
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	g.nextAt.Store(nil) // the once-a-second throttle has passed
	if got := status(h, "Bearer "+oldTok); got != 401 {
		t.Fatalf("the replaced token still opens the guarded endpoints: %d", got)
	}
	if got := status(h, "Bearer "+newTok); got != 200 {
		t.Fatalf("the new token: %d", got)
	}
}
