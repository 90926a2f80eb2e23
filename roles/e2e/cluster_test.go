package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// mdsMembers reads the MDS's member IDs over HTTP.
func mdsMembers(t *testing.T, httpAddr string) []string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/members")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Members []struct{ ID string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range doc.Members {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestClusterProcessesWithEtcd runs a real cluster: two `dfkv mds`
// processes on one real etcd and three `dfkv server` processes on
// loopback. It runs smoke through the MDS, SIGKILLs a node and measures
// how long until the directory and a client stop routing to it, runs smoke
// again, kills one MDS (the other serves on), adds a node, runs smoke
// again, and stops everything gracefully.
func TestClusterProcessesWithEtcd(t *testing.T) {
	etcd := testetcd.Start(t)
	dir := t.TempDir()
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	mds2Addr, mds2HTTP := freePort(t), freePort(t)
	startChild(t, "mds", "http://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--etcd-endpoints", etcd.Endpoint, "--heartbeat-ttl-ms", "2000")
	mds2 := startChild(t, "mds2", "http://"+mds2HTTP+"/readyz", "mds", "--listen", mds2Addr, "--http-listen", mds2HTTP,
		"--etcd-endpoints", etcd.Endpoint, "--heartbeat-ttl-ms", "2000")
	bothMDS := mds2Addr + "," + mdsAddr
	nodes := map[string]*child{}
	startNode := func(id string) {
		addr, httpAddr := freePort(t), freePort(t)
		nodes[id] = startChild(t, id, "http://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr,
			"--disks", filepath.Join(dir, id), "--disk-capacity-bytes", "1GiB", "--mds", bothMDS, "--id", id)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		startNode(id)
	}
	waitFor(t, "three members registered", 30*time.Second, func() bool { return len(mdsMembers(t, mdsHTTP)) == 3 })
	if got := mdsMembers(t, mds2HTTP); len(got) != 3 {
		t.Fatalf("the second MDS sees %v", got)
	}

	smoke := func(when string) {
		t.Helper()
		code, out, errs := dfkv(t, nil, "smoke", "--mds", bothMDS, "--max-block-bytes", "4MiB")
		if code != 0 || !bytes.Contains(out, []byte(" 0 failed")) {
			t.Fatalf("smoke %s (exit %d):\n%s\n%s", when, code, out, errs)
		}
	}
	smoke("with three nodes")

	cl, err := client.Open(client.Options{Namespace: []byte("cluster"), MDS: []string{mds2Addr, mdsAddr}, MDSPoll: 100 * time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if len(cl.Members()) != 3 {
		t.Fatalf("client sees %v", cl.Members())
	}

	// SIGKILL: no deregistration; the lease (TTL 2s) has to lapse.
	killed := time.Now()
	nodes["n2"].signal(t, syscall.SIGKILL)
	dirTook := waitFor(t, "killed node dropped from the directory", 30*time.Second, func() bool {
		return !strings.Contains(strings.Join(mdsMembers(t, mdsHTTP), ","), "n2")
	})
	waitFor(t, "client stops routing to the killed node", 30*time.Second, func() bool { return len(cl.Members()) == 2 })
	t.Logf("SIGKILL to directory drop %v, to client no longer routing %v (heartbeat TTL 2s, client poll 100ms)",
		dirTook.Round(10*time.Millisecond), time.Since(killed).Round(10*time.Millisecond))
	smoke("after a node was killed")

	// One MDS dies; nodes and clients carry on through the other.
	mds2.signal(t, syscall.SIGKILL)

	// A new node joins and is used.
	startNode("n4")
	joined := time.Now()
	waitFor(t, "client sees the new node", 30*time.Second, func() bool { return len(cl.Members()) == 3 })
	t.Logf("new node visible to the client %v after it was ready", time.Since(joined).Round(time.Millisecond))
	smoke("after a node joined")
	if err := cl.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}

	// Graceful stops deregister at once.
	for _, id := range []string{"n1", "n3", "n4"} {
		nodes[id].stop(t)
	}
	if got := mdsMembers(t, mdsHTTP); len(got) != 0 {
		t.Fatalf("members left after graceful stops: %v", got)
	}
}

// TestServerProcessRAMTier runs smoke against a node with the RAM tier in
// front of its disk (write-back, RAM acknowledgement), stops it with
// SIGTERM, and finds the kept blocks again on a restart without the tier:
// the graceful stop flushed everything it had acknowledged.
func TestServerProcessRAMTier(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	disk := filepath.Join(dir, "d0")
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disks", disk, "--disk-capacity-bytes", "1GiB"}
	srv := startChild(t, "server", "http://"+httpAddr+"/readyz", append(args, "--ram-tier", "1", "--ram-tier-bytes", "256MiB")...)
	code, out, errs := dfkv(t, nil, "smoke", "--members", addr, "--keep", "--run-id", "ram")
	if code != 0 || !bytes.Contains(out, []byte(" 0 failed")) {
		t.Fatalf("smoke with the RAM tier (exit %d):\n%s\n%s", code, out, errs)
	}
	// ctl stats shows the tier's own state: what smoke kept is in RAM.
	code, out, _ = dfkv(t, nil, "ctl", "--members", addr, "stats")
	if code != 0 || !bytes.Contains(out, []byte("ram tier")) || !bytes.Contains(out, []byte("ram flush")) || bytes.Contains(out, []byte("ram tier     0 objects")) {
		t.Fatalf("ctl stats with the RAM tier (exit %d):\n%s", code, out)
	}
	srv.stop(t)
	if !strings.Contains(srv.logs.String(), "RAM tier on") {
		t.Fatalf("no RAM tier start line:\n%s", srv.logs.String())
	}
	// The last line counts what the disks hold after the tier's flush
	// (it used to be taken before it: objects=0).
	if m := regexp.MustCompile(`stopped cleanly" role=server objects=(\d+)`).FindStringSubmatch(srv.logs.String()); m == nil || m[1] == "0" {
		t.Fatalf("the stop line does not count the flushed values:\n%s", srv.logs.String())
	}
	srv = startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
	for _, k := range []string{"smoke/ram/scalar-1", "smoke/ram/scalar-65537", "smoke/ram/scalar-1048579", "smoke/ram/scalar-67108864"} {
		code, out, errs := dfkv(t, nil, "ctl", "--members", addr, "exist", k)
		if code != 0 {
			t.Fatalf("%s after a graceful stop of the RAM tier: exit %d %s %s", k, code, out, errs)
		}
	}
	srv.stop(t)
}

// TestServerProcessRAMTierSIGKILL checks what each acknowledgement mode
// promises across a SIGKILL, with real processes and files: PUTs through
// the RAM tier (write-back), SIGKILL, restart without the tier, and count
// what came back.
//
//   - put_ack_mode = disk, over either engine (both keep what they wrote
//     across a process crash: the file engine its committed files, the slab
//     engine every record that validates): every acknowledged PUT is there
//     with its bytes.
//   - put_ack_mode = ram: what is missing is at most what was still dirty
//     (dfkv_ram_dirty_bytes scraped after the last PUT, before the kill;
//     it only shrinks meanwhile), and nothing comes back with wrong bytes.
func TestServerProcessRAMTierSIGKILL(t *testing.T) {
	for _, c := range []struct {
		name, engine, ack string
	}{
		{"file/disk-ack", "file", "disk"},
		{"file/ram-ack", "file", "ram"},
		{"slab/disk-ack", "slab", "disk"},
		{"slab/ram-ack", "slab", "ram"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			addr, httpAddr := freePort(t), freePort(t)
			args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disks", filepath.Join(dir, "d0"),
				"--disk-capacity-bytes", "1GiB", "--store-engine", c.engine}
			srv := startChild(t, "server", "http://"+httpAddr+"/readyz",
				append(args, "--ram-tier", "1", "--ram-tier-bytes", "256MiB", "--put-ack-mode", c.ack)...)
			cl, err := client.Open(client.Options{Namespace: []byte("sigkill"), Members: []string{addr}, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			const n, size = 300, 64 << 10
			value := func(i int) []byte {
				v := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, size/3+1)
				return v[:size]
			}
			keyOf := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
			for i := range n {
				if err := cl.Put(context.Background(), keyOf(i), value(i)); err != nil {
					t.Fatalf("PUT %d: %v", i, err)
				}
			}
			dirty := scrapeGauge(t, httpAddr, "dfkv_ram_dirty_bytes")
			srv.signal(t, syscall.SIGKILL)

			srv = startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
			defer srv.stop(t)
			missing := 0
			dst := make([]byte, size)
			for i := range n {
				got, _, err := cl.Get(context.Background(), keyOf(i), dst)
				switch {
				case wire.StatusOf(err) == wire.StatusNotFound:
					missing++
				case err != nil:
					t.Fatalf("GET %d after the restart: %v", i, err)
				case !bytes.Equal(dst[:got], value(i)):
					t.Fatalf("GET %d after the restart: wrong bytes", i)
				}
			}
			t.Logf("%s: %d of %d acknowledged PUTs missing after SIGKILL (%v dirty bytes at the kill)", c.name, missing, n, dirty)
			switch {
			case c.ack == "disk" && missing != 0:
				t.Fatalf("disk acknowledgement lost %d acknowledged PUTs", missing)
			case float64(missing*size) > dirty:
				t.Fatalf("RAM acknowledgement lost %d × %d bytes, more than the %v dirty at the kill", missing, size, dirty)
			}
			if err := cl.Put(context.Background(), []byte("after"), value(1)); err != nil {
				t.Fatalf("PUT after the restart: %v", err)
			}
		})
	}
}

// scrapeGauge reads one unlabelled gauge from a node's /metrics.
func scrapeGauge(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	v := scrapeSample(t, httpAddr, name+" ")
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s %s: %v", name, v, err)
	}
	return f
}

// scrapeSample returns, as text, the value of the first sample of a
// node's /metrics whose line starts with prefix: a name and a space for
// an unlabelled series, a name and "{" for a labelled one.
func scrapeSample(t *testing.T, httpAddr, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:])
		}
	}
	t.Fatalf("no %s sample in /metrics", strings.TrimSpace(prefix))
	return ""
}
