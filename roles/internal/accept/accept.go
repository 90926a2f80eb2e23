// Package accept tells a listener's passing Accept failures from final
// ones, and paces the retries. A node that runs out of file descriptors
// (a client opening connections faster than they close, or a low
// LimitNOFILE) gets EMFILE from accept; taking that as the end of the
// listener would let one misbehaving client take every other client's
// cache away. The shortage passes as connections close, so the loop waits
// and accepts again, as net/http does.
package accept

import (
	"errors"
	"syscall"
	"time"
)

// Transient reports whether err from Accept is a passing condition after
// which accepting again can succeed: out of file descriptors (EMFILE,
// ENFILE), out of kernel memory (ENOBUFS, ENOMEM), or one connection that
// failed before it was accepted (ECONNABORTED, ECONNRESET, EPROTO, and
// EPERM when a firewall rule refused it). A closed listener and every
// other error are final.
func Transient(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Pause is how long to wait before accepting again after the nth
// consecutive transient failure (n ≥ 1): 5 ms, doubling, at most 1 s. It
// keeps a loop that cannot get a descriptor from spinning on the CPU the
// other connections need, and gives the shortage time to pass.
func Pause(n int) time.Duration {
	const first, most = 5 * time.Millisecond, time.Second
	if n < 1 {
		n = 1
	}
	if n > 8 { // 5 ms << 8 is past the cap already
		return most
	}
	return min(first<<(n-1), most)
}
