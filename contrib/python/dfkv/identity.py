"""Block identity, byte-identical to the Go package ``wire``.

Every function here is a transcription of wire/ident.go, wire/namespace.go,
wire/objectkey.go, wire/blockkey.go and wire/ring.go, and
``contrib/python/tests/test_identity.py`` checks each of them against every
vector of ``wire/testdata/identity_golden.json``, the file the Go tests read.
Change nothing here without a matching Go change and a new layout ID: these
bytes are the cache identity.

Standard library only: hashlib and struct.
"""

from __future__ import annotations

import bisect
import operator
import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "MAX_NAMESPACE_BYTES", "MAX_OBJECT_KEY_BYTES", "NAMESPACE_MAGIC",
    "LAYOUT_SGLANG_HICACHE", "LAYOUT_VLLM", "LAYOUT_LMCACHE", "EXPERIMENTAL_LAYOUT_PREFIX",
    "OBJECT_KEY_PREFIX", "REPLICATED_RANK",
    "IdentityError", "LayerGeometry", "TopologySizes", "NamespaceDescriptor",
    "decode_namespace", "canonical_tenant", "layout_fingerprint",
    "ObjectKey", "frame", "object_id", "tenant_hash", "BlockKey", "block_key",
    "disk_hash", "Ring",
]

MAX_NAMESPACE_BYTES = 64 << 10
MAX_OBJECT_KEY_BYTES = 4 << 10

NAMESPACE_MAGIC = b"DFKVNS\x00\x02"
LAYOUT_SGLANG_HICACHE = "sglang-hicache/raw-v1"
LAYOUT_VLLM = "vllm-multiwr-v4"
LAYOUT_LMCACHE = "lmcache/raw-v1"
EXPERIMENTAL_LAYOUT_PREFIX = "x-"
_KNOWN_LAYOUTS = (LAYOUT_SGLANG_HICACHE, LAYOUT_VLLM, LAYOUT_LMCACHE)

OBJECT_KEY_PREFIX = "dfkv/pool/v2"
REPLICATED_RANK = -1

_TENANT_DOMAIN = b"DFKVTENANT1"
_LAYOUT_DOMAIN = b"DFKVLAYOUT1"
_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF


class IdentityError(ValueError):
    """An identity input that must fail closed (Go: an error wrapping
    wire.StatusInvalid). Also a ValueError, so callers can catch either."""

    status = 2  # DFKV_INVALID


def _text(s: Union[str, bytes]) -> bytes:
    """Text fields are kept byte-for-byte: str is encoded as UTF-8 with no
    normalization, bytes are taken as given."""
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    raise TypeError(f"expected str or bytes, got {type(s).__name__}")


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    """v as an int in lo..hi: an integer type only (operator.index takes
    Python and numpy ints, refuses floats), never truncated or wrapped, so
    no two values name one identity."""
    try:
        n = operator.index(v)
    except TypeError:
        raise IdentityError(f"{what} {v!r} is not an integer") from None
    if not lo <= n <= hi:
        raise IdentityError(f"{what} {n} is outside {lo}..{hi}")
    return n


def frame(x: bytes) -> bytes:
    """u64le(len(x)) || x."""
    return struct.pack("<Q", len(x)) + x


# ---------------------------------------------------------------------------
# Namespace descriptor (wire/namespace.go)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerGeometry:
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class TopologySizes:
    dp: int = 1
    tp: int = 1
    pcp: int = 1
    dcp: int = 1
    pp: int = 1


_FIELD_NAMES = ("tenant", "model ID", "model revision", "layout ID", "dtype",
                "layout fingerprint", "block tokens", "layer geometry", "group",
                "topology sizes")


@dataclass(frozen=True)
class NamespaceDescriptor:
    """The canonical namespace a connector builds from engine metadata.

    ``encode()`` returns ``b"DFKVNS\\x00\\x02"`` followed by ten framed fields
    in this order (byte layout documented in wire/namespace.go).
    """

    tenant: Union[str, bytes]
    model_id: Union[str, bytes]
    model_revision: Union[str, bytes]
    layout_id: str
    dtype: Union[str, bytes]
    layout_fingerprint: int
    block_tokens: int
    layer_geometry: LayerGeometry
    group: Union[str, bytes] = ""
    topology_sizes: TopologySizes = field(default_factory=TopologySizes)

    def validate(self) -> None:
        def bad(msg: str) -> IdentityError:
            return IdentityError(f"namespace descriptor: {msg}")

        if not _text(self.tenant):
            raise bad("tenant is empty")
        if not _text(self.model_id):
            raise bad("model ID is empty")
        layout = _text(self.layout_id)
        if not layout:
            raise bad("layout ID is empty")
        known = tuple(x.encode() for x in _KNOWN_LAYOUTS)
        prefix = EXPERIMENTAL_LAYOUT_PREFIX.encode()
        if layout not in known and not (layout.startswith(prefix) and len(layout) > len(prefix)):
            raise bad(f"layout ID {layout!r} is neither {', '.join(_KNOWN_LAYOUTS)} "
                      f"nor {EXPERIMENTAL_LAYOUT_PREFIX!r}+name")
        if not _text(self.dtype):
            raise bad("dtype is empty")
        try:
            _int(self.layout_fingerprint, "layout fingerprint", 0, _U64_MAX)
        except IdentityError as e:
            raise bad(str(e)) from None
        g, t = self.layer_geometry, self.topology_sizes
        for name, v in (("block tokens", self.block_tokens),
                        ("layer geometry layers", g.layers), ("layer geometry kv heads", g.kv_heads),
                        ("layer geometry head dim", g.head_dim),
                        ("topology dp size", t.dp), ("topology tp size", t.tp),
                        ("topology pcp size", t.pcp), ("topology dcp size", t.dcp),
                        ("topology pp size", t.pp)):
            try:
                n = _int(v, name, 0, _U32_MAX)
            except IdentityError as e:
                raise bad(f"{e} (a u32)") from None
            if n == 0:
                raise bad(f"{name} is 0")
        n = len(self._encode_unchecked())
        if n > MAX_NAMESPACE_BYTES:
            raise bad(f"encoding is {n} bytes, over the {MAX_NAMESPACE_BYTES}-byte namespace limit")

    def _encode_unchecked(self) -> bytes:
        g, t = self.layer_geometry, self.topology_sizes
        parts = [NAMESPACE_MAGIC]
        for s in (self.tenant, self.model_id, self.model_revision, self.layout_id, self.dtype):
            parts.append(frame(_text(s)))
        parts.append(frame(struct.pack("<Q", int(self.layout_fingerprint))))
        parts.append(frame(struct.pack("<I", int(self.block_tokens))))
        parts.append(frame(struct.pack("<III", int(g.layers), int(g.kv_heads), int(g.head_dim))))
        parts.append(frame(_text(self.group)))
        parts.append(frame(struct.pack("<IIIII", int(t.dp), int(t.tp), int(t.pcp), int(t.dcp), int(t.pp))))
        return b"".join(parts)

    def encode(self) -> bytes:
        """Validate and return the canonical namespace bytes."""
        self.validate()
        return self._encode_unchecked()

    def tenant_hash(self) -> int:
        return tenant_hash(self.encode())


def decode_namespace(b: bytes) -> NamespaceDescriptor:
    """Strict decoder, like wire.DecodeNamespace: anything it accepts
    re-encodes to the same bytes. Text fields come back as str when they are
    valid UTF-8, else as bytes."""
    b = bytes(b)
    if len(b) > MAX_NAMESPACE_BYTES:
        raise IdentityError(f"namespace descriptor: {len(b)} bytes, over the {MAX_NAMESPACE_BYTES}-byte limit")
    if not b.startswith(NAMESPACE_MAGIC):
        raise IdentityError(f"namespace descriptor: does not start with magic {NAMESPACE_MAGIC!r}")
    rest = memoryview(b)[len(NAMESPACE_MAGIC):]
    fields: List[bytes] = []
    for i in range(10):
        if len(rest) < 8:
            raise IdentityError(f"namespace descriptor: field {i + 1} ({_FIELD_NAMES[i]}): length word truncated")
        (n,) = struct.unpack_from("<Q", rest)
        rest = rest[8:]
        if n > len(rest):
            raise IdentityError(f"namespace descriptor: field {i + 1} ({_FIELD_NAMES[i]}): length {n} exceeds the {len(rest)} bytes left")
        fields.append(bytes(rest[:n]))
        rest = rest[n:]
    if len(rest):
        raise IdentityError(f"namespace descriptor: {len(rest)} trailing bytes after field 10")
    for i, want in ((5, 8), (6, 4), (7, 12), (9, 20)):
        if len(fields[i]) != want:
            raise IdentityError(f"namespace descriptor: field {i + 1} ({_FIELD_NAMES[i]}) is {len(fields[i])} bytes, want {want}")

    def txt(x: bytes) -> Union[str, bytes]:
        try:
            return x.decode("utf-8")
        except UnicodeDecodeError:
            return x

    d = NamespaceDescriptor(
        tenant=txt(fields[0]), model_id=txt(fields[1]), model_revision=txt(fields[2]),
        layout_id=txt(fields[3]), dtype=txt(fields[4]),
        layout_fingerprint=struct.unpack("<Q", fields[5])[0],
        block_tokens=struct.unpack("<I", fields[6])[0],
        layer_geometry=LayerGeometry(*struct.unpack("<III", fields[7])),
        group=txt(fields[8]),
        topology_sizes=TopologySizes(*struct.unpack("<IIIII", fields[9])),
    )
    d.validate()
    return d


def canonical_tenant(ns: bytes) -> Optional[bytes]:
    """The tenant field of a namespace shaped like a canonical descriptor
    (magic, then one or more framed fields consuming the bytes exactly, the
    first non-empty), else None. Framing only, like wire.CanonicalTenant."""
    ns = bytes(ns)
    if not ns.startswith(NAMESPACE_MAGIC):
        return None
    rest = ns[len(NAMESPACE_MAGIC):]
    tenant = None
    first = True
    while first or rest:
        if len(rest) < 8:
            return None
        (n,) = struct.unpack_from("<Q", rest)
        rest = rest[8:]
        if n > len(rest):
            return None
        if first:
            tenant = rest[:n]
        rest = rest[n:]
        first = False
    return tenant or None


def layout_fingerprint(fields: Iterable[Tuple[str, Sequence[int]]]) -> int:
    """Deterministic 64-bit hash of a connector's ordered shape/stride fields:
    big-endian u64 of SHA-256("DFKVLAYOUT1" || per field frame(name) ||
    frame(u64le two's-complement of each value))[0:8]. Order matters.
    Values are int64s, as Go's wire.LayoutField holds them; anything else
    (a float, 2**63) is refused rather than wrapped onto another value."""
    h = hashlib.sha256(_LAYOUT_DOMAIN)
    for name, values in fields:
        h.update(frame(_text(name)))
        vals = [_int(v, f"layout field {name!r} value", -(1 << 63), (1 << 63) - 1) for v in values]
        h.update(frame(b"".join(struct.pack("<q", v) for v in vals)))
    return int.from_bytes(h.digest()[:8], "big")


# ---------------------------------------------------------------------------
# Object key rendering (wire/objectkey.go)
# ---------------------------------------------------------------------------

Coord = Tuple[int, int]  # (size, rank)


@dataclass(frozen=True)
class ObjectKey:
    """dfkv/pool/v2|pool=P|hash=H|dp=S:R|tp=S:R|pcp=S:R|dcp=S:R|pp=S:R|group=N|component=C[|sg=W:G]"""

    pool: str
    hash: str
    dp: Coord = (1, 0)
    tp: Coord = (1, 0)
    pcp: Coord = (1, 0)
    dcp: Coord = (1, 0)
    pp: Coord = (1, 0)
    group: int = 0
    component: str = "kv"
    sg: Optional[Tuple[int, int]] = None  # (width, group)

    def validate(self) -> None:
        def bad(msg: str) -> IdentityError:
            return IdentityError(f"object key: {msg}")

        for name, v in (("pool", self.pool), ("hash", self.hash), ("component", self.component)):
            b = _text(v)
            if not b:
                raise bad(f"{name} is empty")
            for i, c in enumerate(b):
                if c in (0x7C, 0x3D):  # '|' '='
                    raise bad(f"{name} {v!r} contains {chr(c)!r} at byte {i}; '|' and '=' are separators")
        try:
            for name, (size, rank) in (("dp", self.dp), ("tp", self.tp), ("pcp", self.pcp),
                                       ("dcp", self.dcp), ("pp", self.pp)):
                _int(size, f"{name} size", 1, _U64_MAX)
                _int(rank, f"{name} rank", REPLICATED_RANK, _U64_MAX)
            _int(self.group, "group", 0, _U64_MAX)
            if self.sg is not None:
                _int(self.sg[0], "scatter width", 1, _U64_MAX)
                _int(self.sg[1], "scatter group", 0, _U64_MAX)
        except IdentityError as e:
            raise bad(str(e)) from None
        for name, (size, rank) in (("dp", self.dp), ("tp", self.tp), ("pcp", self.pcp),
                                   ("dcp", self.dcp), ("pp", self.pp)):
            if size < 1:
                raise bad(f"{name} size {size} is below 1")
            if rank < REPLICATED_RANK or rank >= size:
                raise bad(f"{name} rank {rank} is outside [-1, {size})")
        if self.group < 0:
            raise bad(f"group {self.group} is negative")
        if self.sg is not None:
            w, g = self.sg
            if w < 1:
                raise bad(f"scatter width {w} is below 1")
            if g < 0:
                raise bad(f"scatter group {g} is negative")

    def render_bytes(self) -> bytes:
        """Validate and return the rendered key bytes (what gets hashed)."""
        self.validate()
        out = [OBJECT_KEY_PREFIX.encode(), b"|pool=", _text(self.pool), b"|hash=", _text(self.hash)]
        for label, (size, rank) in (("dp", self.dp), ("tp", self.tp), ("pcp", self.pcp),
                                    ("dcp", self.dcp), ("pp", self.pp)):
            out.append(f"|{label}={int(size)}:{int(rank)}".encode())
        out.append(f"|group={int(self.group)}|component=".encode())
        out.append(_text(self.component))
        if self.sg is not None:
            out.append(f"|sg={int(self.sg[0])}:{int(self.sg[1])}".encode())
        b = b"".join(out)
        if len(b) > MAX_OBJECT_KEY_BYTES:
            raise IdentityError(f"object key: renders to {len(b)} bytes, over the {MAX_OBJECT_KEY_BYTES}-byte limit")
        return b

    def render(self) -> str:
        return self.render_bytes().decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------
# Block identity (wire/ident.go, wire/blockkey.go, wire/ring.go)
# ---------------------------------------------------------------------------

def object_id(namespace: bytes, object_key: bytes) -> bytes:
    """SHA-256(frame(namespace) || frame(object_key))[0:16]."""
    return hashlib.sha256(frame(bytes(namespace)) + frame(bytes(object_key))).digest()[:16]


def tenant_hash(namespace: bytes) -> int:
    """Big-endian u64 of SHA-256("DFKVTENANT1" || frame(identity))[0:8], where
    identity is the canonical tenant field or the whole namespace."""
    ns = bytes(namespace)
    t = canonical_tenant(ns)
    identity = ns if t is None else t
    return int.from_bytes(hashlib.sha256(_TENANT_DOMAIN + frame(identity)).digest()[:8], "big")


@dataclass(frozen=True)
class BlockKey:
    tenant: int
    id: bytes

    @property
    def filename(self) -> str:
        return struct.pack(">Q", self.tenant).hex() + self.id.hex()

    @property
    def route_hash(self) -> int:
        return int.from_bytes(self.id[:8], "big") ^ self.tenant


def block_key(namespace: bytes, object_key: bytes) -> BlockKey:
    """The native identity of (namespace, object key); empty or oversized
    spans fail closed like wire.NewBlockKey."""
    ns, k = bytes(namespace), bytes(object_key)
    if not ns:
        raise IdentityError("namespace is empty")
    if len(ns) > MAX_NAMESPACE_BYTES:
        raise IdentityError(f"namespace is {len(ns)} bytes, over the {MAX_NAMESPACE_BYTES}-byte limit")
    if not k:
        raise IdentityError("object key is empty")
    if len(k) > MAX_OBJECT_KEY_BYTES:
        raise IdentityError(f"object key is {len(k)} bytes, over the {MAX_OBJECT_KEY_BYTES}-byte limit")
    return BlockKey(tenant_hash(ns), object_id(ns, k))


def disk_hash(k: BlockKey) -> int:
    """64-bit FNV-1a over the 48-character filename."""
    h = 14695981039346656037
    for c in k.filename.encode():
        h ^= c
        h = (h * 1099511628211) & _U64_MAX
    return h


class Ring:
    """Ketama ring, as wire.NewRing: member id's digest j is
    SHA-256(id || "-" || decimal(j)); its four big-endian u64 words are
    points; weight*points_per_weight points per member; equal points ordered
    by member id; a hash belongs to the first point >= it, wrapping."""

    DEFAULT_POINTS_PER_WEIGHT = 160

    @staticmethod
    def digest(member_id: str, j: int) -> Tuple[int, int, int, int]:
        d = hashlib.sha256(_text(member_id) + b"-" + str(j).encode()).digest()
        return struct.unpack(">QQQQ", d)

    def __init__(self, members: Sequence[Tuple[str, int]], points_per_weight: int = 0):
        if not members:
            raise IdentityError("ring: no members")
        ppw = points_per_weight or self.DEFAULT_POINTS_PER_WEIGHT
        self.members = [(mid, w or 1) for mid, w in members]
        pts = []
        for idx, (mid, w) in enumerate(self.members):
            n = w * ppw
            j = 0
            while n > 0:
                for p in self.digest(mid, j):
                    if n == 0:
                        break
                    pts.append((p, _text(mid), idx))
                    n -= 1
                j += 1
        pts.sort()
        self._points = [p for p, _, _ in pts]
        self._owners = [i for _, _, i in pts]

    def get(self, h: int) -> int:
        """Index of the member owning hash h."""
        i = bisect.bisect_left(self._points, h)
        if i == len(self._points):
            i = 0
        return self._owners[i]
