// Package wire is the contract between dfkv clients and cache nodes: status
// codes, block identity (namespace descriptor, object key, 128-bit object
// id, tenant hash; ident.go, namespace.go, objectkey.go), block-prefix
// chain keys that name KV blocks from token ids (chain.go), the Ketama
// ring that routes blocks, and the TCP frame codec described here. The
// client library is wire/client.
//
// # TCP frames (protocol epoch 6)
//
// A connection carries requests from the client and responses from the
// node, strictly FIFO: the n-th response answers the n-th request, and a
// client may pipeline as many requests as it likes. All integers are
// little-endian. These constants are part of the wire format and must not
// be changed; a change of layout is a new epoch.
//
// Request prefix, 50 bytes, followed by BodyLen bytes of body:
//
//	+--------+------+-----------+-------------------------------------------+
//	| offset | size | field     | meaning                                   |
//	+--------+------+-----------+-------------------------------------------+
//	|      0 |    1 | epoch     | 6 for TCP; anything else is refused       |
//	|      1 |    1 | op        | Op below                                  |
//	|      2 |    8 | tenant    | BlockKey.Tenant (scalar key ops)          |
//	|     10 |   16 | object id | BlockKey.ID (scalar key ops)              |
//	|     26 |    8 | offset    | GET: first byte to read                   |
//	|     34 |    8 | length    | GET: bytes to read (0 = to the end);      |
//	|        |      |           | batch ops: number of items                |
//	|     42 |    8 | body len  | bytes of body that follow the prefix      |
//	+--------+------+-----------+-------------------------------------------+
//
// Response prefix, 18 bytes, followed by BodyLen bytes of body:
//
//	+--------+------+-----------+-------------------------------------------+
//	|      0 |    1 | epoch     | 6                                         |
//	|      1 |    1 | status    | Status                                    |
//	|      2 |    8 | stored    | GET/EXIST: full stored length of the      |
//	|        |      |           | value; batch ops: number of item records  |
//	|     10 |    8 | body len  | GET: bytes of value; non-OK status: a     |
//	|        |      |           | UTF-8 message; batch ops: 0 (records are  |
//	|        |      |           | self-delimiting, see below)               |
//	+--------+------+-----------+-------------------------------------------+
//
// Fields an op does not use must be zero; a request with a non-zero unused
// field is malformed. A malformed request (wrong epoch, unknown op, a body
// larger than the node's maximum block size, an inconsistent batch table)
// is answered with one response carrying the status and a message, and
// the connection is then closed: after a framing error nothing later on the
// stream can be trusted. Nothing of a malformed request is applied. A
// request of another epoch is refused on its first byte; a connection's
// first request whose prefix stops part-way and stays quiet for
// ShortPrefixGap (5 ms) is refused as a peer with shorter frames
// (EPOCH_MISMATCH), since a client writes a prefix in one call. Both hold
// on the MDS's control port too.
//
// Ops and their bodies:
//
//	PING    (1)  no body                       -> OK
//	PUT     (2)  body = the value (1..max)      -> OK | error
//	GET     (3)  no body                       -> OK + stored + value bytes
//	EXIST   (4)  no body                       -> OK + stored | NOT_FOUND
//	REMOVE  (5)  no body                       -> OK | NOT_FOUND
//	BATCH_PUT    (6)  length = n; body = n put items (32 bytes each:
//	             tenant u64, id [16], value len u64) then the n values
//	             back to back                  -> n status records (1 byte);
//	             a value over max_block_bytes is its item's TOO_LARGE
//	             (its bytes are read and dropped), the others are stored;
//	             a body over n values of max_block_bytes refuses the
//	             whole frame with TOO_LARGE
//	BATCH_GET    (7)  length = n; body = n get items (40 bytes each: tenant,
//	             id, offset u64, length u64)   -> n get records: status u8,
//	             stored u64, data len u64, then data len bytes
//	BATCH_EXIST  (8)  length = n; body = n keys (24 bytes: tenant, id);
//	             offset = 1 (PIN): keep each value found where it is (RAM,
//	             or disk) until a GET of its key (on any connection) or
//	             server.lease_ms, so a prefix looked up is not evicted
//	             before it is loaded (values larger than one disk extent
//	             are not pinned)
//	                                           -> n exist records: status u8,
//	                                              stored u64
//	BATCH_REMOVE (9)  length = n; body = n keys -> n status records
//	STATS   (10) no body                       -> OK + JSON body
//	AUTH    (15) body = a token, 1..256 bytes  -> OK + stored 1 (accepted)
//	             or stored 0 (the node requires no credentials and did
//	             not check it) | UNAUTHENTICATED, then closed
//
// # Credentials
//
// A node configured with credentials (server.credentials_file) requires
// each connection to present a token in an AUTH frame before anything
// but PING and SHM_INFO; AUTH is an op of epoch 6, so an open node and a
// client without a token speak exactly as before. A request that comes
// before AUTH, a token the node does not know, and any request after the
// token was withdrawn from the node's file are answered UNAUTHENTICATED
// (12) and the connection is closed; a second AUTH, or a token of 0 or
// more than 256 bytes, is a malformed frame (INVALID, closed). Once
// authenticated, a request whose key's tenant the token does not grant
// for the op (read: GET, EXIST and their batch forms; write: PUT,
// BATCH_PUT; remove: REMOVE, BATCH_REMOVE; stats: STATS) is answered
// FORBIDDEN (13) and nothing is done, whether or not the key exists; in
// a batch that is the item's status, and the other items are served. The
// connection stays open. A token that may remove but not read a tenant's
// keys has its REMOVEs of them answered OK whether the key was there or
// not (the key is gone either way), so removing cannot serve to probe
// for keys. A client that predates AUTH and meets a node
// that requires it reads status 12 as one it does not know, and stops.
// The lease protocol below is not offered by such a node: a one-sided
// reader maps the whole RAM arena, which no grant confines to a tenant.
//
// The range contract holds for GET and BATCH_GET on every
// engine: length 0 reads the remainder, offset == stored succeeds with zero
// bytes, offset > stored is INVALID, an oversized length is clamped, and the
// stored length is always returned.
//
// # The lease protocol (epoch 7): one-sided reads from the node's RAM
//
// A client on the node's host (shared memory, package wire/shm) or on an
// RDMA fabric reads resident values out of the node's RAM arena itself,
// instead of receiving them through a socket, and writes values into a
// staging region the node copies from. The node pins what it leases, so
// the bytes cannot be evicted or reused while the client copies them.
//
// Discovery, on the TCP port:
//
//	SHM_INFO (11) no body -> OK + stored = node instance + body = the
//	             path of the node's shared-memory socket | NOT_FOUND
//
// Bootstrap, on the shared-memory socket (a Unix stream socket): the
// client sends a 32-byte hello (LeaseHello: magic "DFKVLSE\0", epoch 7,
// the node instance it expects or 0); the node answers with a 48-byte
// welcome (LeaseWelcome: lease time, node instance, arena size, staging
// size, lease-word count) and three memory files as SCM_RIGHTS: the
// arena (read-only), the lease words (read-only; both sealed against new
// writers, so reopening the descriptor for writing gives no writable
// mapping either) and the connection's own staging region (read-write). A hello of another epoch, a TCP frame,
// or an instance that is not the node's (the node restarted) gets a
// welcome with that status, a u16 message length and the message, and
// the connection closes. After the welcome the connection carries the
// TCP frames above (every op) and the lease ops:
//
//	LEASE_GET (12) tenant field = flags (1: PROMOTE, read a value that is
//	             only on disk into RAM and lease it, rather than send it);
//	             offset = r, length = n; body = r lease ids (u64) to
//	             release first, then n get items (40 bytes, as BATCH_GET)
//	                               -> n records (34 bytes): status u8,
//	                                  stored u64, kind u8, offset u64,
//	                                  length u64, lease u64; kind 1
//	                                  (ARENA): the bytes are in the arena
//	                                  at offset, under lease; kind 2
//	                                  (INLINE): length bytes follow the
//	                                  record (not resident in the arena,
//	                                  or every lease is live); kind 0:
//	                                  none (a miss, an error, zero bytes)
//	RELEASE   (13) offset = r ≥ 1; body = r lease ids
//	                               -> OK + stored = how many it ended
//	LEASE_PUT (14) offset = r, length = n; body = r lease ids, then n put
//	             items (40 bytes: tenant, id, staging offset u64, length
//	             u64) naming values the client wrote into its staging
//	             region            -> n status records (1 byte), as
//	                                  BATCH_PUT; a range outside the
//	                                  region is that item's INVALID
//
// Over RDMA (package rdma) the same ops run on a TCP connection to the
// node's data port whose first byte is 7: rdma's bootstrap frame, which
// the node hands to its RDMA transport (a node without one answers with
// a refusal welcome). Otherwise the lease ops are refused (UNSUPPORTED,
// connection closed) on the TCP port, and a frame of any epoch other
// than 6 is refused on its first byte. A lease id is a slot index (high 32 bits) and a sequence number
// (low 32, never 0). A lease ends when its connection releases it (best
// piggybacked on its next LEASE_GET or LEASE_PUT), when its connection
// closes, or server.lease_ms after it was granted; a release of an id the
// connection does not hold ends nothing. The lease-word region holds, at
// 8 × slot, the id of the slot's live lease or 0, and the node clears it
// before it unpins: a client copies the leased bytes, then reads the
// word (after a full fence), and trusts its copy only if the word still
// holds its id. REMOVE and PUT of a leased key do what they do while a
// GET is in flight: the key changes at once, the leased bytes stay as
// they were until the lease ends. Quotas and the RAM tier's watermark
// apply to LEASE_PUT as to PUT. The client must not change a staged
// value until LEASE_PUT answers: the node copies it during the request.
package wire
