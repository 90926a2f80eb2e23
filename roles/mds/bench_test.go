package mds

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/roles/internal/testetcd"
)

// BenchmarkMembers1000 measures one MEMBERS request (full list, over TCP,
// a fresh connection as clients make it) with 1,000 registered nodes, on
// each backend. Target: under 5 ms.
func BenchmarkMembers1000(b *testing.B) {
	run := func(b *testing.B, flags map[string][]string) {
		ctrl, _, stop := runMDSB(b, flags)
		defer stop()
		mc := mdsClientB(b, ctrl)
		ctx := context.Background()
		for i := 0; i < 1000; i++ {
			m := member(i)
			m.Disks = []string{"/nvme0/dfkv", "/nvme1/dfkv"}
			if _, err := mc.Register(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, ms, _, err := mc.Members(ctx, 0)
			if err != nil || len(ms) != 1000 {
				b.Fatalf("%d members, %v", len(ms), err)
			}
		}
	}
	b.Run("bbolt", func(b *testing.B) {
		run(b, map[string][]string{"db": {filepath.Join(b.TempDir(), "m.db")}})
	})
	b.Run("etcd", func(b *testing.B) {
		etcd := testetcd.Start(b)
		run(b, map[string][]string{"etcd": {etcd.Endpoint}, "etcd-prefix": {fmt.Sprintf("/bench%d", b.N)}})
	})
}
