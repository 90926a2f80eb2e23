/*
 * dfkv.h — the C ABI of dfkv, a distributed KV-cache store for LLM inference.
 *
 * Written by hand; implemented by libdfkv.so (contrib/libdfkv, Go with cgo,
 * built by scripts/build-lib.sh). The sections below cover identity, status
 * codes and the behaviour of clients.
 *
 * Identity
 *   A client handle is opened on one immutable NAMESPACE (binary bytes, e.g.
 *   a canonical DFKVNS\0\2 descriptor from the Python package). Every call
 *   names a block by an OBJECT KEY given as a (const void* ptr, uint64_t len)
 *   span. Embedded NUL bytes are identity bytes, never terminators. A NULL or
 *   zero-length key, a key over 4096 bytes, and a zero-byte value fail closed
 *   with DFKV_INVALID; nothing is sent.
 *
 * Unreachable nodes
 *   Reads (get, get_range, exist, their batch and SG forms, exist_prefix)
 *   of a node that cannot be reached are answered as misses: the item's
 *   status is DFKV_NOT_FOUND (the engine recomputes, as for any miss) and
 *   the last error says "unreachable, answered as a miss". Writes and
 *   removes report DFKV_UNAVAILABLE or DFKV_TIMEOUT. After a connection
 *   failure the node is skipped for a short, growing back-off window, so a
 *   dead node costs no dial per call.
 *
 * Return values
 *   Every function returns a dfkv status (an int, the same numbers as the
 *   wire protocol's status byte): DFKV_OK (0) or a failure. Output slots are
 *   written to a failure value (0 lengths, DFKV_INTERNAL statuses) before
 *   any work, so they never hold stale data when a call fails early. No
 *   function aborts or unwinds into the caller: an internal fault is caught
 *   and returned as DFKV_INTERNAL with a message in dfkv_last_error.
 *
 * Thread safety
 *   A dfkv_client is safe to use from many threads at once; batch calls fan
 *   out to the owning nodes in parallel inside the library. dfkv_close must
 *   not race with other calls on the same handle that the caller still
 *   expects to succeed; a call made after dfkv_close fails with DFKV_INVALID
 *   (handles are never reused, so a stale handle cannot reach another
 *   client).
 *
 * Processes
 *   libdfkv.so contains a Go runtime with its own threads; like any such
 *   library it does not survive fork() without exec. Open clients in the
 *   process that uses them. A child forked from a process with an embedded
 *   store does not keep that store's disks locked: the library closes the
 *   child's copies of the lock descriptors right after fork, so another
 *   process may open a disk once its owner closed it, whatever children
 *   that owner forked.
 *
 * Memory ownership
 *   The library never retains a caller pointer after a call returns and never
 *   frees caller memory. Keys and values are read, and destination buffers
 *   written, only during the call. Strings the library returns are copied
 *   into caller buffers (dfkv_last_error, dfkv_stats), except
 *   dfkv_status_name, which returns a static string.
 *
 * Last error
 *   Each handle keeps the message of its most recent failure per calling
 *   thread, like errno (dfkv_last_error(c, ...)); failures of dfkv_open_v2,
 *   which has no handle yet, of dfkv_chain_keys, which takes none, of
 *   dfkv_close, after which the handle is gone, and of calls made with a
 *   NULL or closed handle go to one process-wide slot kept the same way
 *   (dfkv_last_error(NULL, ...)). Read it on the thread that made the
 *   failing call: with one handle shared by many threads, each gets its
 *   own failure's message. A
 *   thread with no message of its own on the handle gets the latest of any
 *   thread (or, once its thread id is reused, a dead thread's). Up to 1,024
 *   threads' messages are kept per handle; past that, the oldest goes.
 *   Success does not clear the message.
 */
#ifndef DFKV_H
#define DFKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: wire.Status values (wire/status.go). Never renumbered. */
#define DFKV_OK             0  /* success */
#define DFKV_NOT_FOUND      1  /* no block under this key (a miss) */
#define DFKV_INVALID        2  /* bad argument: NULL/empty/oversized span, zero-byte value, bad options, closed handle */
#define DFKV_QUOTA_EXCEEDED 3  /* the tenant's quota is full */
#define DFKV_CACHE_FULL     4  /* the node could not make room */
#define DFKV_IO_ERROR       5  /* the node's disk failed */
#define DFKV_TIMEOUT        6  /* the call's deadline (timeout_ms) passed */
#define DFKV_UNAVAILABLE    7  /* the owning node could not be reached or dropped the connection */
#define DFKV_UNSUPPORTED    8  /* a feature this build does not have (e.g. a newer options field) */
#define DFKV_EPOCH_MISMATCH 9  /* the node speaks another protocol epoch, or requires TLS this client is not using */
#define DFKV_TOO_LARGE      10 /* value over max block bytes, or a destination smaller than the stored value */
#define DFKV_INTERNAL       11 /* a bug inside libdfkv; the message says where */
#define DFKV_UNAUTHENTICATED 12 /* the node requires a token (the token option, DFKV_CLIENT_TOKEN) and refused this one, or none was given */
#define DFKV_FORBIDDEN      13 /* the token does not grant this op on this namespace's tenant; nothing was done */

/* Opaque client handle. It is a token, not a pointer to memory: never
 * dereference it. NULL is never a valid handle. */
typedef struct dfkv_client dfkv_client;

/*
 * Options for dfkv_open_v2. Size-delimited: set struct_size to
 * sizeof(dfkv_client_options_v2) and zero every field you do not set
 * (memset or "= {0}"). A later version appends fields; this library rejects
 * a struct_size smaller than its v2 layout (DFKV_INVALID) and accepts a
 * larger one only when every byte past the fields it knows is zero (a
 * non-zero unknown field asks for a feature it lacks: DFKV_UNSUPPORTED).
 */
typedef struct dfkv_client_options_v2 {
    uint64_t struct_size;        /* sizeof(dfkv_client_options_v2); required */

    /* Membership: exactly one of members or mds_addrs. */
    const char* members;         /* static members: comma-separated host:port list */
    const char* mds_addrs;       /* MDS addresses, comma-separated: members are discovered and followed */
    const char* group;           /* MDS group; NULL or "" = "default"; only with mds_addrs */

    /* Namespace: immutable binary bytes, 1..65536 bytes, copied at open. */
    const void* namespace_ptr;
    uint64_t namespace_len;

    uint32_t batch_concurrency;  /* nodes a batch call talks to at once; 0 = 8 */
    uint32_t pool_size;          /* idle connections kept per node; 0 = 16 */
    uint64_t timeout_ms;         /* per-call deadline; 0 = 10000 */
    uint64_t dial_timeout_ms;    /* connecting to one node; 0 = 2000 */
    uint64_t max_block_bytes;    /* largest value sent or accepted; 0 = 64 MiB */

    /* Appended later; a caller built before it passes a struct_size that
     * ends above, which means 0 here. shm: DFKV_SHM_AUTO (0) uses shared
     * memory with nodes on this host that offer it (their
     * server.shm_socket) and TCP for the rest; DFKV_SHM_OFF always TCP;
     * DFKV_SHM_ON requires it (a call to a node without it fails). */
    uint32_t shm;
    uint32_t reserved0;          /* must be 0 */

    /* Appended later (a shorter struct_size reads it as NULL).
     * NULL: connect to the nodes named above. Otherwise open an embedded
     * store inside this process instead: a whole cache node (RAM tier,
     * optional local disk, optional object store) reached through the
     * same calls, with no server and no port. The string is TOML in the
     * layout of dfkv.toml, usually its [server] table, e.g.
     *   "[server]\nram_tier_bytes = \"8GiB\"\ndisks = [\"/nvme/dfkv\"]\n"
     * ("" for the defaults: a 1 GiB RAM tier and no disk); DFKV_SERVER_*
     * variables, as the process has them at open (getenv), apply on top;
     * the client's connection variables (DFKV_CLIENT_TOKEN, DFKV_TOKEN,
     * DFKV_CLIENT_TLS*) are ignored. members and mds_addrs must be empty. A disk
     * has one owner: a second process naming the same directory fails with
     * an error naming the process that holds it; processes share through
     * the object store (server.s3_*). dfkv_close flushes RAM to the disk
     * and queued uploads to the object store before it returns. */
    const char* embedded_config;

    /* Appended later (a shorter struct_size reads it as NULL). The secret
     * presented to nodes that require credentials (server.credentials_file),
     * NUL-terminated: 16..256 bytes, no spaces or control characters (else
     * DFKV_INVALID). NULL or "": the environment's DFKV_CLIENT_TOKEN, else
     * DFKV_TOKEN (the names the dfkv tools read), read at open; none of
     * them set: no token. A node without credentials accepts any token. The
     * library copies it at open and never puts it in a message or a log. A
     * refused token makes calls fail with DFKV_UNAUTHENTICATED; a token
     * that does not grant an op on this namespace's tenant, DFKV_FORBIDDEN. */
    const char* token;

    /* Appended later (a shorter struct_size reads tls as DFKV_TLS_ENV and
     * the strings as NULL). TLS with every node and MDS, for nodes started
     * with server.tls_cert (dfkv server --tls-cert): TLS 1.3, verifying
     * each node's certificate against the CA and its address's host (or
     * tls_server_name). Each setting is the field when it is set, else the
     * environment variable the dfkv tools read for client.tls*, looked up
     * at open:
     *   tls: DFKV_TLS_ON or DFKV_TLS_OFF decide; DFKV_TLS_ENV (0) takes
     *     $DFKV_CLIENT_TLS (1/0, true/false, yes/no, on/off; unset or ""
     *     is off; another value is DFKV_INVALID). Any other value is
     *     DFKV_INVALID. A uint32_t like shm, followed by reserved1 to keep
     *     the pointers after it 8-byte aligned.
     *   tls_ca_file ($DFKV_CLIENT_TLS_CA): PEM CA bundle the nodes'
     *     certificates must chain to; neither set: the system's roots.
     *   tls_cert_file, tls_key_file ($DFKV_CLIENT_TLS_CERT,
     *     $DFKV_CLIENT_TLS_KEY): a PEM client certificate and its key, for
     *     nodes that require one (server.tls_client_ca, mutual TLS); both
     *     or neither, else DFKV_INVALID naming them. A node's credentials
     *     may grant a certificate's common name (cert_common_name) what a
     *     token grants; then no token is needed.
     *   tls_server_name ($DFKV_CLIENT_TLS_SERVER_NAME): the name every
     *     node's certificate must carry; neither set: each address's host.
     * NULL and "" count as unset. A file that cannot be read or holds no
     * usable PEM fails the open with DFKV_INVALID and a message naming its
     * path. With TLS off the environment's files are ignored, as the tools
     * ignore them, but a file or server name set in these fields is
     * DFKV_INVALID unless tls is DFKV_TLS_OFF: it means TLS was wanted,
     * and the data would otherwise go in clear. An embedded store
     * (embedded_config) has no connection to encrypt: tls DFKV_TLS_ON, or
     * a file or server name in these fields, is DFKV_INVALID there, and
     * the environment is ignored. Against a node without TLS, calls fail
     * with a message saying it "does not speak TLS", and a certificate
     * that does not verify fails them with the x509 reason and the CA in
     * use (writes: DFKV_UNAVAILABLE; reads: misses, as for any node that
     * cannot be reached); a node with TLS refuses a client without it
     * (DFKV_EPOCH_MISMATCH, "requires TLS"). */
    uint32_t tls;                /* DFKV_TLS_* */
    uint32_t reserved1;          /* must be 0 */
    const char* tls_ca_file;
    const char* tls_cert_file;
    const char* tls_key_file;
    const char* tls_server_name;
} dfkv_client_options_v2;

/* dfkv_client_options_v2.shm (not statuses: an enum, apart from them). */
enum { DFKV_SHM_AUTO = 0, DFKV_SHM_OFF = 1, DFKV_SHM_ON = 2 };

/* dfkv_client_options_v2.tls. */
enum { DFKV_TLS_ENV = 0, DFKV_TLS_ON = 1, DFKV_TLS_OFF = 2 };

/* DFKV_INTERNAL_NO_PROTOTYPES is for libdfkv's own cgo build, which cannot
 * spell `const`; never define it in a caller. */
#ifndef DFKV_INTERNAL_NO_PROTOTYPES

/* Opens a client. On success *out is a handle for dfkv_close; on failure
 * *out is NULL and dfkv_last_error(NULL, ...) says why. With static members
 * it does not connect (nodes are dialed on first use); with mds_addrs it
 * asks the MDS for the group's members before returning (an unreachable
 * MDS fails the open) and then follows membership changes in the
 * background until dfkv_close. */
int dfkv_open_v2(const dfkv_client_options_v2* opts, dfkv_client** out);

/* Closes idle connections and invalidates the handle, which is gone even
 * when the close fails (an embedded store whose flush to disk failed): the
 * message is then in dfkv_last_error(NULL, ...). Closing NULL or a closed
 * handle returns DFKV_INVALID. */
int dfkv_close(dfkv_client* c);

/* Copies the last error message (NUL-terminated, truncated to cap-1 bytes)
 * into buf and returns its full length in bytes, excluding the NUL, so a
 * return >= cap means it was truncated. c == NULL reads the open-failure
 * slot. buf may be NULL when cap is 0. */
size_t dfkv_last_error(dfkv_client* c, char* buf, size_t cap);

/* Upper-case name of a status ("OK", "NOT_FOUND", ...) or "UNKNOWN".
 * Static storage; never free it. */
const char* dfkv_status_name(int status);

/* ---- scalar operations ---- */

/* Stores value under key, replacing any previous value. */
int dfkv_put(dfkv_client* c, const void* key, uint64_t key_len,
             const void* value, uint64_t value_len);

/* Reads the whole value of key into buf. *stored_len (required) receives
 * the stored length. When the value is longer than buf_len, buf holds its
 * first buf_len bytes and DFKV_TOO_LARGE is returned: retry with a buffer of
 * *stored_len bytes. A value longer than this client's max_block_bytes
 * (stored by a writer with a higher limit) is DFKV_TOO_LARGE whatever the
 * buffer: only a client opened with a larger max_block_bytes reads it. A
 * miss is DFKV_NOT_FOUND. */
int dfkv_get(dfkv_client* c, const void* key, uint64_t key_len,
             void* buf, uint64_t buf_len, uint64_t* stored_len);

/* Reads `length` bytes at `offset` of key's value into buf (buf_len >= the
 * bytes wanted). length 0 reads to the end (as much as fits in buf);
 * offset == stored length reads 0 bytes successfully; offset past the end
 * is DFKV_INVALID; a length past the end is clamped. *bytes_read and
 * *stored_len (both required) receive the bytes copied and the full stored
 * length. */
int dfkv_get_range(dfkv_client* c, const void* key, uint64_t key_len,
                   uint64_t offset, uint64_t length,
                   void* buf, uint64_t buf_len,
                   uint64_t* bytes_read, uint64_t* stored_len);

/* DFKV_OK with *stored_len (may be NULL) when key is stored, DFKV_NOT_FOUND
 * when it is not. */
int dfkv_exist(dfkv_client* c, const void* key, uint64_t key_len, uint64_t* stored_len);

/* Removes key; DFKV_NOT_FOUND when it was not stored. */
int dfkv_remove(dfkv_client* c, const void* key, uint64_t key_len);

/* ---- scatter-gather (one key, several caller buffers) ---- */

/* Stores the concatenation bufs[0..n) (lens[i] bytes each, every lens[i] >
 * 0) as one value. The pieces go to the socket in place (vectored writes):
 * the library makes no copy of them, so they must not change during the call. */
int dfkv_put_sg(dfkv_client* c, const void* key, uint64_t key_len,
                uint64_t n, const void* const* bufs, const uint64_t* lens);

/* Reads key's value and fills bufs[0..n) in order. *stored_len (required)
 * receives the stored length. The value is read from the socket straight
 * into the buffers (no staging copy). A value shorter than the buffers fills a
 * prefix of them and returns DFKV_OK (check *stored_len); a longer one fills
 * them all and returns DFKV_TOO_LARGE. */
int dfkv_get_sg(dfkv_client* c, const void* key, uint64_t key_len,
                uint64_t n, void* const* bufs, const uint64_t* lens,
                uint64_t* stored_len);

/* ---- batch operations ----
 * keys[i] / key_lens[i] are parallel arrays of n spans (n <= 1048576). Each
 * item gets its own status in statuses[i] (required, n entries). The return
 * value is DFKV_OK when every item succeeded, otherwise the status of the
 * first failed item; an argument error of the call itself (NULL arrays,
 * n too large) is DFKV_INVALID with every statuses[i] = DFKV_INVALID.
 * Items go to their owning nodes in parallel; a node that fails fails only
 * its own items. */

int dfkv_put_batch(dfkv_client* c, uint64_t n,
                   const void* const* keys, const uint64_t* key_lens,
                   const void* const* values, const uint64_t* value_lens,
                   int32_t* statuses);

/* Reads each whole value into bufs[i] (buf_lens[i] bytes, > 0).
 * stored_lens[i] (required) receives each stored length; an item whose value
 * is longer than its buffer is DFKV_TOO_LARGE. */
int dfkv_get_batch(dfkv_client* c, uint64_t n,
                   const void* const* keys, const uint64_t* key_lens,
                   void* const* bufs, const uint64_t* buf_lens,
                   uint64_t* stored_lens, int32_t* statuses);

/* statuses[i] is DFKV_OK or DFKV_NOT_FOUND per key; stored_lens may be NULL. */
int dfkv_exist_batch(dfkv_client* c, uint64_t n,
                     const void* const* keys, const uint64_t* key_lens,
                     uint64_t* stored_lens, int32_t* statuses);

int dfkv_remove_batch(dfkv_client* c, uint64_t n,
                      const void* const* keys, const uint64_t* key_lens,
                      int32_t* statuses);

/* How long a prefix is stored: *hits (required) receives the number of
 * consecutive keys from keys[0] that exist. All keys are looked up in
 * parallel across their owners and the answer is cut at the first miss.
 * Returns DFKV_OK when the count ended at a miss (an unreachable node's
 * keys are misses) or at n; when it ended at another error (an invalid key
 * span, a node answering with an error), that error's status, with *hits
 * still the count before it. */
int dfkv_exist_prefix(dfkv_client* c, uint64_t n,
                      const void* const* keys, const uint64_t* key_lens,
                      uint64_t* hits);

/* dfkv_exist_batch and dfkv_exist_prefix that also pin: each node keeps
 * the values it finds where they are (in RAM, or on disk) until a GET of
 * the key (from any client) or its lease time (server.lease_ms) passes,
 * so a prefix found is still there when the engine loads it. Values
 * larger than one disk extent are not pinned; nodes without pins answer
 * as the unpinned calls do. */
int dfkv_exist_batch_pin(dfkv_client* c, uint64_t n,
                         const void* const* keys, const uint64_t* key_lens,
                         uint64_t* stored_lens, int32_t* statuses);
int dfkv_exist_prefix_pin(dfkv_client* c, uint64_t n,
                          const void* const* keys, const uint64_t* key_lens,
                          uint64_t* hits);

/* Batch scatter-gather: item i is key i and the counts[i] buffers that
 * follow the previous items' buffers in the flattened bufs/lens arrays (so
 * bufs and lens hold counts[0] + ... + counts[n-1] entries, each buffer
 * non-NULL and non-empty). put stores each item's concatenation; get fills
 * each item's buffers in order, stored_lens[i] (required) receiving the
 * stored length, with the dfkv_get_sg rules per item. As there, the pieces
 * move between the socket and the caller's buffers in place, with no
 * staging copy. Statuses and the return value follow the batch rules
 * above. */
int dfkv_put_batch_sg(dfkv_client* c, uint64_t n,
                      const void* const* keys, const uint64_t* key_lens,
                      const uint64_t* counts, const void* const* bufs, const uint64_t* lens,
                      int32_t* statuses);

int dfkv_get_batch_sg(dfkv_client* c, uint64_t n,
                      const void* const* keys, const uint64_t* key_lens,
                      const uint64_t* counts, void* const* bufs, const uint64_t* lens,
                      uint64_t* stored_lens, int32_t* statuses);

/* dfkv_get_batch_sg reading a byte range of each value: item i's buffers
 * (laid out as there) are filled from byte offsets[i] (required, n entries)
 * of its value, so an item reads lens' total from there, not the whole
 * value (one layer of a block stored layer after layer, say).
 * stored_lens[i] (required) receives the full stored length whatever the
 * range. The range rules of dfkv_get_range apply per item: the bytes read
 * are min(stored_lens[i] - offsets[i], the item's total) and a value that
 * ends inside the range fills a prefix of the buffers with DFKV_OK (check
 * stored_lens[i]); offsets[i] == stored length reads 0 bytes with DFKV_OK;
 * offsets[i] past it is DFKV_INVALID for that item alone. An item's total
 * past max_block_bytes is DFKV_TOO_LARGE. Buffers are filled in place, as
 * there; statuses and the return value follow the batch rules above. */
int dfkv_get_batch_range_sg(dfkv_client* c, uint64_t n,
                            const void* const* keys, const uint64_t* key_lens,
                            const uint64_t* offsets,
                            const uint64_t* counts, void* const* bufs, const uint64_t* lens,
                            uint64_t* stored_lens, int32_t* statuses);

/* ---- block-prefix chain keys (no handle, no I/O) ----
 *
 * Content-addressed names of KV blocks computed from token ids, for an
 * engine that gives the connector tokens rather than block hashes of its
 * own: two prompts that share their first M full blocks of tokens name
 * those M blocks identically. With H = BLAKE3-256, integers little-endian,
 * F the namespace's layout fingerprint (the u64 of its canonical
 * descriptor, as the Python package's layout_fingerprint computes) and B
 * tokens per block:
 *
 *   seed     = H("DFKVCHAIN1" || u64le(F))
 *   chain[0] = H(seed || u32le of tokens[0..B))
 *   chain[k] = H(chain[k-1] || u32le of tokens[k*B..(k+1)*B))   full blocks only
 *
 * The n_tokens % B trailing tokens, if any, are the tail; with P the last
 * full block's hash (seed when there is none):
 *
 *   tail name   = H(P || "tail")
 *   tail digest = H(P || u32le of the tail's tokens)
 *
 * The name depends on P alone, so a longer prompt with the same full
 * blocks writes its tail under the same key (replacing the shorter one);
 * store the digest with the tail's value and compare it before using a
 * stored tail. Object keys (what dfkv_put and dfkv_exist_prefix take) are
 * the prefixes below followed by 64 lower-case hex digits of a chain hash
 * or tail name, no NUL; dfkv_exist_prefix over the block keys, in order,
 * returns how many leading blocks are stored. wire/chain.go in the dfkv
 * source is the definition and wire/testdata/chain_golden.json its
 * vectors. */
#define DFKV_CHAIN_BLOCK_KEY_PREFIX "dfkv/chain/v1/b3="
#define DFKV_CHAIN_TAIL_KEY_PREFIX "dfkv/chain/v1/tail/b3="
enum { DFKV_CHAIN_HASH_BYTES = 32 };

/* Computes the chain of tokens[0..n_tokens) in blocks of block_tokens for
 * fingerprint. out_hashes receives *n_blocks = n_tokens / block_tokens
 * hashes of DFKV_CHAIN_HASH_BYTES bytes each, back to back, when it holds
 * them (out_capacity_blocks hashes; it may be NULL when that is 0).
 * tail_name and tail_digest (required, 32 bytes each) and *tail_tokens
 * (required) receive the tail, or zeros and 0 when n_tokens is a multiple
 * of block_tokens. All outputs but out_hashes are preset (0 and zeros)
 * before any check; out_hashes is written only on success.
 *   DFKV_INVALID:   block_tokens 0; n_blocks, tail_name, tail_digest or
 *                   tail_tokens NULL; tokens NULL with n_tokens > 0;
 *                   out_hashes NULL with out_capacity_blocks > 0;
 *                   n_tokens over 2^32.
 *   DFKV_TOO_LARGE: out_capacity_blocks is below the number of full
 *                   blocks, which *n_blocks then holds: call again with
 *                   room for that many (n_tokens / block_tokens).
 * No tokens is DFKV_OK with no blocks and no tail. Failures are reported
 * in dfkv_last_error(NULL, ...). */
int dfkv_chain_keys(uint64_t fingerprint,
                    const uint32_t* tokens, uint64_t n_tokens, uint64_t block_tokens,
                    uint8_t* out_hashes, uint64_t out_capacity_blocks, uint64_t* n_blocks,
                    uint8_t* tail_name, uint8_t* tail_digest, uint64_t* tail_tokens);

/* ---- introspection ---- */

/* Writes a JSON object {"<member>": <that node's STATS document> |
 * {"error": "..."}, ...} for every member into buf (NUL-terminated) and its
 * length (without the NUL) into *len (required). When cap is too small,
 * returns DFKV_TOO_LARGE with *len the size needed (plus 1 for the NUL).
 * The document is fetched anew by every call and its counters grow, so
 * retry with headroom (e.g. *len + 4096). */
int dfkv_stats(dfkv_client* c, char* buf, uint64_t cap, uint64_t* len);

#endif /* DFKV_INTERNAL_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif

#endif /* DFKV_H */
