package creds

import (
	"strings"
)

// NodeGrant is what one MDS credential may do: register, heartbeat and
// deregister the node ids its patterns match, and read the member list,
// in the groups its group patterns match (all when it lists none).
type NodeGrant struct {
	Name    string
	nodes   []string // patterns; '*' matches any run of bytes
	groups  []string // patterns; none: every group
	Members bool
}

// InGroup reports whether g may act in group (server.group): groups
// that never mix (one per tenant or cluster) can be kept apart, so a
// host trusted in one cannot register itself into another's ring.
func (g *NodeGrant) InGroup(group string) bool {
	if len(g.groups) == 0 {
		return true
	}
	for _, p := range g.groups {
		if globMatch(p, group) {
			return true
		}
	}
	return false
}

// MayRegister reports whether g may register, renew or remove node id.
func (g *NodeGrant) MayRegister(id string) bool {
	for _, p := range g.nodes {
		if globMatch(p, id) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern whose only special byte is '*',
// which matches any run of bytes ('/' included: node ids often hold an
// address).
func globMatch(pattern, s string) bool {
	head, rest, ok := strings.Cut(pattern, "*")
	if !ok {
		return pattern == s
	}
	if !strings.HasPrefix(s, head) {
		return false
	}
	s = s[len(head):]
	for i := 0; i <= len(s); i++ {
		if globMatch(rest, s[i:]) {
			return true
		}
	}
	return false
}

// Nodes is one reading of an MDS's node credentials file.
type Nodes struct {
	Path   string
	grants map[Sum]*NodeGrant
}

// Lookup returns the grant of the token whose hash is sum, or nil.
func (n *Nodes) Lookup(sum Sum) *NodeGrant { return n.grants[sum] }

// Len is the number of credentials.
func (n *Nodes) Len() int { return len(n.grants) }

type nodesFile struct {
	Credential []struct {
		Name        string   `toml:"name"`
		TokenSHA256 *Sum     `toml:"token_sha256"`
		Nodes       []string `toml:"nodes"`
		Groups      []string `toml:"groups"`
		Members     bool     `toml:"members"`
	} `toml:"credential"`
}

// LoadNodes reads an MDS's node credentials file
// (mds.node_credentials_file):
//
//	[[credential]]
//	name = "rack-a"
//	token_sha256 = "…"          # printf %s "$TOKEN" | sha256sum
//	nodes = ["rack-a-*"]        # node ids it may register; "*" any
//	groups = ["prod"]           # groups (server.group) it may act in; unset: all
//	members = true              # may read the member list
func LoadNodes(path string) (*Nodes, error) {
	var doc nodesFile
	bad, err := decodeFile(path, "node credentials file", &doc, "name, token_sha256, nodes, groups and members")
	if err != nil {
		return nil, err
	}
	if len(doc.Credential) == 0 {
		return nil, bad("no [[credential]] tables: no node could register")
	}
	n := &Nodes{Path: path, grants: map[Sum]*NodeGrant{}}
	for i, c := range doc.Credential {
		var label string
		label, c.Name = labelOf(i, c.Name)
		if c.TokenSHA256 == nil {
			return nil, bad("%s has no token_sha256", label)
		}
		if len(c.Nodes) == 0 && !c.Members {
			return nil, bad("%s grants nothing: give it nodes (the node ids it may register) or members = true", label)
		}
		for _, p := range c.Nodes {
			if p == "" || strings.ContainsAny(p, " \t\n") {
				return nil, bad("%s: node pattern %q is empty or holds a space", label, p)
			}
		}
		if c.Groups != nil && len(c.Groups) == 0 {
			return nil, bad("%s: groups = [] would allow no group; leave groups out for all of them", label)
		}
		for _, p := range c.Groups {
			if p == "" || strings.ContainsAny(p, " \t\n") {
				return nil, bad("%s: group pattern %q is empty or holds a space", label, p)
			}
		}
		if prev, dup := n.grants[*c.TokenSHA256]; dup {
			return nil, bad("%s has the same token_sha256 as %q: one token, one credential", label, prev.Name)
		}
		n.grants[*c.TokenSHA256] = &NodeGrant{Name: c.Name, nodes: c.Nodes, groups: c.Groups, Members: c.Members}
	}
	return n, nil
}
