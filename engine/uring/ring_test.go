//go:build linux

package uring

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func newRing(t testing.TB) *Ring {
	t.Helper()
	r, err := New(64)
	if err != nil {
		t.Skipf("io_uring refused here (%v); the engine falls back to pread/pwrite", err)
	}
	return r
}

func aligned(n int) []byte {
	b := make([]byte, n+4096)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 4095)
	return b[off : off+n : off+n]
}

// TestReadWriteManyGoroutines: writes and reads from many goroutines at
// once, buffered and O_DIRECT, land where they were aimed and read back
// byte-exact; far more requests than ring slots are in flight at once.
// Both ways the reaper can wait run it: parked on the runtime's poller
// (the ring's fd registered with epoll), and blocked in io_uring_enter.
func TestReadWriteManyGoroutines(t *testing.T) {
	for _, poller := range []bool{true, false} {
		t.Run(fmt.Sprintf("poller=%v", poller), func(t *testing.T) {
			usePoller = poller
			defer func() { usePoller = true }()
			readWriteManyGoroutines(t, poller)
		})
	}
}

func readWriteManyGoroutines(t *testing.T, poller bool) {
	r := newRing(t)
	defer r.Close()
	if polled := r.poll != nil; polled != poller {
		t.Fatalf("the reaper waits on the runtime's poller: %v, want %v (does epoll refuse io_uring here?)", polled, poller)
	}
	for _, direct := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "f")
		flag := os.O_RDWR | os.O_CREATE
		if direct {
			flag |= syscall.O_DIRECT
		}
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		const blocks, size = 512, 4096
		if err := f.Truncate(blocks * size); err != nil {
			t.Fatal(err)
		}
		fd := int(f.Fd())
		block := func(i int) []byte {
			b := aligned(size)
			for j := range b {
				b[j] = byte(i*31 + j)
			}
			return b
		}
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				for i := w; i < blocks; i += 32 {
					if n, err := r.WriteAt(fd, block(i), int64(i*size)); n != size || err != nil {
						t.Errorf("WriteAt block %d: %d, %v", i, n, err)
					}
				}
			})
		}
		wg.Wait()
		for w := range 32 {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(w), 1))
				got := aligned(size)
				for range 64 {
					i := rnd.IntN(blocks)
					if n, err := r.ReadAt(fd, got, int64(i*size)); n != size || err != nil || !bytes.Equal(got, block(i)) {
						t.Errorf("ReadAt block %d: %d, %v, equal %v", i, n, err, bytes.Equal(got, block(i)))
						return
					}
				}
			})
		}
		wg.Wait()
		f.Close()
		if r.Ops.Load() == 0 || r.Submits.Load() == 0 {
			t.Fatal("nothing went through the ring")
		}
	}
}

// TestErrorsAndEOF: a read past the end returns 0 bytes and no error, as
// pread does; a bad descriptor is EBADF; a misaligned O_DIRECT read is
// EINVAL; after Close, calls fail with ErrClosed.
func TestErrorsAndEOF(t *testing.T) {
	r := newRing(t)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	buf := make([]byte, 10)
	if n, err := r.ReadAt(int(f.Fd()), buf, 0); n != 5 || err != nil || string(buf[:5]) != "hello" {
		t.Fatalf("short read: %d, %v", n, err)
	}
	if n, err := r.ReadAt(int(f.Fd()), buf, 100); n != 0 || err != nil {
		t.Fatalf("read past the end: %d, %v", n, err)
	}
	if _, err := r.ReadAt(1<<20, buf, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("bad descriptor: %v, want EBADF", err)
	}
	d, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err == nil {
		defer d.Close()
		if _, err := r.ReadAt(int(d.Fd()), aligned(4096)[1:513], 0); !errors.Is(err, unix.EINVAL) {
			t.Logf("misaligned O_DIRECT read: %v (this filesystem may not check alignment)", err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(int(f.Fd()), buf, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// BenchmarkRead4KiB16 compares 4 KiB O_DIRECT random reads from 16
// goroutines through the ring and through pread, on one 256 MiB file.
func BenchmarkRead4KiB16(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 256 << 10} {
		path := filepath.Join(b.TempDir(), "f")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_DIRECT, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		const fileBytes = 256 << 20
		chunk := aligned(1 << 20)
		for off := 0; off < fileBytes; off += len(chunk) {
			if _, err := f.WriteAt(chunk, int64(off)); err != nil {
				b.Fatal(err)
			}
		}
		fd := int(f.Fd())
		r := newRing(b)
		for _, how := range []string{"uring", "pread"} {
			b.Run(how+"/"+itoa(size>>10)+"KiB", func(b *testing.B) {
				b.SetBytes(int64(size))
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					buf := aligned(size)
					rnd := rand.New(rand.NewPCG(rand.Uint64(), 1))
					for pb.Next() {
						off := int64(rnd.IntN(fileBytes/size) * size)
						var err error
						if how == "uring" {
							_, err = r.ReadAt(fd, buf, off)
						} else {
							_, err = unix.Pread(fd, buf, off)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
		r.Close()
		f.Close()
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestConcurrentCallersShareASubmit: callers that queue while another
// caller's submission is on its way into the kernel do not each make a
// system call; the submitting caller takes all of them in its next one.
// Nine reads cost two submitting calls.
func TestConcurrentCallersShareASubmit(t *testing.T) {
	r := newRing(t)
	defer r.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const readers, size = 8, 4096
	want := bytes.Repeat([]byte("s"), (readers+1)*size)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	enterHook = func() { once.Do(func() { close(entered); <-release }) }
	defer func() { enterHook = nil }()
	submits, ops := r.Submits.Load(), r.Ops.Load()

	var wg sync.WaitGroup
	errs := make([]error, readers+1)
	read := func(i int) {
		b := make([]byte, size)
		if n, err := r.ReadAt(int(f.Fd()), b, int64(i*size)); err != nil || n != size || !bytes.Equal(b, want[:size]) {
			errs[i] = fmt.Errorf("read %d: %d bytes, %v", i, n, err)
		}
	}
	wg.Go(func() { read(0) })
	<-entered // the first read is submitting, the ring's lock released
	for i := 1; i <= readers; i++ {
		wg.Go(func() { read(i) })
	}
	for queued := uint32(0); queued != readers+1; {
		r.mu.Lock()
		queued = atomic.LoadUint32(r.sqTail) - atomic.LoadUint32(r.sqHead)
		r.mu.Unlock()
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got, done := r.Submits.Load()-submits, r.Ops.Load()-ops; got != 2 || done != readers+1 {
		t.Fatalf("%d reads took %d submitting calls, want %d reads in 2", done, got, readers+1)
	}
}

// BenchmarkReadAt4KiB16: 16 goroutines reading random 4 KiB blocks of a
// 256 MiB O_DIRECT file through one ring (set TMPDIR to put the file on
// the disk to measure); reports the submitting system calls per read.
func BenchmarkReadAt4KiB16(b *testing.B) {
	r := newRing(b)
	defer r.Close()
	const size, blocks = 4096, 65536
	path := filepath.Join(b.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	chunk := aligned(1 << 20)
	for off := int64(0); off < size*blocks; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	fd := int(f.Fd())
	submits, ops := r.Submits.Load(), r.Ops.Load()
	b.SetBytes(size)
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := aligned(size)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			if _, err := r.ReadAt(fd, buf, int64(rng.IntN(blocks))*size); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(r.Submits.Load()-submits)/float64(r.Ops.Load()-ops), "submits/read")
}

// TestFailedWaitAnswersEachRequestWithItsOwnResult: when the reaper's wait
// fails for good, the requests already in the kernel are not failed (the
// kernel may still be filling their buffers, which their callers would
// reuse): each is answered with its own completion, read from the CQ, and
// only then does the ring refuse new requests' callers (ErrClosed, so they
// use pread) and close cleanly.
func TestFailedWaitAnswersEachRequestWithItsOwnResult(t *testing.T) {
	var fired atomic.Bool
	waitHook = func(r *Ring) syscall.Errno {
		if fired.Load() {
			return 0
		}
		for {
			r.mu.Lock()
			busy := len(r.free) != len(r.inflight)
			r.mu.Unlock()
			if busy {
				break
			}
			runtime.Gosched()
		}
		fired.Store(true)
		return unix.EBADF
	}
	r := newRing(t)
	defer func() { waitHook = nil }()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const readers, size = 4, 4096
	want := make([]byte, readers*size)
	for i := range want {
		want[i] = byte(i / size * 7)
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, readers)
	for i := range readers {
		wg.Go(func() {
			b := make([]byte, size)
			n, err := r.ReadAt(int(f.Fd()), b, int64(i*size))
			if errors.Is(err, ErrClosed) {
				return // came after the failure: the caller uses pread
			}
			if err != nil || n != size || !bytes.Equal(b, want[i*size:(i+1)*size]) {
				errs[i] = fmt.Errorf("read %d in flight when the wait failed: %d bytes, %v", i, n, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !fired.Load() {
		t.Fatal("the wait never failed")
	}
	if _, err := r.ReadAt(int(f.Fd()), make([]byte, size), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("a read after the failed wait: %v, want ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close after the failed wait: %v", err)
	}
}
