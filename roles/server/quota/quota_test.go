package quota

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "q.toml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	q, err := Load(write("[tenants]\n\"acme\" = \"1MiB\"\n\"0x00000000000000ff\" = 4096\n"), 77)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Limit(wire.TenantHash([]byte("acme"))); got != 1<<20 {
		t.Fatalf("acme limit %d", got)
	}
	if got := q.Limit(0xff); got != 4096 {
		t.Fatalf("hash limit %d", got)
	}
	if got := q.Limit(12345); got != 77 {
		t.Fatalf("default limit %d", got)
	}
	// Operators see a tenant by the name they listed it by (metrics,
	// refusals), else by the hash form the file takes.
	acme := wire.TenantHash([]byte("acme"))
	if got := q.Label(acme); got != "acme" {
		t.Errorf("label of a tenant listed by name: %q", got)
	}
	if got, other := q.Label(0xff), q.Label(12345); got != "0x00000000000000ff" || other != "0x0000000000003039" {
		t.Errorf("labels of a tenant listed by hash and of an unlisted one: %q, %q", got, other)
	}
	// A canonical namespace whose tenant is "acme" maps to the same limit.
	ns, err := wire.NamespaceDescriptor{Tenant: "acme", ModelID: "m", LayoutID: wire.LayoutLMCache, DType: "bf16",
		BlockTokens: 16, LayerGeometry: wire.LayerGeometry{Layers: 1, KVHeads: 1, HeadDim: 1},
		TopologySizes: wire.TopologySizes{DP: 1, TP: 1, PCP: 1, DCP: 1, PP: 1}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if q.Limit(wire.TenantHash(ns)) != 1<<20 {
		t.Fatal("a descriptor's tenant does not match the quota name")
	}
	if q, err := Load("", 0); q != nil || err != nil {
		t.Fatalf("no file, no default: %v %v", q, err)
	}
	bad := func(body, want string) {
		t.Helper()
		_, err := Load(write(body), 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: got %v, want an error containing %q", body, err, want)
		}
	}
	bad("[tenant]\nx = 1\n", `unknown key "tenant"`)
	bad("[tenants]\nx = \"lots\"\n", `tenant "x"`)
	bad("[tenants]\nx = -1\n", "negative")
	bad("[tenants]\nx = 1.5\n", "size must be")
	bad("[tenants\n", "q.toml")
	if _, err := Load(filepath.Join(dir, "missing.toml"), 0); err == nil || !strings.Contains(err.Error(), "DFKV_SERVER_TENANT_QUOTAS_FILE") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestWarnOver: at start, each tenant already holding more than its
// quota is named (its hash, what it holds, its quota), at most ten lines
// and then a count; tenants within their quota or without one are not.
func TestWarnOver(t *testing.T) {
	q := engine.NewQuotas(0, map[uint64]uint64{1: 100, 2: 100})
	q.Committed(1, 150) // over
	q.Committed(2, 50)  // within
	q.Committed(3, 1e9) // no quota
	var buf bytes.Buffer
	WarnOver(slog.New(slog.NewTextHandler(&buf, nil)), q)
	if got := buf.String(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "tenant=0x0000000000000001 committed_bytes=150 quota_bytes=100") {
		t.Fatalf("warnings: %s", got)
	}

	limits := map[uint64]uint64{}
	for i := range uint64(12) {
		limits[i+10] = 1
	}
	q = engine.NewQuotas(0, limits)
	for tenant := range limits {
		q.Committed(tenant, 2)
	}
	buf.Reset()
	WarnOver(slog.New(slog.NewTextHandler(&buf, nil)), q)
	if got := buf.String(); strings.Count(got, "level=WARN") != overQuotaLines+1 || !strings.Contains(got, "not_listed=2") {
		t.Fatalf("twelve tenants over quota: %s", got)
	}
}
