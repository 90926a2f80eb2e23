package wire

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// handDigest gives member "N" the points N*100 + 4j + {0,1,2,3} for digest
// j, so ring positions can be worked out by hand (groupcache's Atoi hash).
func handDigest(id string, j int) [4]uint64 {
	n, err := strconv.Atoi(id)
	if err != nil {
		panic(err)
	}
	b := uint64(n*100 + 4*j)
	return [4]uint64{b, b + 1, b + 2, b + 3}
}

func members(ids ...string) []Member {
	var ms []Member
	for _, id := range ids {
		ms = append(ms, Member{ID: id, Addr: "addr-" + id})
	}
	return ms
}

func ownerID(r *Ring, h uint64) string { return r.Member(r.Get(h)).ID }

func TestRingHandPositions(t *testing.T) {
	r, err := newRing(members("2", "1", "3"), 4, handDigest)
	if err != nil {
		t.Fatal(err)
	}
	wantPoints := []uint64{100, 101, 102, 103, 200, 201, 202, 203, 300, 301, 302, 303}
	if !slices.Equal(r.points, wantPoints) {
		t.Fatalf("points = %v, want %v", r.points, wantPoints)
	}
	cases := map[uint64]string{
		0: "1", 99: "1", 100: "1", 103: "1", 104: "2", 203: "2", 204: "3", 303: "3",
		304: "1", ^uint64(0): "1", // past the last point wraps to the first
	}
	for h, want := range cases {
		if got := ownerID(r, h); got != want {
			t.Errorf("Get(%d) = %s, want %s", h, got, want)
		}
	}
	if got := r.Get(0); got != 1 {
		t.Errorf("Get returns an index into members as given: got %d, want 1", got)
	}

	// Adding member 4 takes exactly the wrapped arc (303, 403].
	r2, err := newRing(members("2", "1", "3", "4"), 4, handDigest)
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[uint64]string{304: "4", 403: "4", 404: "1", 0: "1", 250: "3"} {
		if got := ownerID(r2, h); got != want {
			t.Errorf("with member 4: Get(%d) = %s, want %s", h, got, want)
		}
	}

	// Weight and points per weight: 2*3 = 6 points for "2" from two digests,
	// the second one cut short.
	ms := members("1", "2")
	ms[1].Weight = 2
	r3, err := newRing(ms, 3, handDigest)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{100, 101, 102, 200, 201, 202, 203, 204, 205}; !slices.Equal(r3.points, want) {
		t.Fatalf("weighted points = %v, want %v", r3.points, want)
	}
}

// TestRingTieBreak: equal points are ordered by member ID, whatever order
// the members are listed in.
func TestRingTieBreak(t *testing.T) {
	for _, order := range [][]string{{"1", "01"}, {"01", "1"}} {
		r, err := newRing(members(order...), 4, handDigest) // both Atoi to 1
		if err != nil {
			t.Fatal(err)
		}
		if got := ownerID(r, 100); got != "01" {
			t.Errorf("order %v: tie at 100 owned by %s, want 01", order, got)
		}
	}
}

func randomHashes(n int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	return hs
}

func nodeMembers(n int) []Member {
	var ms []Member
	for i := range n {
		ms = append(ms, Member{ID: fmt.Sprintf("node-%d", i), Addr: fmt.Sprintf("10.0.0.%d:7600", i)})
	}
	return ms
}

func TestRingOrderIndependence(t *testing.T) {
	ms := nodeMembers(7)
	ms[3].Weight = 3
	a, err := NewRing(ms, 0)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := slices.Clone(ms)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.Reverse(shuffled[:3])
	b, err := NewRing(shuffled, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range randomHashes(10000, 1) {
		if x, y := ownerID(a, h), ownerID(b, h); x != y {
			t.Fatalf("hash %016x: %s in one order, %s in another", h, x, y)
		}
	}
}

func TestRingAddMemberMovesOnlyToIt(t *testing.T) {
	before, err := NewRing(nodeMembers(4), 0)
	if err != nil {
		t.Fatal(err)
	}
	after, err := NewRing(nodeMembers(5), 0)
	if err != nil {
		t.Fatal(err)
	}
	hashes := randomHashes(20000, 2)
	moved := 0
	for _, h := range hashes {
		x, y := ownerID(before, h), ownerID(after, h)
		if x == y {
			continue
		}
		moved++
		if y != "node-4" {
			t.Fatalf("hash %016x moved from %s to %s, not to the new member", h, x, y)
		}
	}
	frac := float64(moved) / float64(len(hashes))
	t.Logf("adding a 5th member moved %.1f%% of keys (ideal 20%%)", 100*frac)
	if frac < 0.10 || frac > 0.30 {
		t.Fatalf("adding a 5th member moved %.1f%% of keys, want 10-30%%", 100*frac)
	}

	// Removing it again moves only its own keys: every key a surviving
	// member owns after the add, it owned before.
	for _, h := range hashes {
		if ownerID(after, h) != "node-4" && ownerID(after, h) != ownerID(before, h) {
			t.Fatalf("hash %016x owned by a surviving member changed owner", h)
		}
	}
}

func TestRingWeights(t *testing.T) {
	ms := nodeMembers(3)
	ms[0].Weight = 2
	r, err := NewRing(ms, 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 3)
	for _, h := range randomHashes(60000, 3) {
		counts[r.Get(h)]++
	}
	for _, other := range counts[1:] {
		ratio := float64(counts[0]) / float64(other)
		if ratio < 1.5 || ratio > 2.6 {
			t.Fatalf("weight 2 vs 1: counts %v, ratio %.2f, want about 2", counts, ratio)
		}
	}
	t.Logf("weights 2:1:1 -> counts %v", counts)
}

func TestRingBalance(t *testing.T) {
	r, err := NewRing(nodeMembers(10), 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 10)
	const n = 100000
	for _, h := range randomHashes(n, 4) {
		counts[r.Get(h)]++
	}
	for i, c := range counts {
		if share := float64(c) / (n / 10); share < 0.75 || share > 1.25 {
			t.Fatalf("member %d got %.2fx its fair share (counts %v)", i, share, counts)
		}
	}
}

func TestRingErrors(t *testing.T) {
	dup := nodeMembers(3)
	dup[2].ID = "node-0"
	noID := nodeMembers(2)
	noID[1].ID = ""
	neg := nodeMembers(2)
	neg[0].Weight = -1
	heavy := nodeMembers(2)
	heavy[1].Weight = 1 << 40
	cases := []struct {
		name   string
		ms     []Member
		ppw    int
		status Status
		want   string
	}{
		{"no members", nil, 0, StatusUnavailable, "ring: no members"},
		{"empty ID", noID, 0, StatusInvalid, `member 1 (addr "10.0.0.1:7600") has an empty ID`},
		{"duplicate ID", dup, 0, StatusInvalid, `members 0 and 2 share ID "node-0"`},
		{"negative weight", neg, 0, StatusInvalid, `member "node-0" has negative weight -1`},
		{"negative points", nodeMembers(1), -1, StatusInvalid, "points per weight -1 is negative"},
		{"too many points", heavy, 0, StatusInvalid, `member "node-1" weight 1099511627776`},
	}
	for _, c := range cases {
		r, err := NewRing(c.ms, c.ppw)
		if r != nil || !errors.Is(err, c.status) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewRing = %v, %v; want %v error containing %q", c.name, r, err, c.status, c.want)
		}
	}
}

func TestRingNilAndAccessors(t *testing.T) {
	var r *Ring
	if r.Get(42) != -1 || r.Len() != 0 || r.Members() != nil {
		t.Fatalf("nil ring: Get %d, Len %d, Members %v", r.Get(42), r.Len(), r.Members())
	}
	ms := nodeMembers(3)
	ms[1].Weight = 0
	ring, err := NewRing(ms, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ring.Len() != 3 {
		t.Fatalf("Len = %d", ring.Len())
	}
	got := ring.Members()
	if got[1].Weight != 1 || got[2].Addr != "10.0.0.2:7600" {
		t.Fatalf("Members = %+v, want weight 0 reported as 1 and addrs kept", got)
	}
	got[0].ID = "changed"
	ms[2].ID = "changed-too"
	if ring.Member(0).ID != "node-0" || ring.Member(2).ID != "node-2" {
		t.Fatalf("ring shares memory with its input or output: %+v", ring.Members())
	}
	// Weight 0 routes exactly as weight 1; Addr plays no part.
	ms = nodeMembers(3)
	ms[1].Weight = 1
	ms[0].Addr = "elsewhere:1"
	same, _ := NewRing(ms, 0)
	for _, h := range randomHashes(2000, 5) {
		if ring.Get(h) != same.Get(h) {
			t.Fatalf("weight 0 or a changed addr moved hash %016x", h)
		}
	}
}

func TestRingGetAllocs(t *testing.T) {
	r, err := NewRing(nodeMembers(16), 0)
	if err != nil {
		t.Fatal(err)
	}
	var h uint64
	if n := testing.AllocsPerRun(1000, func() { h += 0x9e3779b97f4a7c15; r.Get(h) }); n != 0 {
		t.Fatalf("Get: %v allocs/op, want 0", n)
	}
}

func TestRingDiskHash(t *testing.T) {
	k := BlockKey{Tenant: 0x0123456789abcdef, ID: [16]byte{0xde, 0xad, 0xbe, 0xef, 15: 0x01}}
	f := fnv.New64a()
	f.Write([]byte(k.Filename()))
	if got, want := DiskHash(k), f.Sum64(); got != want {
		t.Fatalf("DiskHash = %016x, want FNV-1a of %q = %016x", got, k.Filename(), want)
	}
	if n := testing.AllocsPerRun(1000, func() { k.ID[3]++; DiskHash(k) }); n != 0 {
		t.Fatalf("DiskHash: %v allocs/op, want 0", n)
	}
}

// TestRingDiskIndependentOfNode routes keys to 3 nodes by RouteHash, then the
// keys of one node to 4 disks by DiskHash: the disks must still share them
// evenly, which they would not if the two hashes were correlated.
func TestRingDiskIndependentOfNode(t *testing.T) {
	nodes, _ := NewRing(nodeMembers(3), 0)
	var dms []Member
	for i := range 4 {
		dms = append(dms, Member{ID: fmt.Sprintf("disk%d", i), Addr: fmt.Sprintf("/data/nvme%d", i)})
	}
	disks, err := NewRing(dms, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := NewKeyMapper([]byte("ns"))
	counts := make([]int, 4)
	total := 0
	for i := range 60000 {
		k, _ := m.BlockKey([]byte(strconv.Itoa(i)))
		if nodes.Get(k.RouteHash()) != 0 {
			continue
		}
		counts[disks.Get(DiskHash(k))]++
		total++
	}
	for i, c := range counts {
		if share := float64(c) / (float64(total) / 4); share < 0.75 || share > 1.25 {
			t.Fatalf("disk %d got %.2fx its share of one node's keys (counts %v)", i, share, counts)
		}
	}
	t.Logf("one node's %d keys over 4 disks: %v", total, counts)
}

func BenchmarkRingGet(b *testing.B) {
	for _, n := range []int{3, 16, 128} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r, err := NewRing(nodeMembers(n), 0)
			if err != nil {
				b.Fatal(err)
			}
			hs := randomHashes(1024, 6)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Get(hs[i&1023])
				i++
			}
		})
	}
}

func BenchmarkRingNew(b *testing.B) {
	ms := nodeMembers(16)
	b.ReportAllocs()
	for b.Loop() {
		NewRing(ms, 0)
	}
}

func BenchmarkRingDiskHash(b *testing.B) {
	k := BlockKey{Tenant: 1, ID: [16]byte{1, 2, 3}}
	b.ReportAllocs()
	for b.Loop() {
		k.ID[0]++
		DiskHash(k)
	}
}
