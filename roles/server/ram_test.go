package server

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/wire/client"
)

// TestRAMTierNode: with the RAM tier on, a node serves PUTs and warm GETs
// from RAM (the dfkv_ram_* metrics move), and a graceful stop flushes
// every acknowledged value to disk, so the node restarted without the tier
// finds them all.
func TestRAMTierNode(t *testing.T) {
	dir := t.TempDir()
	base := map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}}
	withRAM := map[string][]string{"ram-tier": {"1"}, "ram-tier-bytes": {"128MiB"}}
	for k, v := range base {
		withRAM[k] = v
	}
	addr, httpAddr, stop := runNode(t, withRAM)
	cl, err := client.Open(client.Options{Namespace: []byte("ram"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
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
	cl, err = client.Open(client.Options{Namespace: []byte("ram"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
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

// TestRAMTierRefusals: the tier needs a size, and refuses write-back with
// quotas (an acknowledged PUT could be refused at flush).
func TestRAMTierRefusals(t *testing.T) {
	dir := t.TempDir()
	f := func(flags map[string][]string, want string) {
		t.Helper()
		cfg, _, err := config.LoadFrom("server", "", nil, flags)
		if err != nil {
			t.Fatal(err)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		err = Run(context.Background(), cfg, Deps{Listener: ln})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error containing %q", err, want)
		}
	}
	f(map[string][]string{"disk": {dir + "/a"}, "disk-capacity": {"256MiB"}, "ram-tier": {"1"}, "http-listen": {""}}, "DFKV_RAM_TIER_BYTES")
	f(map[string][]string{"disk": {dir + "/b"}, "disk-capacity": {"256MiB"}, "ram-tier": {"1"}, "ram-tier-bytes": {"64MiB"},
		"tenant-default-quota": {"1GiB"}, "http-listen": {""}}, "writearound")
}
