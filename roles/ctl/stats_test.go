package ctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/server"
)

// TestStatsShowsExtentMoves: the human summary names extent moves when a
// slab disk had any, and stays quiet about them otherwise.
func TestStatsShowsExtentMoves(t *testing.T) {
	var out bytes.Buffer
	writeStats(&out, "127.0.0.1:7600", &nodeStats{Engine: engine.Stats{Engine: "slab", Evictions: 40, ExtentMoves: 3}})
	if !strings.Contains(out.String(), "extents      3 moved to another value size") {
		t.Fatalf("summary of a node with 3 extent moves:\n%s", out.String())
	}
	out.Reset()
	writeStats(&out, "127.0.0.1:7600", &nodeStats{Engine: engine.Stats{Engine: "slab", Evictions: 40}})
	if strings.Contains(out.String(), "extents ") {
		t.Fatalf("summary of a node without extent moves mentions them:\n%s", out.String())
	}
}

// TestStatsShowsTenants: each tenant STATS lists appears with its share of
// its quota, or without one.
func TestStatsShowsTenants(t *testing.T) {
	var out bytes.Buffer
	writeStats(&out, "127.0.0.1:7600", &nodeStats{Tenants: []server.TenantUsage{
		{Tenant: "acme", UsedBytes: 3 << 30, QuotaBytes: 4 << 30},
		{Tenant: "0x00000000000000ff", UsedBytes: 1 << 20},
	}})
	for _, want := range []string{"tenant       acme holds 3.0 GiB (75% of its 4.0 GiB quota)", "tenant       0x00000000000000ff holds 1.0 MiB (no quota)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
