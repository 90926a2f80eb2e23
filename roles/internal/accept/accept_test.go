package accept

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestTransient: descriptor and memory shortages and connections that
// failed before being accepted are passing, as the *net.OpError wrapping
// Accept returns them; a closed listener and other errors are final.
func TestTransient(t *testing.T) {
	wrap := func(e syscall.Errno) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EPERM} {
		if !Transient(wrap(e)) {
			t.Errorf("Transient(%v) = false, want true", e)
		}
	}
	for _, err := range []error{net.ErrClosed, fmt.Errorf("accept: %w", net.ErrClosed), wrap(syscall.EINVAL), wrap(syscall.EBADF), errors.New("other")} {
		if Transient(err) {
			t.Errorf("Transient(%v) = true, want false", err)
		}
	}
}

// TestPause: 5 ms after the first failure, doubling, capped at 1 s however
// long the failures go on.
func TestPause(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := Pause(i + 1); got != w*time.Millisecond {
			t.Errorf("Pause(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if Pause(0) != 5*time.Millisecond || Pause(1<<30) != time.Second {
		t.Errorf("Pause(0) = %v, Pause(1<<30) = %v", Pause(0), Pause(1<<30))
	}
}
