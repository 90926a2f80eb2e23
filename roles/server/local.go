package server

import (
	"github.com/dfkv/dfkv/wire"
)

// LocalRead copies [offset, offset+length) of key's value into dst
// straight out of the RAM tier, for a client in this process (an
// embedded store): one copy from the arena, no frame and no socket. It is
// GET's read for values the tier holds, with GET's effects (it ends a
// pin, it is counted); ok is false when the value is not resident or dst
// cannot take it, and the caller then sends the GET over its connection,
// which reads the disk and answers every case.
func (s *Server) LocalRead(key wire.BlockKey, offset, length uint64, dst []byte) (n int, stored uint64, ok bool, err error) {
	l := s.lender
	if l == nil {
		return 0, 0, false, nil
	}
	data, stored, loan, ok, err := l.Lend(key, offset, length)
	if !ok {
		return 0, 0, false, nil
	}
	if err == nil && len(data) > len(dst) {
		l.Return(loan)
		return 0, 0, false, nil
	}
	n = copy(dst, data)
	if len(data) > 0 {
		l.Return(loan)
	}
	s.pins.read(key)
	s.stats.ops[wire.OpGet].Add(1)
	s.stats.bytesOut.Add(uint64(n))
	return n, stored, true, err
}
