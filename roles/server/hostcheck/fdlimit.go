package hostcheck

import (
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// fdHeadroom is the descriptors a node needs beyond its engines' files and
// its connections: listeners, epoll, the HTTP side, the MDS client, logs.
const fdHeadroom = 64

// fdLimitShort reports whether a node holding open files (its engines'
// extents and tables, counted after they are open) and up to maxConns
// connections can run out of descriptors under limit, and how many it may
// want. Out of them, new connections wait on accept; a slab disk keeps
// every extent file open, so a large disk alone can take thousands.
func fdLimitShort(open, maxConns int, limit uint64) (want uint64, short bool) {
	want = uint64(open) + uint64(maxConns) + fdHeadroom
	return want, limit < want
}

// WarnFDLimit logs once at start when the process's open-file limit is
// below what the node may use. It reads the limit after the Go runtime
// raised the soft limit to the hard one, so it is the real ceiling. Call
// it after the engines are open, so their files are counted.
func WarnFDLimit(log *slog.Logger, maxConns int) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	if want, short := fdLimitShort(len(ents), maxConns, rl.Cur); short {
		log.Warn("the open-file limit is below what this node may use, so new connections may wait; raise LimitNOFILE (ulimit -n) or lower server.max_conns",
			"limit", rl.Cur, "open_files", len(ents), "max_conns", maxConns, "want", want)
	}
}
