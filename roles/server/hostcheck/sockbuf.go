package hostcheck

import (
	"fmt"
	"log/slog"

	"github.com/dfkv/dfkv/config"
)

// WarnSocketBuffers logs a warning for each of the kernel's caps on
// socket buffers that server.socket_buffer_bytes exceeds.
func WarnSocketBuffers(log *slog.Logger, requested uint64) {
	for _, w := range socketBufferWarnings(requested, procSysctl) {
		log.Warn(w)
	}
}

// socketBufferWarnings says what the kernel will make of
// server.socket_buffer_bytes. Linux caps SO_SNDBUF and SO_RCVBUF at
// net.core.wmem_max and rmem_max (212,992 bytes on a stock kernel) without
// an error, and a fixed size turns the kernel's autotuning off, whose
// ceiling (tcp_wmem / tcp_rmem, 4 MiB and 6 MiB by default) is usually far
// larger: an operator asking for 8 MiB on a stock kernel gets 208 KiB per
// socket and slower large GETs than with the setting at 0. readSysctl
// returns a /proc/sys value; a value it cannot read is not judged.
func socketBufferWarnings(requested uint64, readSysctl func(name string) (uint64, bool)) []string {
	if requested == 0 {
		return nil
	}
	var out []string
	for _, s := range []struct{ name, what string }{
		{"wmem_max", "send"},
		{"rmem_max", "receive"},
	} {
		limit, ok := readSysctl("net/core/" + s.name)
		if !ok || requested <= limit {
			continue
		}
		out = append(out, fmt.Sprintf("server.socket_buffer_bytes (DFKV_SERVER_SOCKET_BUFFER_BYTES) is %s, but the kernel caps a socket's %s buffer at net.core.%s = %d bytes and turns autotuning off: raise that sysctl, or set 0 to keep autotuning",
			config.FormatSize(requested), s.what, s.name, limit))
	}
	return out
}

// procSysctl reads one integer from /proc/sys.
func procSysctl(name string) (uint64, bool) { return readUint("/proc/sys/" + name) }
