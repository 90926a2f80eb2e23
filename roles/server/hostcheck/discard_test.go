package hostcheck

import (
	"bytes"
	"errors"
	"log/slog"
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
garbage line
`

// TestParseMountinfo: the device, mount point (octal escapes undone),
// filesystem type, source and superblock options are read; a line that is
// not mountinfo is skipped.
func TestParseMountinfo(t *testing.T) {
	m, err := parseMountinfo(strings.NewReader(mountinfoFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 6 {
		t.Fatalf("parsed %d entries, want 6: %+v", len(m), m)
	}
	if e := m[2]; e.device != "259:2" || e.mountPoint != "/mnt/nvme 0" || e.fsType != "ext4" || e.source != "/dev/nvme0n1" || strings.Join(e.superOpts, ",") != "rw,nodiscard" {
		t.Fatalf("entry 2 = %+v", e)
	}
}

// TestOnlineDiscardWarnings: only an ext4 disk mounted with discard is
// named (with its mount and what to do) in one structured line; nodiscard, no option, another
// filesystem, or a directory that cannot be placed gives nothing.
func TestOnlineDiscardWarnings(t *testing.T) {
	mounts, err := parseMountinfo(strings.NewReader(mountinfoFixture))
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]string{"/data/d0": "254:1", "/mnt/nvme 0/d": "259:2", "/mnt/nvme1/d": "259:3", "/mnt/xfs/d": "259:4", "/elsewhere": "8:1"}
	dev := func(dir string) (string, error) {
		if d, ok := devs[dir]; ok {
			return d, nil
		}
		return "", errors.New("no such directory")
	}
	w := onlineDiscardWarnings([]string{"/data/d0", "/mnt/nvme 0/d", "/mnt/nvme1/d", "/mnt/xfs/d", "/elsewhere", "/missing"}, mounts, dev)
	if len(w) != 1 || w[0] != (discardWarning{dir: "/data/d0", source: "/dev/vda", mountPoint: "/"}) {
		t.Fatalf("warnings = %+v, want one for /data/d0 on /dev/vda at /", w)
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
	mounts := procMounts()
	for _, m := range mounts {
		if m.device == dev {
			return
		}
	}
	t.Fatalf("device %s of %s is not in /proc/self/mountinfo (%d entries)", dev, dir, len(mounts))
}
