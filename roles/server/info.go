package server

import (
	"runtime"
	"sort"

	"github.com/klauspost/cpuid/v2"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/lease"
	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/version"
)

// NodeInfo is what `dfkv ctl info` shows about a node: its build, the CPU
// it runs on and how it was configured. It is sent in the STATS reply.
type NodeInfo struct {
	ID            string   `json:"id"`
	Group         string   `json:"group"`
	Listen        string   `json:"listen"`
	Version       string   `json:"version"`
	Commit        string   `json:"commit"`
	GoVersion     string   `json:"go_version"`
	OS            string   `json:"os"`
	CPU           string   `json:"cpu"`
	CPUs          int      `json:"cpus"`
	CPUFeatures   []string `json:"cpu_features"`
	Engine        string   `json:"engine"`
	ConfigFile    string   `json:"config_file,omitempty"`
	ConfigSources []string `json:"config_sources,omitempty"` // "key = value  # source" lines that are not defaults
	StartedUnixMS int64    `json:"started_unix_ms"`
	MDS           []string `json:"mds,omitempty"`
}

// cpuInfo fills the CPU fields from cpuid: the features that matter to a
// data mover (vector widths for checksums and copies, AES and SHA for
// hashing identities) come first, the rest follow sorted.
func (n *NodeInfo) cpuInfo() {
	n.CPU = cpuid.CPU.BrandName
	n.CPUs = runtime.NumCPU()
	n.GoVersion = runtime.Version()
	n.OS = runtime.GOOS + "/" + runtime.GOARCH
	n.Version, n.Commit = version.Version, version.CommitID()
	feats := cpuid.CPU.FeatureSet()
	sort.Strings(feats)
	n.CPUFeatures = feats
}

// StatsReply is the STATS reply body; `dfkv ctl` decodes it.
type StatsReply struct {
	Info   NodeInfo       `json:"info"`
	Server Stats          `json:"server"`
	Engine engine.Stats   `json:"engine"`
	Disks  []engine.Stats `json:"disks,omitempty"`
	// RAM is the RAM tier's own counters; absent when the tier is off.
	RAM *ramtier.RAMStats `json:"ram,omitempty"`
	// Shm is the shared-memory transport's; absent when it is off.
	Shm *ShmStats `json:"shm,omitempty"`
	// Pins are BATCH_EXIST's pins; absent without the RAM tier.
	Pins *lease.Stats `json:"pins,omitempty"`
	// RDMA is the RDMA transport's; absent when it is off.
	RDMA *rdma.NodeStats `json:"rdma,omitempty"`
	// ObjectStore is the object-store tier's; absent when it is off.
	ObjectStore *objtier.Stats `json:"object_store,omitempty"`
	// Auth says whether the data port requires tokens and what it refused.
	Auth AuthStats `json:"auth"`
	// Tenants are the tenants holding the most bytes on this node (at most
	// TopTenants, the same ones /metrics names), with their quotas.
	Tenants []TenantUsage `json:"tenants,omitempty"`
	// Scope is "tenants" in the reply to a credential whose stats right
	// names tenants rather than "*": Info and those tenants' Tenants rows
	// only, every node-wide figure left out (zero).
	Scope string `json:"scope,omitempty"`
}

// TenantUsage is what one tenant has committed on a node against its
// quota there (0: none).
type TenantUsage struct {
	Tenant     string `json:"tenant"` // as the quotas file names it, else 0x and its hash
	UsedBytes  int64  `json:"used_bytes"`
	QuotaBytes uint64 `json:"quota_bytes"`
}

// quotas are the node's tenant quotas, or nil.
func (s *Server) quotas() *engine.Quotas {
	g := s.group
	if g == nil {
		g, _ = s.opts.Engine.(*engine.Group)
	}
	if g == nil {
		return nil
	}
	return g.Quotas()
}

// scopedStats is STATS for a credential whose stats right names tenants
// rather than "*": the node's identity and build, and the usage of those
// tenants, nothing node-wide. On a quiet node the node's totals (bytes and
// objects stored, traffic, evictions, refusals by tenant) move with
// another tenant's PUTs and would tell their sizes.
func (s *Server) scopedStats(g *creds.Grant) StatsReply {
	r := StatsReply{Info: s.info, Scope: "tenants", Auth: AuthStats{Required: true}}
	grp := s.group
	if grp == nil {
		grp, _ = s.opts.Engine.(*engine.Group)
	}
	if grp == nil || grp.Quotas() == nil {
		return r
	}
	q := grp.Quotas()
	for t, used := range q.Usage() {
		if g.Allows(t, creds.Stats) {
			r.Tenants = append(r.Tenants, TenantUsage{Tenant: q.Label(t), UsedBytes: used, QuotaBytes: q.Limit(t)})
		}
	}
	sort.Slice(r.Tenants, func(i, j int) bool { return r.Tenants[i].Tenant < r.Tenants[j].Tenant })
	return r
}

// tenantUsage lists the TopTenants tenants holding the most bytes, most
// first; nil without quotas.
func tenantUsage(q *engine.Quotas) []TenantUsage {
	if q == nil {
		return nil
	}
	usage := q.Usage()
	tenants := make([]uint64, 0, len(usage))
	for t := range usage {
		tenants = append(tenants, t)
	}
	sort.Slice(tenants, func(i, j int) bool {
		a, b := tenants[i], tenants[j]
		return usage[a] > usage[b] || usage[a] == usage[b] && a < b
	})
	out := make([]TenantUsage, 0, min(len(tenants), TopTenants))
	for _, t := range tenants[:min(len(tenants), TopTenants)] {
		out = append(out, TenantUsage{Tenant: q.Label(t), UsedBytes: usage[t], QuotaBytes: q.Limit(t)})
	}
	return out
}

// SetInfo records what STATS reports about the node. Call before Serve.
func (s *Server) SetInfo(n NodeInfo) {
	n.cpuInfo()
	s.info = n
}

func (s *Server) statsReply() StatsReply {
	r := StatsReply{Info: s.info, Server: s.Stats(), Engine: s.opts.Engine.Stats(), Shm: s.ShmStats(), Auth: s.AuthStats()}
	if s.pins != nil {
		st := s.pins.table.Stats()
		r.Pins = &st
	}
	if s.opts.RDMA != nil {
		st := s.opts.RDMA.Stats()
		r.RDMA = &st
	}
	if s.obj != nil {
		st := s.obj.TierStats()
		r.ObjectStore = &st
	}
	if t, ok := s.opts.Engine.(*ramtier.Tier); ok {
		ram := t.RAM()
		r.RAM = &ram
	}
	g := s.group
	if g == nil {
		g, _ = s.opts.Engine.(*engine.Group)
	}
	if g != nil {
		r.Tenants = tenantUsage(g.Quotas())
		r.Disks = g.Disks()
		names := g.Names()
		for i := range r.Disks {
			if r.Disks[i].Path == "" {
				r.Disks[i].Path = names[i]
			}
		}
	}
	return r
}
