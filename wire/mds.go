package wire

import (
	"encoding/binary"
	"fmt"
)

// The MDS control protocol uses the TCP frame layout of doc.go with its own
// epoch byte, so a data-plane client that dials an MDS port (or the
// reverse) fails fast with EPOCH_MISMATCH instead of being mis-parsed.
//
// Request prefix fields for the control ops:
//
//	epoch    8 (EpochMDS)
//	op       MDS_REGISTER | MDS_HEARTBEAT | MDS_DEREGISTER | MDS_MEMBERS
//	tenant, object id, offset: zero
//	length   MDS_MEMBERS: the epoch the caller already knows (0 = none)
//	body len bytes of a JSON body (MDSRequest), at most MaxMDSRequest
//
// An MDS that requires credentials answers a request without an accepted
// token UNAUTHENTICATED, and one whose credential does not cover the node
// id (or MEMBERS) FORBIDDEN.
//
// Response prefix: epoch 8, status, stored = the directory's epoch, body =
// JSON (MDSReply) or, for a non-OK status, a message. A MEMBERS reply whose
// epoch equals the known epoch carries no body ("unchanged"). A member list
// whose JSON would exceed MaxMembersReply is refused with TOO_LARGE rather
// than truncated: a client must never route over a partial list.
const (
	EpochMDS = 8

	OpMDSRegister   Op = 20
	OpMDSHeartbeat  Op = 21
	OpMDSDeregister Op = 22
	OpMDSMembers    Op = 23

	// MaxMDSRequest bounds a control request body.
	MaxMDSRequest = 64 << 10
	// MaxMembersReply bounds a MEMBERS reply body (about 4,000 members).
	MaxMembersReply = 1 << 20
)

// MemberInfo is one cache node as the directory knows it.
type MemberInfo struct {
	ID            string   `json:"id"`
	Addr          string   `json:"addr"`
	Weight        int      `json:"weight"`
	Disks         []string `json:"disks,omitempty"`
	CapacityBytes uint64   `json:"capacity_bytes"`
	Version       string   `json:"version,omitempty"`
	// LastHeartbeatUnixMS is when the directory last heard from the node,
	// or 0 when it does not know (see LeaseLive).
	LastHeartbeatUnixMS int64 `json:"last_heartbeat_unix_ms"`
	// LeaseLive says the directory keeps no heartbeat times and holds the
	// member on a lease instead (etcd): the node renews it by heartbeating
	// through any MDS, and all the directory knows is that it has not run
	// out. LastHeartbeatUnixMS is then 0.
	LeaseLive bool `json:"lease_live,omitempty"`
}

// MDSRequest is the JSON body of a control request.
type MDSRequest struct {
	Group  string      `json:"group"`
	Member *MemberInfo `json:"member,omitempty"` // REGISTER
	ID     string      `json:"id,omitempty"`     // HEARTBEAT, DEREGISTER
	// Addr is, on DEREGISTER, the address the node registered the id
	// at: an MDS removes the member only if it is still listed there, so
	// a node whose entry lapsed and was taken by another node with the
	// same id does not remove that one when it stops. Empty: not checked
	// (older nodes).
	Addr string `json:"addr,omitempty"`
	// Token is the caller's secret, for an MDS that requires node
	// credentials (REGISTER, HEARTBEAT, DEREGISTER) or a token for
	// MEMBERS; an MDS without them ignores it. It is sent with every
	// request (control requests are few) and never logged.
	Token string `json:"token,omitempty"`
}

// MDSReply is the JSON body of a control reply.
type MDSReply struct {
	Epoch   uint64       `json:"epoch"`
	Members []MemberInfo `json:"members,omitempty"`
	// HeartbeatTTLMS tells a registering or heartbeating node how often
	// to heartbeat: a node silent for longer is dropped from the
	// directory.
	HeartbeatTTLMS int64 `json:"heartbeat_ttl_ms,omitempty"`
}

// IsMDSOp reports whether o is a control op.
func IsMDSOp(o Op) bool { return o >= OpMDSRegister && o <= OpMDSMembers }

// MDSOpName names a control op for logs.
func MDSOpName(o Op) string {
	switch o {
	case OpMDSRegister:
		return "REGISTER"
	case OpMDSHeartbeat:
		return "HEARTBEAT"
	case OpMDSDeregister:
		return "DEREGISTER"
	case OpMDSMembers:
		return "MEMBERS"
	}
	return o.String()
}

// AppendMDSRequest appends a control request prefix.
func AppendMDSRequest(dst []byte, op Op, knownEpoch uint64, bodyLen int) []byte {
	var b [RequestPrefixLen]byte
	b[0] = EpochMDS
	b[1] = byte(op)
	binary.LittleEndian.PutUint64(b[34:], knownEpoch)
	binary.LittleEndian.PutUint64(b[42:], uint64(bodyLen))
	return append(dst, b[:]...)
}

// ForeignMDSEpoch refuses, from its first byte, a control request of
// another epoch, or returns nil: the MDS answers a peer of another
// generation at once instead of waiting for a prefix it will never send
// whole.
func ForeignMDSEpoch(first []byte) error {
	if len(first) == 0 || first[0] == EpochMDS {
		return nil
	}
	return frameErr(StatusEpochMismatch, "request epoch %d on the MDS control port, which speaks epoch %d; is this a data-plane client dialing the MDS, or a client of another generation?", first[0], EpochMDS)
}

// DecodeMDSRequest decodes and checks a control request prefix: epoch,
// op, zero key and offset, body within MaxMDSRequest. A non-nil error is a
// *FrameError; the connection is answered and closed.
func DecodeMDSRequest(src []byte) (op Op, knownEpoch uint64, bodyLen int, err error) {
	if len(src) < RequestPrefixLen {
		return 0, 0, 0, frameErr(StatusInvalid, "truncated control request: %d of %d bytes", len(src), RequestPrefixLen)
	}
	if src[0] != EpochMDS {
		return 0, 0, 0, frameErr(StatusEpochMismatch, "request epoch %d on the MDS control port, which speaks epoch %d; is this a data-plane client dialing the MDS?", src[0], EpochMDS)
	}
	op = Op(src[1])
	if !IsMDSOp(op) {
		return 0, 0, 0, frameErr(StatusUnsupported, "unknown control op %d", src[1])
	}
	for _, c := range src[2:34] {
		if c != 0 {
			return 0, 0, 0, frameErr(StatusInvalid, "%s carries a non-zero key or offset", MDSOpName(op))
		}
	}
	knownEpoch = binary.LittleEndian.Uint64(src[34:])
	body := binary.LittleEndian.Uint64(src[42:])
	if body > MaxMDSRequest {
		return 0, 0, 0, frameErr(StatusTooLarge, "control request body of %d bytes exceeds %d", body, MaxMDSRequest)
	}
	if op != OpMDSMembers && knownEpoch != 0 {
		return 0, 0, 0, frameErr(StatusInvalid, "%s carries a non-zero length field", MDSOpName(op))
	}
	return op, knownEpoch, int(body), nil
}

// AppendMDSResponse appends a control response prefix.
func AppendMDSResponse(dst []byte, st Status, epoch uint64, bodyLen int) []byte {
	return AppendResponse(dst, &ResponseHeader{Epoch: EpochMDS, Status: st, Stored: epoch, BodyLen: uint64(bodyLen)})
}

// DecodeMDSResponse decodes a control response prefix and bounds its body.
func DecodeMDSResponse(src []byte) (ResponseHeader, error) {
	var h ResponseHeader
	if len(src) < ResponsePrefixLen {
		return h, frameErr(StatusInvalid, "truncated control response")
	}
	if src[0] != EpochMDS {
		return h, frameErr(StatusEpochMismatch, "response epoch %d from an MDS address, want %d; is the address a cache node's data port?", src[0], EpochMDS)
	}
	h.Epoch = src[0]
	h.Status = Status(src[1])
	h.Stored = binary.LittleEndian.Uint64(src[2:])
	h.BodyLen = binary.LittleEndian.Uint64(src[10:])
	if !h.Status.Known() {
		return h, frameErr(StatusInvalid, "control response carries unknown status %d", src[1])
	}
	if h.BodyLen > MaxMembersReply {
		return h, frameErr(StatusTooLarge, "control response body of %d bytes exceeds %d", h.BodyLen, MaxMembersReply)
	}
	return h, nil
}

// ValidateGroup checks a group name: 1–64 of [A-Za-z0-9._-]. It runs when
// a client, node or MDS starts, before any background worker.
func ValidateGroup(g string) error {
	return validateName("group", g, 64)
}

// ValidateMemberID checks a node ID: 1–255 printable bytes without spaces.
func ValidateMemberID(id string) error {
	if id == "" || len(id) > 255 {
		return fmt.Errorf("member id %q: want 1..255 bytes: %w", id, StatusInvalid)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("member id %q: byte %d is a space or control character: %w", id, i, StatusInvalid)
		}
	}
	return nil
}

func validateName(what, s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%s %q: want 1..%d characters of [A-Za-z0-9._-]: %w", what, s, max, StatusInvalid)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%s %q: character %q is not one of [A-Za-z0-9._-]: %w", what, s, c, StatusInvalid)
		}
	}
	return nil
}
