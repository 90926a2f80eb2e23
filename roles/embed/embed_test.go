package embed_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/embed"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

func open(t *testing.T, text string) *embed.Store {
	t.Helper()
	cfg, err := embed.Config(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := embed.Open(cfg, client.Options{Namespace: []byte("embedded-test"), Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The embedded store has the client API and the node's semantics: the
// range contract, batches, prefix counts, REMOVE, bad input refused.
func TestRAMOnlyStore(t *testing.T) {
	s := open(t, "[server]\nram_tier_bytes = \"64MiB\"\n")
	ctx := context.Background()
	v := bytes.Repeat([]byte("kv-cache"), 1<<17) // 1 MiB
	if err := s.Put(ctx, []byte("k\x001"), v); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2<<20)
	n, stored, err := s.Get(ctx, []byte("k\x001"), buf)
	if err != nil || stored != uint64(len(v)) || !bytes.Equal(buf[:n], v) {
		t.Fatalf("GET: %v (stored %d)", err, stored)
	}
	got, stored, err := s.GetRange(ctx, []byte("k\x001"), 100, 10, buf)
	if err != nil || stored != uint64(len(v)) || !bytes.Equal(buf[:got], v[100:110]) {
		t.Fatalf("GET range: %v", err)
	}
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	for i, err := range s.PutBatch(ctx, keys[:2], [][]byte{v[:10], v[:20]}) {
		if err != nil {
			t.Fatalf("batch item %d: %v", i, err)
		}
	}
	if hits, err := s.ExistPrefix(ctx, keys); err != nil || hits != 2 {
		t.Fatalf("prefix count = %d, %v; want 2", hits, err)
	}
	if err := s.Remove(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, []byte("a"), buf); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET after REMOVE: %v", err)
	}
	if err := s.Put(ctx, []byte("empty"), nil); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("zero-byte PUT: %v, want INVALID", err)
	}
	if err := s.Put(ctx, nil, v[:1]); err == nil {
		t.Fatal("PUT of an empty key accepted")
	}
}

// Values outlive the store on its disk: closed and opened again, a
// store with a disk serves what the first one stored.
func TestDiskSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "disk")
	text := fmt.Sprintf("[server]\ndisks = [%q]\ndisk_capacity_bytes = \"256MiB\"\nram_tier_bytes = \"64MiB\"\n", dir)
	cfg, err := embed.Config(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := embed.Open(cfg, client.Options{Namespace: []byte("embedded-test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 50 {
		if err := s.Put(ctx, []byte(fmt.Sprint(i)), bytes.Repeat([]byte{byte(i)}, 5000+i)); err != nil {
			t.Fatal(err)
		}
	}
	// A second store on the same disk, while the first holds it, is
	// refused with the holder named.
	_, err = embed.Open(cfg, client.Options{Namespace: []byte("embedded-test")}, nil)
	if err == nil || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("second store on a held disk: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, text)
	buf := make([]byte, 8192)
	for i := range 50 {
		n, _, err := s.Get(ctx, []byte(fmt.Sprint(i)), buf)
		if err != nil || !bytes.Equal(buf[:n], bytes.Repeat([]byte{byte(i)}, 5000+i)) {
			t.Fatalf("GET %d after reopening: %v", i, err)
		}
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for text, want := range map[string]string{
		"[server]\nram_tier = 0\n":                       "it would keep nothing",
		"[server]\nram_write_mode = \"writearound\"\n":   "writearound",
		"[server]\nno_such_setting = 1\n":                "no_such_setting",
		"[server\n":                                      "TOML",
		"[server]\ncredentials_file = \"/etc/c.toml\"\n": "only this process reaches it",
	} {
		_, err := embed.Config(text, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Config(%q) = %v, want an error saying %q", text, err, want)
		}
	}
	if _, err := embed.Open(nil, client.Options{Members: []string{"127.0.0.1:7600"}}, nil); err == nil {
		t.Error("Open accepted client members")
	}
}

// Many goroutines at once, under -race.
func TestConcurrentClients(t *testing.T) {
	s := open(t, "[server]\nram_tier_bytes = \"64MiB\"\n")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := range 200 {
				k := []byte(fmt.Sprint(w, "/", i))
				v := bytes.Repeat([]byte{byte(w), byte(i)}, 1000)
				if err := s.Put(ctx, k, v); err != nil {
					errs <- err
					return
				}
				n, _, err := s.Get(ctx, k, buf)
				if err != nil || !bytes.Equal(buf[:n], v) {
					errs <- fmt.Errorf("GET %s: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Users of one configuration in a process share one node: a value one
// stores, another reads; the node lives until the last lets go.
func TestSharedNode(t *testing.T) {
	const text = "[server]\nram_tier_bytes = \"64MiB\"\n"
	n1, release1, err := embed.Shared(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	n2, release2, err := embed.Shared(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n1 != n2 {
		t.Fatal("two users of one configuration got two nodes")
	}
	c1, err := n1.Client(client.Options{Namespace: []byte("shared")})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := n2.Client(client.Options{Namespace: []byte("shared")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c1.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	if err := release1(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _, err := c2.Get(ctx, []byte("k"), buf); err != nil || string(buf[:n]) != "v" {
		t.Fatalf("the other user's GET after the first let go: %q, %v", buf[:n], err)
	}
	c2.Close()
	if err := release2(); err != nil {
		t.Fatal(err)
	}
	n3, release3, err := embed.Shared(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release3()
	if n3 == n1 {
		t.Fatal("the node outlived its last user")
	}
}

// Configurations that resolve alike share a node however they are
// written: an empty text, an empty section, a default spelled out, keys
// in another order.
func TestSharedNodeByResolvedConfiguration(t *testing.T) {
	texts := []string{
		"",
		"[server]\n",
		"[server]\nram_tier_bytes = \"1GiB\"\n",
		"[server]\nram_tier = 1\n  ram_tier_bytes = \"1024MiB\"\n",
	}
	var first *embed.Node
	for i, text := range texts {
		n, release, err := embed.Shared(text, nil)
		if err != nil {
			t.Fatalf("text %d: %v", i, err)
		}
		defer release()
		if first == nil {
			first = n
		} else if n != first {
			t.Fatalf("text %d (%q) got a node of its own", i, text)
		}
	}
	n, release, err := embed.Shared("[server]\nram_tier_bytes = \"512MiB\"\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if n == first {
		t.Fatal("a configuration of another RAM size shares the default's node")
	}
}

// A user arriving while the last one closes the node (which holds the
// disk until its Close returns) waits for that close and starts the node
// anew, rather than be refused the disk the closing node still holds.
func TestSharedNodeReopenedWhileItCloses(t *testing.T) {
	text := fmt.Sprintf("[server]\nram_tier_bytes = \"64MiB\"\ndisks = [%q]\ndisk_capacity_bytes = \"256MiB\"\n", filepath.Join(t.TempDir(), "disk"))
	for round := range 10 {
		_, release, err := embed.Shared(text, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wg sync.WaitGroup
		var again error
		wg.Go(func() {
			var rel func() error
			if _, rel, again = embed.Shared(text, nil); again == nil {
				again = rel()
			}
		})
		if err := release(); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
		wg.Wait()
		if again != nil {
			t.Fatalf("round %d: opened while the last user closed it: %v", round, again)
		}
	}
}

// GetBatch into caller buffers reads resident values straight from the
// node's RAM and sends the rest over the connection, with the same
// answers either way.
func TestBatchGetLocalAndRemote(t *testing.T) {
	s := open(t, "[server]\nram_tier_bytes = \"64MiB\"\n")
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789"), 1000)
	for _, kv := range [][2][]byte{{[]byte("a"), []byte("alpha")}, {[]byte("big"), big}} {
		if err := s.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	dsts := [][]byte{make([]byte, 16), make([]byte, 16), make([]byte, 100)}
	res := s.GetBatch(ctx, [][]byte{[]byte("a"), []byte("missing"), []byte("big")}, dsts)
	if res[0].Err != nil || string(res[0].Data) != "alpha" || res[0].Stored != 5 {
		t.Errorf("resident item: %+v", res[0])
	}
	if wire.StatusOf(res[1].Err) != wire.StatusNotFound {
		t.Errorf("missing item: %v", res[1].Err)
	}
	if res[2].Err != client.ErrBufferTooSmall || res[2].Stored != uint64(len(big)) || !bytes.Equal(res[2].Data, big[:100]) {
		t.Errorf("item larger than its buffer: %v stored %d data %d bytes", res[2].Err, res[2].Stored, len(res[2].Data))
	}
	st, err := s.Stats(ctx, embed.Address)
	if err != nil || !bytes.Contains(st, []byte(`"GET":`)) {
		t.Fatalf("STATS of the embedded node: %v %s", err, st)
	}
}

// Without a disk RAM is the only copy: a value it cannot hold is refused,
// never acknowledged and lost.
func TestNoDiskRefusesWhatRAMCannotHold(t *testing.T) {
	s := open(t, "[server]\nram_tier_bytes = \"64MiB\"\nram_tier_large_reserve_bytes = 0\n")
	ctx := context.Background()
	big := make([]byte, 20<<20) // over one 16 MiB arena extent, and no reserve
	err := s.Put(ctx, []byte("big"), big)
	if wire.StatusOf(err) != wire.StatusTooLarge || !strings.Contains(err.Error(), "no disk") {
		t.Fatalf("PUT of a value RAM cannot hold without a disk: %v, want TOO_LARGE saying so", err)
	}
	// With the embedded default reserve the largest value fits.
	s2 := open(t, "[server]\nram_tier_bytes = \"256MiB\"\nmax_block_bytes = \"32MiB\"\n")
	if err := s2.Put(ctx, []byte("big"), big); err != nil {
		t.Fatalf("PUT of 20 MiB with the default reserve: %v", err)
	}
	buf := make([]byte, len(big))
	if n, _, err := s2.Get(ctx, []byte("big"), buf); err != nil || n != len(big) {
		t.Fatalf("GET: %d %v", n, err)
	}
}
