package client_test

import (
	"bytes"
	"context"
	"testing"
)

// TestRDMALargeValueFallsBackToTCP: a value larger than one RDMA transfer
// (the connection's registered buffer, ClientOptions.BufferBytes) but
// within the client's and the node's max_block_bytes is one of the calls
// RDMA does not serve, and goes over TCP: Put, PutBatch, Get and GetBatch
// of it succeed, as over TCP or shared memory.
func TestRDMALargeValueFallsBackToTCP(t *testing.T) {
	_, viaRDMA, viaTCP := rdmaNode(t, 1<<20)
	bg := context.Background()
	val := bytes.Repeat([]byte("L"), 2<<20) // 2 MiB: well under max_block_bytes (64 MiB)

	if err := viaTCP.Put(bg, []byte("tcp"), val); err != nil {
		t.Fatalf("Put over TCP: %v", err)
	}
	var failed []string
	if err := viaRDMA.Put(bg, []byte("a"), val); err != nil {
		failed = append(failed, "Put: "+err.Error())
	}
	if errs := viaRDMA.PutBatch(bg, [][]byte{[]byte("b")}, [][]byte{val}); errs[0] != nil {
		failed = append(failed, "PutBatch: "+errs[0].Error())
	}
	dst := make([]byte, len(val))
	if n, _, err := viaRDMA.Get(bg, []byte("tcp"), dst); err != nil || !bytes.Equal(dst[:n], val) {
		failed = append(failed, "Get into a large enough buffer: "+errString(err))
	}
	res := viaRDMA.GetBatch(bg, [][]byte{[]byte("tcp")}, [][]byte{make([]byte, len(val))})
	if res[0].Err != nil || !bytes.Equal(res[0].Data, val) {
		failed = append(failed, "GetBatch into a large enough buffer: "+errString(res[0].Err))
	}
	if len(failed) > 0 {
		t.Fatalf("a 2 MiB value (client max_block_bytes 64 MiB, RDMA buffer 1 MiB) that TCP serves fails over RDMA instead of falling back:\n%s",
			joinLines(failed))
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil> (wrong bytes)"
	}
	return err.Error()
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
