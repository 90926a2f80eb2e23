package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestCommitID: the link-time commit wins; without one, the revision the
// go command stamped; without that, "unknown", never an empty string.
func TestCommitID(t *testing.T) {
	saved := Commit
	t.Cleanup(func() { Commit = saved })

	Commit = "0123abc"
	if got := CommitID(); got != "0123abc" {
		t.Fatalf("with Commit set at link time: %q", got)
	}
	if !strings.Contains(String(), "commit 0123abc") {
		t.Fatalf("String() = %q, want the link-time commit", String())
	}

	Commit = ""
	want := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				want = s.Value
			}
		}
	}
	if got := CommitID(); got != want {
		t.Fatalf("without a link-time commit: %q, want %q", got, want)
	}
}
