package wire

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Block identity. A client names a block by a namespace (immutable bytes
// given at open) and an object key (bytes per call). Both are opaque: an
// embedded NUL is an identity byte like any other. The client turns the pair
// into a BlockKey and only the BlockKey crosses the wire:
//
//	frame(x)  = u64le(len(x)) || x
//	object id = SHA-256(frame(namespace) || frame(object key))[0:16]
//	tenant    = big-endian u64 of
//	            SHA-256("DFKVTENANT1" || u64le(len(identity)) || identity)[0:8]
//
// where identity is the tenant field of a canonical namespace descriptor
// (see CanonicalTenant) and the whole namespace otherwise. Every constant
// and byte order here is part of the cache identity: changing one silently
// turns every stored block into a miss, and the Python client must compute
// the same bytes (testdata/identity_golden.json holds the shared vectors).

// Span limits. They bound what a client can make the identity code hash and
// keep a hostile caller from feeding megabytes through every call; both are
// inclusive.
const (
	// MaxNamespaceBytes is the largest namespace accepted (64 KiB).
	MaxNamespaceBytes = 64 << 10
	// MaxObjectKeyBytes is the largest object key accepted (4 KiB).
	MaxObjectKeyBytes = 4 << 10
)

// tenantDomain separates tenant hashes from every other SHA-256 use, so a
// tenant hash can never equal the prefix of an object id or a fingerprint.
var tenantDomain = []byte("DFKVTENANT1")

// Frame appends u64le(len(x)) || x to dst. Length-framing every span makes
// concatenations unambiguous: ("ab", "c") and ("a", "bc") frame differently.
func Frame(dst, x []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(x)))
	return append(dst, x...)
}

// frameLen is the 8-byte length word of frame(x) for len(x) == n.
func frameLen(n int) (b [8]byte) {
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	return b
}

// ObjectID returns the first 16 bytes of
// SHA-256(frame(namespace) || frame(objectKey)). It does not validate the
// spans (NewBlockKey does) and does not allocate: the digest is built from
// sha256.New in a way the compiler devirtualizes and keeps on the stack.
func ObjectID(namespace, objectKey []byte) (id [16]byte) {
	h := sha256.New()
	n := frameLen(len(namespace))
	h.Write(n[:])
	h.Write(namespace)
	k := frameLen(len(objectKey))
	h.Write(k[:])
	h.Write(objectKey)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	copy(id[:], sum[:16])
	return id
}

// TenantHash returns the 64-bit tenant of a namespace: the first eight bytes,
// big-endian, of SHA-256("DFKVTENANT1" || u64le(len(identity)) || identity).
// identity is the tenant field when the namespace is a canonical descriptor
// (CanonicalTenant reports true) and the whole namespace otherwise, so every
// namespace of one tenant shares one quota and one on-disk prefix no matter
// which model or layout it names. It does not allocate.
func TenantHash(namespace []byte) uint64 {
	identity := namespace
	if t, ok := CanonicalTenant(namespace); ok {
		identity = t
	}
	h := sha256.New()
	h.Write(tenantDomain)
	n := frameLen(len(identity))
	h.Write(n[:])
	h.Write(identity)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return binary.BigEndian.Uint64(sum[:8])
}

// ParseTenant reads a tenant as operators write it in the quotas and
// credentials files: a name, hashed as a client hashes its namespace's
// tenant field (TenantHash), or the 64-bit hash itself as "0x" and 16 hex
// digits (byHash), for a tenant whose name the operator does not know.
func ParseTenant(s string) (hash uint64, byHash bool, err error) {
	if s == "" {
		return 0, false, errors.New("an empty tenant name")
	}
	if h, ok := strings.CutPrefix(s, "0x"); ok && len(h) == 16 {
		b, err := hex.DecodeString(h)
		if err != nil {
			return 0, false, fmt.Errorf("tenant %q: not 16 hex digits: %v", s, err)
		}
		return binary.BigEndian.Uint64(b), true, nil
	}
	return TenantHash([]byte(s)), false, nil
}

// checkNamespace rejects spans the identity must not be built from: an empty
// namespace would let unrelated clients share blocks, and the limit bounds
// the hashing a caller can demand.
func checkNamespace(namespace []byte) error {
	switch {
	case len(namespace) == 0:
		return fmt.Errorf("namespace is empty: %w", StatusInvalid)
	case len(namespace) > MaxNamespaceBytes:
		return fmt.Errorf("namespace is %d bytes, over the %d-byte limit: %w", len(namespace), MaxNamespaceBytes, StatusInvalid)
	}
	return nil
}

// checkObjectKey is checkNamespace for object keys.
func checkObjectKey(objectKey []byte) error {
	switch {
	case len(objectKey) == 0:
		return fmt.Errorf("object key is empty: %w", StatusInvalid)
	case len(objectKey) > MaxObjectKeyBytes:
		return fmt.Errorf("object key is %d bytes, over the %d-byte limit: %w", len(objectKey), MaxObjectKeyBytes, StatusInvalid)
	}
	return nil
}

// NewBlockKey derives the BlockKey of (namespace, objectKey). Empty or
// oversized spans fail closed with an error wrapping StatusInvalid. A client
// mapping many keys in one namespace should use a KeyMapper, which hashes
// the namespace once.
func NewBlockKey(namespace, objectKey []byte) (BlockKey, error) {
	if err := checkNamespace(namespace); err != nil {
		return BlockKey{}, err
	}
	if err := checkObjectKey(objectKey); err != nil {
		return BlockKey{}, err
	}
	return BlockKey{Tenant: TenantHash(namespace), ID: ObjectID(namespace, objectKey)}, nil
}

// KeyMapper maps object keys of one namespace to BlockKeys. A client handle
// holds one for its whole life: the namespace is validated, its tenant hash
// computed and frame(namespace) absorbed into a SHA-256 state once, so each
// key costs only the hash of frame(objectKey) and no allocation. A KeyMapper
// is immutable and safe for concurrent use.
type KeyMapper struct {
	namespace []byte // private copy; the caller may reuse its buffer
	tenant    uint64
	// state is the marshaled SHA-256 state after frame(namespace). nil when
	// the linked SHA-256 cannot marshal its state (a FIPS/boring build), in
	// which case BlockKey hashes the namespace again: slower, same answer.
	state []byte
}

// NewKeyMapper validates namespace and prepares a KeyMapper for it. The
// namespace bytes are copied.
func NewKeyMapper(namespace []byte) (*KeyMapper, error) {
	if err := checkNamespace(namespace); err != nil {
		return nil, err
	}
	m := &KeyMapper{
		namespace: append([]byte(nil), namespace...),
		tenant:    TenantHash(namespace),
	}
	h := sha256.New()
	n := frameLen(len(namespace))
	h.Write(n[:])
	h.Write(namespace)
	if mh, ok := h.(encoding.BinaryMarshaler); ok {
		if st, err := mh.MarshalBinary(); err == nil {
			m.state = st
		}
	}
	return m, nil
}

// Tenant returns the tenant hash shared by every BlockKey of this mapper.
func (m *KeyMapper) Tenant() uint64 { return m.tenant }

// BlockKey returns the BlockKey of objectKey in the mapper's namespace,
// equal to NewBlockKey(namespace, objectKey). An empty or oversized key fails
// with an error wrapping StatusInvalid.
func (m *KeyMapper) BlockKey(objectKey []byte) (BlockKey, error) {
	if err := checkObjectKey(objectKey); err != nil {
		return BlockKey{}, err
	}
	return BlockKey{Tenant: m.tenant, ID: m.objectID(objectKey)}, nil
}

// objectID resumes the saved namespace state. Restoring a state into a fresh
// stack digest is what keeps this path free of allocations.
func (m *KeyMapper) objectID(objectKey []byte) (id [16]byte) {
	if m.state == nil {
		return ObjectID(m.namespace, objectKey)
	}
	h := sha256.New()
	u, ok := h.(encoding.BinaryUnmarshaler)
	if !ok || u.UnmarshalBinary(m.state) != nil {
		return ObjectID(m.namespace, objectKey)
	}
	k := frameLen(len(objectKey))
	h.Write(k[:])
	h.Write(objectKey)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	copy(id[:], sum[:16])
	return id
}
