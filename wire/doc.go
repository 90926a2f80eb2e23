// Package wire is the contract between dfkv clients and cache nodes: status
// codes, block identity (namespace descriptor, object key, 128-bit object
// id, tenant hash), the Ketama ring that routes blocks, and the TCP frame
// codec described here. The client library is wire/client.
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
// stream can be trusted. Nothing of a malformed request is applied.
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
//	BATCH_EXIST  (8)  length = n; body = n keys (24 bytes: tenant, id)
//	                                           -> n exist records: status u8,
//	                                              stored u64
//	BATCH_REMOVE (9)  length = n; body = n keys -> n status records
//	STATS   (10) no body                       -> OK + JSON body
//
// The range contract holds for GET and BATCH_GET on every
// engine: length 0 reads the remainder, offset == stored succeeds with zero
// bytes, offset > stored is INVALID, an oversized length is clamped, and the
// stored length is always returned.
package wire
