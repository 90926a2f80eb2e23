package ramtier

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseNUMANodeList(t *testing.T) {
	ok := func(in string, want ...int) {
		t.Helper()
		got, err := parseNodeList(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseNodeList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	ok("0", 0)
	ok("0\n", 0)
	ok("0-3", 0, 1, 2, 3)
	ok("0-3,5", 0, 1, 2, 3, 5)
	ok("0,2,4-5", 0, 2, 4, 5)
	ok("1-1", 1)
	ok("5,0-1", 0, 1, 5)      // out of order: sorted
	ok("0-2,1-3", 0, 1, 2, 3) // overlapping: each node once
	ok("4095", 4095)

	bad := func(in, want string) {
		t.Helper()
		got, err := parseNodeList(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseNodeList(%q) = %v, %v; want an error containing %q", in, got, err, want)
		}
	}
	bad("", "empty")
	bad(" \n", "empty")
	bad("a", `item "a": is not a node number`)
	bad("0x1", "is not a node number")
	bad("1-", `item "1-": is not a node number`)
	bad("-1", "is not a node number")
	bad("+1", "is not a node number")
	bad("1,,2", `item "": is not a node number`)
	bad("0,", `item "": is not a node number`)
	bad("1-2-3", "is not a node number")
	bad("0 - 3", "is not a node number")
	bad("3-1", `range "3-1" runs backwards`)
	bad("4096", "past the largest node number")
	bad("0-99999999999999999999", "past the largest node number")
}

// TestNUMANodeMask: bit n of the C unsigned long array is node n, and maxnode
// is one more than the bits passed (the kernel reads maxnode-1 of them).
func TestNUMANodeMask(t *testing.T) {
	mask, maxnode := nodeMask([]int{0, 2, 65})
	want := make([]uint, 65/bits.UintSize+1)
	want[0] = 0b101
	want[65/bits.UintSize] |= 1 << (65 % bits.UintSize)
	if !reflect.DeepEqual(mask, want) || maxnode != uintptr(len(want)*bits.UintSize+1) {
		t.Fatalf("nodeMask = %b, %d; want %b, %d", mask, maxnode, want, len(want)*bits.UintSize+1)
	}
}

// mapTestRegion maps a small anonymous region without populating it, as
// the arena is before applyNUMA.
func mapTestRegion(t *testing.T) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	return mem
}

// withNodeFile points nodeOnlinePath at a file holding body ("" = no file)
// for the rest of the test.
func withNodeFile(t *testing.T, body string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "online")
	if body != "" {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := nodeOnlinePath
	nodeOnlinePath = path
	t.Cleanup(func() { nodeOnlinePath = old })
}

// TestApplyNUMA runs the policy on a real mapping of this machine: the
// answer follows the node count read the same way, whatever it is.
func TestApplyNUMA(t *testing.T) {
	mem := mapTestRegion(t)
	if got, err := applyNUMA(mem, NUMAOff); err != nil || got != "off" {
		t.Fatalf("applyNUMA(off) = %q, %v; want off", got, err)
	}

	nodes, _, err := onlineNodes()
	if err != nil {
		t.Fatalf("online nodes of this machine: %v", err)
	}
	want := "single node"
	if len(nodes) > 1 {
		want = fmt.Sprintf("interleave over %d nodes", len(nodes))
	}
	got, err := applyNUMA(mem, NUMAInterleave)
	if err != nil || got != want {
		t.Fatalf("applyNUMA(interleave) on %d node(s) = %q, %v; want %q", len(nodes), got, err, want)
	}
	// The policy only places pages; the memory works as before.
	mem[0], mem[len(mem)-1] = 1, 2
	if mem[0] != 1 || mem[len(mem)-1] != 2 {
		t.Fatal("mapping unusable after applyNUMA")
	}

	for _, mode := range []string{"", "Interleave", "local", "preferred"} {
		if got, err := applyNUMA(mem, mode); err == nil || !strings.Contains(err.Error(), "valid: interleave, off") {
			t.Errorf("applyNUMA(%q) = %q, %v; want an error naming interleave and off", mode, got, err)
		}
	}
}

// TestApplyNUMANodes: no node directory and a single node leave the
// mapping alone; a list the kernel cannot bind to fails with the way out.
func TestApplyNUMANodes(t *testing.T) {
	mem := mapTestRegion(t)
	f := func(body, want string) {
		t.Helper()
		withNodeFile(t, body)
		if got, err := applyNUMA(mem, NUMAInterleave); err != nil || got != want {
			t.Errorf("online %q: applyNUMA = %q, %v; want %q", body, got, err, want)
		}
	}
	f("", "single node") // a kernel without NUMA: no file
	f("0\n", "single node")
	f("3\n", "single node")

	withNodeFile(t, "0-1,x\n")
	if _, err := applyNUMA(mem, NUMAInterleave); err == nil || !strings.Contains(err.Error(), `node list "0-1,x"`) ||
		!strings.Contains(err.Error(), "DFKV_SERVER_RAM_TIER_NUMA=off") {
		t.Errorf("malformed node file: %v; want an error naming the list and DFKV_SERVER_RAM_TIER_NUMA=off", err)
	}

	// No machine has nodes 1000 and 1001, so mbind refuses (EINVAL; EPERM
	// or ENOSYS where a sandbox forbids the call). Either way the error
	// names the arena, the nodes and the setting that turns it off.
	withNodeFile(t, "1000-1001\n")
	_, err := applyNUMA(mem, NUMAInterleave)
	if err == nil {
		t.Fatal("mbind to nodes 1000-1001 succeeded")
	}
	t.Logf("mbind to nodes 1000-1001: %v", err)
	for _, want := range []string{"1048576-byte arena", "NUMA nodes 1000-1001", "mbind", `server.ram_tier_numa = "off"`, "DFKV_SERVER_RAM_TIER_NUMA=off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("mbind error %q lacks %q", err, want)
		}
	}
}

// TestApplyNUMAMbind calls mbind for real even on a one-node machine, to
// check the nodemask and maxnode encoding against the kernel: it is given
// this machine's first online node plus one more, and the kernel drops
// nodes it does not have as long as one allowed node is left.
func TestApplyNUMAMbind(t *testing.T) {
	nodes, _, err := onlineNodes()
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	if len(nodes) > 0 {
		first = nodes[0]
	}
	mem := mapTestRegion(t)
	withNodeFile(t, fmt.Sprintf("%d-%d\n", first, first+1))
	got, err := applyNUMA(mem, NUMAInterleave)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("mbind is not allowed here: %v", err)
	}
	if err != nil || got != "interleave over 2 nodes" {
		t.Fatalf("applyNUMA over nodes %d-%d = %q, %v; want interleave over 2 nodes", first, first+1, got, err)
	}
}
