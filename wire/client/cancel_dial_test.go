package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// hangingDialer never completes a connection: it returns only when the
// dial's context ends, as a SYN to a slow or far node does.
type hangingDialer struct{}

func (hangingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
}

// TestCancelDuringDialIsNotAMiss: a caller can tell its own cancellation
// (errors.Is(err, context.Canceled)) from a node that failed, also when it
// cancels while the connection is being dialed: not ErrPeerDown, and for
// reads not a miss (ExistPrefix would answer "0 blocks cached, no error").
func TestCancelDuringDialIsNotAMiss(t *testing.T) {
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{"127.0.0.1:7600"}, Dialer: hangingDialer{},
		Timeout: 5 * time.Second, DialTimeout: 5 * time.Second, SharedMemory: ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	n, err := cl.ExistPrefix(ctx, [][]byte{[]byte("a"), []byte("b")})
	if err == nil || !errors.Is(err, context.Canceled) || errors.Is(err, ErrPeerDown) || wire.StatusOf(err) == wire.StatusNotFound {
		t.Fatalf("ExistPrefix cancelled during the dial: %d, %v; want an error wrapping context.Canceled, not an unreachable node's miss", n, err)
	}
}
