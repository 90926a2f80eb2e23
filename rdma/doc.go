// Package rdma is the lease protocol (wire, epoch 7) over RDMA: a client
// on the fabric reads resident values out of a node's RAM arena with
// one-sided RDMA READs under leases, and writes values into a staging
// region of its connection with RDMA WRITEs, the way a client on the
// node's host does through shared memory (wire/shm).
//
// # Pieces
//
//   - verbs.go: the few verbs the transport uses (device, PD, memory
//     regions, RC queue pairs, READ, WRITE, completions), as interfaces.
//   - ibverbs.go: those verbs over libibverbs, built only with
//     `go build -tags ibverbs` (cgo, libibverbs-dev; not "rdma", a tag
//     the S3 client library uses for a build of its own). A default build has no
//     verbs library: NewNode, Dial and Check without a Provider return
//     ErrNotBuilt, which says how to build one.
//   - fake.go: an in-process provider (not hardware) that keeps the rules
//     the transport relies on: rkeys and bounds checked before any byte
//     moves, per-QP order, flushing after an error; hooks pause, delay or
//     break a connection.
//   - node.go, client.go: the transport, over any Provider. frame.go
//     draws the bootstrap frames.
//
// # Protocol
//
// A client opens a TCP connection to the node's RDMA port and sends a
// 32-byte bootstrap frame (epoch, its QP's number, LID, GID and PSN, its
// device's name); a frame of another epoch, or a TCP request, is refused
// with the reason. The node answers with a lease welcome, its own
// bootstrap frame and the addresses and rkeys of its arena and lease
// words (registered once per node, on one PD) and of the connection's
// staging region. The TCP connection then carries LEASE_GET, RELEASE,
// LEASE_PUT and PING. A LEASE_GET record of kind ARENA names an arena
// offset; the client READs arena base + offset into its registered
// buffer, then READs the lease's word: a QP executes its READs in order,
// so when the word still holds the lease the bytes were read while they
// were pinned, and only then are they copied to the caller; otherwise the
// item is a miss. Leases are released on the client's next request, end
// with the connection (the node destroys its QP and deregisters its
// staging region first), and expire (engine/lease). A PUT WRITEs values
// into staging, waits for their completions, and names them in a
// LEASE_PUT.
//
// Every call has one absolute deadline (DFKV_RDMA_OP_TIMEOUT_MS for one
// item, DFKV_RDMA_BATCH_OP_TIMEOUT_MS for several, unset following the
// former) over its control frames and every completion it waits for. A
// failed completion, a timeout or a broken control connection breaks the
// connection: the call fails, later calls fail, and the caller dials
// again. The settings are read by FromEnv, not by the config table.
//
// # What is tested, and what is not
//
// The tests run the node over a real RAM tier and the client over the
// Fake, with the race detector: leased and inline values, ranges, misses,
// batches split into frames and READ groups, PUT through staging, a lease
// that lapses between a value's READ and its word's READ (a miss, nothing
// copied), foreign and forged lease ids, a wrong rkey (a remote access
// error that touches nothing), a connection broken mid-batch (flushed
// completions; the node ends its leases), a call past its deadline, and
// bootstraps of the wrong epoch. The libibverbs provider compiles and is
// vetted, but has never run against a NIC: the test machines have none.
//
// # In dfkv
//
// A node started with DFKV_RDMA=1 (roles/server) takes RDMA clients on
// its data port: a connection whose first byte is the lease epoch is
// handed to Node.ServeConn. wire/client (Options.RDMA; the roles, libdfkv
// and so Python read DFKV_RDMA with ClientFromEnv) reads and writes
// values over RDMA and falls back to TCP, for a while, for a node whose
// RDMA fails, and for the calls RDMA does not serve.
//
// Not done: each client connection opens its own device, PD and buffer;
// a leased value larger than the client's registered buffer fails as
// TOO_LARGE; on RoCE the GID index is 0; the bootstrap carries device
// names of at most 7 bytes; there are no RDMA metrics.
package rdma
