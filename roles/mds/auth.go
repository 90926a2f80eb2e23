package mds

import (
	"fmt"

	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/wire"
)

// Node credentials on the control port.
//
// With mds.node_credentials_file, REGISTER, HEARTBEAT and DEREGISTER
// carry a token (MDSRequest.Token) whose credential must list the node id
// the request names, so a host can register only itself: not a rogue
// node that takes over key ranges, not a replacement of another node's
// id, and no removal of another node; a credential that lists groups
// acts only in them. MEMBERS needs a token whose
// credential has members = true when mds.members_need_token is set. The
// token is hashed per request; control requests are a handful a second.

// authorize checks req against the credentials in force; OK when the
// MDS has none or the credential covers the request.
func (s *controlServer) authorize(op wire.Op, req *wire.MDSRequest) (wire.Status, string) {
	if s.creds == nil || (op == wire.OpMDSMembers && !s.membersNeedToken) {
		return wire.StatusOK, ""
	}
	what := "registering, heartbeating or deregistering a node"
	if op == wire.OpMDSMembers {
		what = "the member list"
	}
	if req.Token == "" {
		s.unauthenticated.Add(1)
		return wire.StatusUnauthenticated, "this MDS requires a token for " + what + " (a node: server.mds_token / DFKV_SERVER_MDS_TOKEN; a client: client.token / DFKV_TOKEN)"
	}
	g := s.creds.Current().Lookup(creds.SumOf([]byte(req.Token)))
	if g == nil {
		s.unauthenticated.Add(1)
		s.log.Warn("MDS: request refused: token not accepted", "op", wire.MDSOpName(op), "group", req.Group)
		return wire.StatusUnauthenticated, "token not accepted by this MDS's node credentials file"
	}
	if !g.InGroup(req.Group) {
		s.forbidden.Add(1)
		s.log.Warn("MDS: request refused: the credential does not cover this group",
			"op", wire.MDSOpName(op), "group", req.Group, "credential", g.Name)
		return wire.StatusForbidden, fmt.Sprintf("credential %q may not act in group %q: its groups patterns do not match it", g.Name, req.Group)
	}
	if op == wire.OpMDSMembers {
		if !g.Members {
			s.forbidden.Add(1)
			return wire.StatusForbidden, fmt.Sprintf("credential %q may not read the member list (members = true in the MDS's node credentials file)", g.Name)
		}
		return wire.StatusOK, ""
	}
	id := req.ID
	if op == wire.OpMDSRegister && req.Member != nil {
		id = req.Member.ID
	}
	if !g.MayRegister(id) {
		s.forbidden.Add(1)
		s.log.Warn("MDS: request refused: the credential does not cover this node id",
			"op", wire.MDSOpName(op), "group", req.Group, "id", id, "credential", g.Name)
		return wire.StatusForbidden, fmt.Sprintf("credential %q may not %s node id %q: its nodes patterns do not match it", g.Name, opVerb(op), id)
	}
	return wire.StatusOK, ""
}

func opVerb(op wire.Op) string {
	switch op {
	case wire.OpMDSRegister:
		return "register"
	case wire.OpMDSHeartbeat:
		return "heartbeat for"
	}
	return "deregister"
}

// admission refuses a REGISTER that the group cannot take: one whose
// weight would bring the group's total past wire.MaxGroupWeight (every
// client would then refuse the member list and route over its old one, or,
// when starting, not at all), and one of an id that a member holds at
// another address: two nodes configured with one server.id would otherwise
// take turns replacing each other, and the ring would flap between them. A
// node that moved (a new pod IP) is refused until its old registration
// lapses (the heartbeat TTL); its registration loop retries meanwhile. A
// re-registration from the same address (a restart) replaces as before.
// The directory runs the check in one step with the write, so concurrent
// REGISTERs (on this MDS or, on etcd, on several) cannot pass it together.
func (s *controlServer) admission(group string, m wire.MemberInfo) Admission {
	return func(members []wire.MemberInfo) error {
		total := m.Weight
		for _, old := range members {
			if old.ID != m.ID {
				total += old.Weight
			}
		}
		if total > wire.MaxGroupWeight {
			s.log.Warn("MDS: REGISTER refused: the group's total weight would pass what clients can route over",
				"group", group, "id", m.ID, "weight", m.Weight, "total", total, "max", wire.MaxGroupWeight)
			return fmt.Errorf("registering %q at weight %d brings group %q to a total weight of %d, over the %d a client's ring takes: lower server.weight on the nodes (weights are relative): %w",
				m.ID, m.Weight, group, total, wire.MaxGroupWeight, wire.StatusInvalid)
		}
		for _, old := range members {
			if old.ID == m.ID && old.Addr != m.Addr {
				s.duplicateIDs.Add(1)
				s.log.Warn("MDS: REGISTER refused: the node id is held by a live member at another address",
					"group", group, "id", m.ID, "addr", m.Addr, "held_by", old.Addr)
				return fmt.Errorf("node id %q is registered by a live member at %s: two nodes share this id (give each its own server.id), or this node moved and its old registration lapses within the heartbeat TTL (%s): %w",
					m.ID, old.Addr, s.ttl, wire.StatusInvalid)
			}
		}
		return nil
	}
}
