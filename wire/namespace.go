package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// Canonical namespace descriptor, version 2.
//
// Connectors do not invent namespace bytes: they fill a NamespaceDescriptor
// from the engine's runtime metadata and encode it. The encoding is the
// 8-byte magic followed by exactly ten framed fields, frame(x) =
// u64le(len(x)) || x, in this order:
//
//	+--------------------------------------------------------------------+
//	| magic "DFKVNS\x00\x02" = 44 46 4b 56 4e 53 00 02          (8 bytes) |
//	+--------------------------------------------------------------------+
//	| u64le(len) | field bytes |   x 10, fields 1..10 below              |
//	+--------------------------------------------------------------------+
//
//	#   field               len    field bytes
//	1   tenant              >= 1   verbatim
//	2   model ID            >= 1   verbatim
//	3   model revision      >= 0   verbatim (empty = no revision pinned)
//	4   layout ID           >= 1   a Layout* constant, or "x-" + name
//	5   dtype               >= 1   verbatim, e.g. "bfloat16"
//	6   layout fingerprint  8      u64le (see LayoutFingerprint)
//	7   block tokens        4      u32le, >= 1
//	8   layer geometry      12     u32le layers || u32le kv heads ||
//	                               u32le head dim, each >= 1
//	9   group               >= 0   verbatim
//	10  topology sizes      20     u32le dp || tp || pcp || dcp || pp,
//	                               each >= 1
//
// Integers are little-endian inside their framed field, and the frame length
// of a fixed-width field must equal its width. Nothing follows field 10, and
// the whole encoding is at most MaxNamespaceBytes. Text fields are kept
// byte-for-byte (no case folding, trimming or Unicode normalization): two
// spellings of a model are two caches, which is the safe direction.
//
// These constants are part of the cache identity and must not be changed. A
// different layout of these bytes needs a new magic; a change in what a
// connector stores needs a new layout ID. Both deliberately start a cold
// cache.

// NamespaceMagic opens every canonical namespace descriptor.
const NamespaceMagic = "DFKVNS\x00\x02"

// Source-controlled connector raw-layout IDs. A connector that changes
// anything about the bytes it stores (shapes, order, dtype handling, paging)
// must get a new ID here, through code review, so old and new layouts can
// never be read as each other.
const (
	LayoutSGLangHiCache = "sglang-hicache/raw-v1"
	LayoutVLLM          = "vllm-multiwr-v4"
	LayoutLMCache       = "lmcache/raw-v1"
)

// ExperimentalLayoutPrefix marks a layout ID that is not source-controlled
// here: an out-of-tree or in-development connector may use "x-" + a name of
// its own. Such IDs can never equal a released layout ID, so they cannot
// alias a production cache; their owner is responsible for bumping the name
// when the stored layout changes.
const ExperimentalLayoutPrefix = "x-"

// namespaceFields is the number of framed fields after the magic.
const namespaceFields = 10

// Widths of the fixed-size fields.
const (
	fingerprintLen = 8
	blockTokensLen = 4
	geometryLen    = 12
	topologyLen    = 20
)

// fieldNames name the fields in error messages, indexed from 0.
var fieldNames = [namespaceFields]string{
	"tenant", "model ID", "model revision", "layout ID", "dtype",
	"layout fingerprint", "block tokens", "layer geometry", "group", "topology sizes",
}

// LayerGeometry is the model's attention geometry. Values are model-level
// (before any tensor or pipeline split): which share of them one rank stores
// is given by the object key's coordinates, and the exact per-rank shapes
// and strides go into the layout fingerprint.
type LayerGeometry struct {
	Layers  uint32 // attention layers whose KV the blocks carry
	KVHeads uint32 // key/value heads per layer (1 for MLA latent caches)
	HeadDim uint32 // elements per head (for MLA, the latent width)
}

// TopologySizes are the sizes of the deployment's parallel dimensions. They
// are identity because they decide how a block is split: a cache written at
// tp=8 cannot be read at tp=4 even where ranks happen to line up.
type TopologySizes struct {
	DP, TP, PCP, DCP, PP uint32
}

// NamespaceDescriptor is the canonical namespace a connector builds from its
// engine's runtime metadata. Field order matches the encoding.
type NamespaceDescriptor struct {
	Tenant            string // quota and on-disk owner; hashed alone for BlockKey.Tenant
	ModelID           string // exact model ID as the engine reports it
	ModelRevision     string // exact revision, may be empty
	LayoutID          string // Layout* constant or ExperimentalLayoutPrefix + name
	DType             string // KV dtype as the engine names it
	LayoutFingerprint uint64 // LayoutFingerprint of the connector's shape/stride fields
	BlockTokens       uint32 // tokens per block (page)
	LayerGeometry     LayerGeometry
	Group             string // deployment cache group name, may be empty
	TopologySizes     TopologySizes
}

// IsKnownLayout reports whether id is one of the source-controlled layout IDs.
func IsKnownLayout(id string) bool {
	switch id {
	case LayoutSGLangHiCache, LayoutVLLM, LayoutLMCache:
		return true
	}
	return false
}

// Validate checks everything Encode requires. Errors wrap StatusInvalid.
func (d NamespaceDescriptor) Validate() error {
	switch {
	case d.Tenant == "":
		return invalidDescriptor("tenant is empty")
	case d.ModelID == "":
		return invalidDescriptor("model ID is empty")
	case d.LayoutID == "":
		return invalidDescriptor("layout ID is empty")
	case !IsKnownLayout(d.LayoutID) &&
		!(strings.HasPrefix(d.LayoutID, ExperimentalLayoutPrefix) && len(d.LayoutID) > len(ExperimentalLayoutPrefix)):
		return invalidDescriptor(fmt.Sprintf("layout ID %q is neither %q, %q, %q nor %q+name",
			d.LayoutID, LayoutSGLangHiCache, LayoutVLLM, LayoutLMCache, ExperimentalLayoutPrefix))
	case d.DType == "":
		return invalidDescriptor("dtype is empty")
	case d.BlockTokens == 0:
		return invalidDescriptor("block tokens is 0")
	}
	g := d.LayerGeometry
	for _, f := range [...]struct {
		name string
		v    uint32
	}{
		{"layer geometry layers", g.Layers}, {"layer geometry kv heads", g.KVHeads}, {"layer geometry head dim", g.HeadDim},
		{"topology dp size", d.TopologySizes.DP}, {"topology tp size", d.TopologySizes.TP},
		{"topology pcp size", d.TopologySizes.PCP}, {"topology dcp size", d.TopologySizes.DCP},
		{"topology pp size", d.TopologySizes.PP},
	} {
		if f.v == 0 {
			return invalidDescriptor(f.name + " is 0")
		}
	}
	if n := d.encodedLen(); n > MaxNamespaceBytes {
		return invalidDescriptor(fmt.Sprintf("encoding is %d bytes, over the %d-byte namespace limit", n, MaxNamespaceBytes))
	}
	return nil
}

func invalidDescriptor(msg string) error {
	return fmt.Errorf("namespace descriptor: %s: %w", msg, StatusInvalid)
}

// encodedLen is the exact length of the encoding.
func (d NamespaceDescriptor) encodedLen() int {
	return len(NamespaceMagic) + namespaceFields*8 +
		len(d.Tenant) + len(d.ModelID) + len(d.ModelRevision) + len(d.LayoutID) + len(d.DType) +
		fingerprintLen + blockTokensLen + geometryLen + len(d.Group) + topologyLen
}

// Append validates d and appends its canonical encoding to dst. On error dst
// is returned unchanged.
func (d NamespaceDescriptor) Append(dst []byte) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return dst, err
	}
	return d.appendValid(dst), nil
}

// appendValid appends the encoding of an already validated descriptor.
func (d NamespaceDescriptor) appendValid(dst []byte) []byte {
	le := binary.LittleEndian
	b := append(dst, NamespaceMagic...)
	for _, s := range [...]string{d.Tenant, d.ModelID, d.ModelRevision, d.LayoutID, d.DType} {
		b = le.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = le.AppendUint64(b, fingerprintLen)
	b = le.AppendUint64(b, d.LayoutFingerprint)
	b = le.AppendUint64(b, blockTokensLen)
	b = le.AppendUint32(b, d.BlockTokens)
	b = le.AppendUint64(b, geometryLen)
	b = le.AppendUint32(b, d.LayerGeometry.Layers)
	b = le.AppendUint32(b, d.LayerGeometry.KVHeads)
	b = le.AppendUint32(b, d.LayerGeometry.HeadDim)
	b = le.AppendUint64(b, uint64(len(d.Group)))
	b = append(b, d.Group...)
	t := d.TopologySizes
	b = le.AppendUint64(b, topologyLen)
	for _, v := range [...]uint32{t.DP, t.TP, t.PCP, t.DCP, t.PP} {
		b = le.AppendUint32(b, v)
	}
	return b
}

// Encode returns the canonical namespace bytes of d, after Validate.
func (d NamespaceDescriptor) Encode() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d.appendValid(make([]byte, 0, d.encodedLen())), nil
}

// DecodeNamespace parses a canonical descriptor strictly: bad magic, a
// truncated or over-long field, a fixed-width field of the wrong width,
// trailing bytes, or a descriptor Validate would reject all fail with an
// error wrapping StatusInvalid. What it accepts re-encodes to the same bytes.
func DecodeNamespace(b []byte) (NamespaceDescriptor, error) {
	var d NamespaceDescriptor
	if len(b) > MaxNamespaceBytes {
		return d, fmt.Errorf("namespace descriptor: %d bytes, over the %d-byte namespace limit: %w", len(b), MaxNamespaceBytes, StatusInvalid)
	}
	if len(b) < len(NamespaceMagic) || string(b[:len(NamespaceMagic)]) != NamespaceMagic {
		return d, fmt.Errorf("namespace descriptor: does not start with magic %q: %w", NamespaceMagic, StatusInvalid)
	}
	var f [namespaceFields][]byte
	rest := b[len(NamespaceMagic):]
	off := len(NamespaceMagic)
	for i := range f {
		if len(rest) < 8 {
			return d, fmt.Errorf("namespace descriptor: field %d (%s): length word truncated at offset %d (%d bytes left): %w",
				i+1, fieldNames[i], off, len(rest), StatusInvalid)
		}
		n := binary.LittleEndian.Uint64(rest)
		rest = rest[8:]
		if n > uint64(len(rest)) {
			return d, fmt.Errorf("namespace descriptor: field %d (%s): length %d at offset %d exceeds the %d bytes left: %w",
				i+1, fieldNames[i], n, off, len(rest), StatusInvalid)
		}
		f[i], rest = rest[:n], rest[n:]
		off += 8 + int(n)
	}
	if len(rest) != 0 {
		return d, fmt.Errorf("namespace descriptor: %d trailing bytes after field %d: %w", len(rest), namespaceFields, StatusInvalid)
	}
	for _, w := range [...]struct{ i, want int }{
		{5, fingerprintLen}, {6, blockTokensLen}, {7, geometryLen}, {9, topologyLen},
	} {
		if i, want := w.i, w.want; len(f[i]) != want {
			return d, fmt.Errorf("namespace descriptor: field %d (%s) is %d bytes, want %d: %w",
				i+1, fieldNames[i], len(f[i]), want, StatusInvalid)
		}
	}
	le := binary.LittleEndian
	d = NamespaceDescriptor{
		Tenant:            string(f[0]),
		ModelID:           string(f[1]),
		ModelRevision:     string(f[2]),
		LayoutID:          string(f[3]),
		DType:             string(f[4]),
		LayoutFingerprint: le.Uint64(f[5]),
		BlockTokens:       le.Uint32(f[6]),
		LayerGeometry: LayerGeometry{
			Layers: le.Uint32(f[7][0:]), KVHeads: le.Uint32(f[7][4:]), HeadDim: le.Uint32(f[7][8:]),
		},
		Group: string(f[8]),
		TopologySizes: TopologySizes{
			DP: le.Uint32(f[9][0:]), TP: le.Uint32(f[9][4:]), PCP: le.Uint32(f[9][8:]),
			DCP: le.Uint32(f[9][12:]), PP: le.Uint32(f[9][16:]),
		},
	}
	if err := d.Validate(); err != nil {
		return NamespaceDescriptor{}, err
	}
	return d, nil
}

// CanonicalTenant returns the tenant field of a namespace that has the form
// of a canonical descriptor: the magic followed by one or more framed fields
// that consume the bytes exactly, the first (the tenant) non-empty. Any other
// namespace, including a malformed descriptor, reports false and TenantHash
// then uses the whole namespace as the tenant identity.
//
// Only the framing is checked, not what Validate checks: a tenant's hash
// (its quota and on-disk prefix) must not change when a later release learns
// a new layout ID or field rule, so it depends on bytes alone. The returned
// slice aliases ns.
//
// So a descriptor that Validate and DecodeNamespace refuse (an unknown
// layout ID, a field of the wrong width, nine or eleven fields) is still
// charged to the tenant its first field names, exactly as a valid one of
// that tenant is. That is deliberate. Nothing on the data path refuses it
// (a namespace is opaque bytes to the client, and a node sees only the
// tenant hash), so its blocks are stored, and they are that tenant's: to
// give them an identity of their own would let a connector escape its
// tenant's quota, metric and on-disk prefix by a malformed descriptor,
// and would grant nothing a client could not do anyway, since tenants are
// not authenticated (any client may send a valid descriptor naming any
// tenant, or the hash itself). Only bytes whose framing does not hold (a
// truncated field, an empty tenant, a trailing partial length) name no
// tenant and are their own identity. The identity vectors shared with the
// Python client pin both.
func CanonicalTenant(ns []byte) ([]byte, bool) {
	if !bytes.HasPrefix(ns, []byte(NamespaceMagic)) {
		return nil, false
	}
	rest := ns[len(NamespaceMagic):]
	var tenant []byte
	for first := true; first || len(rest) > 0; first = false {
		if len(rest) < 8 {
			return nil, false
		}
		n := binary.LittleEndian.Uint64(rest)
		rest = rest[8:]
		if n > uint64(len(rest)) {
			return nil, false
		}
		if first {
			tenant = rest[:n:n]
		}
		rest = rest[n:]
	}
	if len(tenant) == 0 {
		return nil, false
	}
	return tenant, true
}

// LayoutField is one named shape or stride property of a connector's raw
// layout, e.g. {"k_shape", []int64{64, 8, 128}}.
type LayoutField struct {
	Name   string
	Values []int64
}

// layoutDomain separates layout fingerprints from other SHA-256 uses.
const layoutDomain = "DFKVLAYOUT1"

// LayoutFingerprint is the deterministic 64-bit hash of a connector's
// shape/stride fields that goes into field 6 of the namespace descriptor:
//
//	fingerprint = big-endian u64 of SHA-256(
//	    "DFKVLAYOUT1" ||
//	    for each field, in the order given:
//	        u64le(len(name)) || name ||
//	        u64le(8*len(values)) || u64le(values[0]) || u64le(values[1]) || ...
//	)[0:8]
//
// Each value is written as its 64-bit two's-complement, little-endian. The
// order is the caller's (no sorting, no maps), so a connector must list its
// fields in a fixed source order; reordering fields is a layout change. In
// Python: h = sha256(b"DFKVLAYOUT1"); for name, vals in fields:
// h.update(frame(name.encode()) + frame(b"".join(struct.pack("<q", v) for v
// in vals))); int.from_bytes(h.digest()[:8], "big").
func LayoutFingerprint(fields ...LayoutField) uint64 {
	h := sha256.New()
	h.Write([]byte(layoutDomain))
	var w [8]byte
	for _, f := range fields {
		binary.LittleEndian.PutUint64(w[:], uint64(len(f.Name)))
		h.Write(w[:])
		h.Write([]byte(f.Name))
		binary.LittleEndian.PutUint64(w[:], uint64(8*len(f.Values)))
		h.Write(w[:])
		for _, v := range f.Values {
			binary.LittleEndian.PutUint64(w[:], uint64(v))
			h.Write(w[:])
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return binary.BigEndian.Uint64(sum[:8])
}
