package hostcheck

import "testing"

// TestFDLimitShort: the node wants its open files, max_conns connections
// and a fixed headroom; a limit below that is short, one at or above it
// is not.
func TestFDLimitShort(t *testing.T) {
	for _, tc := range []struct {
		open, maxConns int
		limit, want    uint64
		short          bool
	}{
		{open: 40, maxConns: 4096, limit: 1024, want: 4200, short: true},
		{open: 40, maxConns: 4096, limit: 4200, want: 4200, short: false},
		{open: 62_520, maxConns: 4096, limit: 65_536, want: 66_680, short: true}, // a 4 TB slab disk of 64 MiB extents
		{open: 62_520, maxConns: 4096, limit: 1 << 20, want: 66_680, short: false},
	} {
		want, short := fdLimitShort(tc.open, tc.maxConns, tc.limit)
		if want != tc.want || short != tc.short {
			t.Errorf("fdLimitShort(%d, %d, %d) = %d, %v; want %d, %v", tc.open, tc.maxConns, tc.limit, want, short, tc.want, tc.short)
		}
	}
}
