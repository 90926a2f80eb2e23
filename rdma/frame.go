package rdma

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/dfkv/dfkv/wire"
)

// The bootstrap, on the node's RDMA TCP port. All integers are
// little-endian; these layouts are part of the wire format.
//
// The client sends its 32-byte bootstrap frame:
//
//	+--------+------+-----------+------------------------------------------+
//	| offset | size | field     | meaning                                  |
//	+--------+------+-----------+------------------------------------------+
//	|      0 |    1 | epoch     | 7, the lease protocol; else refused      |
//	|      1 |    2 | LID       | the port's LID (InfiniBand; 0 on RoCE)   |
//	|      3 |    3 | QPN       | the QP number                            |
//	|      6 |    3 | PSN       | the first packet sequence number         |
//	|      9 |   16 | GID       | the port's GID (RoCE; routing on IB)     |
//	|     25 |    7 | device    | the device's name, NUL-padded (for logs) |
//	+--------+------+-----------+------------------------------------------+
//
// The node answers with a 48-byte lease welcome (wire.LeaseWelcome:
// lease time, node instance, arena bytes, staging bytes, lease-word
// count). A refusal (another epoch, a TCP frame, no room for the
// connection) is a welcome of that status, a u16 message length and the
// message, and the node closes. After an OK welcome come the node's own
// 32-byte bootstrap frame (its QP, already connected to the client's)
// and the 40-byte regions frame, the memory the client may address:
//
//	+--------+------+-----------+------------------------------------------+
//	|      0 |    8 | arena     | address of the arena's first byte        |
//	|      8 |    8 | words     | address of the lease-word region         |
//	|     16 |    8 | staging   | address of this connection's staging     |
//	|     24 |    4 | arena key | rkey of the arena (READ)                 |
//	|     28 |    4 | words key | rkey of the lease words (READ)           |
//	|     32 |    4 | stage key | rkey of the staging region (WRITE)       |
//	|     36 |    4 | reserved  | 0                                        |
//	+--------+------+-----------+------------------------------------------+
//
// The arena and the lease words are registered once per node; only the
// staging region is the connection's own. Then the TCP connection carries
// the lease ops (LEASE_GET, RELEASE, LEASE_PUT) and PING, as frames of
// package wire.
const (
	bootstrapLen = 32
	regionsLen   = 40
	// maxDeviceName is the longest device name the bootstrap frame
	// carries; a longer one is refused when the device opens (give the
	// device a shorter name: rdma dev set NAME name SHORT).
	maxDeviceName = 7
)

// bootstrap is a decoded bootstrap frame.
type bootstrap struct {
	Epoch  uint8
	Device string
	Endpoint
}

func appendBootstrap(dst []byte, b bootstrap) []byte {
	var f [bootstrapLen]byte
	f[0] = b.Epoch
	if f[0] == 0 {
		f[0] = wire.EpochLease
	}
	binary.LittleEndian.PutUint16(f[1:], b.LID)
	put24(f[3:], b.QPN)
	put24(f[6:], b.PSN)
	copy(f[9:25], b.GID[:])
	copy(f[25:], b.Device)
	return append(dst, f[:]...)
}

// decodeBootstrap checks a bootstrap frame's epoch first: a TCP request
// (epoch 6) or another epoch is refused with a status the node answers.
func decodeBootstrap(src []byte) (bootstrap, error) {
	var b bootstrap
	if len(src) < bootstrapLen {
		return b, &wire.FrameError{Status: wire.StatusInvalid, Message: fmt.Sprintf("truncated RDMA bootstrap: %d of %d bytes", len(src), bootstrapLen)}
	}
	b.Epoch = src[0]
	switch {
	case b.Epoch == wire.EpochTCP:
		return b, &wire.FrameError{Status: wire.StatusEpochMismatch, Message: fmt.Sprintf("a TCP request (epoch %d) on the RDMA bootstrap port: it speaks the lease protocol (epoch %d) and begins with a bootstrap frame; send TCP requests to the node's data port", wire.EpochTCP, wire.EpochLease)}
	case b.Epoch != wire.EpochLease:
		return b, &wire.FrameError{Status: wire.StatusEpochMismatch, Message: fmt.Sprintf("RDMA bootstrap of epoch %d, this side speaks %d; upgrade the older side", b.Epoch, wire.EpochLease)}
	}
	b.LID = binary.LittleEndian.Uint16(src[1:])
	b.QPN = get24(src[3:])
	b.PSN = get24(src[6:])
	copy(b.GID[:], src[9:25])
	name := src[25:bootstrapLen]
	for i, c := range name {
		if c == 0 {
			if !allZero(name[i:]) {
				return b, &wire.FrameError{Status: wire.StatusInvalid, Message: "RDMA bootstrap with bytes after its device name's end"}
			}
			name = name[:i]
			break
		}
	}
	b.Device = string(name)
	if b.QPN == 0 {
		return b, &wire.FrameError{Status: wire.StatusInvalid, Message: "RDMA bootstrap without a QP number"}
	}
	return b, nil
}

// regions is the node's regions frame.
type regions struct {
	Arena, Words, Staging          uint64
	ArenaKey, WordsKey, StagingKey uint32
}

func appendRegions(dst []byte, r regions) []byte {
	var f [regionsLen]byte
	binary.LittleEndian.PutUint64(f[0:], r.Arena)
	binary.LittleEndian.PutUint64(f[8:], r.Words)
	binary.LittleEndian.PutUint64(f[16:], r.Staging)
	binary.LittleEndian.PutUint32(f[24:], r.ArenaKey)
	binary.LittleEndian.PutUint32(f[28:], r.WordsKey)
	binary.LittleEndian.PutUint32(f[32:], r.StagingKey)
	return append(dst, f[:]...)
}

func decodeRegions(src []byte) (regions, error) {
	r := regions{
		Arena: binary.LittleEndian.Uint64(src[0:]), Words: binary.LittleEndian.Uint64(src[8:]), Staging: binary.LittleEndian.Uint64(src[16:]),
		ArenaKey: binary.LittleEndian.Uint32(src[24:]), WordsKey: binary.LittleEndian.Uint32(src[28:]), StagingKey: binary.LittleEndian.Uint32(src[32:]),
	}
	if !allZero(src[36:regionsLen]) {
		return r, fmt.Errorf("RDMA regions frame with non-zero reserved bytes: %w", wire.StatusInvalid)
	}
	return r, nil
}

// writeRefusal answers a bootstrap the node will not serve; the caller
// closes the connection.
func writeRefusal(w io.Writer, st wire.Status, msg string) error {
	if len(msg) > wire.MaxErrorMessage {
		msg = msg[:wire.MaxErrorMessage]
	}
	b := wire.AppendLeaseWelcome(nil, wire.LeaseWelcome{Status: st})
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	_, err := w.Write(append(b, msg...))
	return err
}

// readWelcome reads the node's welcome; a refusal comes back as an error
// wrapping its status, with the node's message.
func readWelcome(r io.Reader) (wire.LeaseWelcome, error) {
	var b [wire.LeaseWelcomeLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return wire.LeaseWelcome{}, fmt.Errorf("reading the node's RDMA welcome: %w", err)
	}
	w, err := wire.DecodeLeaseWelcome(b[:])
	if err != nil {
		return w, err
	}
	if w.Status == wire.StatusOK {
		return w, nil
	}
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return w, fmt.Errorf("the node refused the RDMA bootstrap: %w", w.Status)
	}
	msg := make([]byte, min(int(binary.LittleEndian.Uint16(l[:])), wire.MaxErrorMessage))
	if _, err := io.ReadFull(r, msg); err != nil {
		return w, fmt.Errorf("the node refused the RDMA bootstrap: %w", w.Status)
	}
	return w, &wire.StatusError{Status: w.Status, Message: "the node refused the RDMA bootstrap: " + string(msg)}
}

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16) }
func get24(b []byte) uint32    { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
