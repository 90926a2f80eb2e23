package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// The peer protocols let one load generator measure dfkv, redis and
// memcached alike: the same workers, keys, values and
// histograms, only the few bytes on the wire differ. Each client is the
// minimum the workloads need, one TCP connection per worker, no
// pipelining, buffers reused so a successful operation allocates nothing.

// peerTarget dials one connection per worker to a redis or memcached.
type peerTarget struct {
	proto       string // "redis" or "memcache"
	addr        string
	dialTimeout time.Duration
	timeout     time.Duration // per operation; 0 = none
}

func (t *peerTarget) Dial() (conn, error) {
	pc := &peerConn{addr: t.addr, dialTimeout: t.dialTimeout, timeout: t.timeout}
	switch t.proto {
	case "redis":
		return &respConn{peerConn: pc}, nil
	case "memcache":
		return &metaConn{peerConn: pc}, nil
	}
	return nil, fmt.Errorf("bench: unknown peer protocol %q", t.proto)
}

func (t *peerTarget) Close() error { return nil }

// peerConn is the connection handling both protocols share: a lazily
// (re)dialled TCP connection, a read buffer and a write buffer. After an
// I/O error or a reply that breaks framing the connection is dropped and
// the next operation dials again.
type peerConn struct {
	addr        string
	dialTimeout time.Duration
	timeout     time.Duration
	// dial replaces net.Dialer in tests (net.Pipe servers).
	dial func() (net.Conn, error)

	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
	iov  [3][]byte
	bufs net.Buffers
}

var crlf = []byte("\r\n")

// ready returns a connected peerConn, dialling if needed, with the
// operation's deadline set.
func (c *peerConn) ready(what string) error {
	if c.nc == nil {
		var nc net.Conn
		var err error
		if c.dial != nil {
			nc, err = c.dial()
		} else {
			nc, err = net.DialTimeout("tcp", c.addr, c.dialTimeout)
		}
		if err != nil {
			return ioError("connect to "+what, c.addr, err)
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c.nc = nc
		if c.br == nil {
			c.br = bufio.NewReaderSize(nc, 64<<10)
		} else {
			c.br.Reset(nc)
		}
	}
	if c.timeout > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(c.timeout))
	}
	return nil
}

// broken closes the connection after a failure that may have left the
// stream misaligned and returns err.
func (c *peerConn) broken(err error) error {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
	return err
}

// send writes wbuf, then body and a CRLF when body is non-nil, in one
// writev.
func (c *peerConn) send(what string, body []byte) error {
	var err error
	if body == nil {
		_, err = c.nc.Write(c.wbuf)
	} else {
		c.iov[0], c.iov[1], c.iov[2] = c.wbuf, body, crlf
		c.bufs = c.iov[:]
		_, err = c.bufs.WriteTo(c.nc)
		c.iov[0], c.iov[1], c.iov[2] = nil, nil, nil
	}
	c.wbuf = c.wbuf[:0]
	if err != nil {
		return c.broken(ioError("write to "+what, c.addr, err))
	}
	return nil
}

// line reads one CRLF-terminated reply line and returns it without the
// CRLF. The slice is valid until the next read.
func (c *peerConn) line(what string) ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("%s %s sent a reply line over %d bytes", what, c.addr, c.br.Size())})
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("server closed the connection")
		}
		return nil, c.broken(ioError("read from "+what, c.addr, err))
	}
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return nil, c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("%s %s sent a line not ended by CRLF: %q", what, c.addr, l)})
	}
	return l[:len(l)-2], nil
}

// value reads a value of n bytes and its CRLF into dst. When n exceeds
// len(dst) the value is read as far as dst holds and the rest skipped, so
// the stream stays aligned, and the error has class WRONG_SIZE.
func (c *peerConn) value(what string, n int, dst []byte) (int, error) {
	take := min(n, len(dst))
	if _, err := io.ReadFull(c.br, dst[:take]); err != nil {
		return 0, c.broken(ioError("read from "+what, c.addr, err))
	}
	if _, err := c.br.Discard(n - take); err != nil {
		return 0, c.broken(ioError("read from "+what, c.addr, err))
	}
	end, err := c.br.Peek(2)
	if err != nil {
		return 0, c.broken(ioError("read from "+what, c.addr, err))
	}
	if end[0] != '\r' || end[1] != '\n' {
		return 0, c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("%s %s: value of %d bytes not followed by CRLF", what, c.addr, n)})
	}
	_, _ = c.br.Discard(2)
	if n > len(dst) {
		return take, &peerError{class: classWrongSize, msg: fmt.Sprintf("%s %s returned %d bytes, expected at most %d", what, c.addr, n, len(dst))}
	}
	return n, nil
}

func (c *peerConn) Close() error {
	if c.nc == nil {
		return nil
	}
	err := c.nc.Close()
	c.nc = nil
	return err
}

// parseInt reads a decimal integer (optional leading '-') without
// allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// firstWord returns the text up to the first space.
func firstWord(b []byte) string {
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// respConn speaks RESP2 to redis: SET, GET and EXISTS.
type respConn struct{ *peerConn }

const redisName = "redis"

// appendBulkHeader appends a RESP bulk string header "$n\r\n".
func appendBulkHeader(b []byte, n int) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendCommand appends "*argc\r\n" and every argument but a trailing
// value of valueLen bytes (valueLen < 0: none), whose header ends wbuf.
func (c *respConn) appendCommand(cmd string, key []byte, valueLen int) {
	argc := 2
	if valueLen >= 0 {
		argc = 3
	}
	b := append(c.wbuf[:0], '*')
	b = strconv.AppendInt(b, int64(argc), 10)
	b = append(b, '\r', '\n')
	b = appendBulkHeader(b, len(cmd))
	b = append(b, cmd...)
	b = append(b, '\r', '\n')
	b = appendBulkHeader(b, len(key))
	b = append(b, key...)
	b = append(b, '\r', '\n')
	if valueLen >= 0 {
		b = appendBulkHeader(b, valueLen)
	}
	c.wbuf = b
}

// errorReply maps a RESP error line ("-ERR …", "-OOM …") to a peerError
// whose class is the error's first word.
func (c *respConn) errorReply(l []byte) error {
	return &peerError{class: "REDIS_" + firstWord(l[1:]), msg: fmt.Sprintf("redis %s: %s", c.addr, l[1:])}
}

func (c *respConn) unexpected(cmd string, l []byte) error {
	return c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("redis %s answered %s with %q", c.addr, cmd, l)})
}

func (c *respConn) Put(key, val []byte) error {
	if err := c.ready(redisName); err != nil {
		return err
	}
	c.appendCommand("SET", key, len(val))
	if err := c.send(redisName, val); err != nil {
		return err
	}
	l, err := c.line(redisName)
	switch {
	case err != nil:
		return err
	case len(l) > 0 && l[0] == '-':
		return c.errorReply(l)
	case string(l) != "+OK":
		return c.unexpected("SET", l)
	}
	return nil
}

func (c *respConn) Get(key, dst []byte) (int, error) {
	if err := c.ready(redisName); err != nil {
		return 0, err
	}
	c.appendCommand("GET", key, -1)
	if err := c.send(redisName, nil); err != nil {
		return 0, err
	}
	l, err := c.line(redisName)
	if err != nil {
		return 0, err
	}
	if len(l) > 0 && l[0] == '-' {
		return 0, c.errorReply(l)
	}
	if len(l) < 2 || l[0] != '$' {
		return 0, c.unexpected("GET", l)
	}
	n, ok := parseInt(l[1:])
	switch {
	case !ok || n < -1:
		return 0, c.unexpected("GET", l)
	case n == -1:
		return 0, wire.StatusNotFound
	}
	return c.value(redisName, int(n), dst)
}

func (c *respConn) Exist(key []byte) error {
	if err := c.ready(redisName); err != nil {
		return err
	}
	c.appendCommand("EXISTS", key, -1)
	if err := c.send(redisName, nil); err != nil {
		return err
	}
	l, err := c.line(redisName)
	switch {
	case err != nil:
		return err
	case len(l) > 0 && l[0] == '-':
		return c.errorReply(l)
	case string(l) == ":1":
		return nil
	case string(l) == ":0":
		return wire.StatusNotFound
	}
	return c.unexpected("EXISTS", l)
}

// metaConn speaks memcached's meta protocol: ms, mg KEY v (get) and
// mg KEY with no flags (existence only: HD on a hit, EN on a miss).
type metaConn struct{ *peerConn }

const memcacheName = "memcached"

func (c *metaConn) errorReply(cmd string, l []byte) error {
	w := firstWord(l)
	switch w {
	case "SERVER_ERROR", "CLIENT_ERROR", "ERROR":
		return &peerError{class: "MEMCACHED_" + w, msg: fmt.Sprintf("memcached %s answered %s with %q", c.addr, cmd, l)}
	}
	return c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("memcached %s answered %s with %q", c.addr, cmd, l)})
}

func (c *metaConn) Put(key, val []byte) error {
	if err := c.ready(memcacheName); err != nil {
		return err
	}
	b := append(c.wbuf[:0], "ms "...)
	b = append(b, key...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(val)), 10)
	c.wbuf = append(b, '\r', '\n')
	if err := c.send(memcacheName, val); err != nil {
		return err
	}
	l, err := c.line(memcacheName)
	switch {
	case err != nil:
		return err
	case string(l) == "HD":
		return nil
	case string(l) == "NS":
		return &peerError{class: "MEMCACHED_NOT_STORED", msg: fmt.Sprintf("memcached %s did not store %q", c.addr, key)}
	}
	return c.errorReply("ms", l)
}

func (c *metaConn) Get(key, dst []byte) (int, error) {
	if err := c.ready(memcacheName); err != nil {
		return 0, err
	}
	b := append(c.wbuf[:0], "mg "...)
	b = append(b, key...)
	c.wbuf = append(b, " v\r\n"...)
	if err := c.send(memcacheName, nil); err != nil {
		return 0, err
	}
	l, err := c.line(memcacheName)
	switch {
	case err != nil:
		return 0, err
	case string(l) == "EN":
		return 0, wire.StatusNotFound
	case len(l) > 3 && string(l[:3]) == "VA ":
	default:
		return 0, c.errorReply("mg v", l)
	}
	num := l[3:]
	if i := bytes.IndexByte(num, ' '); i >= 0 {
		num = num[:i] // flags follow the size
	}
	n, ok := parseInt(num)
	if !ok || n < 0 {
		return 0, c.broken(&peerError{class: classProtocol, msg: fmt.Sprintf("memcached %s: bad value size in %q", c.addr, l)})
	}
	return c.value(memcacheName, int(n), dst)
}

func (c *metaConn) Exist(key []byte) error {
	if err := c.ready(memcacheName); err != nil {
		return err
	}
	b := append(c.wbuf[:0], "mg "...)
	b = append(b, key...)
	c.wbuf = append(b, '\r', '\n')
	if err := c.send(memcacheName, nil); err != nil {
		return err
	}
	l, err := c.line(memcacheName)
	switch {
	case err != nil:
		return err
	case string(l) == "HD":
		return nil
	case string(l) == "EN":
		return wire.StatusNotFound
	}
	return c.errorReply("mg", l)
}
