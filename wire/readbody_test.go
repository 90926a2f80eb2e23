package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestReadGrowing: the n bytes come back exactly, a buffer large enough
// is used as it is, a short body is io.ErrUnexpectedEOF, and a body that
// never comes grows the buffer no further than the bytes that did.
func TestReadGrowing(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	got, err := ReadGrowing(bytes.NewReader(src), nil, len(src))
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("64 KiB into nil: %d bytes, %v", len(got), err)
	}
	buf := make([]byte, 0, 100)
	got, err = ReadGrowing(bytes.NewReader(src), buf, 100)
	if err != nil || !bytes.Equal(got, src[:100]) || &got[0] != &buf[:1][0] {
		t.Fatalf("100 bytes into a 100-byte buffer: %q, %v (a new array: %v)", got, err, &got[0] != &buf[:1][0])
	}
	for _, have := range []int{0, 1, 5000} {
		got, err = ReadGrowing(bytes.NewReader(src[:have]), nil, 1<<20)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 0 {
			t.Fatalf("%d of 1 MiB announced: %d bytes, %v; want none and io.ErrUnexpectedEOF", have, len(got), err)
		}
		if limit := max(2*have, 4096); cap(got) > limit {
			t.Fatalf("%d of 1 MiB announced grew the buffer to %d bytes, want at most %d", have, cap(got), limit)
		}
	}
}
