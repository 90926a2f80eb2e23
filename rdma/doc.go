// Package rdma is where the RDMA v2 transport will live (PUT by
// WRITE_WITH_IMM into a leased server slot, GET by the server's RDMA_WRITE
// into the client's registered buffers, negotiated during the TCP
// bootstrap). It is not
// built yet: this package has no code, clients and nodes speak only TCP,
// and a node started with DFKV_RDMA=1 refuses to start with an error that
// says so (config), while client roles and the transport's tuning
// variables (DFKV_RDMA_DEV, …) are warned about as ignored.
//
// When it lands, the cgo and libibverbs code goes behind the "rdma" build
// tag, so the default build needs neither, and its logic (leases, receive
// chunks, completion ordering) is tested against an in-process fake of
// the verbs it uses, since the test machines have no RDMA devices. The
// RAM tier's arena is one contiguous mmap with stable addresses so that it
// can be registered once.
package rdma
