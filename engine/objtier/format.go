package objtier

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"

	"github.com/dfkv/dfkv/wire"
)

// An object holds one value behind a fixed header, so a reader that finds
// an object by its name alone can tell whether the bytes are the value of
// that key in this format before serving one of them:
//
//	off len  field
//	  0   8  magic "DFKVOBJ1"
//	  8   4  header length, u32 little-endian (HeaderLen)
//	 12   4  flags, zero
//	 16   8  tenant hash, u64 little-endian
//	 24  16  object id
//	 40   8  value length, u64 little-endian
//	 48   8  layout fingerprint (LayoutFingerprint), u64 little-endian
//	 56   4  CRC-32C (Castagnoli) of bytes 0..55 followed by the value
//	 60   4  zero
//
// The checksum covers the identity as well as the bytes, so an object
// copied or renamed under another key fails it like a corrupt one.
const HeaderLen = 64

const magic = "DFKVOBJ1"

// LayoutFingerprint names this object layout. A bucket shared with a
// later layout (or with anything else) holds objects whose fingerprint
// differs; a reader treats them as misses.
var LayoutFingerprint = func() uint64 {
	s := sha256.Sum256([]byte("dfkv object tier v1: 64-byte header, CRC-32C of header[0:56] || value"))
	return binary.LittleEndian.Uint64(s[:8])
}()

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Reasons an object is not served; each is a miss, counted by reason.
var (
	errShort       = errors.New("object shorter than its header")
	errHeader      = errors.New("object header of another layout")
	errIdentity    = errors.New("object holds another key's value")
	errLength      = errors.New("object length does not match its header")
	errChecksum    = errors.New("object checksum mismatch")
	errUnsupported = errors.New("object flags not understood")
)

// putHeader writes the header of key's value into hdr[:HeaderLen].
func putHeader(hdr []byte, key wire.BlockKey, value []byte) {
	_ = hdr[HeaderLen-1]
	copy(hdr[0:8], magic)
	binary.LittleEndian.PutUint32(hdr[8:12], HeaderLen)
	binary.LittleEndian.PutUint32(hdr[12:16], 0)
	binary.LittleEndian.PutUint64(hdr[16:24], key.Tenant)
	copy(hdr[24:40], key.ID[:])
	binary.LittleEndian.PutUint64(hdr[40:48], uint64(len(value)))
	binary.LittleEndian.PutUint64(hdr[48:56], LayoutFingerprint)
	sum := crc32.Update(crc32.Checksum(hdr[:56], castagnoli), castagnoli, value)
	binary.LittleEndian.PutUint32(hdr[56:60], sum)
	binary.LittleEndian.PutUint32(hdr[60:64], 0)
}

// checkObject verifies that obj is key's value in this layout and
// returns the value within it.
func checkObject(obj []byte, key wire.BlockKey) ([]byte, error) {
	if len(obj) < HeaderLen {
		return nil, errShort
	}
	if string(obj[0:8]) != magic || binary.LittleEndian.Uint32(obj[8:12]) != HeaderLen ||
		binary.LittleEndian.Uint64(obj[48:56]) != LayoutFingerprint {
		return nil, errHeader
	}
	if binary.LittleEndian.Uint32(obj[12:16]) != 0 || binary.LittleEndian.Uint32(obj[60:64]) != 0 {
		return nil, errUnsupported
	}
	var id [16]byte
	copy(id[:], obj[24:40])
	if binary.LittleEndian.Uint64(obj[16:24]) != key.Tenant || id != key.ID {
		return nil, errIdentity
	}
	value := obj[HeaderLen:]
	if binary.LittleEndian.Uint64(obj[40:48]) != uint64(len(value)) {
		return nil, errLength
	}
	sum := crc32.Update(crc32.Checksum(obj[:56], castagnoli), castagnoli, value)
	if sum != binary.LittleEndian.Uint32(obj[56:60]) {
		return nil, errChecksum
	}
	return value, nil
}

// ObjectName is where key's value lives in a bucket:
// "<prefix>/v1/<tenant, 16 hex>/<object id, 32 hex>" (no leading
// "<prefix>/" when prefix is empty). The name alone finds a block: a node,
// a replacement node or an embedded client computes it from the key.
func ObjectName(prefix string, key wire.BlockKey) string {
	b := make([]byte, 0, len(prefix)+4+16+1+32)
	if prefix != "" {
		b = append(b, prefix...)
		b = append(b, '/')
	}
	b = append(b, "v1/"...)
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], key.Tenant)
	b = hex.AppendEncode(b, t[:])
	b = append(b, '/')
	b = hex.AppendEncode(b, key.ID[:])
	return string(b)
}
