package wire

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
)

// Ketama consistent hashing. Clients route a BlockKey to a cache node with
// Get(key.RouteHash()); a node routes the block to one of its disks with a
// second ring over the disks and Get(DiskHash(key)). Each member owns
// Weight*pointsPerWeight points on a 64-bit circle and a hash belongs to the
// member owning the first point at or after it, wrapping past the top. Adding
// or removing one member therefore moves only the keys of the arcs it gains
// or loses (about 1/N of them), and nothing moves between the others.
//
// Points of a member with ID id and n = Weight*pointsPerWeight points:
//
//	digest j = SHA-256(id || "-" || decimal(j)),  j = 0, 1, ...
//	points   = big-endian u64 of digest j bytes [0:8], [8:16], [16:24], [24:32]
//
// taking digests in order until n points are taken (classic ketama takes 4
// u32 points from each MD5 digest; SHA-256 gives 4 u64 points). Equal points
// of two members are ordered by member ID, so routing depends only on the
// set of members, never on the order they are listed in. Clients in other
// languages that route must reproduce exactly this.

// DefaultPointsPerWeight is the number of ring points per unit of weight
// used when NewRing is given 0: ketama's 160, which keeps the load of ten
// members within a few percent of even.
const DefaultPointsPerWeight = 160

// maxRingPoints bounds the points of one ring (48 MiB of points and owners),
// so a bad weight in a config cannot exhaust memory.
const maxRingPoints = 1 << 22

// MaxMemberWeight is the largest weight one node may have
// (server.weight), and MaxGroupWeight the largest sum of a group's
// weights that a client's ring takes at DefaultPointsPerWeight: the MDS
// refuses a registration past it, so no client is ever handed a member
// list it cannot route over.
const (
	MaxMemberWeight = 1000
	MaxGroupWeight  = maxRingPoints / DefaultPointsPerWeight
)

// Member is one node (or one disk) on a ring.
type Member struct {
	ID     string // stable identity; points are derived from it, so it decides placement
	Addr   string // where to reach it; not part of placement, may change freely
	Weight int    // relative share of keys; 0 means 1, negative is rejected
}

// Ring maps 64-bit hashes to members. It is immutable once built and safe
// for concurrent use; a membership change builds a new Ring. A nil *Ring has
// no members and Get returns -1, so a client may hold "no ring yet" as nil.
type Ring struct {
	members []Member
	points  []uint64 // sorted ascending
	owners  []int32  // owners[i] is the index in members of points[i]
}

// digestFunc returns the four points of digest j of a member; tests replace
// it with a function whose points can be checked by hand.
type digestFunc func(id string, j int) [4]uint64

// sha256Digest is the production digestFunc described in the package comment.
func sha256Digest(id string, j int) (p [4]uint64) {
	var buf [128]byte
	b := append(buf[:0], id...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(j), 10)
	sum := sha256.Sum256(b)
	for i := range p {
		p[i] = binary.BigEndian.Uint64(sum[8*i:])
	}
	return p
}

// NewRing builds a ring over members with pointsPerWeight points per unit of
// weight (0 selects DefaultPointsPerWeight). It rejects an empty member
// list, an empty or duplicate ID, and a negative weight; errors wrap
// StatusInvalid, except an empty list, which wraps StatusUnavailable (no
// node can serve). Get returns indices into members as given.
func NewRing(members []Member, pointsPerWeight int) (*Ring, error) {
	return newRing(members, pointsPerWeight, sha256Digest)
}

func newRing(members []Member, pointsPerWeight int, digest digestFunc) (*Ring, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("ring: no members: %w", StatusUnavailable)
	}
	if pointsPerWeight == 0 {
		pointsPerWeight = DefaultPointsPerWeight
	}
	if pointsPerWeight < 0 {
		return nil, fmt.Errorf("ring: points per weight %d is negative: %w", pointsPerWeight, StatusInvalid)
	}
	if len(members) > 1<<31-1 {
		return nil, fmt.Errorf("ring: %d members: %w", len(members), StatusInvalid)
	}
	r := &Ring{members: slices.Clone(members)}
	seen := make(map[string]int, len(members))
	total := 0
	for i := range r.members {
		m := &r.members[i]
		if m.ID == "" {
			return nil, fmt.Errorf("ring: member %d (addr %q) has an empty ID: %w", i, m.Addr, StatusInvalid)
		}
		if j, dup := seen[m.ID]; dup {
			return nil, fmt.Errorf("ring: members %d and %d share ID %q: %w", j, i, m.ID, StatusInvalid)
		}
		seen[m.ID] = i
		if m.Weight < 0 {
			return nil, fmt.Errorf("ring: member %q has negative weight %d: %w", m.ID, m.Weight, StatusInvalid)
		}
		if m.Weight == 0 {
			m.Weight = 1
		}
		if m.Weight > maxRingPoints/pointsPerWeight || total+m.Weight*pointsPerWeight > maxRingPoints {
			return nil, fmt.Errorf("ring: member %q weight %d at %d points per weight takes the ring over %d points: %w",
				m.ID, m.Weight, pointsPerWeight, maxRingPoints, StatusInvalid)
		}
		total += m.Weight * pointsPerWeight
	}

	type point struct {
		p     uint64
		owner int32
	}
	pts := make([]point, 0, total)
	for i, m := range r.members {
		n := m.Weight * pointsPerWeight
		for j := 0; n > 0; j++ {
			for _, p := range digest(m.ID, j) {
				if n == 0 {
					break
				}
				pts = append(pts, point{p, int32(i)})
				n--
			}
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.p, b.p); c != 0 {
			return c
		}
		return cmp.Compare(r.members[a.owner].ID, r.members[b.owner].ID)
	})
	r.points = make([]uint64, len(pts))
	r.owners = make([]int32, len(pts))
	for i, p := range pts {
		r.points[i], r.owners[i] = p.p, p.owner
	}
	return r, nil
}

// Get returns the index of the member that owns hash: the owner of the first
// point >= hash, or of the first point when hash is past the last one. It
// does not allocate. A nil ring returns -1.
func (r *Ring) Get(hash uint64) int {
	if r == nil || len(r.points) == 0 {
		return -1
	}
	i, _ := slices.BinarySearch(r.points, hash)
	if i == len(r.points) {
		i = 0
	}
	return int(r.owners[i])
}

// Members returns a copy of the members in the order given to NewRing, with
// a zero Weight reported as the 1 it was treated as.
func (r *Ring) Members() []Member {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members)
}

// Member returns member i, as indexed by Get.
func (r *Ring) Member(i int) Member { return r.members[i] }

// Len returns the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// DiskHash is the point of k on a node's disk ring: 64-bit FNV-1a over the
// 48-byte Filename of k. Node routing uses RouteHash, taken from the object
// id; hashing the filename instead keeps disk placement independent of node
// placement, so the blocks that land on one node still spread over all of
// its disks. It does not allocate.
func DiskHash(k BlockKey) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	var buf [FilenameLen]byte
	name := k.AppendFilename(buf[:0])
	h := uint64(offset64)
	for _, c := range name {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}
