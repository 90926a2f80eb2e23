package mds

import (
	"context"
	"errors"
	"fmt"

	"github.com/dfkv/dfkv/wire"
)

// Directory is the membership store of one or more groups. Two backends
// implement it: etcd (production: member keys on leases, several MDS
// processes in step through watches) and bbolt (one MDS, nothing else to
// install). Every change of a group's member set moves its epoch forward.
type Directory interface {
	// Register adds or replaces a member and returns the group's epoch.
	// admit, when not nil, sees the group's members as they stand and
	// may refuse with an error, which Register returns; the check and the
	// write are one step, so two racing REGISTERs cannot both pass a
	// check only one of them may (a total weight cap, a node id).
	Register(ctx context.Context, group string, m wire.MemberInfo, admit Admission) (uint64, error)
	// Heartbeat renews a member; ErrUnknownMember means it must register
	// again (it expired, or the directory was reset).
	Heartbeat(ctx context.Context, group, id string) (uint64, error)
	// Deregister removes a member (a node stopping gracefully).
	Deregister(ctx context.Context, group, id string) (uint64, error)
	// Members returns the group's epoch and members sorted by ID.
	Members(ctx context.Context, group string) (uint64, []wire.MemberInfo, error)
	// Epoch returns the group's epoch cheaply (0 if unknown), so the MDS
	// can answer an unchanged MEMBERS from its encoded-reply cache.
	Epoch(ctx context.Context, group string) (uint64, error)
	// Probe checks that the backend is reachable (readiness).
	Probe(ctx context.Context) error
	// Close stops background work and releases the backend.
	Close() error
}

// Admission decides whether a member may join its group given the
// members the group holds now; an error refuses it.
type Admission func(members []wire.MemberInfo) error

// ErrUnknownMember is returned by Heartbeat for a member the directory
// does not hold.
var ErrUnknownMember = fmt.Errorf("member not registered (expired or directory reset); register again: %w", wire.StatusNotFound)

// ErrBackend marks a failure of the directory's backend (etcd unreachable,
// bbolt I/O): the request may succeed later.
var ErrBackend = errors.New("directory backend unavailable")

func backendErr(op string, err error) error {
	return fmt.Errorf("%s: %w: %v: %w", op, ErrBackend, err, wire.StatusUnavailable)
}
