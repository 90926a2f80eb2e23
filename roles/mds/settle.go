package mds

import (
	"encoding/json"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// Settling after a directory outage.
//
// A backend that was away longer than the heartbeat TTL (etcd stopped,
// partitioned or paused) comes back with every member's lease run out at
// once: its members vanish together, and the nodes, whose heartbeats now
// find no lease, register again one after another over the next second or
// two. A client polling in between would route over a list of one node
// of three, and send its PUTs to the wrong node. So for one heartbeat TTL
// after the MDS sees its backend return, it answers MEMBERS with the list
// it served before the outage for as long as the backend's list is
// shorter than that one; the window ends early once the backend lists as
// many members again, and a node that really died during the outage
// leaves the lists when the window ends.
//
// The MDS sees the return when a probe that failed succeeds, or when one
// succeeds only after a quarter of the TTL (a pause shorter than the
// probe's timeout can still outlast the leases). A client holding a list
// at least as new as the one from before keeps its own. An MDS started
// during the outage has no list from before it, and cannot settle: its
// clients see the nodes come back one by one.

// backendReturned starts the settle window for an outage that began at
// since: the lists served so far (the last ones before the outage) stand
// while the backend's are shorter. Only lists the backend confirmed
// within a heartbeat TTL of the outage's start qualify: an older one (an
// MDS clients seldom ask) may name nodes that left since, and handing it
// out would bring them back.
func (s *controlServer) backendReturned(since time.Time) {
	s.cacheMu.Lock()
	from := make(map[string]cachedReply, len(s.replies))
	for g, r := range s.replies {
		if r.status == wire.StatusOK && memberCount(r) > 0 && !r.confirmed.Before(since.Add(-s.ttl)) {
			from[g] = r
		}
	}
	s.cacheMu.Unlock()
	if len(from) == 0 {
		return
	}
	s.settleMu.Lock()
	s.settleFrom, s.settleUntil = from, time.Now().Add(s.ttl)
	s.settleMu.Unlock()
	s.log.Info("MDS: backend back; serving the member lists of before the outage while nodes whose leases ran out register again",
		"for_at_most", s.ttl.String())
}

// settlingFrom returns the group's list of before the outage while the
// settle window is open for it.
func (s *controlServer) settlingFrom(group string) (cachedReply, bool) {
	s.settleMu.Lock()
	defer s.settleMu.Unlock()
	r, ok := s.settleFrom[group]
	if !ok {
		return cachedReply{}, false
	}
	if time.Now().After(s.settleUntil) {
		delete(s.settleFrom, group)
		return cachedReply{}, false
	}
	return r, true
}

// settled ends the window for group: its backend lists as many members
// as before.
func (s *controlServer) settled(group string) {
	s.settleMu.Lock()
	_, was := s.settleFrom[group]
	delete(s.settleFrom, group)
	s.settleMu.Unlock()
	if was {
		s.log.Info("MDS: member list settled after the backend outage", "group", group)
	}
}

// memberCount is the number of members in a MEMBERS reply body.
func memberCount(r cachedReply) int {
	var rep wire.MDSReply
	if json.Unmarshal(r.body, &rep) != nil {
		return 0
	}
	return len(rep.Members)
}
