package rdma

import "fmt"

// The verbs below are the whole of what the transport asks of an RDMA
// library, so it can run over libibverbs (ibverbs.go, built with -tags
// rdma) or over the in-process Fake (fake.go), which is how it is tested:
// a device and its protection domain, memory regions, reliable-connected
// queue pairs with their completion queues, and one-sided READ and WRITE.
// Nothing here sends or receives: requests travel on the TCP control
// connection, so no receive queue, no SEND and no immediate data exist.

// Provider is an RDMA library: libibverbs (Verbs) or the Fake.
type Provider interface {
	// Open opens the device called name; "" opens the first device with
	// an ACTIVE port. Each side picks its own device: the names need not
	// match across hosts, the bootstrap carries the port's addresses.
	Open(name string) (Device, error)
}

// Device is an open RDMA device and the port the transport uses on it.
type Device interface {
	// Name is the device's name (for logs and the bootstrap frame).
	Name() string
	// AllocPD allocates a protection domain. Memory regions and queue
	// pairs of one PD work together: the node registers its arena once
	// on one PD that every connection's QP is created on.
	AllocPD() (PD, error)
	// Close closes the device; its PDs must be closed first.
	Close() error
}

// Access is what a memory region lets the local and the remote side do.
type Access uint8

const (
	// AccessLocalWrite lets the NIC write the region for local work
	// requests: the destination of a READ must have it.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteRead lets a peer READ the region with its rkey (the
	// node's arena and lease words).
	AccessRemoteRead
	// AccessRemoteWrite lets a peer WRITE the region with its rkey (a
	// connection's staging region).
	AccessRemoteWrite
)

// PD is a protection domain.
type PD interface {
	// Register registers buf (memory outside the Go heap that stays
	// mapped until Deregister) for access. The NIC pins it.
	Register(buf []byte, access Access) (MR, error)
	// CreateQP creates a reliable-connected queue pair with its own
	// completion queue, holding up to depth outstanding work requests.
	CreateQP(depth int) (QP, error)
	// Close deallocates the PD; its MRs and QPs must be gone first.
	Close() error
}

// MR is a registered memory region. Addr is the address a peer names in
// a work request (the virtual address of the region's first byte), RKey
// the key it must present, LKey the key local work requests present.
// A provider may hand a deregistered region's keys to a later region: a
// key alone proves nothing about what it names, so the transport never
// keeps a remote key past the connection (or node) that announced it.
type MR interface {
	Addr() uint64
	Len() uint64
	LKey() uint32
	RKey() uint32
	// Deregister revokes the region: later remote access with its rkey
	// completes with a remote access error.
	Deregister() error
}

// Endpoint is what one side of a queue pair tells the other during the
// bootstrap to connect it: the QP number, the first packet sequence
// number, and the port's addresses (LID on InfiniBand, GID on RoCE).
type Endpoint struct {
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	LID uint16
	GID [16]byte
}

// Opcode is a work request's operation.
type Opcode uint8

const (
	// OpRead reads remote memory into a local buffer.
	OpRead Opcode = 1
	// OpWrite writes a local buffer into remote memory.
	OpWrite Opcode = 2
)

func (o Opcode) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return fmt.Sprintf("OPCODE_%d", uint8(o))
}

// WorkRequest is one signaled READ or WRITE: Local (inside a region
// registered under LKey) and len(Local) bytes at Remote (inside the
// peer's region under RKey).
type WorkRequest struct {
	ID     uint64
	Op     Opcode
	Local  []byte
	LKey   uint32
	Remote uint64
	RKey   uint32
	// Fence holds the request until every READ posted before it on the
	// QP has completed (IBV_SEND_FENCE): several READs may be in flight
	// at once, and the peer's memory reads of one are not ordered against
	// another's, only their completions are.
	Fence bool
}

// QP is a reliable-connected queue pair and its completion queue. Work
// requests of one QP complete in the order they were posted; a READ that
// must read after earlier ones (the client's lease words, after the
// values) is fenced (WorkRequest.Fence). After an error
// completion the QP is in the error state: later and still queued work
// requests complete with WCFlushed.
type QP interface {
	// Endpoint is this QP's side of the bootstrap.
	Endpoint() Endpoint
	// Connect brings the QP to ready-to-send against the peer's
	// endpoint.
	Connect(remote Endpoint) error
	// Post queues wr; every work request is signaled (completes with a
	// Completion).
	Post(wr WorkRequest) error
	// Poll moves up to len(dst) completions into dst without waiting
	// and reports how many.
	Poll(dst []Completion) (int, error)
	// Close destroys the QP and its completion queue.
	Close() error
}

// WCStatus is a completion's status.
type WCStatus uint8

const (
	WCSuccess         WCStatus = iota
	WCLocalProtection          // Local is not inside a region of LKey, or the region lacks local write
	WCRemoteAccess             // the peer refused: wrong or revoked rkey, range outside the region, access not granted
	WCFlushed                  // the QP was in the error state (an earlier error, or the connection broke)
	WCRetryExceeded            // the peer did not answer (gone, or the fabric broke)
	WCOther                    // anything else the library reports
)

var wcNames = [...]string{"success", "local protection error", "remote access error", "flushed", "retry exceeded", "error"}

func (s WCStatus) String() string {
	if int(s) < len(wcNames) {
		return wcNames[s]
	}
	return fmt.Sprintf("status %d", uint8(s))
}

// Completion reports how one work request ended.
type Completion struct {
	ID     uint64
	Op     Opcode
	Status WCStatus
}
