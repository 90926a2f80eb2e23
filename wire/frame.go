package wire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"
)

// Frame geometry and protocol epoch. Part of the wire format.
const (
	EpochTCP          = 6
	RequestPrefixLen  = 50
	ResponsePrefixLen = 18

	BatchPutItemLen   = 32
	BatchGetItemLen   = 40
	BatchKeyItemLen   = 24
	BatchGetRecordLen = 17 // status, stored, data len
	BatchExistRecLen  = 9  // status, stored
	BatchStatusRecLen = 1

	// MaxErrorMessage bounds the message body of a non-OK response, so a
	// confused peer cannot make the other side allocate much to read it.
	MaxErrorMessage = 4096

	// MaxTokenBytes bounds an AUTH token: long enough for any secret an
	// operator generates (openssl rand -hex 64 is 128 bytes), short enough
	// that a node reads it into a fixed buffer.
	MaxTokenBytes = 256

	// ExistFlagPin, in a BATCH_EXIST's offset field, asks the node to
	// keep each value it finds from eviction until a GET of the key or
	// the lease time (server.lease_ms) passes.
	ExistFlagPin = 1
)

// Op is a request operation code.
type Op uint8

const (
	OpPing        Op = 1
	OpPut         Op = 2
	OpGet         Op = 3
	OpExist       Op = 4
	OpRemove      Op = 5
	OpBatchPut    Op = 6
	OpBatchGet    Op = 7
	OpBatchExist  Op = 8
	OpBatchRemove Op = 9
	OpStats       Op = 10
	// OpAuth presents the connection's token (its body, 1..MaxTokenBytes
	// bytes) to a node that requires credentials; see the package doc.
	OpAuth Op = 15
	LastOp Op = OpAuth // the highest op; the lease protocol's (11..14) are in lease.go
)

var opNames = [...]string{
	OpPing: "PING", OpPut: "PUT", OpGet: "GET", OpExist: "EXIST", OpRemove: "REMOVE",
	OpBatchPut: "BATCH_PUT", OpBatchGet: "BATCH_GET", OpBatchExist: "BATCH_EXIST",
	OpBatchRemove: "BATCH_REMOVE", OpStats: "STATS",
	OpShmInfo: "SHM_INFO", OpLeaseGet: "LEASE_GET", OpRelease: "RELEASE", OpLeasePut: "LEASE_PUT",
	OpAuth: "AUTH",
}

func (o Op) String() string {
	if o >= 1 && o <= LastOp {
		return opNames[o]
	}
	return fmt.Sprintf("OP_%d", uint8(o))
}

// IsBatch reports whether o carries an item table instead of one key.
func (o Op) IsBatch() bool { return o >= OpBatchPut && o <= OpBatchRemove }

// RequestHeader is the decoded 50-byte request prefix.
type RequestHeader struct {
	Epoch   uint8
	Op      Op
	Key     BlockKey
	Offset  uint64
	Length  uint64 // GET: range length; batch ops: item count
	BodyLen uint64
}

// ResponseHeader is the decoded 18-byte response prefix.
type ResponseHeader struct {
	Epoch   uint8
	Status  Status
	Stored  uint64 // GET/EXIST: stored length; batch ops: record count
	BodyLen uint64
}

// Limits bound what a decoder accepts before anything is allocated.
type Limits struct {
	MaxBlockBytes uint64 // largest value; also bounds every body
	MaxBatchItems uint64 // largest item count of one batch frame
}

// FrameError is a request the decoder refused. The connection that sent it
// must be answered with Status and Message and then closed.
type FrameError struct {
	Status  Status
	Message string
}

func (e *FrameError) Error() string { return e.Status.String() + ": " + e.Message }

// Unwrap lets errors.Is(err, wire.StatusEpochMismatch) match.
func (e *FrameError) Unwrap() error { return e.Status }

func frameErr(s Status, format string, args ...any) *FrameError {
	return &FrameError{Status: s, Message: fmt.Sprintf(format, args...)}
}

// foreignProtocol names the protocol a prefix that is not dfkv's most
// likely speaks, or returns "": an operator who points curl, a browser or
// a TLS client at the data port should read that, not advice to upgrade
// (the first byte of "GET " would otherwise read as epoch 71).
func foreignProtocol(src []byte) string {
	for _, m := range []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "PRI * HTTP/2"} {
		if len(src) >= len(m) && string(src[:len(m)]) == m {
			return "HTTP"
		}
	}
	if len(src) >= 2 && src[0] == 0x16 && src[1] == 0x03 {
		return "a TLS handshake"
	}
	return ""
}

// AppendRequest appends the 50-byte prefix of h to dst. A zero Epoch is
// written as EpochTCP.
func AppendRequest(dst []byte, h *RequestHeader) []byte {
	var b [RequestPrefixLen]byte
	b[0] = h.Epoch
	if b[0] == 0 {
		b[0] = EpochTCP
	}
	b[1] = byte(h.Op)
	binary.LittleEndian.PutUint64(b[2:], h.Key.Tenant)
	copy(b[10:26], h.Key.ID[:])
	binary.LittleEndian.PutUint64(b[26:], h.Offset)
	binary.LittleEndian.PutUint64(b[34:], h.Length)
	binary.LittleEndian.PutUint64(b[42:], h.BodyLen)
	return append(dst, b[:]...)
}

// DecodeRequest decodes and validates a request prefix. src must hold at
// least RequestPrefixLen bytes (the caller reads exactly that many first).
// It checks, in order: epoch, op, unused fields, then every declared length
// against lim, so that the caller may allocate BodyLen (or, for BATCH_PUT,
// one value at a time) without further checks. A non-nil error is always a
// *FrameError.
func DecodeRequest(src []byte, lim Limits) (RequestHeader, error) {
	var h RequestHeader
	if len(src) < RequestPrefixLen {
		return h, frameErr(StatusInvalid, "truncated request prefix: %d of %d bytes", len(src), RequestPrefixLen)
	}
	h.Epoch = src[0]
	h.Op = Op(src[1])
	h.Key.Tenant = binary.LittleEndian.Uint64(src[2:])
	copy(h.Key.ID[:], src[10:26])
	h.Offset = binary.LittleEndian.Uint64(src[26:])
	h.Length = binary.LittleEndian.Uint64(src[34:])
	h.BodyLen = binary.LittleEndian.Uint64(src[42:])

	if h.Epoch != EpochTCP {
		return h, epochMismatch(src, h.Epoch)
	}
	switch h.Op {
	case OpPing, OpStats, OpShmInfo:
		return h, h.checkBare()
	case OpLeaseGet, OpRelease, OpLeasePut:
		return h, h.checkLease(lim)
	case OpPut:
		return h, h.checkPut(lim)
	case OpAuth:
		return h, h.checkAuth()
	case OpGet:
		if h.BodyLen != 0 {
			return h, frameErr(StatusInvalid, "GET carries a %d-byte body", h.BodyLen)
		}
		return h, nil
	case OpExist, OpRemove:
		if h.Offset != 0 || h.Length != 0 || h.BodyLen != 0 {
			return h, frameErr(StatusInvalid, "%s carries non-zero offset, length or body", h.Op)
		}
		return h, nil
	case OpBatchPut, OpBatchGet, OpBatchExist, OpBatchRemove:
		return h, h.checkBatch(lim)
	}
	return h, frameErr(StatusUnsupported, "unknown op %d", uint8(h.Op))
}

// ForeignEpoch refuses, from its first bytes alone (at least one), a
// request whose epoch is not EpochTCP, or returns nil. A node checks it
// as soon as a request's first byte arrives, so a peer of another
// generation (whose frames may be shorter than the prefix) is answered at
// once rather than when the prefix's missing bytes time out.
func ForeignEpoch(first []byte) error {
	if len(first) == 0 || first[0] == EpochTCP {
		return nil
	}
	return epochMismatch(first, first[0])
}

// ShortPrefixGap is how long the first request of a connection may pause
// part-way through its prefix before the port takes the peer for one of a
// generation with shorter frames and refuses it (ShortPrefix), instead of
// waiting the first-request deadline for bytes that will never come.
// Every dfkv client writes a request's prefix in one call, so at the start
// of a connection it arrives in one segment, whole.
const ShortPrefixGap = 5 * time.Millisecond

// ShortPrefix is the refusal of a connection whose first request stopped
// after n bytes of its prefix (want, this epoch's length) and went quiet.
func ShortPrefix(n, want int, port string) *FrameError {
	return frameErr(StatusEpochMismatch, "the first request stopped after %d bytes of the %d-byte prefix of this epoch: a peer of an older generation (shorter frames)? %s speaks only its current epoch; upgrade the peer", n, want, port)
}

// epochMismatch is DecodeRequest's error for a prefix whose first byte is
// not EpochTCP, naming what the peer most likely is.
func epochMismatch(src []byte, epoch uint8) error {
	if what := foreignProtocol(src); what != "" {
		return frameErr(StatusEpochMismatch, "not a dfkv request: it looks like %s; this is dfkv's binary data port (the node's /metrics, /healthz and /readyz are on server.http_listen)", what)
	}
	if epoch == EpochMDS {
		return frameErr(StatusEpochMismatch, "request epoch %d is the MDS control protocol: this address is a cache node's data port, not an MDS; give it as a member (client.members), not as an MDS address", epoch)
	}
	return frameErr(StatusEpochMismatch, "request epoch %d, this node speaks TCP epoch %d; upgrade the older side", epoch, EpochTCP)
}

// checkBare checks PING and STATS, which carry nothing but their op.
func (h *RequestHeader) checkBare() error {
	if h.Key != (BlockKey{}) || h.Offset != 0 || h.Length != 0 || h.BodyLen != 0 {
		return frameErr(StatusInvalid, "%s carries non-zero key, offset, length or body", h.Op)
	}
	return nil
}

// checkAuth checks AUTH: a token of 1..MaxTokenBytes as its body and
// nothing else.
func (h *RequestHeader) checkAuth() error {
	if h.Key != (BlockKey{}) || h.Offset != 0 || h.Length != 0 {
		return frameErr(StatusInvalid, "AUTH carries a non-zero key, offset or length")
	}
	if h.BodyLen == 0 || h.BodyLen > MaxTokenBytes {
		return frameErr(StatusInvalid, "AUTH token of %d bytes; a token is 1..%d bytes", h.BodyLen, MaxTokenBytes)
	}
	return nil
}

func (h *RequestHeader) checkPut(lim Limits) error {
	if h.Offset != 0 || h.Length != 0 {
		return frameErr(StatusInvalid, "PUT carries non-zero offset or length")
	}
	if h.BodyLen == 0 {
		return frameErr(StatusInvalid, "PUT of a zero-byte value; dfkv stores only non-empty values")
	}
	if h.BodyLen > lim.MaxBlockBytes {
		return frameErr(StatusTooLarge, "PUT value of %d bytes exceeds the node's max_block_bytes %d", h.BodyLen, lim.MaxBlockBytes)
	}
	return nil
}

// checkBatch checks the four batch ops: no key or offset, an item count
// (Length) within lim, and a body that fits the count (checkBatchBody).
func (h *RequestHeader) checkBatch(lim Limits) error {
	if h.Key != (BlockKey{}) || (h.Offset != 0 && !(h.Op == OpBatchExist && h.Offset == ExistFlagPin)) {
		return frameErr(StatusInvalid, "%s carries a non-zero key or offset", h.Op)
	}
	if n := h.Length; n == 0 || n > lim.MaxBatchItems {
		return frameErr(StatusInvalid, "%s of %d items; allowed 1..%d", h.Op, n, lim.MaxBatchItems)
	}
	return h.checkBatchBody(lim)
}

// checkBatchBody checks a batch's body length against its item count
// (1..MaxBatchItems, checked already): the exact table size for the
// fixed-size items, and for BATCH_PUT a table plus values of at least one
// byte and, on average, at most MaxBlockBytes.
func (h *RequestHeader) checkBatchBody(lim Limits) error {
	n := h.Length
	switch h.Op {
	case OpBatchPut:
		// Every product is checked for overflow: Limits come from the
		// embedding program, not only from the config's bounds.
		table, ok := mulFits(n, BatchPutItemLen)
		if !ok || h.BodyLen < table || h.BodyLen-table < n {
			return frameErr(StatusInvalid, "BATCH_PUT body of %d bytes is too short for %d items of at least 1 byte", h.BodyLen, n)
		}
		// More than n values of the limit, one byte past it included
		// (the division rounds up): one at least is over it.
		if (h.BodyLen-table-1)/n >= lim.MaxBlockBytes {
			return frameErr(StatusTooLarge, "BATCH_PUT body of %d bytes is more than %d values of max_block_bytes %d: a value exceeds max_block_bytes", h.BodyLen, n, lim.MaxBlockBytes)
		}
	case OpBatchGet:
		if want, ok := mulFits(n, BatchGetItemLen); !ok || h.BodyLen != want {
			return frameErr(StatusInvalid, "BATCH_GET body of %d bytes, want %d bytes for each of %d items", h.BodyLen, BatchGetItemLen, n)
		}
	default:
		if want, ok := mulFits(n, BatchKeyItemLen); !ok || h.BodyLen != want {
			return frameErr(StatusInvalid, "%s body of %d bytes, want %d bytes for each of %d items", h.Op, h.BodyLen, BatchKeyItemLen, n)
		}
	}
	return nil
}

// mulFits is a*b and whether it fits in 64 bits.
func mulFits(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

// AppendResponse appends the 18-byte prefix of h to dst. A zero Epoch is
// written as EpochTCP.
func AppendResponse(dst []byte, h *ResponseHeader) []byte {
	var b [ResponsePrefixLen]byte
	b[0] = h.Epoch
	if b[0] == 0 {
		b[0] = EpochTCP
	}
	b[1] = byte(h.Status)
	binary.LittleEndian.PutUint64(b[2:], h.Stored)
	binary.LittleEndian.PutUint64(b[10:], h.BodyLen)
	return append(dst, b[:]...)
}

// DecodeResponse decodes a response prefix; src must hold at least
// ResponsePrefixLen bytes. It refuses a foreign epoch and an unknown
// status; the caller bounds BodyLen by what it asked for.
func DecodeResponse(src []byte) (ResponseHeader, error) {
	var h ResponseHeader
	if len(src) < ResponsePrefixLen {
		return h, frameErr(StatusInvalid, "truncated response prefix: %d of %d bytes", len(src), ResponsePrefixLen)
	}
	h.Epoch = src[0]
	h.Status = Status(src[1])
	h.Stored = binary.LittleEndian.Uint64(src[2:])
	h.BodyLen = binary.LittleEndian.Uint64(src[10:])
	if h.Epoch == EpochMDS {
		return h, frameErr(StatusEpochMismatch, "response epoch %d is the MDS control protocol: this address is an MDS, not a cache node; give it as an MDS address (client.mds, --mds), not as a member", h.Epoch)
	}
	if h.Epoch != EpochTCP {
		return h, frameErr(StatusEpochMismatch, "response epoch %d, this client speaks TCP epoch %d; the peer is not a dfkv node of this version", h.Epoch, EpochTCP)
	}
	if !h.Status.Known() {
		return h, frameErr(StatusInvalid, "response carries unknown status %d", uint8(h.Status))
	}
	return h, nil
}

// Batch item tables.

// AppendKeyItem appends a 24-byte key item (BATCH_EXIST, BATCH_REMOVE).
func AppendKeyItem(dst []byte, k BlockKey) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, k.Tenant)
	return append(dst, k.ID[:]...)
}

// DecodeKeyItem decodes a 24-byte key item; the caller ensures len(src) >= 24.
func DecodeKeyItem(src []byte) BlockKey {
	var k BlockKey
	k.Tenant = binary.LittleEndian.Uint64(src)
	copy(k.ID[:], src[8:24])
	return k
}

// AppendPutItem appends a 32-byte BATCH_PUT item.
func AppendPutItem(dst []byte, k BlockKey, valueLen uint64) []byte {
	dst = AppendKeyItem(dst, k)
	return binary.LittleEndian.AppendUint64(dst, valueLen)
}

// DecodePutItem decodes a 32-byte BATCH_PUT item; len(src) >= 32.
func DecodePutItem(src []byte) (BlockKey, uint64) {
	return DecodeKeyItem(src), binary.LittleEndian.Uint64(src[24:])
}

// AppendGetItem appends a 40-byte BATCH_GET item.
func AppendGetItem(dst []byte, k BlockKey, offset, length uint64) []byte {
	dst = AppendKeyItem(dst, k)
	dst = binary.LittleEndian.AppendUint64(dst, offset)
	return binary.LittleEndian.AppendUint64(dst, length)
}

// DecodeGetItem decodes a 40-byte BATCH_GET item; len(src) >= 40.
func DecodeGetItem(src []byte) (k BlockKey, offset, length uint64) {
	return DecodeKeyItem(src), binary.LittleEndian.Uint64(src[24:]), binary.LittleEndian.Uint64(src[32:])
}

// ValidateBatchPutTable checks a BATCH_PUT item table against the body
// length the prefix declared: every value non-empty and the values adding
// up exactly to the rest of the body. It runs before any value is read so
// a lying table cannot make the node read or allocate past it. A value
// over MaxBlockBytes passes: it is that item's TOO_LARGE, not the frame's
// (the body bound DecodeRequest applied keeps the frame itself bounded),
// so the caller must skip such an item's bytes rather than store them.
func ValidateBatchPutTable(table []byte, bodyLen uint64, lim Limits) error {
	n := uint64(len(table)) / BatchPutItemLen
	want := bodyLen - uint64(len(table))
	var sum uint64
	for i := uint64(0); i < n; i++ {
		_, vl := DecodePutItem(table[i*BatchPutItemLen:])
		if vl == 0 {
			return frameErr(StatusInvalid, "BATCH_PUT item %d has a zero-byte value; dfkv stores only non-empty values", i)
		}
		if vl > want-sum { // sum <= want: no overflow either way
			return frameErr(StatusInvalid, "BATCH_PUT values up to item %d add up to more than the %d bytes the body holds", i, want)
		}
		sum += vl
	}
	if sum != want {
		return frameErr(StatusInvalid, "BATCH_PUT values add up to %d bytes but the body holds %d", sum, want)
	}
	return nil
}

// AppendGetRecord appends a BATCH_GET response record header; dataLen
// bytes of data follow it on the wire.
func AppendGetRecord(dst []byte, s Status, stored, dataLen uint64) []byte {
	dst = append(dst, byte(s))
	dst = binary.LittleEndian.AppendUint64(dst, stored)
	return binary.LittleEndian.AppendUint64(dst, dataLen)
}

// DecodeGetRecord decodes a 17-byte BATCH_GET record header.
func DecodeGetRecord(src []byte) (s Status, stored, dataLen uint64) {
	return Status(src[0]), binary.LittleEndian.Uint64(src[1:]), binary.LittleEndian.Uint64(src[9:])
}

// AppendExistRecord appends a 9-byte BATCH_EXIST response record.
func AppendExistRecord(dst []byte, s Status, stored uint64) []byte {
	dst = append(dst, byte(s))
	return binary.LittleEndian.AppendUint64(dst, stored)
}

// DecodeExistRecord decodes a 9-byte BATCH_EXIST record.
func DecodeExistRecord(src []byte) (Status, uint64) {
	return Status(src[0]), binary.LittleEndian.Uint64(src[1:])
}
