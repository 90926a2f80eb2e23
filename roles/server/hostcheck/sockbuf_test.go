package hostcheck

import (
	"strings"
	"testing"
)

// TestSocketBufferWarnings: a socket buffer above the kernel's cap is
// named with the sysctl to raise; one within it, 0 (autotuning), or a
// sysctl that cannot be read gives no warning.
func TestSocketBufferWarnings(t *testing.T) {
	stock := func(name string) (uint64, bool) { return 212992, true }
	w := socketBufferWarnings(8<<20, stock)
	if len(w) != 2 || !strings.Contains(w[0], "net.core.wmem_max = 212992") || !strings.Contains(w[1], "net.core.rmem_max") || !strings.Contains(w[0], "8MiB") {
		t.Fatalf("8 MiB on a stock kernel: %q", w)
	}
	if w := socketBufferWarnings(128<<10, stock); len(w) != 0 {
		t.Fatalf("128 KiB within the cap: %q", w)
	}
	if w := socketBufferWarnings(0, stock); len(w) != 0 {
		t.Fatalf("0 (autotuning): %q", w)
	}
	if w := socketBufferWarnings(8<<20, func(string) (uint64, bool) { return 0, false }); len(w) != 0 {
		t.Fatalf("unreadable sysctls: %q", w)
	}
}
