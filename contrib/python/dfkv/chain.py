"""Block-prefix chain keys: content-addressed names of KV blocks computed
from token ids, for an engine that gives the connector tokens rather than
block hashes of its own. Two prompts that share their first M full blocks
of tokens name those M blocks identically, so a later request finds what
an earlier one stored.

    fp = dfkv.layout_fingerprint(...)        # the namespace's layout fingerprint
    ck = dfkv.chain_keys(fp, token_ids, 16)  # blocks of 16 tokens
    keys = ck.object_keys()                  # one per full block, then the tail's
    client.stored_chain_prefix(ck)           # how many leading blocks are stored

The hashing (BLAKE3, which the standard library lacks) is libdfkv's
dfkv_chain_keys, the one implementation, in Go (wire/chain.go defines the
construction; dfkv.h restates it); this module only converts and renders.
The library is loaded on the first call, as for a Client.
"""

from __future__ import annotations

import array
import ctypes
from ctypes import byref, c_uint32, c_uint64
from dataclasses import dataclass
from typing import Iterable, List, Optional

from . import _lib
from .errors import InvalidArgument, error_for

__all__ = ["CHAIN_BLOCK_KEY_PREFIX", "CHAIN_TAIL_KEY_PREFIX", "CHAIN_HASH_BYTES", "ChainTail", "ChainKeys",
           "chain_keys"]

#: What opens a full block's object key; 64 lower-case hex digits follow.
CHAIN_BLOCK_KEY_PREFIX = b"dfkv/chain/v1/b3="
#: What opens a tail's object key; 64 lower-case hex digits of its name follow.
CHAIN_TAIL_KEY_PREFIX = b"dfkv/chain/v1/tail/b3="
#: Size of a block hash, a tail name and a tail digest.
CHAIN_HASH_BYTES = 32

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
# The array typecode of a C uint32_t: 'I' (unsigned int) on every platform
# libdfkv builds for.
_U32_CODE = next(c for c in "IL" if array.array(c).itemsize == 4)


@dataclass(frozen=True)
class ChainTail:
    """The trailing partial block: ``name`` (32 bytes) depends only on the
    blocks before it, so a longer prompt with the same full blocks stores
    its tail under the same key and replaces it; ``digest`` (32 bytes)
    covers the tail's tokens: store it with the value and compare it
    before using a stored tail. ``tokens`` is how many tokens it holds."""

    name: bytes
    digest: bytes
    tokens: int

    def object_key(self) -> bytes:
        return CHAIN_TAIL_KEY_PREFIX + self.name.hex().encode("ascii")


@dataclass(frozen=True)
class ChainKeys:
    """The chain of a token sequence: ``blocks`` holds the 32-byte hash of
    every full block, in order; ``tail`` is None when the tokens fill
    whole blocks."""

    blocks: List[bytes]
    tail: Optional[ChainTail]

    def block_keys(self) -> List[bytes]:
        """The object keys of the full blocks, in order."""
        return [CHAIN_BLOCK_KEY_PREFIX + h.hex().encode("ascii") for h in self.blocks]

    def object_keys(self) -> List[bytes]:
        """The object keys to store under: one per full block, in order,
        then the tail's when there is one."""
        keys = self.block_keys()
        if self.tail is not None:
            keys.append(self.tail.object_key())
        return keys


def _tokens_array(tokens: Iterable[int]) -> array.array:
    """tokens as a uint32 array, checked: a value out of range is an
    InvalidArgument naming it and its index."""
    if isinstance(tokens, array.array) and tokens.typecode == _U32_CODE:
        return tokens
    if isinstance(tokens, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"chain_keys: tokens must be int token ids, not {type(tokens).__name__}")
    if not hasattr(tokens, "__len__"):
        tokens = list(tokens)  # a generator: read once, checked below
    try:
        return array.array(_U32_CODE, tokens)
    except OverflowError as e:
        err = e
    for i, t in enumerate(tokens):
        v = int(t)
        if not 0 <= v <= _U32_MAX:
            raise InvalidArgument(f"chain_keys: token id {v} at index {i} does not fit in uint32 (0..{_U32_MAX})")
    raise InvalidArgument(f"chain_keys: a token id does not fit in uint32 (0..{_U32_MAX}): {err}")


def _last_error(lib) -> str:
    cap = 1024
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = lib.dfkv_last_error(None, buf, cap)
        if n < cap:
            return buf.value.decode("utf-8", "replace")
        cap = n + 1


def chain_keys(fingerprint: int, tokens: Iterable[int], block_tokens: int, *,
               library: Optional[str] = None) -> ChainKeys:
    """The chain keys of ``tokens`` (int token ids, each 0..2**32-1) in
    blocks of ``block_tokens`` (>= 1) for the namespace's layout
    ``fingerprint`` (an unsigned 64-bit int, as layout_fingerprint returns
    and NamespaceDescriptor.layout_fingerprint holds). Use the block size
    of the namespace (its descriptor's block_tokens). A token id, block
    size or fingerprint out of range raises InvalidArgument (a
    ValueError); a non-integer, TypeError."""
    for what, v in (("fingerprint", fingerprint), ("block_tokens", block_tokens)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"chain_keys: {what} must be an int, not {type(v).__name__}")
    if not 0 <= fingerprint <= _U64_MAX:
        raise InvalidArgument(f"chain_keys: fingerprint {fingerprint} does not fit in uint64")
    if not 1 <= block_tokens <= _U64_MAX:
        raise InvalidArgument(f"chain_keys: block_tokens is {block_tokens}; it must be at least 1 (and fit in uint64)")
    toks = _tokens_array(tokens)
    n = len(toks)
    lib = _lib.load(library)
    need = n // block_tokens
    hashes = ctypes.create_string_buffer(max(1, need * CHAIN_HASH_BYTES))
    name = ctypes.create_string_buffer(CHAIN_HASH_BYTES)
    digest = ctypes.create_string_buffer(CHAIN_HASH_BYTES)
    nb, tt = c_uint64(), c_uint64()
    tp = (c_uint32 * n).from_buffer(toks) if n else None
    rc = lib.dfkv_chain_keys(fingerprint, tp, n, block_tokens, hashes, need, byref(nb), name, digest, byref(tt))
    if rc:
        raise error_for(rc, f"chain_keys: {_last_error(lib)}")
    raw = hashes.raw
    blocks = [raw[i * CHAIN_HASH_BYTES:(i + 1) * CHAIN_HASH_BYTES] for i in range(nb.value)]
    tail = ChainTail(name.raw, digest.raw, tt.value) if tt.value else None
    return ChainKeys(blocks, tail)
