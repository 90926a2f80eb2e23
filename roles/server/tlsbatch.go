package server

import (
	"net"
	"sync"
)

// recordBatcher sits between a server's tls.Conn and its socket and, while
// a response is being written, gathers the TLS records it produces into a
// few large writes: crypto/tls writes each record (at most 16 KiB) with a
// system call of its own, 65 for a 1 MiB value, and a response's prefix
// would be a record and a call by itself. Outside a response (the
// handshake, alerts) it writes straight through, so nothing waits in it.
type recordBatcher struct {
	net.Conn
	buf *[]byte // while batching; from batchBufs
}

const batchBytes = 128 << 10

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchBytes); return &b }}

func (r *recordBatcher) begin() {
	r.buf = batchBufs.Get().(*[]byte)
}

// end writes what is gathered and gives the buffer back.
func (r *recordBatcher) end() error {
	err := r.flush()
	*r.buf = (*r.buf)[:0]
	batchBufs.Put(r.buf)
	r.buf = nil
	return err
}

func (r *recordBatcher) flush() error {
	b := *r.buf
	for len(b) > 0 {
		n, err := r.Conn.Write(b)
		if err != nil {
			*r.buf = (*r.buf)[:0]
			return err
		}
		b = b[n:]
	}
	*r.buf = (*r.buf)[:0]
	return nil
}

func (r *recordBatcher) Write(p []byte) (int, error) {
	if r.buf == nil {
		return r.Conn.Write(p)
	}
	if len(*r.buf)+len(p) > cap(*r.buf) {
		if err := r.flush(); err != nil {
			return 0, err
		}
	}
	if len(p) > cap(*r.buf) {
		return r.Conn.Write(p)
	}
	*r.buf = append(*r.buf, p...)
	return len(p), nil
}
