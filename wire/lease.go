package wire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The lease protocol (epoch 7): a client on the node's host (shared
// memory) or on an RDMA fabric reads resident values out of the node's
// RAM arena itself, under a lease, instead of receiving them through a
// socket. The package documentation specifies the frames.
const (
	EpochLease = 7

	// LeaseHelloLen is the client's bootstrap frame; LeaseWelcomeLen the
	// node's answer.
	LeaseHelloLen   = 32
	LeaseWelcomeLen = 48

	LeaseIDLen        = 8
	LeaseRecordLen    = 34 // status, stored, kind, offset, length, lease
	LeaseItemLen      = 40 // LEASE_GET: tenant, id, offset, length (as BATCH_GET); LEASE_PUT: tenant, id, staging offset, length
	LeaseFlagPromote  = 1  // LEASE_GET: fill RAM from disk first, so a cold value comes back leased
	leaseKnownFlags   = LeaseFlagPromote
	leaseHelloMagic   = "DFKVLSE\x00"
	leaseWelcomeMagic = "DFKVLSA\x00"
)

// Lease protocol ops. SHM_INFO is served on the TCP port (where a client
// learns a node's shared-memory socket); the other three only on a
// connection that went through the lease bootstrap.
const (
	OpShmInfo  Op = 11
	OpLeaseGet Op = 12
	OpRelease  Op = 13
	OpLeasePut Op = 14
)

// IsLease reports whether o is valid only after the lease bootstrap.
func (o Op) IsLease() bool { return o >= OpLeaseGet && o <= OpLeasePut }

// LeaseKind says where a LEASE_GET item's bytes are.
type LeaseKind uint8

const (
	// LeaseNone: no bytes (the status says why: a miss, INVALID range,
	// or a zero-length range).
	LeaseNone LeaseKind = 0
	// LeaseArena: the bytes are in the node's arena at [Offset,
	// Offset+Length), leased under Lease until it is released or expires.
	LeaseArena LeaseKind = 1
	// LeaseInline: Length bytes follow the record on the stream (the
	// value is not resident in the arena, or the lease table is full).
	LeaseInline LeaseKind = 2
)

// LeaseID names one lease: the index of its slot in the node's lease
// table (the high 32 bits) and the sequence number it was granted under
// (the low 32, never 0). The node's lease-word region holds, at 8 × index,
// the ID of the live lease of that slot or 0: a client that finds its own
// ID there after copying knows the bytes it copied were still leased.
type LeaseID uint64

// Index is the lease's slot in the node's lease table.
func (id LeaseID) Index() uint32 { return uint32(id >> 32) }

// Seq is the sequence number the lease was granted under.
func (id LeaseID) Seq() uint32 { return uint32(id) }

// LeaseHello is the client's bootstrap frame (32 bytes):
//
//	magic "DFKVLSE\0" (8) | epoch u8 | flags u8 (0) | reserved (6) |
//	instance u64 (the node instance the client expects; 0: any) | reserved (8)
type LeaseHello struct {
	Epoch    uint8
	Instance uint64
}

// AppendLeaseHello appends h's 32 bytes to dst (a zero Epoch is written
// as EpochLease).
func AppendLeaseHello(dst []byte, h LeaseHello) []byte {
	var b [LeaseHelloLen]byte
	copy(b[:], leaseHelloMagic)
	b[8] = h.Epoch
	if b[8] == 0 {
		b[8] = EpochLease
	}
	binary.LittleEndian.PutUint64(b[16:], h.Instance)
	return append(dst, b[:]...)
}

// DecodeLeaseHello decodes and checks a client's bootstrap frame: magic,
// epoch and zero reserved bytes. The error is a *FrameError for the node
// to answer with.
func DecodeLeaseHello(src []byte) (LeaseHello, error) {
	var h LeaseHello
	if len(src) < LeaseHelloLen {
		return h, frameErr(StatusInvalid, "truncated lease hello: %d of %d bytes", len(src), LeaseHelloLen)
	}
	if string(src[:8]) != leaseHelloMagic {
		if src[0] == EpochTCP {
			return h, frameErr(StatusEpochMismatch, "a TCP request (epoch %d) on the shared-memory socket: it speaks the lease protocol (epoch %d) and begins with its hello; send TCP requests to the node's data port", EpochTCP, EpochLease)
		}
		return h, frameErr(StatusInvalid, "not a dfkv lease hello (the shared-memory socket speaks the lease protocol, epoch %d)", EpochLease)
	}
	h.Epoch = src[8]
	h.Instance = binary.LittleEndian.Uint64(src[16:])
	if h.Epoch != EpochLease {
		return h, frameErr(StatusEpochMismatch, "lease protocol epoch %d, this node speaks %d; upgrade the older side", h.Epoch, EpochLease)
	}
	if src[9] != 0 || !allZero(src[10:16]) || !allZero(src[24:32]) {
		return h, frameErr(StatusInvalid, "lease hello with non-zero flags or reserved bytes")
	}
	return h, nil
}

// LeaseWelcome is the node's answer to a hello (48 bytes), sent with the
// memory files as SCM_RIGHTS on a Unix socket when Status is OK:
//
//	magic "DFKVLSA\0" (8) | epoch u8 | status u8 | reserved (2) |
//	lease ms u32 | instance u64 | arena bytes u64 | staging bytes u64 |
//	lease words u64
//
// A non-OK Status is followed by a u16 message length and the message,
// and the node closes the connection.
type LeaseWelcome struct {
	Epoch        uint8
	Status       Status
	LeaseMS      uint32 // how long a lease lives unless released
	Instance     uint64 // the node process: a client reconnecting compares it
	ArenaBytes   uint64
	StagingBytes uint64 // the connection's own staging region for LEASE_PUT
	LeaseWords   uint64 // entries in the lease-word region
}

// AppendLeaseWelcome appends w's 48 bytes to dst.
func AppendLeaseWelcome(dst []byte, w LeaseWelcome) []byte {
	var b [LeaseWelcomeLen]byte
	copy(b[:], leaseWelcomeMagic)
	b[8] = w.Epoch
	if b[8] == 0 {
		b[8] = EpochLease
	}
	b[9] = byte(w.Status)
	binary.LittleEndian.PutUint32(b[12:], w.LeaseMS)
	binary.LittleEndian.PutUint64(b[16:], w.Instance)
	binary.LittleEndian.PutUint64(b[24:], w.ArenaBytes)
	binary.LittleEndian.PutUint64(b[32:], w.StagingBytes)
	binary.LittleEndian.PutUint64(b[40:], w.LeaseWords)
	return append(dst, b[:]...)
}

// DecodeLeaseWelcome decodes a node's welcome; an epoch other than
// EpochLease or an unknown status is an error.
func DecodeLeaseWelcome(src []byte) (LeaseWelcome, error) {
	var w LeaseWelcome
	if len(src) < LeaseWelcomeLen {
		return w, frameErr(StatusInvalid, "truncated lease welcome: %d of %d bytes", len(src), LeaseWelcomeLen)
	}
	if string(src[:8]) != leaseWelcomeMagic {
		return w, frameErr(StatusInvalid, "not a dfkv lease welcome: the socket is not a dfkv node's shared-memory socket")
	}
	w.Epoch, w.Status = src[8], Status(src[9])
	w.LeaseMS = binary.LittleEndian.Uint32(src[12:])
	w.Instance = binary.LittleEndian.Uint64(src[16:])
	w.ArenaBytes = binary.LittleEndian.Uint64(src[24:])
	w.StagingBytes = binary.LittleEndian.Uint64(src[32:])
	w.LeaseWords = binary.LittleEndian.Uint64(src[40:])
	if w.Epoch != EpochLease {
		return w, frameErr(StatusEpochMismatch, "lease welcome of epoch %d, this client speaks %d; upgrade the older side", w.Epoch, EpochLease)
	}
	if !w.Status.Known() {
		return w, frameErr(StatusInvalid, "lease welcome carries unknown status %d", uint8(w.Status))
	}
	if src[10] != 0 || src[11] != 0 {
		return w, frameErr(StatusInvalid, "lease welcome with non-zero reserved bytes")
	}
	return w, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkLease checks the prefix of a lease op: LEASE_GET and LEASE_PUT
// carry flags in the tenant field (LEASE_PUT none), r lease ids to
// release in Offset, n ≥ 1 items in Length and a body of exactly r ids
// and n items; RELEASE carries r ≥ 1 ids and no items.
func (h *RequestHeader) checkLease(lim Limits) error {
	if h.Key.ID != [16]byte{} {
		return frameErr(StatusInvalid, "%s carries a non-zero object id", h.Op)
	}
	flags := h.Key.Tenant
	r, n := h.Offset, h.Length
	if r > lim.MaxBatchItems {
		return frameErr(StatusInvalid, "%s releases %d leases; allowed up to %d", h.Op, r, lim.MaxBatchItems)
	}
	switch h.Op {
	case OpRelease:
		if flags != 0 || n != 0 || r == 0 {
			return frameErr(StatusInvalid, "RELEASE wants flags 0, no items and at least one lease id; got flags %#x, %d items, %d ids", flags, n, r)
		}
	case OpLeaseGet, OpLeasePut:
		if flags&^leaseKnownFlags != 0 || (h.Op == OpLeasePut && flags != 0) {
			return frameErr(StatusInvalid, "%s carries unknown flags %#x", h.Op, flags)
		}
		if n == 0 || n > lim.MaxBatchItems {
			return frameErr(StatusInvalid, "%s of %d items; allowed 1..%d", h.Op, n, lim.MaxBatchItems)
		}
	}
	ids, ok1 := mulFits(r, LeaseIDLen)
	items, ok2 := mulFits(n, LeaseItemLen)
	want, carry := bits.Add64(ids, items, 0)
	if !ok1 || !ok2 || carry != 0 || h.BodyLen != want {
		return frameErr(StatusInvalid, "%s body of %d bytes, want %d bytes for each of %d lease ids and %d for each of %d items", h.Op, h.BodyLen, LeaseIDLen, r, LeaseItemLen, n)
	}
	return nil
}

// AppendLeaseRecord appends a 34-byte LEASE_GET record; with LeaseInline,
// length bytes of data follow it on the stream.
func AppendLeaseRecord(dst []byte, s Status, stored uint64, kind LeaseKind, offset, length uint64, id LeaseID) []byte {
	dst = append(dst, byte(s))
	dst = binary.LittleEndian.AppendUint64(dst, stored)
	dst = append(dst, byte(kind))
	dst = binary.LittleEndian.AppendUint64(dst, offset)
	dst = binary.LittleEndian.AppendUint64(dst, length)
	return binary.LittleEndian.AppendUint64(dst, uint64(id))
}

// LeaseRecord is a decoded LEASE_GET record.
type LeaseRecord struct {
	Status Status
	Stored uint64
	Kind   LeaseKind
	Offset uint64 // LeaseArena: arena offset of the first byte
	Length uint64
	Lease  LeaseID
}

// DecodeLeaseRecord decodes a 34-byte LEASE_GET record and checks what a
// client must not trust blindly: a known status and kind, bytes only with
// OK, a lease only with LeaseArena.
func DecodeLeaseRecord(src []byte) (LeaseRecord, error) {
	r := LeaseRecord{
		Status: Status(src[0]),
		Stored: binary.LittleEndian.Uint64(src[1:]),
		Kind:   LeaseKind(src[9]),
		Offset: binary.LittleEndian.Uint64(src[10:]),
		Length: binary.LittleEndian.Uint64(src[18:]),
		Lease:  LeaseID(binary.LittleEndian.Uint64(src[26:])),
	}
	switch {
	case !r.Status.Known():
		return r, fmt.Errorf("lease record with unknown status %d: %w", src[0], StatusInvalid)
	case r.Kind > LeaseInline:
		return r, fmt.Errorf("lease record of unknown kind %d: %w", r.Kind, StatusInvalid)
	case r.Kind != LeaseNone && (r.Status != StatusOK || r.Length == 0):
		return r, fmt.Errorf("lease record with bytes (kind %d, %d bytes) and status %s: %w", r.Kind, r.Length, r.Status, StatusInvalid)
	case (r.Kind == LeaseArena) != (r.Lease != 0):
		return r, fmt.Errorf("lease record of kind %d with lease %#x: %w", r.Kind, uint64(r.Lease), StatusInvalid)
	case r.Kind == LeaseNone && r.Length != 0:
		return r, fmt.Errorf("lease record without bytes declares %d of them: %w", r.Length, StatusInvalid)
	}
	return r, nil
}

// StagedItemStatus is the verdict on one LEASE_PUT item before its value
// is stored: a zero-byte value or a range outside the staging region is
// INVALID, a value over maxBlock TOO_LARGE, anything else OK.
func StagedItemStatus(off, length, staging, maxBlock uint64) Status {
	switch {
	case length == 0:
		return StatusInvalid
	case length > maxBlock:
		return StatusTooLarge
	case off > staging || length > staging-off:
		return StatusInvalid
	}
	return StatusOK
}
