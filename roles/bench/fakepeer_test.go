package bench

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// fakePeer is a tiny in-memory redis (SET, GET, EXISTS over RESP) or
// memcached (ms, mg over the meta protocol) for tests: enough for bench's
// clients, and allocation-free once a key exists, so allocation tests
// measure the client alone.
type fakePeer struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (f *fakePeer) set(k, v []byte) {
	f.mu.Lock()
	if old, ok := f.m[string(k)]; ok && len(old) == len(v) {
		copy(old, v)
	} else {
		f.m[string(k)] = bytes.Clone(v)
	}
	f.mu.Unlock()
}

// get calls fn with the value of k (nil when missing) under the lock.
func (f *fakePeer) get(k []byte, fn func(v []byte)) {
	f.mu.Lock()
	fn(f.m[string(k)])
	f.mu.Unlock()
}

// startFakePeer serves proto ("redis" or "memcache") on a loopback port
// until the test ends.
func startFakePeer(t *testing.T, proto string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{m: map[string][]byte{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				br := bufio.NewReaderSize(nc, 64<<10)
				bw := bufio.NewWriterSize(nc, 64<<10)
				if proto == "redis" {
					f.serveRESP(br, bw)
				} else {
					f.serveMeta(br, bw)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func readLine(br *bufio.Reader) ([]byte, bool) {
	l, err := br.ReadSlice('\n')
	if err != nil || len(l) < 2 {
		return nil, false
	}
	return l[:len(l)-2], true
}

func atoi(b []byte) int {
	n, ok := parseInt(b)
	if !ok {
		return -2
	}
	return int(n)
}

func (f *fakePeer) serveRESP(br *bufio.Reader, bw *bufio.Writer) {
	var args [3][]byte
	var num []byte
	for {
		l, ok := readLine(br)
		if !ok || len(l) < 2 || l[0] != '*' {
			return
		}
		n := atoi(l[1:])
		if n < 1 || n > len(args) {
			return
		}
		for i := 0; i < n; i++ {
			l, ok := readLine(br)
			if !ok || len(l) < 2 || l[0] != '$' {
				return
			}
			size := atoi(l[1:])
			if size < 0 {
				return
			}
			if cap(args[i]) < size+2 {
				args[i] = make([]byte, size+2)
			}
			args[i] = args[i][:size+2]
			if _, err := io.ReadFull(br, args[i]); err != nil {
				return
			}
			args[i] = args[i][:size]
		}
		switch string(args[0]) {
		case "SET":
			f.set(args[1], args[2])
			bw.WriteString("+OK\r\n")
		case "GET":
			f.get(args[1], func(v []byte) {
				if v == nil {
					bw.WriteString("$-1\r\n")
					return
				}
				num = strconv.AppendInt(append(num[:0], '$'), int64(len(v)), 10)
				bw.Write(num)
				bw.WriteString("\r\n")
				bw.Write(v)
				bw.WriteString("\r\n")
			})
		case "EXISTS":
			f.get(args[1], func(v []byte) {
				if v == nil {
					bw.WriteString(":0\r\n")
				} else {
					bw.WriteString(":1\r\n")
				}
			})
		default:
			bw.WriteString("-ERR unknown command\r\n")
		}
		if bw.Flush() != nil {
			return
		}
	}
}

func (f *fakePeer) serveMeta(br *bufio.Reader, bw *bufio.Writer) {
	var val, num []byte
	var tok [4][]byte
	for {
		l, ok := readLine(br)
		if !ok {
			return
		}
		nt := 0
		for len(l) > 0 && nt < len(tok) {
			i := bytes.IndexByte(l, ' ')
			if i < 0 {
				i = len(l)
			}
			tok[nt] = l[:i]
			nt++
			l = l[min(i+1, len(l)):]
		}
		switch {
		case nt == 3 && string(tok[0]) == "ms":
			size := atoi(tok[2])
			if size < 0 {
				bw.WriteString("CLIENT_ERROR bad data chunk\r\n")
				break
			}
			// tok aliases br's buffer: keep the key before reading on.
			key := append(num[:0], tok[1]...)
			num = key
			if cap(val) < size+2 {
				val = make([]byte, size+2)
			}
			val = val[:size+2]
			if _, err := io.ReadFull(br, val); err != nil {
				return
			}
			f.set(key, val[:size])
			bw.WriteString("HD\r\n")
		case nt >= 2 && string(tok[0]) == "mg":
			withValue := nt == 3 && string(tok[2]) == "v"
			f.get(tok[1], func(v []byte) {
				switch {
				case v == nil:
					bw.WriteString("EN\r\n")
				case !withValue:
					bw.WriteString("HD\r\n")
				default:
					bw.WriteString("VA ")
					bw.Write(strconv.AppendInt(num[:0], int64(len(v)), 10))
					bw.WriteString("\r\n")
					bw.Write(v)
					bw.WriteString("\r\n")
				}
			})
		default:
			bw.WriteString("ERROR\r\n")
		}
		if bw.Flush() != nil {
			return
		}
	}
}
