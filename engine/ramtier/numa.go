package ramtier

import (
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nodeOnlinePath is where Linux lists the online NUMA nodes. A variable so
// tests can point it at a file of their own.
var nodeOnlinePath = "/sys/devices/system/node/online"

// mpolInterleave is MPOL_INTERLEAVE of <linux/mempolicy.h>: pages go
// round-robin over the nodes of the mask as they are first touched.
const mpolInterleave = 3

// maxNodeID bounds the node numbers parseNodeList accepts: the kernel
// allows at most 1<<10 nodes, so anything far past that is a bad file, not
// a machine, and must not size the nodemask.
const maxNodeID = 1<<12 - 1

// applyNUMA sets the memory policy of mem, a fresh anonymous mapping whose
// pages have not been touched yet, and says what it did for the startup
// log. The policy decides where a page lands when it is first faulted in,
// so it must be set before the arena is touched: pages already resident
// stay where they are.
//
// NUMAInterleave spreads the pages over every online node, so a warm GET
// stream is not capped by one node's memory bandwidth. On a machine or
// kernel without NUMA (no node directory in sysfs, or one node) there is
// nothing to spread and mem is left alone, so the default works anywhere.
// NUMAOff leaves the kernel's default policy (local allocation).
func applyNUMA(mem []byte, mode string) (applied string, err error) {
	switch mode {
	case NUMAOff:
		return "off", nil
	case NUMAInterleave:
	default:
		return "", fmt.Errorf("ram tier: unknown NUMA policy %q (server.ram_tier_numa / DFKV_SERVER_RAM_TIER_NUMA); valid: %s, %s", mode, NUMAInterleave, NUMAOff)
	}
	if len(mem) == 0 {
		return "", errors.New("ram tier: NUMA policy for an empty arena: nothing is mapped")
	}
	nodes, raw, err := onlineNodes()
	if err != nil {
		return "", err
	}
	if len(nodes) <= 1 {
		return "single node", nil
	}
	mask, maxnode := nodeMask(nodes)
	_, _, errno := unix.Syscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		mpolInterleave, uintptr(unsafe.Pointer(&mask[0])), maxnode, 0)
	if errno != 0 {
		return "", fmt.Errorf("ram tier: cannot interleave the %d-byte arena over NUMA nodes %s: mbind: %w; "+
			`set server.ram_tier_numa = "off" (DFKV_SERVER_RAM_TIER_NUMA=off) to leave placement to the kernel`, len(mem), raw, errno)
	}
	return fmt.Sprintf("interleave over %d nodes", len(nodes)), nil
}

// onlineNodes reads the online NUMA nodes, and the list as the kernel
// wrote it for messages. A kernel built without NUMA has no node
// directory: that is one node, not an error.
func onlineNodes() (nodes []int, raw string, err error) {
	data, err := os.ReadFile(nodeOnlinePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("ram tier: cannot read the online NUMA nodes: %w; "+
			`set server.ram_tier_numa = "off" (DFKV_SERVER_RAM_TIER_NUMA=off) to skip NUMA placement`, err)
	}
	raw = strings.TrimSpace(string(data))
	if nodes, err = parseNodeList(raw); err != nil {
		return nil, "", fmt.Errorf("ram tier: %s: %w; "+
			`set server.ram_tier_numa = "off" (DFKV_SERVER_RAM_TIER_NUMA=off) to skip NUMA placement`, nodeOnlinePath, err)
	}
	return nodes, raw, nil
}

// parseNodeList reads a kernel node list ("0", "0-3,5"; cpulist format in
// Documentation/admin-guide/cputopology.rst) into ascending node numbers,
// each once. Surrounding white space is allowed; anything else malformed
// is an error rather than a guess.
func parseNodeList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("node list is empty")
	}
	var seen [maxNodeID + 1]bool
	for _, item := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parseNodeID(lo)
		if err != nil {
			return nil, fmt.Errorf("node list %q: item %q: %w", s, item, err)
		}
		b := a
		if isRange {
			if b, err = parseNodeID(hi); err != nil {
				return nil, fmt.Errorf("node list %q: item %q: %w", s, item, err)
			}
			if b < a {
				return nil, fmt.Errorf("node list %q: range %q runs backwards", s, item)
			}
		}
		for n := a; n <= b; n++ {
			seen[n] = true
		}
	}
	var nodes []int
	for n, ok := range seen {
		if ok {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

// parseNodeID reads one node number: decimal digits only (no sign, no
// spaces inside the list), at most maxNodeID.
func parseNodeID(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("is not a node number")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxNodeID {
		return 0, fmt.Errorf("node %s is past the largest node number %d", s, maxNodeID)
	}
	return n, nil
}

// nodeMask builds mbind's nodemask (an array of C unsigned long, bit n for
// node n) and its maxnode argument. The kernel reads maxnode-1 bits
// (mm/mempolicy.c get_nodes decrements it first), so maxnode is the bit
// count plus one, as libnuma passes it.
func nodeMask(nodes []int) (mask []uint, maxnode uintptr) {
	mask = make([]uint, nodes[len(nodes)-1]/bits.UintSize+1)
	for _, n := range nodes {
		mask[n/bits.UintSize] |= 1 << (n % bits.UintSize)
	}
	return mask, uintptr(len(mask)*bits.UintSize + 1)
}
