package server

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestRAMTierNode: with the RAM tier on, a node serves PUTs and warm GETs
// from RAM (the dfkv_ram_* metrics move), and a graceful stop flushes
// every acknowledged value to disk, so the node restarted without the tier
// finds them all.
func TestRAMTierNode(t *testing.T) {
	dir := t.TempDir()
	base := map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}}
	withRAM := withRAMTier(base)
	addr, httpAddr, stop := runNode(t, withRAM)
	cl := ramClient(t, addr)
	ctx := context.Background()
	vals := map[string][]byte{}
	for i, n := range []int{1, 4097, 1 << 20, 3<<20 + 1} {
		k := string(rune('a' + i))
		v := bytes.Repeat([]byte{byte(i + 1)}, n)
		vals[k] = v
		if err := cl.Put(ctx, []byte(k), v); err != nil {
			t.Fatal(err)
		}
		got, err := cl.GetAuto(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("warm get %s: %v", k, err)
		}
	}
	mf := scrape(t, httpAddr)
	if value(t, mf, "dfkv_ram_put_total", nil) < 4 || value(t, mf, "dfkv_ram_hit_total", nil) < 4 || value(t, mf, "dfkv_ram_healthy", nil) != 1 {
		t.Fatalf("RAM tier metrics did not move: puts %v hits %v", value(t, mf, "dfkv_ram_put_total", nil), value(t, mf, "dfkv_ram_hit_total", nil))
	}
	cl.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Restart on the same disk without the tier: every value was flushed.
	addr, httpAddr, _ = runNode(t, base)
	cl = ramClient(t, addr)
	defer cl.Close()
	for k, v := range vals {
		got, err := cl.GetAuto(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after restart without the tier, %s: %v", k, err)
		}
	}
	if mf := scrape(t, httpAddr); mf["dfkv_ram_hit_total"] != nil {
		t.Fatal("dfkv_ram_* exported with the tier off")
	}
}

// TestRAMTierRefusals: the tier needs a size, and one the machine has; a
// refused tier leaves no disk behind (the check runs before any disk is
// opened or formatted).
func TestRAMTierRefusals(t *testing.T) {
	dir := t.TempDir()
	f := func(flags map[string][]string, want string) {
		t.Helper()
		// Refused when the configuration is loaded (a missing size) or
		// when the node starts (a size the machine does not have).
		cfg, _, err := config.LoadFrom("server", "", nil, flags)
		if err == nil {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			defer ln.Close()
			err = Run(context.Background(), cfg, Deps{Listener: ln})
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error containing %q", err, want)
		}
	}
	f(map[string][]string{"disk": {dir + "/a"}, "disk-capacity": {"256MiB"}, "ram-tier": {"1"}, "http-listen": {""}}, "DFKV_SERVER_RAM_TIER_BYTES")
	// 16 TiB (the setting's maximum): more than this machine has (mmap refused it only after
	// the disks were opened, with a message that did not name the setting).
	f(map[string][]string{"disk": {dir + "/b"}, "disk-capacity": {"256MiB"}, "ram-tier": {"1"}, "ram-tier-bytes": {"16TiB"}, "http-listen": {""}},
		"server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES, --ram-tier-bytes) is 16TiB, more than the")
	for _, d := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(dir, d)); !os.IsNotExist(err) {
			t.Fatalf("a refused RAM tier left disk %s behind (%v)", d, err)
		}
	}
}

// TestRAMTierWriteBackQuota: with the tier in write-back and tenant quotas
// on, a limited tenant's PUT that would pass its quota gets QUOTA_EXCEEDED
// as its own answer, not an OK from RAM followed by a flush that drops the
// value; a tenant without a quota keeps write-back and is not held to the
// other's limit.
func TestRAMTierWriteBackQuota(t *testing.T) {
	dir := t.TempDir()
	quotas := filepath.Join(dir, "quotas.toml")
	// A namespace that is not a canonical descriptor is its own tenant.
	if err := os.WriteFile(quotas, []byte("[tenants]\ncapped = \"1MiB\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := runNode(t, map[string][]string{
		"disk": {dir + "/d0", dir + "/d1"}, "disk-capacity": {"256MiB"},
		"ram-tier": {"1"}, "ram-tier-bytes": {"128MiB"}, "ram-write-mode": {"writeback"}, "put-ack-mode": {"ram"},
		"tenant-quotas-file": {quotas},
	})
	connect := func(ns string) *client.Client {
		t.Helper()
		cl, err := client.Open(client.Options{Namespace: []byte(ns), Members: []string{addr}, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	capped, free := connect("capped"), connect("free")
	ctx := context.Background()
	v := bytes.Repeat([]byte{7}, 400<<10)

	for _, k := range []string{"a", "b"} { // 800KiB of 1MiB
		if err := capped.Put(ctx, []byte(k), v); err != nil {
			t.Fatalf("capped PUT %s within the quota: %v", k, err)
		}
	}
	if err := capped.Put(ctx, []byte("c"), v); !errors.Is(err, wire.StatusQuotaExceeded) {
		t.Fatalf("capped PUT c past the 1MiB quota: %v; want %v synchronously", err, wire.StatusQuotaExceeded)
	}
	if _, err := capped.GetAuto(ctx, []byte("c")); !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("GET of the refused key: %v; want %v", err, wire.StatusNotFound)
	}
	for _, k := range []string{"a", "b"} {
		if got, err := capped.GetAuto(ctx, []byte(k)); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("capped GET %s: %v", k, err)
		}
	}

	for _, k := range []string{"a", "b", "c", "d", "e"} { // 2000KiB, no quota
		if err := free.Put(ctx, []byte(k), v); err != nil {
			t.Fatalf("unlimited tenant's PUT %s: %v", k, err)
		}
	}
}

// TestLargeReserve: the operator's auto is the tier's zero value, and the
// operator's 0 ("no reserve") is NoLargeReserve, not the tier's default.
func TestLargeReserve(t *testing.T) {
	f := func(setting, want int64) {
		t.Helper()
		if got := largeReserve(setting); got != want {
			t.Errorf("largeReserve(%d) = %d; want %d", setting, got, want)
		}
	}
	f(config.SizeAuto, 0)
	f(0, ramtier.NoLargeReserve)
	f(64<<20, 64<<20)
}

// TestRAMTierBatchPut: BATCH_PUT through a node with the RAM tier, under
// both acknowledgement modes. Values that fit an arena slot are read
// straight into it, a value larger than an extent takes the copying path,
// a repeated key ends with its last value (runs are committed in order),
// and a batch cut off mid-value stores nothing of the unfinished run and
// leaks no reservation (the node's graceful stop, which waits for every
// reservation, completes).
func TestRAMTierBatchPut(t *testing.T) {
	for _, ack := range []string{"ram", "disk"} {
		t.Run(ack, func(t *testing.T) {
			dir := t.TempDir()
			addr, _, stop := runNode(t, map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"},
				"ram-tier": {"1"}, "ram-tier-bytes": {"128MiB"}, "put-ack-mode": {ack}})
			cl, err := client.Open(client.Options{Namespace: []byte("batch"), Members: []string{addr}, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			val := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
			keys := [][]byte{[]byte("a"), []byte("big"), []byte("a"), []byte("c")}
			vals := [][]byte{val(1, 8192), val(2, 20<<20), val(3, 9000), val(4, 1<<20)}
			for i, err := range cl.PutBatch(ctx, keys, vals) {
				if err != nil {
					t.Fatalf("PutBatch item %d: %v", i, err)
				}
			}
			for k, want := range map[string][]byte{"a": vals[2], "big": vals[1], "c": vals[3]} {
				got, err := cl.GetAuto(ctx, []byte(k))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("GET %s after the batch: %v, %d bytes (want %d)", k, err, len(got), len(want))
				}
			}

			// A batch whose second value never finishes arriving.
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			k1, err := wire.NewBlockKey([]byte("batch"), []byte("cut-1"))
			if err != nil {
				t.Fatal(err)
			}
			k2, _ := wire.NewBlockKey([]byte("batch"), []byte("cut-2"))
			const n = 1 << 20
			frame := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpBatchPut, Length: 2, BodyLen: 2*wire.BatchPutItemLen + 2*n})
			frame = wire.AppendPutItem(frame, k1, n)
			frame = wire.AppendPutItem(frame, k2, n)
			frame = append(frame, val(5, n+n/2)...)
			if _, err := nc.Write(frame); err != nil {
				t.Fatal(err)
			}
			nc.Close()
			for _, k := range []string{"cut-1", "cut-2"} {
				if _, err := cl.Exist(ctx, []byte(k)); wire.StatusOf(err) != wire.StatusNotFound {
					t.Fatalf("%s of the cut batch: %v, want NOT_FOUND", k, err)
				}
			}
			if err := stop(); err != nil {
				t.Fatalf("stop after the cut batch: %v", err)
			}
		})
	}
}

// TestRAMTierNodeFlushDelay: server.ram_flush_delay_ms reaches the tier
// (a value rewritten twice within the delay is flushed once, which the
// dfkv_ram_* metrics show), and a graceful stop flushes what the delay
// still holds, so the node restarted without the tier has the last value.
func TestRAMTierNodeFlushDelay(t *testing.T) {
	dir := t.TempDir()
	base := map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}}
	withRAM := withRAMTier(base)
	withRAM["ram-flush-delay-ms"] = []string{"3600000"}
	addr, httpAddr, stop := runNode(t, withRAM)
	cl := ramClient(t, addr)
	ctx := context.Background()
	var last []byte
	for g := range 3 {
		last = bytes.Repeat([]byte{byte(10 + g)}, 100<<10)
		if err := cl.Put(ctx, []byte("k"), last); err != nil {
			t.Fatal(err)
		}
	}
	mf := scrape(t, httpAddr)
	for name, want := range map[string]float64{
		"dfkv_ram_flush_delay_seconds": 3600, "dfkv_ram_flush_skipped_total": 2, "dfkv_ram_flushed_total": 0, "dfkv_ram_dirty_bytes": 100 << 10,
	} {
		if got := value(t, mf, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	cl.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	addr, _, _ = runNode(t, base)
	cl = ramClient(t, addr)
	defer cl.Close()
	got, err := cl.GetAuto(ctx, []byte("k"))
	if err != nil || !bytes.Equal(got, last) {
		t.Fatalf("after a graceful stop within the flush delay, the restarted node has %d bytes (%v), want the last value", len(got), err)
	}
}

// withRAMTier is base's flags plus a 128 MiB RAM tier.
func withRAMTier(base map[string][]string) map[string][]string {
	flags := map[string][]string{"ram-tier": {"1"}, "ram-tier-bytes": {"128MiB"}}
	for k, v := range base {
		flags[k] = v
	}
	return flags
}

// ramClient opens a client of the "ram" namespace on the node at addr.
func ramClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cl, err := client.Open(client.Options{Namespace: []byte("ram"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
