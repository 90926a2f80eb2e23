package wire

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// BlockKey is the native identity of one cached block: the tenant hash of its
// namespace and the 128-bit object id of (namespace, object key). The server
// only ever sees BlockKeys; namespace and object-key bytes stay on the client.
type BlockKey struct {
	Tenant uint64
	ID     [16]byte
}

// FilenameLen is the length of BlockKey.Filename: 16 hex digits of the
// tenant followed by 32 hex digits of the object id.
const FilenameLen = 48

// AppendFilename appends the 48-character lower-case hex form of k to dst.
func (k BlockKey) AppendFilename(dst []byte) []byte {
	var raw [24]byte
	binary.BigEndian.PutUint64(raw[:8], k.Tenant)
	copy(raw[8:], k.ID[:])
	n := len(dst)
	dst = append(dst, make([]byte, FilenameLen)...)
	hex.Encode(dst[n:], raw[:])
	return dst
}

// Filename returns the 48-character lower-case hex form of k, used for file
// engine paths and for routing a block to one of a node's disks.
func (k BlockKey) Filename() string {
	var buf [FilenameLen]byte
	return string(k.AppendFilename(buf[:0]))
}

// String is Filename, so logs show the same form operators see on disk.
func (k BlockKey) String() string { return k.Filename() }

// ParseFilename parses the strict form written by Filename: exactly 48
// lower-case hex digits. Upper-case digits or any other length are rejected
// so that one block can never have two names on disk.
func ParseFilename(name string) (BlockKey, error) {
	var k BlockKey
	if len(name) != FilenameLen {
		return k, fmt.Errorf("block filename %q: want %d lower-case hex digits, got %d characters", name, FilenameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return k, fmt.Errorf("block filename %q: character %q at %d is not lower-case hex", name, c, i)
		}
	}
	var raw [24]byte
	if _, err := hex.Decode(raw[:], []byte(name)); err != nil {
		return k, fmt.Errorf("block filename %q: %w", name, err)
	}
	k.Tenant = binary.BigEndian.Uint64(raw[:8])
	copy(k.ID[:], raw[8:])
	return k, nil
}

// RouteHash is the 64-bit point of k on a Ketama ring. The object id is
// already a uniform SHA-256 prefix, so its first eight bytes serve directly
// and routing a block costs no hashing and no allocation.
func (k BlockKey) RouteHash() uint64 {
	return binary.BigEndian.Uint64(k.ID[:8]) ^ k.Tenant
}

// HasDuplicate reports whether keys holds one key twice: a batch that
// repeats a key must be applied in order so its last value wins. Short
// batches (the common case) are compared pairwise, without a map.
func HasDuplicate(keys []BlockKey) bool {
	if len(keys) <= 16 {
		for i := range keys {
			for j := i + 1; j < len(keys); j++ {
				if keys[i] == keys[j] {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[BlockKey]struct{}, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; ok {
			return true
		}
		seen[k] = struct{}{}
	}
	return false
}
