package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// Object key rendering, shared by every connector:
//
//	dfkv/pool/v2|pool=P|hash=H|dp=S:R|tp=S:R|pcp=S:R|dcp=S:R|pp=S:R|group=N|component=C[|sg=W:G]
//
// P, H and C are the caller's strings verbatim; S, R, N, W and G are decimal
// integers ("-1" for a replicated rank). Both the size and the rank of every
// parallel dimension are identity: the same content hash at tp=4 rank 1 and
// at tp=8 rank 1 holds different bytes. The rendered string is the object
// key that NewBlockKey hashes, so this format is part of the cache identity.

// ObjectKeyPrefix opens every rendered object key; it carries the version.
const ObjectKeyPrefix = "dfkv/pool/v2"

// ReplicatedRank is the rank of a dimension whose block is the same on every
// rank (for example the KV of an MLA model across tensor-parallel ranks), so
// all ranks share one object.
const ReplicatedRank = -1

// Coord is a block's position along one parallel dimension.
type Coord struct {
	Size int // ranks in the dimension, >= 1
	Rank int // 0..Size-1, or ReplicatedRank
}

// Scatter places an object in a scatter group: Width objects are written as
// one group and Group numbers the group. Only scatter-grouped objects carry
// it, rendered as "|sg=W:G".
type Scatter struct {
	Width int // objects per group, >= 1
	Group int // group number, >= 0
}

// ObjectKey is the structured form of a connector's object key.
type ObjectKey struct {
	Pool      string // connector pool name (e.g. host pool, layer set)
	Hash      string // the engine's full content hash, verbatim (hex, decimal, ...)
	DP        Coord
	TP        Coord
	PCP       Coord
	DCP       Coord
	PP        Coord
	Group     int    // engine KV cache group (e.g. vLLM hybrid allocator), >= 0
	Component string // which tensor(s) of the block, e.g. "kv", "k", "v"
	SG        *Scatter
}

// Validate checks every field. String fields must be non-empty and free of
// '|' and '=', which would let two different keys render the same string.
// Errors wrap StatusInvalid and name the field.
func (k ObjectKey) Validate() error {
	for _, f := range [...]struct{ name, v string }{
		{"pool", k.Pool}, {"hash", k.Hash}, {"component", k.Component},
	} {
		if f.v == "" {
			return invalidObjectKey(f.name + " is empty")
		}
		if i := indexSeparator(f.v); i >= 0 {
			return invalidObjectKey(fmt.Sprintf("%s %q contains %q at byte %d; '|' and '=' are separators", f.name, f.v, f.v[i], i))
		}
	}
	for _, c := range [...]struct {
		name string
		c    Coord
	}{{"dp", k.DP}, {"tp", k.TP}, {"pcp", k.PCP}, {"dcp", k.DCP}, {"pp", k.PP}} {
		if c.c.Size < 1 {
			return invalidObjectKey(fmt.Sprintf("%s size %d is below 1", c.name, c.c.Size))
		}
		if c.c.Rank < ReplicatedRank || c.c.Rank >= c.c.Size {
			return invalidObjectKey(fmt.Sprintf("%s rank %d is outside [-1, %d)", c.name, c.c.Rank, c.c.Size))
		}
	}
	if k.Group < 0 {
		return invalidObjectKey(fmt.Sprintf("group %d is negative", k.Group))
	}
	if k.SG != nil {
		if k.SG.Width < 1 {
			return invalidObjectKey(fmt.Sprintf("scatter width %d is below 1", k.SG.Width))
		}
		if k.SG.Group < 0 {
			return invalidObjectKey(fmt.Sprintf("scatter group %d is negative", k.SG.Group))
		}
	}
	return nil
}

// indexSeparator is strings.IndexAny(s, "|=") done as two vectorized
// IndexByte scans, several times faster on the 64-character hashes that
// every key carries.
func indexSeparator(s string) int {
	i, j := strings.IndexByte(s, '|'), strings.IndexByte(s, '=')
	if i < 0 || (j >= 0 && j < i) {
		return j
	}
	return i
}

func invalidObjectKey(msg string) error {
	return fmt.Errorf("object key: %s: %w", msg, StatusInvalid)
}

// Append validates k and appends its rendered form to dst. A rendering over
// MaxObjectKeyBytes is rejected here rather than at NewBlockKey. On error
// dst is returned unchanged. With enough capacity in dst it does not
// allocate.
func (k ObjectKey) Append(dst []byte) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return dst, err
	}
	b := append(dst, ObjectKeyPrefix...)
	b = append(b, "|pool="...)
	b = append(b, k.Pool...)
	b = append(b, "|hash="...)
	b = append(b, k.Hash...)
	b = appendCoord(b, "|dp=", k.DP)
	b = appendCoord(b, "|tp=", k.TP)
	b = appendCoord(b, "|pcp=", k.PCP)
	b = appendCoord(b, "|dcp=", k.DCP)
	b = appendCoord(b, "|pp=", k.PP)
	b = append(b, "|group="...)
	b = strconv.AppendInt(b, int64(k.Group), 10)
	b = append(b, "|component="...)
	b = append(b, k.Component...)
	if k.SG != nil {
		b = appendCoord(b, "|sg=", Coord{Size: k.SG.Width, Rank: k.SG.Group})
	}
	if n := len(b) - len(dst); n > MaxObjectKeyBytes {
		return dst, invalidObjectKey(fmt.Sprintf("renders to %d bytes, over the %d-byte limit", n, MaxObjectKeyBytes))
	}
	return b, nil
}

func appendCoord(b []byte, label string, c Coord) []byte {
	b = append(b, label...)
	b = strconv.AppendInt(b, int64(c.Size), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(c.Rank), 10)
}

// Render returns the rendered object key as a string.
func (k ObjectKey) Render() (string, error) {
	var buf [256]byte
	b, err := k.Append(buf[:0])
	if err != nil {
		return "", err
	}
	return string(b), nil
}
