package wire

// RangeLen applies the range contract (doc.go) to a read of
// length bytes at offset of a value of stored bytes: the bytes it returns
// (length 0 reads the remainder, an oversized length is clamped, offset ==
// stored reads nothing). ok is false for offset > stored, which is
// INVALID. Every engine, the node and the client apply it through this
// one function, so they cannot disagree about a range.
func RangeLen(stored, offset, length uint64) (n uint64, ok bool) {
	if offset > stored {
		return 0, false
	}
	n = stored - offset
	if length != 0 && length < n {
		n = length
	}
	return n, true
}
