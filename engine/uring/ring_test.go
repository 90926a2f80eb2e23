//go:build linux

package uring

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
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
func TestReadWriteManyGoroutines(t *testing.T) {
	r := newRing(t)
	defer r.Close()
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
