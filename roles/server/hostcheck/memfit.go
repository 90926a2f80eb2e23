package hostcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/dfkv/dfkv/config"
)

// The RAM tier's arena is mapped at startup and faulted in full right
// after, behind the serving node (a lazily faulted arena makes the first
// fill many times slower). A budget larger
// than the memory this process may use is then either refused by mmap (far
// too large) or, worse, mapped and touched until the kernel's or the
// cgroup's OOM killer ends the node. So the node checks the budget against
// what is available before it opens anything, and refuses with the figures.

// memInfo is where the available memory is read: the proc filesystem
// (its meminfo and the process's cgroup list, read with procfs) and the
// cgroup filesystem, whose memory files procfs does not read. Tests point
// it at directories of their own.
type memInfo struct {
	proc       string // /proc
	cgroupRoot string // /sys/fs/cgroup
}

var hostMemInfo = memInfo{proc: procfs.DefaultMountPoint, cgroupRoot: "/sys/fs/cgroup"}

// available returns the bytes this process can still take and where the
// bound comes from: MemAvailable, or the cgroup's limit less its usage
// when that is smaller. ok is false when the kernel's figure cannot be read
// (not Linux, /proc not mounted): the caller then skips the check.
func (m memInfo) available() (avail uint64, source string, ok bool) {
	fs, err := procfs.NewFS(m.proc)
	if err != nil {
		return 0, "", false
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemAvailableBytes == nil { // MemAvailable: Linux 3.14 on
		return 0, "", false
	}
	avail = *mi.MemAvailableBytes
	source = fmt.Sprintf("MemAvailable in %s", filepath.Join(m.proc, "meminfo"))
	if limit, used, where, ok := m.cgroupLimit(fs); ok && limit > used && limit-used < avail {
		avail, source = limit-used, fmt.Sprintf("the memory cgroup's limit %s less its usage %s without inactive page cache (%s)", approxSize(limit), approxSize(used), where)
	} else if ok && limit <= used {
		avail, source = 0, fmt.Sprintf("the memory cgroup's limit %s, already used (%s)", approxSize(limit), where)
	}
	return avail, source, true
}

// cgroupLimit reads the memory limit and usage of this process's cgroup:
// cgroup v2 (memory.max, memory.current) or v1 (memory.limit_in_bytes,
// memory.usage_in_bytes). ok is false without a limit ("max", or v1's
// near-2^63 "unlimited") or when nothing can be read.
func (m memInfo) cgroupLimit(fs procfs.FS) (limit, used uint64, where string, ok bool) {
	self, err := fs.Self()
	if err != nil {
		return 0, 0, "", false
	}
	cgroups, err := self.Cgroups()
	if err != nil {
		return 0, 0, "", false
	}
	for _, cg := range cgroups {
		var dir, limitFile, usageFile, inactiveKey string
		switch {
		case cg.HierarchyID == 0 && len(cg.Controllers) == 0:
			dir, limitFile, usageFile, inactiveKey = filepath.Join(m.cgroupRoot, cg.Path), "memory.max", "memory.current", "inactive_file"
		case slices.Contains(cg.Controllers, "memory"):
			dir, limitFile, usageFile, inactiveKey = filepath.Join(m.cgroupRoot, "memory", cg.Path), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
		default:
			continue
		}
		limit, okL := readUint(filepath.Join(dir, limitFile))
		used, okU := readUint(filepath.Join(dir, usageFile))
		if !okL || !okU || limit >= 1<<62 {
			continue // no limit here ("max", or v1's unlimited)
		}
		// Usage counts page cache the kernel reclaims under pressure; the
		// inactive part of it is as good as free (the working set, as
		// the kubelet computes it).
		if stat, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
			if inactive, ok := statField(stat, inactiveKey); ok {
				used -= min(used, inactive)
			}
		}
		return limit, used, filepath.Join(dir, limitFile), true
	}
	return 0, 0, "", false
}

// statField parses "name 123" out of a cgroup memory.stat.
func statField(data []byte, name string) (uint64, bool) {
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func readUint(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v, err == nil
}

// CheckRAMTier refuses a RAM tier budget larger than the memory this
// process can take, naming the setting, both sizes and where the bound
// comes from. It is called before any disk is opened.
func CheckRAMTier(budget uint64) error { return checkRAMTierFits(budget, hostMemInfo) }

// checkRAMTierFits is CheckRAMTier against the files m names.
func checkRAMTierFits(budget uint64, m memInfo) error {
	avail, source, ok := m.available()
	if !ok || budget <= avail {
		return nil
	}
	return fmt.Errorf("server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES, --ram-tier-bytes) is %s, more than the %s this node can take (%s); the arena is faulted in full at startup, so lower the setting or free the memory",
		config.FormatSize(budget), approxSize(avail), source)
}

// approxSize prints a measured size (free memory, usage) rounded to one
// decimal of its largest binary unit; config.FormatSize prints exact
// configured sizes.
func approxSize(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(b), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
