package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/server"
)

// ServerInfo says what the run measured, asked before measuring: for
// protocol dfkv each node's STATS (build, CPUs, engine, disks, RAM tier,
// capacity and fill), for redis and memcached the protocol and address.
type ServerInfo struct {
	Protocol string     `json:"protocol"`
	Addr     string     `json:"addr,omitempty"`  // redis or memcached
	Nodes    []NodeInfo `json:"nodes,omitempty"` // dfkv, in member order
}

// NodeInfo is one dfkv node as its STATS reply describes it. Error is
// set, and the rest empty, when the node did not answer STATS: the run
// goes on and its own errors say whether the node served.
type NodeInfo struct {
	Addr      string `json:"addr"`
	Error     string `json:"error,omitempty"`
	ID        string `json:"id,omitempty"`
	Version   string `json:"version,omitempty"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	OS        string `json:"os,omitempty"`
	CPU       string `json:"cpu,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`
	Engine    string `json:"engine,omitempty"`
	Disks     int    `json:"disks"`
	// CapacityBytes and UsedBytes are the engine's (all disks); Fill is
	// used / capacity, after the fill stage.
	CapacityBytes uint64  `json:"capacity_bytes"`
	UsedBytes     uint64  `json:"used_bytes"`
	Fill          float64 `json:"fill"`
	Objects       uint64  `json:"objects"`
	// RAMTierBytes is the RAM tier's budget and RAMTierUsedBytes what
	// its values take; both 0 when the node runs without one.
	RAMTierBytes     uint64 `json:"ram_tier_bytes"`
	RAMTierUsedBytes uint64 `json:"ram_tier_used_bytes"`
}

// statsTimeout bounds the STATS exchange with one node.
const statsTimeout = 5 * time.Second

// nodeInfo decodes a STATS reply of the node at addr.
func nodeInfo(addr string, raw []byte) NodeInfo {
	// The server's own reply type, as ctl decodes it: fields a node of
	// another version adds or lacks are ignored or left zero.
	var d server.StatsReply
	if err := json.Unmarshal(raw, &d); err != nil {
		return NodeInfo{Addr: addr, Error: "unreadable STATS reply: " + err.Error()}
	}
	if d.Scope == "tenants" {
		// The token's stats right names tenants: the reply has no node-wide
		// figures, and zeros would describe an empty node.
		return NodeInfo{Addr: addr, ID: d.Info.ID, Version: d.Info.Version, Commit: d.Info.Commit,
			Error: `this credential's stats right names tenants; node-wide figures take stats on "*"`}
	}
	in := d.Info
	n := NodeInfo{Addr: addr, ID: in.ID, Version: in.Version, Commit: in.Commit, GoVersion: in.GoVersion, OS: in.OS,
		CPU: in.CPU, CPUs: in.CPUs, Engine: in.Engine, Disks: realDisks(d.Disks),
		CapacityBytes: d.Engine.CapacityBytes, UsedBytes: d.Engine.UsedBytes, Objects: d.Engine.Objects}
	if n.CapacityBytes > 0 {
		n.Fill = float64(n.UsedBytes) / float64(n.CapacityBytes)
	}
	if d.RAM != nil {
		n.RAMTierBytes, n.RAMTierUsedBytes = d.RAM.BudgetBytes, d.RAM.ArenaUsedBytes+d.RAM.LargeUsedBytes
	}
	return n
}

// describe asks every member for STATS, all at once.
func (t *dfkvTarget) describe(ctx context.Context) *ServerInfo {
	members := t.cl.Members()
	info := &ServerInfo{Protocol: "dfkv", Nodes: make([]NodeInfo, len(members))}
	var wg sync.WaitGroup
	for i, addr := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, statsTimeout)
			defer cancel()
			raw, err := t.cl.Stats(ctx, addr)
			if err != nil {
				info.Nodes[i] = NodeInfo{Addr: addr, Error: "STATS: " + err.Error()}
				return
			}
			info.Nodes[i] = nodeInfo(addr, raw)
		}()
	}
	wg.Wait()
	return info
}

// describe names the peer: bench asks redis and memcached nothing.
func (t *peerTarget) describe(context.Context) *ServerInfo {
	return &ServerInfo{Protocol: t.proto, Addr: t.addr}
}

// lines describes the server in one line per node, for the table.
func (s *ServerInfo) lines() []string {
	if s == nil {
		return nil
	}
	if s.Protocol != "dfkv" {
		return []string{fmt.Sprintf("server %s at %s", s.Protocol, s.Addr)}
	}
	out := make([]string, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if n.Error != "" {
			out = append(out, fmt.Sprintf("server %s: no description (%s)", n.Addr, n.Error))
			continue
		}
		out = append(out, fmt.Sprintf("server %s: %s, %s, engine %s, %s, RAM tier %s; %s",
			n.Addr, n.build(), plural(n.CPUs, "CPU"), n.Engine, plural(n.Disks, "disk"), n.ramTier(), n.usage()))
	}
	return out
}

func (n *NodeInfo) build() string {
	b := "dfkv " + n.Version
	if n.Commit != "" && n.Commit != "unknown" {
		b += " (" + shortCommit(n.Commit) + ")"
	}
	return b
}

func (n *NodeInfo) ramTier() string {
	if n.RAMTierBytes == 0 {
		return "off"
	}
	return config.HumanSize(n.RAMTierUsedBytes) + " of " + config.HumanSize(n.RAMTierBytes)
}

func (n *NodeInfo) usage() string {
	if n.Disks == 0 {
		return fmt.Sprintf("no disk, %d objects", n.Objects)
	}
	return fmt.Sprintf("%s of %s used (%.1f%%), %d objects", config.HumanSize(n.UsedBytes), config.HumanSize(n.CapacityBytes), 100*n.Fill, n.Objects)
}

// realDisks counts the disks of a STATS reply, leaving out the stand-in
// an embedded store without a disk reports (engine "none").
func realDisks(disks []engine.Stats) int {
	n := 0
	for _, d := range disks {
		if d.Engine != "none" {
			n++
		}
	}
	return n
}

// shortCommit is a commit id cut to 12 characters, as git prints it.
func shortCommit(c string) string {
	if len(c) > 12 && !strings.ContainsAny(c[:12], "-+ ") {
		return c[:12]
	}
	return c
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// serverHead is the head row of htmlRows.
var serverHead = []string{"node", "build", "CPUs", "engine", "disks", "RAM tier", "used of capacity", "objects"}

// htmlRows is the server as table rows, one per node that answered,
// and lines for the others (or for a redis or memcached).
func (s *ServerInfo) htmlRows() (rows [][]string, notes []string) {
	if s == nil {
		return nil, nil
	}
	if s.Protocol != "dfkv" {
		return nil, s.lines()
	}
	for _, n := range s.Nodes {
		if n.Error != "" {
			notes = append(notes, fmt.Sprintf("%s: no description (%s)", n.Addr, n.Error))
			continue
		}
		node := n.Addr
		if n.ID != "" && n.ID != n.Addr {
			node += " (" + n.ID + ")"
		}
		rows = append(rows, []string{node, n.build(), fmt.Sprint(n.CPUs), n.Engine, fmt.Sprint(n.Disks), n.ramTier(),
			fmt.Sprintf("%s of %s (%.1f%%)", config.HumanSize(n.UsedBytes), config.HumanSize(n.CapacityBytes), 100*n.Fill), fmt.Sprint(n.Objects)})
	}
	return rows, notes
}
