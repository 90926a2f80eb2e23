package slab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/dfkv/dfkv/wire"
)

// These constants are part of the on-disk format and must not be changed
// without bumping formatVersion (a store refuses a directory of another
// version unless it can upgrade it in place, see upgradeFrom).
const (
	// formatVersion 5 adds values larger than an extent, stored as
	// extent-sized pieces (record bytes 52..59); v4 added the payload
	// checksum to every slot record (v3: tenant-scoped records without
	// one).
	formatVersion = 5
	// sumsFormat is the first format whose records carry payload
	// checksums.
	sumsFormat = 4
	// upgradeFrom is the oldest format Open upgrades in place: a v4
	// store's records read as v5 records of values without pieces, so
	// only slab_meta is rewritten.
	upgradeFrom = 4
	recSpanOff  = 52 // span: pieces of a head, or pieceFlag|index
	recNonceOff = 56 // the head's nonce, which names its pieces
	// pieceFlag marks a piece's record (span = pieceFlag | its index).
	pieceFlag = 1 << 31

	metaMagic  = "DFKVSLAB"
	metaSize   = 64
	stateMagic = "DFKVSTAT"
	stateSize  = 32

	// RecordSize is the size of one slots.tbl record.
	RecordSize = 64
	recMagic   = 0xDF5B
	recSumOff  = 48 // payload checksum (payloadSum)
	recCRCOff  = 60

	maxExtentBytes = 1 << 30 // value lengths are u32 in records; keep well inside

	metaName   = "slab_meta"
	stateName  = "slab_state"
	tableName  = "slots.tbl"
	extentsDir = "extents"

	stateClean  = 1
	stateFailed = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record validation errors, distinct so a log line can say why a record was
// dropped (bbolt Meta.Validate style).
var (
	ErrRecordMagic    = errors.New("bad record magic")
	ErrRecordVersion  = errors.New("unknown record version")
	ErrRecordChecksum = errors.New("record checksum mismatch")
	ErrRecordPlace    = errors.New("record names another extent or slot than its offset")
)

// record is one decoded slots.tbl record.
type record struct {
	class  uint8
	extent uint32
	slot   uint32
	length uint32
	key    wire.BlockKey
	gen    uint64
	sum    uint32 // payloadSum of the value in the slot
	// span and nonce tie a value larger than an extent together: its
	// head (the record under the value's key, holding its last bytes)
	// has span = the number of extent-sized pieces before them; each
	// piece has span = pieceFlag | its index. Both carry the head's
	// nonce. Zero for every other value.
	span  uint32
	nonce uint32
}

// encode writes r into b (RecordSize bytes).
func (r *record) encode(b []byte) {
	_ = b[RecordSize-1]
	clear(b[:RecordSize])
	binary.LittleEndian.PutUint16(b[0:], recMagic)
	b[2] = formatVersion
	b[3] = r.class
	binary.LittleEndian.PutUint32(b[4:], r.extent)
	binary.LittleEndian.PutUint32(b[8:], r.slot)
	binary.LittleEndian.PutUint32(b[12:], r.length)
	binary.LittleEndian.PutUint64(b[16:], r.key.Tenant)
	copy(b[24:40], r.key.ID[:])
	binary.LittleEndian.PutUint64(b[40:], r.gen)
	binary.LittleEndian.PutUint32(b[recSumOff:], r.sum)
	binary.LittleEndian.PutUint32(b[recSpanOff:], r.span)
	binary.LittleEndian.PutUint32(b[recNonceOff:], r.nonce)
	binary.LittleEndian.PutUint32(b[recCRCOff:], crc32.Checksum(b[:recCRCOff], castagnoli))
}

// isZero reports an empty (never written or cleared) record.
func isZero(b []byte) bool {
	return binary.LittleEndian.Uint64(b[0:]) == 0 && binary.LittleEndian.Uint64(b[8:]) == 0 &&
		binary.LittleEndian.Uint64(b[16:]) == 0 && binary.LittleEndian.Uint64(b[24:]) == 0 &&
		binary.LittleEndian.Uint64(b[32:]) == 0 && binary.LittleEndian.Uint64(b[40:]) == 0 &&
		binary.LittleEndian.Uint64(b[48:]) == 0 && binary.LittleEndian.Uint64(b[56:]) == 0
}

// decode parses a non-zero record and checks what the record alone can
// prove; the caller checks it against the geometry.
func (r *record) decode(b []byte) error {
	_ = b[RecordSize-1]
	if binary.LittleEndian.Uint16(b[0:]) != recMagic {
		return ErrRecordMagic
	}
	if crc32.Checksum(b[:recCRCOff], castagnoli) != binary.LittleEndian.Uint32(b[recCRCOff:]) {
		return ErrRecordChecksum
	}
	if b[2] != formatVersion && b[2] != upgradeFrom {
		return ErrRecordVersion
	}
	r.class = b[3]
	r.extent = binary.LittleEndian.Uint32(b[4:])
	r.slot = binary.LittleEndian.Uint32(b[8:])
	r.length = binary.LittleEndian.Uint32(b[12:])
	r.key.Tenant = binary.LittleEndian.Uint64(b[16:])
	copy(r.key.ID[:], b[24:40])
	r.gen = binary.LittleEndian.Uint64(b[40:])
	r.sum = binary.LittleEndian.Uint32(b[recSumOff:])
	r.span = binary.LittleEndian.Uint32(b[recSpanOff:])
	r.nonce = binary.LittleEndian.Uint32(b[recNonceOff:])
	return nil
}

// geometry is everything slab_meta pins: a store opened with other values
// would misread slots.tbl or the extents.
type geometry struct {
	version     uint32
	recordSize  uint32
	capacity    uint64
	extentBytes uint64
	extents     uint32
	maxSlots    uint32
	minClass    uint32
	growth      uint32 // growthShift
	classes     uint32
}

func (g *geometry) encode() []byte {
	b := make([]byte, metaSize)
	copy(b, metaMagic)
	binary.LittleEndian.PutUint32(b[8:], g.version)
	binary.LittleEndian.PutUint32(b[12:], g.recordSize)
	binary.LittleEndian.PutUint64(b[16:], g.capacity)
	binary.LittleEndian.PutUint64(b[24:], g.extentBytes)
	binary.LittleEndian.PutUint32(b[32:], g.extents)
	binary.LittleEndian.PutUint32(b[36:], g.maxSlots)
	binary.LittleEndian.PutUint32(b[40:], g.minClass)
	binary.LittleEndian.PutUint32(b[44:], g.growth)
	binary.LittleEndian.PutUint32(b[48:], g.classes)
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

func decodeGeometry(b []byte) (geometry, error) {
	var g geometry
	if len(b) != metaSize || string(b[:8]) != metaMagic {
		return g, fmt.Errorf("not a slab_meta file (%d bytes, magic %q)", len(b), b[:min(8, len(b))])
	}
	if crc32.Checksum(b[:60], castagnoli) != binary.LittleEndian.Uint32(b[60:]) {
		return g, fmt.Errorf("slab_meta checksum mismatch")
	}
	g.version = binary.LittleEndian.Uint32(b[8:])
	g.recordSize = binary.LittleEndian.Uint32(b[12:])
	g.capacity = binary.LittleEndian.Uint64(b[16:])
	g.extentBytes = binary.LittleEndian.Uint64(b[24:])
	g.extents = binary.LittleEndian.Uint32(b[32:])
	g.maxSlots = binary.LittleEndian.Uint32(b[36:])
	g.minClass = binary.LittleEndian.Uint32(b[40:])
	g.growth = binary.LittleEndian.Uint32(b[44:])
	g.classes = binary.LittleEndian.Uint32(b[48:])
	return g, nil
}

// diff lists the fields where have (on disk) differs from want (this run).
func (g geometry) diff(want geometry) []string {
	var d []string
	f := func(name string, disk, conf uint64) {
		if disk != conf {
			d = append(d, fmt.Sprintf("%s: on disk %d, configured %d", name, disk, conf))
		}
	}
	f("format version", uint64(g.version), uint64(want.version))
	f("record size", uint64(g.recordSize), uint64(want.recordSize))
	f("capacity bytes (server.disk_capacity_bytes; 0 keeps a formatted disk's)", g.capacity, want.capacity)
	f("extent bytes (server.slab_extent_bytes; 0 follows the capacity)", g.extentBytes, want.extentBytes)
	f("extent count", uint64(g.extents), uint64(want.extents))
	f("slots per extent bound", uint64(g.maxSlots), uint64(want.maxSlots))
	f("lattice min class", uint64(g.minClass), uint64(want.minClass))
	f("lattice growth shift", uint64(g.growth), uint64(want.growth))
	f("lattice classes", uint64(g.classes), uint64(want.classes))
	return d
}

// formatNote says what sets an on-disk format version apart from this
// one, for the refusal of a store in another format.
func formatNote(v uint32) string {
	switch {
	case v < sumsFormat:
		return "its slot records carry no payload checksum, so its values cannot be verified and are not served"
	case v > formatVersion:
		return "written by a newer dfkv"
	}
	return "unknown format"
}

// state is slab_state: the running epoch, whether it ended cleanly, and
// whether the store failed closed in it.
type state struct {
	epoch  uint64
	clean  bool
	failed bool
}

func (s state) encode() []byte {
	b := make([]byte, stateSize)
	copy(b, stateMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	var flags uint32
	if s.clean {
		flags |= stateClean
	}
	if s.failed {
		flags |= stateFailed
	}
	binary.LittleEndian.PutUint32(b[12:], flags)
	binary.LittleEndian.PutUint64(b[16:], s.epoch)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

func decodeState(b []byte) (state, error) {
	if len(b) != stateSize || string(b[:8]) != stateMagic {
		return state{}, fmt.Errorf("not a slab_state file")
	}
	if crc32.Checksum(b[:28], castagnoli) != binary.LittleEndian.Uint32(b[28:]) {
		return state{}, fmt.Errorf("slab_state checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion && v != upgradeFrom {
		return state{}, fmt.Errorf("slab_state format version %d, want %d", v, formatVersion)
	}
	flags := binary.LittleEndian.Uint32(b[12:])
	return state{
		clean:  flags&stateClean != 0,
		failed: flags&stateFailed != 0,
		epoch:  binary.LittleEndian.Uint64(b[16:]),
	}, nil
}
