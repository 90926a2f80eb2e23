package bench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/roles/server"
)

// TestScopedStatsNotReadAsEmptyNode: a STATS reply to a credential whose
// stats right names tenants (Scope "tenants", node-wide figures withheld
// as zeros) is not described as a node with no disks, no RAM tier and
// nothing stored, but as withheld.
func TestScopedStatsNotReadAsEmptyNode(t *testing.T) {
	raw, _ := json.Marshal(server.StatsReply{Info: server.NodeInfo{ID: "n1", Version: "v", Engine: "slab", CPUs: 4}, Scope: "tenants"})
	si := &ServerInfo{Protocol: "dfkv", Nodes: []NodeInfo{nodeInfo("n1:1", raw)}}
	line := si.lines()[0]
	if strings.Contains(line, "0 disks") || strings.Contains(line, "RAM tier off") || strings.Contains(line, "0 B of 0 B") {
		t.Fatalf("bench describes a node whose figures were withheld as: %s", line)
	}
	if !strings.Contains(line, "stats right names tenants") {
		t.Fatalf("bench does not say the figures were withheld: %s", line)
	}
}
