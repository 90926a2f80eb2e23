package hostcheck

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in a path field of mountinfo, which procfs leaves
// as the kernel wrote them.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// deviceOf is the "major:minor" of the filesystem holding path.
func deviceOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// onlineDiscardWarnings names every slab disk whose filesystem is ext4
// mounted with online discard. The slab engine preallocates its extents
// with fallocate, which ext4 records as unwritten extents; the first write
// into each part converts it, and the conversions that merge the extent
// tree free its blocks with a synchronous discard while holding the file's
// block-map lock, stalling a fresh disk's PUTs (and GETs of the same
// extent file) for up to seconds until every extent has been written
// once. Periodic fstrim does the same trimming without the stall. A disk
// whose mount cannot be found is not judged.
func onlineDiscardWarnings(dirs []string, mounts []*procfs.MountInfo, deviceOf func(string) (string, error)) []discardWarning {
	var out []discardWarning
	for _, dir := range dirs {
		dev, err := deviceOf(dir)
		if err != nil {
			continue
		}
		i := slices.IndexFunc(mounts, func(m *procfs.MountInfo) bool { return m.MajorMinorVer == dev })
		if i < 0 {
			continue
		}
		m := mounts[i]
		if _, discard := m.SuperOptions["discard"]; m.FSType == "ext4" && discard {
			out = append(out, discardWarning{dir: dir, source: unescapeMountinfo(m.Source), mountPoint: unescapeMountinfo(m.MountPoint)})
		}
	}
	return out
}

// discardWarning is a slab disk on an ext4 filesystem mounted with online
// discard.
type discardWarning struct{ dir, source, mountPoint string }

// log writes the warning, with what to do about it.
func (w discardWarning) log(log *slog.Logger) {
	log.Warn("disk: ext4 mounted with online discard stalls a fresh disk's first writes; remount it nodiscard and use fstrim.timer",
		"dir", w.dir, "device", w.source, "mount", w.mountPoint)
}

// WarnOnlineDiscard logs a warning for each of dirs (a node's slab
// disks, which must exist by then so their mounts can be found) whose
// filesystem is ext4 mounted with online discard.
func WarnOnlineDiscard(log *slog.Logger, dirs []string) {
	for _, w := range onlineDiscardWarnings(dirs, procMounts(procfs.DefaultMountPoint), deviceOf) {
		w.log(log)
	}
}

// procMounts reads this process's mount table (self/mountinfo) from the
// proc filesystem at proc; nil if it cannot, and then no disk is judged.
func procMounts(proc string) []*procfs.MountInfo {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		return nil
	}
	mounts, err := fs.GetMounts()
	if err != nil {
		return nil
	}
	return mounts
}
