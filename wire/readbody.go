package wire

import (
	"errors"
	"io"
	"slices"
)

// ReadGrowing reads exactly n bytes from r into buf's array (from its
// start) and returns them. A buf too small grows as the bytes arrive, at
// most doubling from 4 KiB, not to n at once: a frame's length is its
// sender's claim, and memory set aside for it up front would let headers
// that announce large bodies and send nothing hold that much per
// connection until a deadline. On an error it returns buf emptied, with
// whatever capacity it reached, and io.ErrUnexpectedEOF for a body cut
// short.
func ReadGrowing(r io.Reader, buf []byte, n int) ([]byte, error) {
	t := buf[:0]
	for len(t) < n {
		if len(t) == cap(t) {
			t = slices.Grow(t, min(n-len(t), max(cap(t), 4096)))
		}
		m, err := io.ReadFull(r, t[len(t):min(n, cap(t))])
		t = t[:len(t)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return t[:0], err
		}
	}
	return t, nil
}
