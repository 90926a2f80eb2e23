package hostcheck

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const mountinfoFixture = `22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard,resv_strict
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
30 22 259:2 / /mnt/nvme\0400 rw,noatime shared:9 - ext4 /dev/nvme0n1 rw,nodiscard
31 22 259:3 / /mnt/nvme1 rw,noatime shared:10 - ext4 /dev/nvme1n1 rw
32 22 259:4 / /mnt/xfs rw,noatime shared:11 - xfs /dev/nvme2n1 rw,discard
33 22 254:1 /srv /srv/bind rw,relatime shared:1 - ext4 /dev/vda rw,discard,resv_strict
34 22 259:5 / /mnt/dis\040card rw,noatime - ext4 /dev/nvme\0403n1 rw,discard
`

// fixtureMounts reads mountinfo as procMounts reads a host's: from
// self/mountinfo of a proc filesystem.
func fixtureMounts(t *testing.T, mountinfo string) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc
}

// TestProcMounts: the device, mount point, filesystem type, source and
// superblock options are read; a table that is not mountinfo gives no
// mounts (and so no warnings), not an error.
func TestProcMounts(t *testing.T) {
	m := procMounts(fixtureMounts(t, mountinfoFixture))
	if len(m) != 7 {
		t.Fatalf("read %d entries, want 7: %+v", len(m), m)
	}
	if e := m[2]; e.MajorMinorVer != "259:2" || e.MountPoint != `/mnt/nvme\0400` || e.FSType != "ext4" || e.Source != "/dev/nvme0n1" || len(e.SuperOptions) != 2 {
		t.Fatalf("entry 2 = %+v", e)
	}
	if _, ok := m[2].SuperOptions["nodiscard"]; !ok {
		t.Fatalf("entry 2 lacks nodiscard: %+v", m[2].SuperOptions)
	}
	if m := procMounts(fixtureMounts(t, mountinfoFixture+"garbage line\n")); m != nil {
		t.Fatalf("a table with a line that is not mountinfo: %+v", m)
	}
	if m := procMounts(filepath.Join(t.TempDir(), "none")); m != nil {
		t.Fatalf("no proc filesystem: %+v", m)
	}
}

// TestUnescapeMountinfo: the kernel's octal escapes are undone; a
// backslash not followed by three octal digits is kept.
func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/mnt/nvme\0400`: "/mnt/nvme 0", `a\011b\012c\134d`: "a\tb\nc\\d", `/plain`: "/plain", `x\9`: `x\9`, `end\04`: `end\04`} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOnlineDiscardWarnings: only an ext4 disk mounted with discard is
// named (with its mount and what to do) in one structured line; nodiscard, no option, another
// filesystem, or a directory that cannot be placed gives nothing.
func TestOnlineDiscardWarnings(t *testing.T) {
	mounts := procMounts(fixtureMounts(t, mountinfoFixture))
	devs := map[string]string{"/data/d0": "254:1", "/mnt/nvme 0/d": "259:2", "/mnt/nvme1/d": "259:3", "/mnt/xfs/d": "259:4", "/elsewhere": "8:1", "/mnt/dis card/d": "259:5"}
	dev := func(dir string) (string, error) {
		if d, ok := devs[dir]; ok {
			return d, nil
		}
		return "", errors.New("no such directory")
	}
	w := onlineDiscardWarnings([]string{"/data/d0", "/mnt/nvme 0/d", "/mnt/nvme1/d", "/mnt/xfs/d", "/elsewhere", "/missing", "/mnt/dis card/d"}, mounts, dev)
	if len(w) != 2 || w[0] != (discardWarning{dir: "/data/d0", source: "/dev/vda", mountPoint: "/"}) ||
		w[1] != (discardWarning{dir: "/mnt/dis card/d", source: "/dev/nvme 3n1", mountPoint: "/mnt/dis card"}) {
		t.Fatalf("warnings = %+v, want one for /data/d0 on /dev/vda at / and one for /mnt/dis card/d (escapes undone)", w)
	}
	var buf bytes.Buffer
	w[0].log(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, want := range []string{"level=WARN", "dir=/data/d0", "device=/dev/vda", "mount=/", "online discard", "nodiscard", "fstrim"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log line %q does not say %q", buf.String(), want)
		}
	}
}

// TestDeviceOfFindsItsMount: on this machine's real mount table, a test
// directory's device is listed, so the check can place a real disk.
func TestDeviceOfFindsItsMount(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.BTRFS_SUPER_MAGIC {
		t.Skip("btrfs reports a subvolume's own device number, not the one its mount lists")
	}
	dev, err := deviceOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	mounts := procMounts("/proc")
	for _, m := range mounts {
		if m.MajorMinorVer == dev {
			return
		}
	}
	t.Fatalf("device %s of %s is not in /proc/self/mountinfo (%d entries)", dev, dir, len(mounts))
}
