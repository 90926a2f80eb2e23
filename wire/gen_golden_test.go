package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The identity golden vectors live in testdata/identity_golden.json, read by
// these tests and by the Python client's tests. The inputs are defined in
// goldenVectors below; `go test ./wire -run TestGolden -update` rewrites the
// file from them. Review the diff: any changed expected value is a cache
// identity change.

const goldenPath = "testdata/identity_golden.json"

// The -update flag may also be registered by another test file of this
// package; share it rather than panic on a redefinition.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files under testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

type goldenFile struct {
	Schema               map[string]string     `json:"_schema"`
	Limits               goldenLimits          `json:"limits"`
	NamespaceDescriptors []goldenDescriptorVec `json:"namespace_descriptors"`
	InvalidDescriptors   []goldenInvalidDesc   `json:"invalid_descriptors"`
	RawNamespaces        []goldenRawNamespace  `json:"raw_namespaces"`
	ObjectKeys           []goldenObjectKeyVec  `json:"object_keys"`
	InvalidObjectKeys    []goldenInvalidKey    `json:"invalid_object_keys"`
	BlockKeys            []goldenBlockKey      `json:"block_keys"`
	InvalidBlockKeys     []goldenInvalidBlock  `json:"invalid_block_keys"`
	LayoutFingerprints   []goldenFingerprint   `json:"layout_fingerprints"`
	RingDigests          []goldenRingDigest    `json:"ring_digests"`
	RingLookups          []goldenRingLookups   `json:"ring_lookups"`
}

type goldenLimits struct {
	MaxNamespaceBytes int `json:"max_namespace_bytes"`
	MaxObjectKeyBytes int `json:"max_object_key_bytes"`
}

type goldenGeometry struct {
	Layers  uint32 `json:"layers"`
	KVHeads uint32 `json:"kv_heads"`
	HeadDim uint32 `json:"head_dim"`
}

type goldenTopology struct {
	DP  uint32 `json:"dp"`
	TP  uint32 `json:"tp"`
	PCP uint32 `json:"pcp"`
	DCP uint32 `json:"dcp"`
	PP  uint32 `json:"pp"`
}

type goldenDescriptor struct {
	Tenant            string         `json:"tenant"`
	ModelID           string         `json:"model_id"`
	ModelRevision     string         `json:"model_revision"`
	LayoutID          string         `json:"layout_id"`
	DType             string         `json:"dtype"`
	LayoutFingerprint string         `json:"layout_fingerprint"`
	BlockTokens       uint32         `json:"block_tokens"`
	LayerGeometry     goldenGeometry `json:"layer_geometry"`
	Group             string         `json:"group"`
	TopologySizes     goldenTopology `json:"topology_sizes"`
}

type goldenDescriptorVec struct {
	Name        string           `json:"name"`
	Descriptor  goldenDescriptor `json:"descriptor"`
	EncodingHex string           `json:"encoding_hex"`
	TenantHash  string           `json:"tenant_hash"`
}

type goldenInvalidDesc struct {
	Name       string           `json:"name"`
	Descriptor goldenDescriptor `json:"descriptor"`
	Reason     string           `json:"reason"`
}

type goldenRawNamespace struct {
	Name               string  `json:"name"`
	NamespaceHex       string  `json:"namespace_hex"`
	Decodes            bool    `json:"decodes"`
	CanonicalTenantHex *string `json:"canonical_tenant_hex"`
	TenantHash         string  `json:"tenant_hash"`
}

type goldenKeyFields struct {
	Pool      string  `json:"pool"`
	Hash      string  `json:"hash"`
	DP        [2]int  `json:"dp"`
	TP        [2]int  `json:"tp"`
	PCP       [2]int  `json:"pcp"`
	DCP       [2]int  `json:"dcp"`
	PP        [2]int  `json:"pp"`
	Group     int     `json:"group"`
	Component string  `json:"component"`
	SG        *[2]int `json:"sg"`
}

type goldenObjectKeyVec struct {
	Name     string          `json:"name"`
	Fields   goldenKeyFields `json:"fields"`
	Rendered string          `json:"rendered"`
}

type goldenInvalidKey struct {
	Name   string          `json:"name"`
	Fields goldenKeyFields `json:"fields"`
	Reason string          `json:"reason"`
}

type goldenBlockKey struct {
	Name         string `json:"name"`
	NamespaceHex string `json:"namespace_hex"`
	ObjectKeyHex string `json:"object_key_hex"`
	TenantHash   string `json:"tenant_hash"`
	ObjectID     string `json:"object_id"`
	Filename     string `json:"filename"`
	RouteHash    string `json:"route_hash"`
	DiskHash     string `json:"disk_hash"`
}

type goldenInvalidBlock struct {
	Name         string `json:"name"`
	NamespaceHex string `json:"namespace_hex"`
	ObjectKeyHex string `json:"object_key_hex"`
	Reason       string `json:"reason"`
}

type goldenLayoutField struct {
	Name   string  `json:"name"`
	Values []int64 `json:"values"`
}

type goldenFingerprint struct {
	Name        string              `json:"name"`
	Fields      []goldenLayoutField `json:"fields"`
	Fingerprint string              `json:"fingerprint"`
}

type goldenRingDigest struct {
	ID     string    `json:"id"`
	Digest int       `json:"digest"`
	Points [4]string `json:"points"`
}

type goldenRingMember struct {
	ID     string `json:"id"`
	Weight int    `json:"weight"`
}

type goldenRingLookup struct {
	Hash  string `json:"hash"`
	Owner string `json:"owner"`
}

type goldenRingLookups struct {
	Name            string             `json:"name"`
	Members         []goldenRingMember `json:"members"`
	PointsPerWeight int                `json:"points_per_weight"`
	Lookups         []goldenRingLookup `json:"lookups"`
}

var goldenSchema = map[string]string{
	"about": "dfkv block-identity golden vectors (wire/ident.go, namespace.go, objectkey.go, ring.go). " +
		"Regenerate with `go test ./wire -run TestGolden -update` and review the diff: a changed expected value is a cache-identity change.",
	"encoding": "Byte strings are lower-case hex (*_hex). 64-bit values (tenant_hash, layout_fingerprint, fingerprint, route_hash, disk_hash, ring points and hashes) " +
		"are 16 lower-case hex digits of the unsigned value. Text fields (descriptor strings, object-key strings, layout field names) are JSON strings whose UTF-8 encoding is the exact field bytes.",
	"limits": "inclusive span limits: namespace and object key must be 1..max bytes.",
	"namespace_descriptors": "valid descriptors -> encoding_hex (canonical DFKVNS\\x00\\x02 bytes, which decode back to the same fields) and tenant_hash of that encoding. " +
		"descriptor keys, in encoding order: tenant, model_id, model_revision, layout_id, dtype, layout_fingerprint (16 hex), block_tokens, " +
		"layer_geometry {layers, kv_heads, head_dim}, group, topology_sizes {dp, tp, pcp, dcp, pp}; the byte layout is documented in wire/namespace.go.",
	"invalid_descriptors": "descriptor fields that encoding must reject (reason is informative only).",
	"raw_namespaces": "arbitrary namespace bytes: decodes = whether the strict descriptor decoder accepts them; canonical_tenant_hex = tenant field used as tenant identity " +
		"(null: not canonical, the whole namespace is the identity); tenant_hash = SHA-256(\"DFKVTENANT1\" || u64le(len(identity)) || identity)[0:8] big-endian.",
	"object_keys": "object key fields {pool, hash, dp, tp, pcp, dcp, pp, group, component, sg} ([size, rank] pairs, rank -1 = replicated; " +
		"sg = [width, group] or null) -> rendered key string (the object key bytes are its UTF-8 encoding).",
	"invalid_object_keys": "object key fields rendering must reject.",
	"block_keys": "namespace + object key bytes -> tenant_hash, object_id (32 hex = SHA-256(frame(ns) || frame(key))[0:16], frame(x) = u64le(len(x)) || x), " +
		"filename (16 hex tenant + 32 hex id), route_hash (big-endian u64 of id[0:8] XOR tenant), disk_hash (64-bit FNV-1a of filename).",
	"invalid_block_keys":  "namespace/object key spans that must fail closed (INVALID).",
	"layout_fingerprints": "ordered (name, int64 values) fields -> SHA-256(\"DFKVLAYOUT1\" || per field frame(name) || frame(u64le(v) for v in values))[0:8] big-endian.",
	"ring_digests":        "Ketama points: digest j of member id = SHA-256(id || \"-\" || decimal(j)); points = its four big-endian u64 words.",
	"ring_lookups":        "rings (members with weight, points per weight) and hash -> owning member id (first point >= hash, wrapping; equal points ordered by member id).",
}

func hexPtr(b []byte) *string {
	s := hex.EncodeToString(b)
	return &s
}

func u64hex(v uint64) string { return fmt.Sprintf("%016x", v) }

func toGoldenDescriptor(d NamespaceDescriptor) goldenDescriptor {
	return goldenDescriptor{
		Tenant: d.Tenant, ModelID: d.ModelID, ModelRevision: d.ModelRevision, LayoutID: d.LayoutID, DType: d.DType,
		LayoutFingerprint: u64hex(d.LayoutFingerprint), BlockTokens: d.BlockTokens,
		LayerGeometry: goldenGeometry{d.LayerGeometry.Layers, d.LayerGeometry.KVHeads, d.LayerGeometry.HeadDim},
		Group:         d.Group,
		TopologySizes: goldenTopology{d.TopologySizes.DP, d.TopologySizes.TP, d.TopologySizes.PCP, d.TopologySizes.DCP, d.TopologySizes.PP},
	}
}

func fromGoldenDescriptor(t *testing.T, g goldenDescriptor) NamespaceDescriptor {
	t.Helper()
	var fp uint64
	if _, err := fmt.Sscanf(g.LayoutFingerprint, "%016x", &fp); err != nil || len(g.LayoutFingerprint) != 16 {
		t.Fatalf("golden layout_fingerprint %q: want 16 hex digits (%v)", g.LayoutFingerprint, err)
	}
	return NamespaceDescriptor{
		Tenant: g.Tenant, ModelID: g.ModelID, ModelRevision: g.ModelRevision, LayoutID: g.LayoutID, DType: g.DType,
		LayoutFingerprint: fp, BlockTokens: g.BlockTokens,
		LayerGeometry: LayerGeometry{g.LayerGeometry.Layers, g.LayerGeometry.KVHeads, g.LayerGeometry.HeadDim},
		Group:         g.Group,
		TopologySizes: TopologySizes{g.TopologySizes.DP, g.TopologySizes.TP, g.TopologySizes.PCP, g.TopologySizes.DCP, g.TopologySizes.PP},
	}
}

func toGoldenKey(k ObjectKey) goldenKeyFields {
	g := goldenKeyFields{
		Pool: k.Pool, Hash: k.Hash, Group: k.Group, Component: k.Component,
		DP: [2]int{k.DP.Size, k.DP.Rank}, TP: [2]int{k.TP.Size, k.TP.Rank}, PCP: [2]int{k.PCP.Size, k.PCP.Rank},
		DCP: [2]int{k.DCP.Size, k.DCP.Rank}, PP: [2]int{k.PP.Size, k.PP.Rank},
	}
	if k.SG != nil {
		g.SG = &[2]int{k.SG.Width, k.SG.Group}
	}
	return g
}

func fromGoldenKey(g goldenKeyFields) ObjectKey {
	k := ObjectKey{
		Pool: g.Pool, Hash: g.Hash, Group: g.Group, Component: g.Component,
		DP: Coord{g.DP[0], g.DP[1]}, TP: Coord{g.TP[0], g.TP[1]}, PCP: Coord{g.PCP[0], g.PCP[1]},
		DCP: Coord{g.DCP[0], g.DCP[1]}, PP: Coord{g.PP[0], g.PP[1]},
	}
	if g.SG != nil {
		k.SG = &Scatter{Width: g.SG[0], Group: g.SG[1]}
	}
	return k
}

// Inputs shared by the golden vectors and the hand-computed tests.

var vllmFingerprintFields = []LayoutField{
	{"kv_cache_shape", []int64{2, 1024, 16, 8, 128}},
	{"kv_cache_stride", []int64{16777216, 16384, 1024, 128, 1}},
}

func goldenDescriptors() []struct {
	name string
	d    NamespaceDescriptor
} {
	return []struct {
		name string
		d    NamespaceDescriptor
	}{
		{"vllm-llama3-8b", NamespaceDescriptor{
			Tenant: "acme", ModelID: "meta-llama/Meta-Llama-3-8B-Instruct",
			ModelRevision: "5f0b02c75b57c5855da9ae460ce51323ea669d8a", LayoutID: LayoutVLLM, DType: "bfloat16",
			LayoutFingerprint: LayoutFingerprint(vllmFingerprintFields...), BlockTokens: 16,
			LayerGeometry: LayerGeometry{Layers: 32, KVHeads: 8, HeadDim: 128}, Group: "default",
			TopologySizes: TopologySizes{DP: 1, TP: 1, PCP: 1, DCP: 1, PP: 1},
		}},
		{"sglang-deepseek-mla", NamespaceDescriptor{
			Tenant: "team-b", ModelID: "deepseek-ai/DeepSeek-V3", ModelRevision: "", LayoutID: LayoutSGLangHiCache,
			DType: "float8_e4m3fn", LayoutFingerprint: LayoutFingerprint(LayoutField{"mla_page_shape", []int64{61, 64, 1, 576}}),
			BlockTokens: 64, LayerGeometry: LayerGeometry{Layers: 61, KVHeads: 1, HeadDim: 576}, Group: "",
			TopologySizes: TopologySizes{DP: 1, TP: 8, PCP: 1, DCP: 1, PP: 1},
		}},
		{"lmcache-nul-unicode", NamespaceDescriptor{
			Tenant: "t\x00nul", ModelID: "Qwen/Qwen2.5-7B-Instruct", ModelRevision: "rév\x00", LayoutID: LayoutLMCache,
			DType: "float16", LayoutFingerprint: 0xffffffffffffffff, BlockTokens: 256,
			LayerGeometry: LayerGeometry{Layers: 28, KVHeads: 4, HeadDim: 128}, Group: "g\x00",
			TopologySizes: TopologySizes{DP: 2, TP: 2, PCP: 1, DCP: 1, PP: 2},
		}},
		{"experimental-layout", NamespaceDescriptor{
			Tenant: "acme", ModelID: "m", LayoutID: "x-mylab/raw-v1", DType: "int8",
			BlockTokens: 1, LayerGeometry: LayerGeometry{1, 1, 1}, Group: "lab",
			TopologySizes: TopologySizes{DP: 4294967295, TP: 1, PCP: 3, DCP: 5, PP: 7},
		}},
	}
}

// rawDescriptor frames fields after the magic without any validation, for
// building malformed and non-canonical descriptors.
func rawDescriptor(fields ...[]byte) []byte {
	b := []byte(NamespaceMagic)
	for _, f := range fields {
		b = Frame(b, f)
	}
	return b
}

func u32le(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return b
}

func u64le(v uint64) []byte {
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)}
}

// descriptorFields returns the ten raw fields of a valid descriptor so tests
// can corrupt one.
func descriptorFields(layout string) [][]byte {
	return [][]byte{
		[]byte("acme"), []byte("m"), []byte("r"), []byte(layout), []byte("bfloat16"),
		u64le(7), u32le(16), u32le(32, 8, 128), []byte("default"), u32le(1, 1, 1, 1, 1),
	}
}

func withField(fields [][]byte, i int, v []byte) [][]byte {
	out := append([][]byte(nil), fields...)
	out[i] = v
	return out
}

func goldenRawInputs() []struct {
	name string
	ns   []byte
} {
	valid := rawDescriptor(descriptorFields(LayoutVLLM)...)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return []struct {
		name string
		ns   []byte
	}{
		{"plain-ascii", []byte("my-namespace")},
		{"nul-bytes", []byte("a\x00b\x00")},
		{"single-nul", []byte{0}},
		{"magic-only", []byte(NamespaceMagic)},
		{"magic-v1", cat([]byte("DFKVNS\x00\x01"), Frame(nil, []byte("acme")))},
		{"tenant-frame-only", rawDescriptor([]byte("acme"))},
		{"truncated-tenant-frame", cat([]byte(NamespaceMagic), u64le(10), []byte("acme"))},
		{"partial-length-word", cat(rawDescriptor([]byte("acme")), []byte{1, 2})},
		{"empty-tenant", rawDescriptor([]byte(""), []byte("m"))},
		{"huge-length", cat([]byte(NamespaceMagic), u64le(1<<63), []byte("acme"))},
		{"valid-minimal", valid},
		{"trailing-byte", cat(valid, []byte{0})},
		{"extra-field", cat(valid, Frame(nil, []byte("x")))},
		{"unknown-layout", rawDescriptor(descriptorFields("vllm-multiwr-v3")...)},
		{"fingerprint-7-bytes", rawDescriptor(withField(descriptorFields(LayoutVLLM), 5, []byte{1, 2, 3, 4, 5, 6, 7})...)},
		{"zero-block-tokens", rawDescriptor(withField(descriptorFields(LayoutVLLM), 6, u32le(0))...)},
		{"nine-fields", rawDescriptor(descriptorFields(LayoutVLLM)[:9]...)},
	}
}

func basicObjectKey() ObjectKey {
	return ObjectKey{
		Pool: "host", Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		DP: Coord{1, 0}, TP: Coord{4, 1}, PCP: Coord{1, 0}, DCP: Coord{1, 0}, PP: Coord{2, 1},
		Group: 0, Component: "kv",
	}
}

func goldenObjectKeyInputs() []struct {
	name string
	k    ObjectKey
} {
	rep := basicObjectKey()
	rep.TP = Coord{8, ReplicatedRank}
	rep.Component = "kv_latent"
	sg := basicObjectKey()
	sg.SG = &Scatter{Width: 4, Group: 7}
	sg.Group = 2
	odd := ObjectKey{
		Pool: "p/é", Hash: "0xABCdef", Component: "k\x00v",
		DP: Coord{3, 2}, TP: Coord{1, -1}, PCP: Coord{2, 0}, DCP: Coord{2, -1}, PP: Coord{16, 15},
		Group: 12345, SG: &Scatter{Width: 1, Group: 0},
	}
	return []struct {
		name string
		k    ObjectKey
	}{{"basic", basicObjectKey()}, {"replicated-tp", rep}, {"scatter", sg}, {"verbatim-strings", odd}}
}

func goldenInvalidObjectKeys() []struct {
	name, reason string
	k            ObjectKey
} {
	mut := func(f func(k *ObjectKey)) ObjectKey { k := basicObjectKey(); f(&k); return k }
	return []struct {
		name, reason string
		k            ObjectKey
	}{
		{"pipe-in-pool", "pool contains '|'", mut(func(k *ObjectKey) { k.Pool = "a|b" })},
		{"equals-in-hash", "hash contains '='", mut(func(k *ObjectKey) { k.Hash = "ab=" })},
		{"pipe-in-component", "component contains '|'", mut(func(k *ObjectKey) { k.Component = "kv|sg=1:0" })},
		{"empty-pool", "pool is empty", mut(func(k *ObjectKey) { k.Pool = "" })},
		{"empty-hash", "hash is empty", mut(func(k *ObjectKey) { k.Hash = "" })},
		{"empty-component", "component is empty", mut(func(k *ObjectKey) { k.Component = "" })},
		{"size-zero", "dp size 0", mut(func(k *ObjectKey) { k.DP = Coord{0, 0} })},
		{"rank-equals-size", "tp rank 4 of 4", mut(func(k *ObjectKey) { k.TP = Coord{4, 4} })},
		{"rank-below-replicated", "pp rank -2", mut(func(k *ObjectKey) { k.PP = Coord{2, -2} })},
		{"negative-group", "group -1", mut(func(k *ObjectKey) { k.Group = -1 })},
		{"sg-width-zero", "scatter width 0", mut(func(k *ObjectKey) { k.SG = &Scatter{0, 0} })},
		{"sg-group-negative", "scatter group -1", mut(func(k *ObjectKey) { k.SG = &Scatter{2, -1} })},
	}
}

func goldenInvalidDescriptors() []struct {
	name, reason string
	d            NamespaceDescriptor
} {
	mut := func(f func(d *NamespaceDescriptor)) NamespaceDescriptor {
		d := goldenDescriptors()[0].d
		f(&d)
		return d
	}
	return []struct {
		name, reason string
		d            NamespaceDescriptor
	}{
		{"empty-tenant", "tenant is empty", mut(func(d *NamespaceDescriptor) { d.Tenant = "" })},
		{"empty-model-id", "model ID is empty", mut(func(d *NamespaceDescriptor) { d.ModelID = "" })},
		{"empty-layout-id", "layout ID is empty", mut(func(d *NamespaceDescriptor) { d.LayoutID = "" })},
		{"unknown-layout-id", "layout ID not source-controlled", mut(func(d *NamespaceDescriptor) { d.LayoutID = "vllm-multiwr-v3" })},
		{"bare-experimental-prefix", "\"x-\" without a name", mut(func(d *NamespaceDescriptor) { d.LayoutID = "x-" })},
		{"empty-dtype", "dtype is empty", mut(func(d *NamespaceDescriptor) { d.DType = "" })},
		{"zero-block-tokens", "block tokens is 0", mut(func(d *NamespaceDescriptor) { d.BlockTokens = 0 })},
		{"zero-layers", "layers is 0", mut(func(d *NamespaceDescriptor) { d.LayerGeometry.Layers = 0 })},
		{"zero-kv-heads", "kv heads is 0", mut(func(d *NamespaceDescriptor) { d.LayerGeometry.KVHeads = 0 })},
		{"zero-head-dim", "head dim is 0", mut(func(d *NamespaceDescriptor) { d.LayerGeometry.HeadDim = 0 })},
		{"zero-dp", "dp size is 0", mut(func(d *NamespaceDescriptor) { d.TopologySizes.DP = 0 })},
		{"zero-tp", "tp size is 0", mut(func(d *NamespaceDescriptor) { d.TopologySizes.TP = 0 })},
		{"zero-pcp", "pcp size is 0", mut(func(d *NamespaceDescriptor) { d.TopologySizes.PCP = 0 })},
		{"zero-dcp", "dcp size is 0", mut(func(d *NamespaceDescriptor) { d.TopologySizes.DCP = 0 })},
		{"zero-pp", "pp size is 0", mut(func(d *NamespaceDescriptor) { d.TopologySizes.PP = 0 })},
	}
}

func goldenBlockKeyInputs() []struct {
	name    string
	ns, key []byte
} {
	enc := func(i int) []byte {
		d := goldenDescriptors()[i].d
		b, err := d.Encode()
		if err != nil {
			panic(err)
		}
		return b
	}
	render := func(i int) []byte {
		k := goldenObjectKeyInputs()[i].k
		s, err := k.Render()
		if err != nil {
			panic(err)
		}
		return []byte(s)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return []struct {
		name    string
		ns, key []byte
	}{
		{"ascii", []byte("ns"), []byte("key")},
		{"nul-bytes", []byte("a\x00"), []byte("\x00b")},
		{"canonical-vllm", enc(0), render(0)},
		{"canonical-mla-replicated", enc(1), render(1)},
		{"canonical-nul-tenant-scatter", enc(2), render(2)},
		{"binary-key", []byte("binary"), all},
		// frame(ns) is 63 bytes and frame(ns)||frame(key) crosses SHA-256's
		// 64-byte block and its length-padding boundary.
		{"block-boundary", bytes.Repeat([]byte("n"), 55), bytes.Repeat([]byte("k"), 56)},
	}
}

func goldenFingerprintInputs() []struct {
	name   string
	fields []LayoutField
} {
	return []struct {
		name   string
		fields []LayoutField
	}{
		{"no-fields", nil},
		{"vllm-shape-stride", vllmFingerprintFields},
		{"vllm-stride-shape-reordered", []LayoutField{vllmFingerprintFields[1], vllmFingerprintFields[0]}},
		{"empty-values", []LayoutField{{"a", []int64{}}}},
		{"extremes", []LayoutField{{"v", []int64{-1, 0, 1, 9223372036854775807, -9223372036854775808}}}},
		{"empty-name", []LayoutField{{"", []int64{1}}}},
	}
}

var goldenRingMembers = []Member{{ID: "node-a", Weight: 1}, {ID: "node-b", Weight: 2}, {ID: "node-c", Weight: 1}}

var goldenRingHashes = []uint64{0, 1, 0x0123456789abcdef, 0x7fffffffffffffff, 0x8000000000000000, 0xdeadbeefcafef00d, 0xfffffffffffffffe, 0xffffffffffffffff}

// goldenVectors computes every vector from the Go inputs above with the
// package's own functions.
func goldenVectors() (goldenFile, error) {
	g := goldenFile{
		Schema: goldenSchema,
		Limits: goldenLimits{MaxNamespaceBytes, MaxObjectKeyBytes},
	}
	for _, v := range goldenDescriptors() {
		enc, err := v.d.Encode()
		if err != nil {
			return g, fmt.Errorf("descriptor %s: %w", v.name, err)
		}
		g.NamespaceDescriptors = append(g.NamespaceDescriptors, goldenDescriptorVec{
			Name: v.name, Descriptor: toGoldenDescriptor(v.d), EncodingHex: hex.EncodeToString(enc), TenantHash: u64hex(TenantHash(enc)),
		})
	}
	for _, v := range goldenInvalidDescriptors() {
		g.InvalidDescriptors = append(g.InvalidDescriptors, goldenInvalidDesc{Name: v.name, Descriptor: toGoldenDescriptor(v.d), Reason: v.reason})
	}
	for _, v := range goldenRawInputs() {
		_, err := DecodeNamespace(v.ns)
		r := goldenRawNamespace{Name: v.name, NamespaceHex: hex.EncodeToString(v.ns), Decodes: err == nil, TenantHash: u64hex(TenantHash(v.ns))}
		if t, ok := CanonicalTenant(v.ns); ok {
			r.CanonicalTenantHex = hexPtr(t)
		}
		g.RawNamespaces = append(g.RawNamespaces, r)
	}
	for _, v := range goldenObjectKeyInputs() {
		s, err := v.k.Render()
		if err != nil {
			return g, fmt.Errorf("object key %s: %w", v.name, err)
		}
		g.ObjectKeys = append(g.ObjectKeys, goldenObjectKeyVec{Name: v.name, Fields: toGoldenKey(v.k), Rendered: s})
	}
	for _, v := range goldenInvalidObjectKeys() {
		g.InvalidObjectKeys = append(g.InvalidObjectKeys, goldenInvalidKey{Name: v.name, Fields: toGoldenKey(v.k), Reason: v.reason})
	}
	for _, v := range goldenBlockKeyInputs() {
		k, err := NewBlockKey(v.ns, v.key)
		if err != nil {
			return g, fmt.Errorf("block key %s: %w", v.name, err)
		}
		g.BlockKeys = append(g.BlockKeys, goldenBlockKey{
			Name: v.name, NamespaceHex: hex.EncodeToString(v.ns), ObjectKeyHex: hex.EncodeToString(v.key),
			TenantHash: u64hex(k.Tenant), ObjectID: hex.EncodeToString(k.ID[:]), Filename: k.Filename(),
			RouteHash: u64hex(k.RouteHash()), DiskHash: u64hex(DiskHash(k)),
		})
	}
	g.InvalidBlockKeys = []goldenInvalidBlock{
		{"empty-namespace", "", hex.EncodeToString([]byte("key")), "namespace is empty"},
		{"empty-object-key", hex.EncodeToString([]byte("ns")), "", "object key is empty"},
		{"both-empty", "", "", "namespace is empty"},
	}
	for _, v := range goldenFingerprintInputs() {
		f := goldenFingerprint{Name: v.name, Fields: []goldenLayoutField{}, Fingerprint: u64hex(LayoutFingerprint(v.fields...))}
		for _, lf := range v.fields {
			vals := append([]int64{}, lf.Values...)
			f.Fields = append(f.Fields, goldenLayoutField{Name: lf.Name, Values: vals})
		}
		g.LayoutFingerprints = append(g.LayoutFingerprints, f)
	}
	for _, id := range []string{"node-a", "node-b"} {
		for j := range 2 {
			p := sha256Digest(id, j)
			g.RingDigests = append(g.RingDigests, goldenRingDigest{ID: id, Digest: j, Points: [4]string{u64hex(p[0]), u64hex(p[1]), u64hex(p[2]), u64hex(p[3])}})
		}
	}
	for _, ppw := range []int{160, 1} {
		r, err := NewRing(goldenRingMembers, ppw)
		if err != nil {
			return g, err
		}
		l := goldenRingLookups{Name: fmt.Sprintf("three-nodes-ppw-%d", ppw), PointsPerWeight: ppw}
		for _, m := range goldenRingMembers {
			l.Members = append(l.Members, goldenRingMember{ID: m.ID, Weight: m.Weight})
		}
		hashes := append([]uint64{}, goldenRingHashes...)
		if ppw == 1 {
			// Around each point, to pin the ">= and wrap" rule.
			for _, p := range r.points {
				hashes = append(hashes, p-1, p, p+1)
			}
		}
		for _, h := range hashes {
			l.Lookups = append(l.Lookups, goldenRingLookup{Hash: u64hex(h), Owner: r.Member(r.Get(h)).ID})
		}
		g.RingLookups = append(g.RingLookups, l)
	}
	return g, nil
}

func marshalGolden(g goldenFile) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func loadGolden(t *testing.T) goldenFile {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("read golden vectors: %v (generate with: go test ./wire -run TestGolden -update)", err)
	}
	var g goldenFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("parse %s: %v", goldenPath, err)
	}
	return g
}

func mustHex(t *testing.T, what, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("%s: bad hex %q: %v", what, s, err)
	}
	return b
}

// TestGoldenUpToDate regenerates the vectors (writing them with -update) and
// fails when the checked-in file differs, so a new input or a changed
// function cannot go unnoticed.
func TestGoldenUpToDate(t *testing.T) {
	g, err := goldenVectors()
	if err != nil {
		t.Fatal(err)
	}
	want, err := marshalGolden(g)
	if err != nil {
		t.Fatal(err)
	}
	if updateGolden() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes); review the diff", goldenPath, len(want))
		return
	}
	got, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("read %s: %v (generate with: go test ./wire -run TestGolden -update)", goldenPath, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale or edited by hand: regenerate with `go test ./wire -run TestGolden -update` and review the diff", goldenPath)
	}
}

// TestGoldenVectors checks every vector of the checked-in file, recomputing
// from the inputs stored in the file itself (what the Python tests do too).
func TestGoldenVectors(t *testing.T) {
	g := loadGolden(t)
	if g.Limits.MaxNamespaceBytes != MaxNamespaceBytes || g.Limits.MaxObjectKeyBytes != MaxObjectKeyBytes {
		t.Errorf("limits = %+v, want %d/%d", g.Limits, MaxNamespaceBytes, MaxObjectKeyBytes)
	}
	if len(g.NamespaceDescriptors) == 0 || len(g.RawNamespaces) == 0 || len(g.ObjectKeys) == 0 ||
		len(g.BlockKeys) == 0 || len(g.LayoutFingerprints) == 0 || len(g.RingLookups) == 0 {
		t.Fatalf("golden file has an empty section")
	}
	for _, v := range g.NamespaceDescriptors {
		d := fromGoldenDescriptor(t, v.Descriptor)
		enc, err := d.Encode()
		if err != nil {
			t.Errorf("descriptor %s: Encode: %v", v.Name, err)
			continue
		}
		if got := hex.EncodeToString(enc); got != v.EncodingHex {
			t.Errorf("descriptor %s: encoding\n got %s\nwant %s", v.Name, got, v.EncodingHex)
		}
		back, err := DecodeNamespace(mustHex(t, v.Name, v.EncodingHex))
		if err != nil || back != d {
			t.Errorf("descriptor %s: DecodeNamespace = %+v, %v; want %+v", v.Name, back, err, d)
		}
		if got := u64hex(TenantHash(enc)); got != v.TenantHash {
			t.Errorf("descriptor %s: tenant hash %s, want %s", v.Name, got, v.TenantHash)
		}
	}
	for _, v := range g.InvalidDescriptors {
		d := fromGoldenDescriptor(t, v.Descriptor)
		if b, err := d.Encode(); !errors.Is(err, StatusInvalid) {
			t.Errorf("invalid descriptor %s (%s): Encode = %x, %v; want INVALID", v.Name, v.Reason, b, err)
		}
	}
	for _, v := range g.RawNamespaces {
		ns := mustHex(t, v.Name, v.NamespaceHex)
		_, err := DecodeNamespace(ns)
		if (err == nil) != v.Decodes {
			t.Errorf("raw namespace %s: DecodeNamespace err = %v, want decodes=%v", v.Name, err, v.Decodes)
		}
		tenant, ok := CanonicalTenant(ns)
		switch {
		case ok != (v.CanonicalTenantHex != nil):
			t.Errorf("raw namespace %s: CanonicalTenant ok = %v, want %v", v.Name, ok, v.CanonicalTenantHex != nil)
		case ok && hex.EncodeToString(tenant) != *v.CanonicalTenantHex:
			t.Errorf("raw namespace %s: tenant %x, want %s", v.Name, tenant, *v.CanonicalTenantHex)
		}
		if got := u64hex(TenantHash(ns)); got != v.TenantHash {
			t.Errorf("raw namespace %s: tenant hash %s, want %s", v.Name, got, v.TenantHash)
		}
	}
	for _, v := range g.ObjectKeys {
		k := fromGoldenKey(v.Fields)
		if s, err := k.Render(); err != nil || s != v.Rendered {
			t.Errorf("object key %s: Render = %q, %v; want %q", v.Name, s, err, v.Rendered)
		}
	}
	for _, v := range g.InvalidObjectKeys {
		k := fromGoldenKey(v.Fields)
		if s, err := k.Render(); !errors.Is(err, StatusInvalid) {
			t.Errorf("invalid object key %s (%s): Render = %q, %v; want INVALID", v.Name, v.Reason, s, err)
		}
	}
	for _, v := range g.BlockKeys {
		ns, key := mustHex(t, v.Name, v.NamespaceHex), mustHex(t, v.Name, v.ObjectKeyHex)
		k, err := NewBlockKey(ns, key)
		if err != nil {
			t.Errorf("block key %s: %v", v.Name, err)
			continue
		}
		got := goldenBlockKey{
			Name: v.Name, NamespaceHex: v.NamespaceHex, ObjectKeyHex: v.ObjectKeyHex,
			TenantHash: u64hex(k.Tenant), ObjectID: hex.EncodeToString(k.ID[:]), Filename: k.Filename(),
			RouteHash: u64hex(k.RouteHash()), DiskHash: u64hex(DiskHash(k)),
		}
		if got != v {
			t.Errorf("block key %s:\n got %+v\nwant %+v", v.Name, got, v)
		}
		if !strings.HasPrefix(v.Filename, v.TenantHash) || !strings.HasSuffix(v.Filename, v.ObjectID) {
			t.Errorf("block key %s: filename %s is not tenant||id", v.Name, v.Filename)
		}
	}
	for _, v := range g.InvalidBlockKeys {
		if k, err := NewBlockKey(mustHex(t, v.Name, v.NamespaceHex), mustHex(t, v.Name, v.ObjectKeyHex)); !errors.Is(err, StatusInvalid) {
			t.Errorf("invalid block key %s: NewBlockKey = %v, %v; want INVALID", v.Name, k, err)
		}
	}
	for _, v := range g.LayoutFingerprints {
		var fields []LayoutField
		for _, f := range v.Fields {
			fields = append(fields, LayoutField(f))
		}
		if got := u64hex(LayoutFingerprint(fields...)); got != v.Fingerprint {
			t.Errorf("layout fingerprint %s: %s, want %s", v.Name, got, v.Fingerprint)
		}
	}
	for _, v := range g.RingDigests {
		p := sha256Digest(v.ID, v.Digest)
		if got := [4]string{u64hex(p[0]), u64hex(p[1]), u64hex(p[2]), u64hex(p[3])}; got != v.Points {
			t.Errorf("ring digest %s-%d: %v, want %v", v.ID, v.Digest, got, v.Points)
		}
	}
	for _, v := range g.RingLookups {
		var members []Member
		for _, m := range v.Members {
			members = append(members, Member{ID: m.ID, Weight: m.Weight})
		}
		r, err := NewRing(members, v.PointsPerWeight)
		if err != nil {
			t.Fatalf("ring %s: %v", v.Name, err)
		}
		for _, l := range v.Lookups {
			var h uint64
			fmt.Sscanf(l.Hash, "%x", &h)
			if got := r.Member(r.Get(h)).ID; got != l.Owner {
				t.Errorf("ring %s: Get(%s) = %s, want %s", v.Name, l.Hash, got, l.Owner)
			}
		}
	}
}

// goldenByName finds a vector by name, failing the test if it is missing.
func goldenByName[T any](t *testing.T, vs []T, name string) T {
	t.Helper()
	for _, v := range vs {
		if reflect.ValueOf(v).FieldByName("Name").String() == name {
			return v
		}
	}
	t.Fatalf("golden vector %q not found", name)
	var zero T
	return zero
}
