package mds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/testcerts"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

const (
	rackAToken   = "rack-a-node-token-0123456789"
	rackBToken   = "rack-b-node-token-0123456789"
	engineToken  = "engine-members-token-012345"
	unknownToken = "nobody-issued-this-token-01"
)

func hexSum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// credMDS runs an MDS with node credentials: rack-a may register node-1
// and node-2 ("node-[12]" as two patterns), rack-b node-3, and the engine
// token may read the member list.
func credMDS(t *testing.T, membersNeedToken bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodes.toml")
	body := fmt.Sprintf(`
[[credential]]
name = "rack-a"
token_sha256 = %q
nodes = ["node-1", "node-2"]

[[credential]]
name = "rack-b"
token_sha256 = %q
nodes = ["node-3*"]
groups = ["default", "staging-*"]

[[credential]]
name = "engines"
token_sha256 = %q
members = true
`, hexSum(rackAToken), hexSum(rackBToken), hexSum(engineToken))
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}, "node-credentials-file": {path}}
	if membersNeedToken {
		flags["members-need-token"] = []string{"1"}
	}
	ctrl, _, _ := runMDS(t, flags)
	return ctrl
}

func status(err error) wire.Status { return wire.StatusOf(err) }

// A credential that lists groups acts only in them: a host trusted in
// one group's ring cannot register itself into another's (groups that
// never mix, one per tenant or cluster), nor heartbeat or leave there.
func TestMDSNodeCredentialsBoundToGroups(t *testing.T) {
	ctrl := credMDS(t, false)
	ctx := context.Background()
	in := func(group string) *client.MDSClient {
		c := mdsClient(t, group, ctrl)
		c.SetToken(rackBToken)
		return c
	}
	for _, group := range []string{"default", "staging-eu"} {
		if _, err := in(group).Register(ctx, member(3)); err != nil {
			t.Fatalf("rack-b registering its node into %s: %v", group, err)
		}
	}
	other := in("tenant-b")
	if _, err := other.Register(ctx, member(3)); status(err) != wire.StatusForbidden {
		t.Fatalf("rack-b registering into a group it does not list: %v, want FORBIDDEN", err)
	}
	if _, err := other.Heartbeat(ctx, "node-3"); status(err) != wire.StatusForbidden {
		t.Fatalf("rack-b heartbeating in a group it does not list: %v, want FORBIDDEN", err)
	}
	// rack-a lists no groups: all of them, as before groups existed.
	a := mdsClient(t, "tenant-b", ctrl)
	a.SetToken(rackAToken)
	if _, err := a.Register(ctx, member(1)); err != nil {
		t.Fatalf("a credential without groups registering into any group: %v", err)
	}
}

// TestMDSNodeCredentials: a rogue REGISTER, a REGISTER reusing a live
// node's id, and a DEREGISTER of another node are all refused; each node
// manages only the ids its credential lists.
func TestMDSNodeCredentials(t *testing.T) {
	ctrl := credMDS(t, false)
	ctx := context.Background()
	as := func(token string) interface {
		Register(context.Context, wire.MemberInfo) (wire.MDSReply, error)
		Heartbeat(context.Context, string) (wire.MDSReply, error)
		Deregister(context.Context, string) error
		Members(context.Context, uint64) (uint64, []wire.MemberInfo, bool, error)
	} {
		c := mdsClient(t, "default", ctrl)
		c.SetToken(token)
		return c
	}
	rackA, rackB, rogue, none := as(rackAToken), as(rackBToken), as(unknownToken), as("")
	if _, err := rackA.Register(ctx, member(1)); err != nil {
		t.Fatalf("rack-a registering its own node: %v", err)
	}
	if _, err := rackB.Register(ctx, member(3)); err != nil {
		t.Fatalf("rack-b registering its own node: %v", err)
	}
	rogueNode := member(9)
	rogueNode.Weight = 1000
	for name, err := range map[string]error{
		"no token":       func() error { _, err := none.Register(ctx, rogueNode); return err }(),
		"unknown token":  func() error { _, err := rogue.Register(ctx, rogueNode); return err }(),
		"heartbeat, no":  func() error { _, err := none.Heartbeat(ctx, "node-1"); return err }(),
		"deregister, no": none.Deregister(ctx, "node-1"),
	} {
		if status(err) != wire.StatusUnauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}
	hijack := member(1)
	hijack.Addr = "10.66.66.66:7600"
	for name, err := range map[string]error{
		"register another rack's id":        func() error { _, err := rackB.Register(ctx, hijack); return err }(),
		"register an id nobody holds":       func() error { _, err := rackB.Register(ctx, rogueNode); return err }(),
		"heartbeat for another rack's node": func() error { _, err := rackB.Heartbeat(ctx, "node-1"); return err }(),
		"deregister another rack's node":    rackB.Deregister(ctx, "node-1"),
	} {
		if status(err) != wire.StatusForbidden {
			t.Errorf("%s: %v, want FORBIDDEN", name, err)
		}
	}
	_, ms, _, err := none.Members(ctx, 0)
	if err != nil {
		t.Fatalf("MEMBERS needs no token unless asked: %v", err)
	}
	if len(ms) != 2 || ms[0].ID != "node-1" || ms[0].Addr != member(1).Addr || ms[1].ID != "node-3" {
		t.Fatalf("members after the attempts: %+v", ms)
	}
	if _, err := rackA.Heartbeat(ctx, "node-1"); err != nil {
		t.Fatalf("rack-a heartbeat: %v", err)
	}
	if err := rackA.Deregister(ctx, "node-1"); err != nil {
		t.Fatalf("rack-a deregistering its node: %v", err)
	}
}

// TestMDSMembersNeedToken: with members_need_token, MEMBERS is refused
// without a token, and with a node credential that lacks members = true.
func TestMDSMembersNeedToken(t *testing.T) {
	ctrl := credMDS(t, true)
	ctx := context.Background()
	c := mdsClient(t, "default", ctrl)
	if _, _, _, err := c.Members(ctx, 0); status(err) != wire.StatusUnauthenticated {
		t.Fatalf("MEMBERS without a token: %v", err)
	}
	c.SetToken(rackAToken)
	if _, _, _, err := c.Members(ctx, 0); status(err) != wire.StatusForbidden {
		t.Fatalf("MEMBERS with a node credential: %v", err)
	}
	c.SetToken(engineToken)
	if _, _, _, err := c.Members(ctx, 0); err != nil {
		t.Fatalf("MEMBERS with a members credential: %v", err)
	}
	if !strings.Contains(fmt.Sprint(func() error { c.SetToken(""); _, _, _, err := c.Members(ctx, 0); return err }()), "client.token") {
		t.Fatal("the refusal does not say which setting gives the token")
	}
}

// TestMDSDuplicateID: a second node with a live node's id at another
// address is refused, with or without credentials; the same node
// re-registering from its own address replaces itself.
func TestMDSDuplicateID(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}})
	ctx := context.Background()
	c := mdsClient(t, "default", ctrl)
	if _, err := c.Register(ctx, member(1)); err != nil {
		t.Fatal(err)
	}
	again := member(1)
	again.Weight = 5
	if _, err := c.Register(ctx, again); err != nil {
		t.Fatalf("a restart at the same address: %v", err)
	}
	twin := member(1)
	twin.Addr = "127.0.0.1:9999"
	_, err := c.Register(ctx, twin)
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status != wire.StatusInvalid || !strings.Contains(se.Message, "127.0.0.1:7601") {
		t.Fatalf("a second node with a live id: %v", err)
	}
	_, ms, _, _ := c.Members(ctx, 0)
	if len(ms) != 1 || ms[0].Addr != member(1).Addr || ms[0].Weight != 5 {
		t.Fatalf("members: %+v", ms)
	}
	if err := c.Deregister(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, twin); err != nil {
		t.Fatalf("the id once free: %v", err)
	}
}

// TestMDSTLS: the control port over TLS serves a TLS client, and tells a
// plaintext one in plaintext that it needs TLS.
func TestMDSTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "mds")
	p := ca.Server(t, "mds")
	ctrl, _, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}, "tls-cert": {p.Cert}, "tls-key": {p.Key}})
	ctx := context.Background()
	cfg, err := tlsconf.Client(tlsconf.ClientFiles{CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewMDSClient([]string{ctrl}, "default", client.NewTLSDialer(nil, cfg), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, member(1)); err != nil {
		t.Fatalf("REGISTER over TLS: %v", err)
	}
	plain := mdsClient(t, "default", ctrl)
	_, _, _, err = plain.Members(ctx, 0)
	if status(err) != wire.StatusEpochMismatch || !strings.Contains(err.Error(), "requires TLS") {
		t.Fatalf("a plaintext client of a TLS MDS: %v", err)
	}
}

// TestMDSBoundsTheGroupWeight: the MDS refuses the registration that
// would make the member list too heavy for a client's ring (27 nodes at
// the largest weight), so a client starting afterwards still opens and
// routes over every member the MDS lists.
func TestMDSBoundsTheGroupWeight(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}})
	ctx := context.Background()
	c := mdsClient(t, "default", ctrl)
	registered := 0
	var refused error
	for i := range 27 {
		m := member(i)
		m.Weight = wire.MaxMemberWeight
		if _, err := c.Register(ctx, m); err != nil {
			refused = err
			break
		}
		registered++
	}
	if want := wire.MaxGroupWeight / wire.MaxMemberWeight; registered != want || status(refused) != wire.StatusInvalid ||
		!strings.Contains(refused.Error(), "server.weight") {
		t.Fatalf("registered %d at weight %d (want %d), then: %v", registered, wire.MaxMemberWeight, want, refused)
	}
	// Re-registering a member at its own weight does not count it twice.
	again := member(0)
	again.Weight = wire.MaxMemberWeight
	if _, err := c.Register(ctx, again); err != nil {
		t.Fatalf("re-registering a member: %v", err)
	}
	cl, err := client.Open(client.Options{Namespace: []byte("ns"), MDS: []string{ctrl}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("a client starting on the full group: %v", err)
	}
	defer cl.Close()
	if len(cl.Members()) != registered {
		t.Fatalf("the client routes over %d members, want %d", len(cl.Members()), registered)
	}
}

// TestConcurrentRegistersCannotPassTheGroupChecks: REGISTERs that race
// each other, through one MDS on bbolt or through two MDS on one etcd,
// still admit at most what the group can take: of eight new members each
// of which fits the group's remaining weight alone, exactly one joins; of
// two nodes claiming one id from different addresses, exactly one holds it.
func TestConcurrentRegistersCannotPassTheGroupChecks(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		ctrl, _, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}})
		checkRacingRegisters(t, ctrl, ctrl)
	})
	t.Run("etcd", func(t *testing.T) {
		etcd := testetcd.Start(t)
		flags := map[string][]string{"etcd": {etcd.Endpoint}}
		a, _, _ := runMDS(t, flags)
		b, _, _ := runMDS(t, flags)
		checkRacingRegisters(t, a, b)
	})
}

func checkRacingRegisters(t *testing.T, ctrlA, ctrlB string) {
	ctx := context.Background()
	full := wire.MaxGroupWeight / wire.MaxMemberWeight
	setup := mdsClient(t, "default", ctrlA)
	for i := range full {
		m := member(i)
		m.Weight = wire.MaxMemberWeight
		if _, err := setup.Register(ctx, m); err != nil {
			t.Fatalf("filling the group, member %d: %v", i, err)
		}
	}
	room := wire.MaxGroupWeight - full*wire.MaxMemberWeight
	racer := room/2 + 1 // one fits, two do not
	const racers = 8
	// One client per racer, half through each MDS, connected before the
	// start so the REGISTERs arrive together.
	clients := make([]*client.MDSClient, racers)
	for i := range clients {
		clients[i] = mdsClient(t, "default", []string{ctrlA, ctrlB}[i%2])
		if _, _, _, err := clients[i].Members(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	race := func(members func(i int) wire.MemberInfo) (joined int, refusals []error) {
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				_, errs[i] = clients[i].Register(ctx, members(i))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err == nil {
				joined++
			} else if status(err) != wire.StatusInvalid {
				t.Fatalf("a racing REGISTER failed otherwise than refused: %v", err)
			} else {
				refusals = append(refusals, err)
			}
		}
		return joined, refusals
	}
	joined, refusals := race(func(i int) wire.MemberInfo {
		m := member(100 + i)
		m.Weight = racer
		return m
	})
	if joined != 1 || !strings.Contains(refusals[0].Error(), "server.weight") {
		t.Fatalf("%d of %d racers at weight %d joined a group with room for %d (want 1); refusals: %v", joined, racers, racer, room, refusals)
	}
	_, ms, _, err := setup.Members(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range ms {
		total += m.Weight
	}
	if total > wire.MaxGroupWeight {
		t.Fatalf("the group holds a total weight of %d, over %d", total, wire.MaxGroupWeight)
	}

	// Now the same id from eight addresses, at a weight the group's
	// remaining room takes: one registration holds it.
	joined, refusals = race(func(i int) wire.MemberInfo {
		m := member(200)
		m.Addr = fmt.Sprintf("127.0.0.1:%d", 7900+i)
		m.Weight = 1
		return m
	})
	if joined != 1 || !strings.Contains(refusals[0].Error(), "two nodes share this id") {
		t.Fatalf("%d of %d REGISTERs of one id from different addresses succeeded (want 1); refusals: %v", joined, racers, refusals)
	}
}
