"""dfkv: Python client of the dfkv KV-cache store.

Standard library only: ``import dfkv`` works without torch and without
libdfkv.so (the identity encoders are pure Python); the library is loaded
when the first Client opens, from $DFKV_LIBRARY, next to this package, or
build/ at the repository root.

    import dfkv
    c = dfkv.Client("127.0.0.1:7600", b"my-namespace")
    c.put(b"key\\x00with-nul", b"value")
    c.get(b"key\\x00with-nul")   # bytearray(b'value'); None when not stored
    c.exist(b"key\\x00with-nul") # True; False when not stored
    c.close()

The namespace is any bytes (a str is taken as UTF-8); the engine
connectors build theirs with NamespaceDescriptor. A node that cannot be
reached raises Unavailable (or Timeout) from the one-key reads, never a
None or False that looks like a miss. Nodes that require credentials take
a token (Client(..., token=...), else $DFKV_CLIENT_TOKEN, else
$DFKV_TOKEN); a refused one raises Unauthenticated, one that does not
cover the namespace's tenant Forbidden (both PermissionErrors). Nodes
serving TLS take Client(..., tls=True, tls_ca=...) (else $DFKV_CLIENT_TLS,
$DFKV_CLIENT_TLS_CA, ...), with tls_cert and tls_key for mutual TLS.
contrib/README.md has the longer example, which the tests run.

NB: libdfkv.so carries a Go runtime, started when the library loads (at
the first Client), which does not survive fork(). Open Clients in the
process that uses them; an engine that forks workers must do so before
any Client exists, or start them with multiprocessing's "spawn". Importing
dfkv starts nothing. In a process forked after the load, a new Client and
every call of an inherited one raise InvalidArgument at once (they would
block for ever); an inherited Client is let go of, not closed, when the
child drops it: it stays the parent's.

Block-prefix chain keys: chain_keys(fingerprint, token_ids, block_tokens)
names KV blocks by their tokens (for an engine that gives tokens rather
than block hashes); Client.stored_chain_prefix counts the leading blocks
stored. The hashing is libdfkv's, loaded on the first call.

Connectors: dfkv.sglang (HiCacheStorage), dfkv.lmcache (RemoteConnector and
ConnectorAdapter for dfkv://), dfkv.vllm (KVConnectorBase_V1).
"""
from .identity import (MAX_NAMESPACE_BYTES, MAX_OBJECT_KEY_BYTES, NAMESPACE_MAGIC,
                       LAYOUT_SGLANG_HICACHE, LAYOUT_VLLM, LAYOUT_LMCACHE, EXPERIMENTAL_LAYOUT_PREFIX,
                       OBJECT_KEY_PREFIX, REPLICATED_RANK,
                       IdentityError, LayerGeometry, TopologySizes, NamespaceDescriptor,
                       decode_namespace, canonical_tenant, layout_fingerprint,
                       ObjectKey, frame, object_id, tenant_hash, BlockKey, block_key,
                       disk_hash, Ring)
from .errors import (DfkvError, NotFound, InvalidArgument, QuotaExceeded, CacheFull, DfkvIOError,
                     Timeout, Unavailable, Unsupported, EpochMismatch, TooLarge, Internal, Unauthenticated,
                     Forbidden, Status, error_for)
from .client import EMBEDDED, Client, key_bytes, namespace_bytes, server_toml
from .chain import (CHAIN_BLOCK_KEY_PREFIX, CHAIN_TAIL_KEY_PREFIX, CHAIN_HASH_BYTES, ChainTail, ChainKeys,
                    chain_keys)

# Spelled out rather than `from .identity import *`, so linters see every
# name (tests/test_identity.py checks it covers identity.__all__).
__all__ = [
    "MAX_NAMESPACE_BYTES", "MAX_OBJECT_KEY_BYTES", "NAMESPACE_MAGIC",
    "LAYOUT_SGLANG_HICACHE", "LAYOUT_VLLM", "LAYOUT_LMCACHE", "EXPERIMENTAL_LAYOUT_PREFIX",
    "OBJECT_KEY_PREFIX", "REPLICATED_RANK",
    "IdentityError", "LayerGeometry", "TopologySizes", "NamespaceDescriptor",
    "decode_namespace", "canonical_tenant", "layout_fingerprint",
    "ObjectKey", "frame", "object_id", "tenant_hash", "BlockKey", "block_key",
    "disk_hash", "Ring",
    "DfkvError", "NotFound", "InvalidArgument", "QuotaExceeded", "CacheFull", "DfkvIOError", "Timeout",
    "Unavailable", "Unsupported", "EpochMismatch", "TooLarge", "Internal", "Unauthenticated", "Forbidden",
    "Status", "error_for",
    "Client", "key_bytes", "namespace_bytes", "EMBEDDED", "server_toml",
    "CHAIN_BLOCK_KEY_PREFIX", "CHAIN_TAIL_KEY_PREFIX", "CHAIN_HASH_BYTES", "ChainTail", "ChainKeys", "chain_keys",
]
