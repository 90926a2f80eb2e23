package hostcheck

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeMem lays out a proc filesystem whose meminfo has MemAvailable avail
// (bytes) and whose self (a link to a process directory, as in /proc)
// has cgroupLine as its cgroup list, and each file of files under a
// cgroup root, and returns a memInfo reading them.
func fakeMem(t *testing.T, avail uint64, cgroupLine string, files map[string]string) memInfo {
	t.Helper()
	dir := t.TempDir()
	m := memInfo{proc: filepath.Join(dir, "proc"), cgroupRoot: filepath.Join(dir, "fs")}
	write := func(path, data string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(m.proc, "meminfo"), "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   "+
		strconv.FormatUint(avail>>10, 10)+" kB\nHugePages_Total:       0\n")
	write(filepath.Join(m.proc, "4242", "cgroup"), cgroupLine+"\n")
	if err := os.Symlink("4242", filepath.Join(m.proc, "self")); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		write(filepath.Join(m.cgroupRoot, name), data)
	}
	return m
}

func TestRAMTierFitsMemory(t *testing.T) {
	const gib = 1 << 30
	check := func(name string, m memInfo, budget uint64, want ...string) {
		t.Helper()
		err := checkRAMTierFits(budget, m)
		if len(want) == 0 {
			if err != nil {
				t.Fatalf("%s: %v, want it accepted", name, err)
			}
			return
		}
		if err == nil {
			t.Fatalf("%s: accepted, want a refusal", name)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %q lacks %q", name, err, w)
			}
		}
	}
	noLimit := fakeMem(t, 16*gib, "0::/dfkv.service", map[string]string{"dfkv.service/memory.max": "max\n", "dfkv.service/memory.current": "1000\n"})
	check("v2 without a limit, within MemAvailable", noLimit, 8*gib)
	check("v2 without a limit, past MemAvailable", noLimit, 32*gib, "server.ram_tier_bytes", "32GiB", "16.0 GiB", "MemAvailable")

	v2 := fakeMem(t, 16*gib, "0::/dfkv.service", map[string]string{"dfkv.service/memory.max": "4294967296\n", "dfkv.service/memory.current": "1073741824\n"})
	check("v2 limit 4 GiB, 1 GiB used: 2 GiB fits", v2, 2*gib)
	check("v2 limit 4 GiB, 1 GiB used: 8 GiB does not", v2, 8*gib, "3.0 GiB", "cgroup", "memory.max")

	// 3 GiB used, 2.5 GiB of it inactive page cache: 3.5 GiB of the 4 GiB
	// limit can be had.
	cached := fakeMem(t, 16*gib, "0::/dfkv.service", map[string]string{"dfkv.service/memory.max": "4294967296\n",
		"dfkv.service/memory.current": "3221225472\n", "dfkv.service/memory.stat": "anon 536870912\nfile 2684354560\ninactive_file 2684354560\nactive_file 0\n"})
	check("v2, usage mostly reclaimable cache", cached, 3*gib)
	check("v2, past what cache frees", cached, 4*gib, "3.5 GiB", "without inactive page cache")

	v1 := fakeMem(t, 16*gib, "4:memory:/process_api/x\n3:cpuset:/", map[string]string{
		"memory/process_api/x/memory.limit_in_bytes": "2147483648\n", "memory/process_api/x/memory.usage_in_bytes": "0\n"})
	check("v1 limit 2 GiB", v1, 4*gib, "2.0 GiB", "memory.limit_in_bytes")
	v1Cached := fakeMem(t, 16*gib, "4:memory:/y", map[string]string{"memory/y/memory.limit_in_bytes": "2147483648\n",
		"memory/y/memory.usage_in_bytes": "1610612736\n", "memory/y/memory.stat": "cache 1073741824\ntotal_inactive_file 1073741824\n"})
	check("v1, usage mostly reclaimable cache", v1Cached, 1*gib)
	check("v1, past what cache frees", v1Cached, 2*gib, "1.5 GiB")
	v1Unlimited := fakeMem(t, 16*gib, "4:memory:/x", map[string]string{
		"memory/x/memory.limit_in_bytes": "9223372036854771712\n", "memory/x/memory.usage_in_bytes": "1097658368\n"})
	check("v1 unlimited", v1Unlimited, 8*gib)

	check("no /proc: not checked", memInfo{proc: "/nonexistent/proc"}, 1<<60)
	noAvailable := fakeMem(t, 0, "0::/", nil)
	if err := os.WriteFile(filepath.Join(noAvailable.proc, "meminfo"), []byte("MemTotal:       24576000 kB\nMemFree:         1000000 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a kernel without MemAvailable: not checked", noAvailable, 1<<60)
	noCgroup := fakeMem(t, 16*gib, "0::/", nil)
	check("no cgroup files: MemAvailable bounds it", noCgroup, 32*gib, "16.0 GiB", "MemAvailable in "+filepath.Join(noCgroup.proc, "meminfo"))
}

// TestHostMemInfoReadable: this machine's /proc gives the figure the
// check needs, so the check runs on a real host rather than skipping.
func TestHostMemInfoReadable(t *testing.T) {
	avail, source, ok := hostMemInfo.available()
	if !ok || avail == 0 || (!strings.Contains(source, "/proc/meminfo") && !strings.Contains(source, "cgroup")) {
		t.Fatalf("available() = %d, %q, %v on this host", avail, source, ok)
	}
	t.Logf("%s: %s", approxSize(avail), source)
}
