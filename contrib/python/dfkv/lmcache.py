"""LMCache remote storage on dfkv (layout ``lmcache/raw-v1``).

Written against LMCache's current connector API: ``RemoteConnector.__init__
(config, metadata)`` holds the engine metadata and derives the chunk
geometry from it lazily (``meta_shapes`` / ``meta_dtypes`` /
``full_chunk_size_bytes`` / ``single_token_size`` are read-only
properties, one shape and dtype per KV-layer group); out-of-tree storage is
loaded by the Remote Storage Plugin Framework. An LMCache from before that
refactor (``RemoteConnector.init_chunk_meta``, no ``__init__`` arguments)
is refused when the connector is built. When lmcache is importable the
classes here subclass its real ``RemoteConnector`` and ``ConnectorAdapter``;
otherwise local stand-ins with the same behaviour are used.

Configure LMCache (its config YAML) with

    chunk_size: 256
    local_cpu: false
    max_local_cpu_size: 5          # the remote tier allocates reads here; must be > 0
    remote_serde: naive            # or cachegen / kivi
    remote_storage_plugins: ["dfkv"]
    extra_config:
      remote_storage_plugin.dfkv.module_path: dfkv.lmcache
      remote_storage_plugin.dfkv.class_name: DfkvConnectorAdapter
      remote_storage_plugin.dfkv.mds: "10.0.0.1:7700,10.0.0.2:7700"      # MDS discovery, or
      remote_storage_plugin.dfkv.members: "10.0.0.1:7600,10.0.0.2:7600"  # static nodes
      remote_storage_plugin.dfkv.tenant: team-a

and no ``remote_url`` (LMCache would build a second remote backend for it).
LMCache builds a RemoteBackend per plugin name and asks the adapter for the
URL ``plugin://dfkv``; ``dfkv.instance`` names (``plugin://dfkv.primary``)
work too, with their settings under ``remote_storage_plugin.dfkv.primary.``.
Every setting may instead be given unscoped as ``dfkv_<name>`` in
extra_config or in the environment (DFKV_CLIENT_MDS, DFKV_CLIENT_MEMBERS,
DFKV_GROUP, DFKV_LIBRARY); ``remote_storage_plugin.dfkv.url:
dfkv://host:port,host:port?tenant=t`` is also read. Names: ``mds``,
``members``, ``group``, ``tenant`` ("default"), ``model_revision`` (""),
``library``, ``timeout_ms``, ``reopen_interval_s`` (2: how long after a
failed open calls are misses before one opens again), ``token`` (for nodes that require credentials;
else DFKV_CLIENT_TOKEN, else DFKV_TOKEN from the environment, which keeps
it out of the configuration LMCache prints; never in a ``dfkv://`` URL,
which is refused with one), ``tls`` (1 for nodes serving TLS; else
DFKV_CLIENT_TLS), ``tls_ca``, ``tls_cert``, ``tls_key`` and
``tls_server_name`` (else DFKV_CLIENT_TLS_CA, _CERT, _KEY, _SERVER_NAME;
see dfkv.Client). With both an MDS and static members set, the
MDS is used and the members are the fallback when it cannot be reached.
(A ``remote_url: dfkv://...`` is parsed as well, but only reaches this
adapter when a module named ``*_adapter`` importing it is placed in
LMCache's connector package.)

Stored value: a fixed-layout envelope, then the chunk's bytes exactly as
LMCache hands them over (after its serde). LMCache's ``save_chunk_meta``
switch is ignored: the envelope is always written, because it is what lets
a partial chunk, a layer-wise object, a compressed (cachegen) chunk or a
multi-group chunk be allocated and checked on read. All integers
little-endian::

    off  size  field
    0    4     magic b"DFLC"
    4    1     envelope version (1)
    5    1     LMCache MemoryFormat value (KV_2LTD=1, KV_T2D=2, KV_2TD=3,
               BINARY=4, BINARY_BUFFER=5, KV_MLA_FMT=6, ...)
    6    1     number of groups G (1..32)
    7    1     0 (reserved)
    8    8     serde name, ASCII, NUL-padded ("naive", "cachegen", "kivi")
    16   8     payload byte length
    24   20*G  per group: dtype code u8 (0 none, 1 float16, 2 bfloat16,
               3 float32, 4 float64, 5 uint8, 6 int8, 7 float8_e4m3fn,
               8 float8_e5m2, 9 int16, 10 int32, 11 int64, 12 bool,
               13 float8_e4m3fnuz, 14 float8_e5m2fnuz), ndim u8 (1..4),
               2 zero bytes, then 4 dims u32 (unused ones 0)
    24+20G 4   CRC-32 of bytes [0, 24+20G)

A read whose envelope does not check out (bad magic, version or CRC,
a payload length that is not the stored length, a serde, format, dtype or
shape other than this engine's, a token count outside 1..chunk_size) is a
miss with one warning naming the mismatch, never wrong KV; the MemoryObj
allocated for it is released. The payload itself carries no checksum.

Object key: ObjectKey(pool="lmcache", hash=<chunk hash in hex, then
"@tag:value" per tag, sorted by tag name>, tp=(world_size, worker_id, or -1
for MLA whose KV every rank shares), component="kv" for a whole chunk or
"layer-<layer_id>" for a layer-wise key). The namespace carries the model,
tenant, group, chunk size and a fingerprint of the per-group shapes,
dtypes and MLA flag, so a reader with another layout never sees the
writer's objects at all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import logging
import struct
import threading
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs

from ._common import ClientSlot, Endpoints, NotConnected, dtype_name, escape_key_part, setting
from .client import Client
from .errors import DfkvError, Status
from .identity import LAYOUT_LMCACHE, LayerGeometry, NamespaceDescriptor, ObjectKey, TopologySizes, layout_fingerprint

logger = logging.getLogger(__name__)

NEEDED_LMCACHE = ("an LMCache whose RemoteConnector.__init__ takes (config, metadata) and derives chunk shapes "
                  "from the metadata (the connector refactor merged in late December 2025; dev builds from then "
                  "on and every later release)")

try:  # pragma: no cover - depends on the environment
    from lmcache.v1.storage_backend.connector import ConnectorAdapter as _AdapterBase
    from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector as _RemoteConnectorBase
    try:
        from lmcache.v1.memory_management import MemoryFormat
    except ImportError:
        MemoryFormat = None  # type: ignore[assignment]
    LMCACHE_AVAILABLE = True
except ImportError:
    LMCACHE_AVAILABLE = False
    _AdapterBase = None  # type: ignore[assignment]
    _RemoteConnectorBase = None  # type: ignore[assignment]
    MemoryFormat = None  # type: ignore[assignment]


def _lmcache_too_old(base: Any) -> bool:
    """The pre-refactor base had init_chunk_meta and no __init__ of its own."""
    if base is None:
        return False
    if hasattr(base, "init_chunk_meta"):
        return True
    init = base.__dict__.get("__init__")
    if init is None:
        return True
    try:
        params = list(inspect.signature(init).parameters)
    except (TypeError, ValueError):
        return False
    return not ("config" in params and "metadata" in params)


LMCACHE_TOO_OLD = LMCACHE_AVAILABLE and _lmcache_too_old(_RemoteConnectorBase)

_ITEMSIZE = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4, "float64": 8, "double": 8,
             "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}


def itemsize(dtype: Any) -> int:
    """Bytes per element of a torch dtype or dtype name (torch not needed)."""
    n = getattr(dtype, "itemsize", None)
    if isinstance(n, int):
        return n
    name = dtype_name(dtype)
    if name in _ITEMSIZE:
        return _ITEMSIZE[name]
    raise ValueError(f"dtype {dtype!r} has no known element size")


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def size_bytes(shapes: Sequence[Sequence[int]], dtypes: Sequence[Any]) -> int:
    if len(shapes) != len(dtypes):
        raise ValueError(f"{len(shapes)} shapes but {len(dtypes)} dtypes")
    return sum(_numel(s) * itemsize(d) for s, d in zip(shapes, dtypes))


if not LMCACHE_AVAILABLE:

    class MemoryFormat(enum.Enum):  # type: ignore[no-redef]
        """LMCache's MemoryFormat values (lmcache/v1/memory_management.py)."""

        UNDEFINED = 0
        KV_2LTD = 1
        KV_T2D = 2
        KV_2TD = 3
        BINARY = 4
        BINARY_BUFFER = 5
        KV_MLA_FMT = 6

    class _RemoteConnectorBase:  # type: ignore[no-redef]
        """Stands in for LMCache's RemoteConnector when lmcache is not
        installed, behaving as the current upstream base does: __init__
        needs the engine metadata and keeps it, the chunk geometry is
        read-only and computed on every access (the engine fills in its
        KV-layer groups after the connector exists), reshape_partial_chunk
        refuses an empty or ragged read, and the optional batched methods
        have upstream's defaults."""

        def __init__(self, config: Any, metadata: Any) -> None:
            assert metadata is not None
            self._connector_metadata = metadata
            extra = getattr(config, "extra_config", None)
            self.save_chunk_meta = bool(extra is None or extra.get("save_chunk_meta", True)
                                        or getattr(config, "use_layerwise", False))
            self.meta_fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
            # LMCache's RemoteMetadata: length, fmt, then dtype + 4 dims per group, all int32.
            self.remote_metadata_bytes = 4 * (2 + 5 * int(metadata.get_num_groups()))

        @property
        def meta_shapes(self) -> list:
            return self._connector_metadata.get_shapes()

        @property
        def meta_dtypes(self) -> list:
            return self._connector_metadata.get_dtypes()

        @property
        def full_chunk_size_bytes(self) -> int:
            return size_bytes(self.meta_shapes, self.meta_dtypes)

        @property
        def single_token_size(self) -> int:
            return self.full_chunk_size_bytes // self._connector_metadata.chunk_size

        def reshape_partial_chunk(self, memory_obj: Any, bytes_read: int) -> Any:
            full, token = self.full_chunk_size_bytes, self.single_token_size
            if bytes_read == 0 or bytes_read % token != 0 or bytes_read > full:
                raise ValueError(f"bytes_read: {bytes_read} is illegal, single_token_size: {token}, "
                                 f"full_chunk_size_bytes: {full}")
            if bytes_read == full:
                return memory_obj
            shape = list(memory_obj.meta.shape)
            shape[2] = bytes_read // token
            memory_obj.raw_data = memory_obj.raw_data[:bytes_read]
            memory_obj.meta.shape = type(memory_obj.meta.shape)(shape)
            return memory_obj

        def post_init(self) -> None:
            pass

        def support_ping(self) -> bool:
            return False

        async def ping(self) -> int:
            raise NotImplementedError

        def support_batched_get(self) -> bool:
            return False

        def support_batched_put(self) -> bool:
            return False

        def support_batched_async_contains(self) -> bool:
            return True

        async def batched_async_contains(self, lookup_id: str, keys: List[Any], pin: bool = False) -> int:
            results = await asyncio.gather(*(self.exists(k) for k in keys))
            return results.index(False) if False in results else len(results)

        def support_batched_get_non_blocking(self) -> bool:
            return True

        async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any]) -> List[Any]:
            results = await asyncio.gather(*(self.get(k) for k in keys), return_exceptions=True)
            out, failed = [], False
            for r in results:
                ok = r is not None and not isinstance(r, BaseException)
                if failed:
                    if ok:
                        r.ref_count_down()
                elif ok:
                    out.append(r)
                else:
                    failed = True
            return out

        def remove_sync(self, key: Any) -> bool:
            raise NotImplementedError

        def batched_contains(self, keys: List[Any]) -> int:
            raise NotImplementedError

        def support_batched_contains(self) -> bool:
            return False

        def __repr__(self) -> str:
            return f"<{self.__class__.__name__}>"

    class _AdapterBase:  # type: ignore[no-redef]
        """Stands in for LMCache's ConnectorAdapter."""

        def __init__(self, schema: str = "") -> None:
            self.schema = schema

        def can_parse(self, url: str) -> bool:
            return self.schema != "" and url.startswith(self.schema)


SCHEME = "dfkv://"
PLUGIN_SCHEME = "plugin://"
PLUGIN_TYPE = "dfkv"


# The query parameters a dfkv:// URL takes (revision is model_revision's
# short name).
URL_PARAMS = ("tenant", "group", "revision", "model_revision")


def parse_dfkv_url(url: str):
    """dfkv://host:port[,host:port...][/][?tenant=..&group=..] -> (members, params).
    dfkv://embedded opens the process's embedded store ($DFKV_EMBEDDED_CONFIG
    or the dfkv.embedded_config setting configures it). A token is refused
    in the URL (URLs end up in logs), and the error does not repeat it; so
    is any parameter but URL_PARAMS, since a misspelt tenant would
    otherwise put the engine's chunks in the default tenant."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not a dfkv URL: {url!r}")
    rest = url[len(SCHEME):]
    rest, _, query = rest.partition("?")
    if "token" in query.lower() or "@" in rest:
        raise ValueError("dfkv URL: a token (or any credential) does not belong in the URL, as URLs end up in "
                         "logs; set remote_storage_plugin.<name>.token or dfkv_token in extra_config, or "
                         "DFKV_CLIENT_TOKEN in the environment")
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    unknown = sorted(set(params) - set(URL_PARAMS))
    if unknown:
        # Names only: the URL and the values may hold a credential.
        raise ValueError(f"dfkv URL: unknown parameter {', '.join(repr(k[:32]) for k in unknown)}; "
                         f"it takes {', '.join(URL_PARAMS)}")
    hosts = [h for h in rest.strip("/").split(",") if h]
    if hosts == ["embedded"]:
        return "embedded", params
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"dfkv URL {url!r}: member {h!r} is not host:port")
    if not hosts:
        raise ValueError(f"dfkv URL {url!r} names no members")
    return ",".join(hosts), params


# ----------------------------------------------------------------- envelope

ENVELOPE_MAGIC = b"DFLC"
ENVELOPE_VERSION = 1
MAX_GROUPS = 32
_HEAD = struct.Struct("<4sBBBB8sQ")
_GROUP = struct.Struct("<BBxxIIII")
_CRC = struct.Struct("<I")

DTYPE_CODES = {None: 0, "float16": 1, "half": 1, "bfloat16": 2, "float32": 3, "float": 3, "float64": 4,
               "double": 4, "uint8": 5, "int8": 6, "float8_e4m3fn": 7, "float8_e5m2": 8, "int16": 9,
               "int32": 10, "int64": 11, "bool": 12, "float8_e4m3fnuz": 13, "float8_e5m2fnuz": 14}
_CODE_NAMES = {0: None, 1: "float16", 2: "bfloat16", 3: "float32", 4: "float64", 5: "uint8", 6: "int8",
               7: "float8_e4m3fn", 8: "float8_e5m2", 9: "int16", 10: "int32", 11: "int64", 12: "bool",
               13: "float8_e4m3fnuz", 14: "float8_e5m2fnuz"}


def envelope_size(groups: int) -> int:
    return _HEAD.size + _GROUP.size * groups + _CRC.size


def _dtype_code(dtype: Any) -> int:
    if dtype is None:
        return 0
    code = DTYPE_CODES.get(dtype_name(dtype))
    if code is None:
        raise ValueError(f"dtype {dtype!r} has no envelope code")
    return code


def _canon_dtype(dtype: Any) -> Optional[str]:
    """A dtype's envelope name ("half" and "float16" are one dtype)."""
    return None if dtype is None else _CODE_NAMES[_dtype_code(dtype)]


def _fmt_value(fmt: Any) -> int:
    v = getattr(fmt, "value", fmt)
    return int(v) if v is not None else 0


_BINARY_FMTS = (4, 5)  # BINARY, BINARY_BUFFER: serde output, opaque bytes


class Envelope:
    """The decoded envelope of one stored chunk."""

    __slots__ = ("fmt", "serde", "shapes", "dtypes", "payload_len")

    def __init__(self, fmt: int, serde: str, shapes: List[Tuple[int, ...]], dtypes: List[Optional[str]],
                 payload_len: int) -> None:
        self.fmt, self.serde, self.shapes, self.dtypes, self.payload_len = fmt, serde, shapes, dtypes, payload_len

    def encode(self) -> bytes:
        g = len(self.shapes)
        if not 1 <= g <= MAX_GROUPS or len(self.dtypes) != g:
            raise ValueError(f"envelope: {g} groups with {len(self.dtypes)} dtypes")
        serde = self.serde.encode("ascii")
        if len(serde) > 8:
            raise ValueError(f"envelope: serde name {self.serde!r} longer than 8 bytes")
        parts = [_HEAD.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, self.fmt, g, 0, serde, self.payload_len)]
        for shape, dtype in zip(self.shapes, self.dtypes):
            dims = [int(d) for d in shape]
            if not 1 <= len(dims) <= 4:
                raise ValueError(f"envelope: shape {tuple(dims)} is not 1 to 4 dimensions")
            dims += [0] * (4 - len(dims))
            parts.append(_GROUP.pack(_dtype_code(dtype), len(shape), *dims))
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @staticmethod
    def decode(buf: Any, stored_len: int) -> "Envelope":
        """Parse and check the envelope at the start of a value of
        stored_len bytes; ValueError names what is wrong."""
        b = bytes(buf[:_HEAD.size])
        if len(b) < _HEAD.size or stored_len < _HEAD.size:
            raise ValueError(f"value of {stored_len} bytes is shorter than an envelope")
        magic, version, fmt, g, _, serde, payload = _HEAD.unpack(b)
        if magic != ENVELOPE_MAGIC:
            raise ValueError(f"magic {magic!r} is not {ENVELOPE_MAGIC!r}")
        if version != ENVELOPE_VERSION:
            raise ValueError(f"envelope version {version}, this connector reads {ENVELOPE_VERSION}")
        if not 1 <= g <= MAX_GROUPS:
            raise ValueError(f"envelope names {g} groups")
        n = envelope_size(g)
        if len(buf) < n or stored_len < n:
            raise ValueError(f"envelope of {g} groups needs {n} bytes, have {min(len(buf), stored_len)}")
        body = bytes(buf[:n - _CRC.size])
        (crc,) = _CRC.unpack(bytes(buf[n - _CRC.size:n]))
        if zlib.crc32(body) != crc:
            raise ValueError("envelope CRC mismatch (corrupt)")
        if payload != stored_len - n:
            raise ValueError(f"envelope says {payload} payload bytes, value holds {stored_len - n}")
        shapes, dtypes = [], []
        for i in range(g):
            code, ndim, *dims = _GROUP.unpack_from(body, _HEAD.size + i * _GROUP.size)
            if code not in _CODE_NAMES:
                raise ValueError(f"group {i}: unknown dtype code {code}")
            if not 1 <= ndim <= 4:
                raise ValueError(f"group {i}: {ndim} dimensions")
            shapes.append(tuple(dims[:ndim]))
            dtypes.append(_CODE_NAMES[code])
        return Envelope(fmt, serde.rstrip(b"\0").decode("ascii", "replace"), shapes, dtypes, payload)


def _obj_shapes(obj: Any) -> Tuple[list, list]:
    meta = obj.meta
    shapes = getattr(meta, "shapes", None)
    dtypes = getattr(meta, "dtypes", None)
    if shapes and dtypes and len(shapes) == len(dtypes):
        return list(shapes), list(dtypes)
    return [meta.shape], [meta.dtype]


def _payload(obj: Any) -> memoryview:
    """The bytes LMCache means by a MemoryObj: its byte_array, cut to
    get_size() when the allocation is larger than the logical chunk."""
    b = memoryview(obj.byte_array).cast("B")
    n = obj.get_size() if callable(getattr(obj, "get_size", None)) else len(b)
    return b[:n] if 0 < n < len(b) else b


def _hold(objs: List[Any]) -> List[Any]:
    """Take a reference to each MemoryObj; returns those taken."""
    held = []
    for o in objs:
        if o is not None and callable(getattr(o, "ref_count_up", None)):
            try:
                o.ref_count_up()
                held.append(o)
            except Exception:  # the write still runs; only its reference is missing
                logger.exception("dfkv LMCache connector: taking a reference to a MemoryObj failed")
    return held


def _release(objs: Any) -> None:
    for o in objs if isinstance(objs, (list, tuple)) else (objs,):
        if o is not None and callable(getattr(o, "ref_count_down", None)):
            try:
                o.ref_count_down()
            except Exception:  # a MemoryObj that refuses is LMCache's problem, not a reason to leak the rest
                logger.exception("dfkv LMCache connector: releasing a MemoryObj failed")


# ---------------------------------------------------------------- connector

_NAMES = ("mds", "members", "group", "tenant", "model_revision", "library", "timeout_ms", "url", "embedded_config",
          "token", "tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "reopen_interval_s")


class DfkvConnector(_RemoteConnectorBase):
    """LMCache RemoteConnector storing chunks in dfkv.

    Every method LMCache calls returns its documented "nothing" (a miss, a
    shorter prefix, False, 0) when dfkv fails, and logs why: LMCache calls
    connectors from its event-loop and worker threads, where an exception
    would be swallowed or, worse, end a thread. No MemoryObj allocated for a
    read that then misses or fails is left allocated.
    """

    def __init__(self, url: Optional[str] = None, loop: Any = None, local_cpu_backend: Any = None,
                 config: Any = None, metadata: Any = None, plugin_name: Optional[str] = None) -> None:
        if LMCACHE_TOO_OLD:
            raise RuntimeError("dfkv LMCache connector: the installed lmcache is older than the connector API "
                               f"this connector is written for (its RemoteConnector has init_chunk_meta); it needs "
                               f"{NEEDED_LMCACHE}")
        # LMCache's own connectors take these from the CPU backend when the
        # caller does not pass them (its external:// route, for one).
        if metadata is None:
            metadata = getattr(local_cpu_backend, "metadata", None)
        if config is None:
            config = getattr(local_cpu_backend, "config", None)
        if metadata is None:
            raise ValueError("dfkv LMCache connector: no engine metadata (LMCacheMetadata); build it through the "
                             "remote_storage_plugins route, whose ConnectorContext carries it")
        super().__init__(config, metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.config = config
        self.metadata = metadata
        self.plugin_name = plugin_name
        self.serde = str(getattr(config, "remote_serde", None) or "naive")
        eff = self._settings(config, plugin_name, url)
        self.tenant = str(setting(eff, "dfkv_tenant", None, "default"))
        self.group = str(setting(eff, "dfkv_group", "DFKV_GROUP", "") or "")
        self.revision = str(setting(eff, "dfkv_model_revision", None, "") or "")
        self.library = setting(eff, "dfkv_library", "DFKV_LIBRARY")
        self.timeout_ms = int(setting(eff, "dfkv_timeout_ms", None, 0) or 0)
        self.endpoints = Endpoints.from_settings(eff, "dfkv LMCache connector", members=self._url_members)
        self.members = self.endpoints.members
        self._slot = ClientSlot("dfkv LMCache connector", float(setting(eff, "dfkv_reopen_interval_s", None, 2.0)))
        # LMCache's "MLA worker id as 0" mode (on by default for MLA): every
        # worker's chunks are worker 0's. Its remote backend rewrites the
        # key for lookups and blocking reads but not for non-blocking reads,
        # so the connector applies the mode to every key itself.
        use_mla = bool(getattr(metadata, "use_mla", False))
        extra = dict(getattr(config, "extra_config", None) or {})
        self._mla_worker0 = (use_mla and int(getattr(metadata, "world_size", 1) or 1) > 1
                             and bool(extra.get("remote_enable_mla_worker_id_as0", use_mla)))
        self._pool_lock = threading.Lock()  # guards the executor
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._closed = False

    def _settings(self, config: Any, plugin_name: Optional[str], url: Optional[str]) -> Dict[str, Any]:
        """extra_config with remote_storage_plugin.<plugin>.<name> and URL
        values lifted onto the dfkv_<name> keys every connector reads."""
        extra = dict(getattr(config, "extra_config", None) or {})
        eff = dict(extra)
        if plugin_name:
            prefix = f"remote_storage_plugin.{plugin_name}."
            for name in _NAMES:
                v = extra.get(prefix + name)
                if v not in (None, ""):
                    eff["dfkv_" + name] = v
        self._url_members = None
        for u in (url, eff.get("dfkv_url")):
            if u and str(u).startswith(SCHEME):
                members, params = parse_dfkv_url(str(u))
                self._url_members = members
                for k, name in (("tenant", "dfkv_tenant"), ("group", "dfkv_group"),
                                ("revision", "dfkv_model_revision"), ("model_revision", "dfkv_model_revision")):
                    if params.get(k):
                        eff[name] = params[k]
                break
        return eff

    # -- identity ---------------------------------------------------------

    def _layout(self) -> Tuple[Tuple[Tuple[int, ...], ...], Tuple[Optional[str], ...]]:
        shapes = tuple(tuple(int(d) for d in s) for s in self.meta_shapes)
        dtypes = tuple(_canon_dtype(d) for d in self.meta_dtypes)
        return shapes, dtypes

    def namespace(self) -> NamespaceDescriptor:
        m = self.metadata
        shapes, dtypes = self._layout()
        world = int(getattr(m, "world_size", 1) or 1)
        chunk = int(m.chunk_size)
        mla = bool(m.use_mla)
        fields = [("chunk_tokens", [chunk]), ("use_mla", [int(mla)]), ("groups", [len(shapes)])]
        for i, (s, d) in enumerate(zip(shapes, dtypes)):
            fields.append((f"group{i}.shape", list(s)))
            fields.append((f"group{i}.dtype", [DTYPE_CODES[d]]))
        kv = getattr(m, "kv_shape", None)
        if kv is not None and len(shapes) == 1:
            layers, heads, head = int(kv[0]), int(kv[3]) * (1 if mla else world), int(kv[4])
        else:  # several groups: the fingerprint carries the exact geometry
            layers = sum(int(s[1]) for s in shapes if len(s) > 1) or 1
            heads, head = 1, max(int(s[-1]) for s in shapes)
        return NamespaceDescriptor(
            tenant=self.tenant, model_id=str(m.model_name), model_revision=self.revision,
            layout_id=LAYOUT_LMCACHE, dtype="+".join(d or "none" for d in dtypes),
            layout_fingerprint=layout_fingerprint(fields), block_tokens=chunk,
            layer_geometry=LayerGeometry(layers, heads, head), group=self.group,
            topology_sizes=TopologySizes(tp=world),
        )

    def _open(self, ns: NamespaceDescriptor) -> Client:
        opts = {"library": self.library, "timeout_ms": self.timeout_ms}
        return self.endpoints.open_client(ns, "dfkv LMCache connector", logger, **opts)

    @property
    def client(self) -> Client:
        """The client for the engine's current layout. LMCache fills in
        the KV-layer groups after building the connector, so the namespace
        is computed on first use and again if the layout changed since.

        One thread opens (see ClientSlot); the others, meanwhile and for
        reopen_interval_s after a failed open, get NotConnected, which the
        I/O calls turn into misses. LMCache asks batched_contains on its
        lookup path, so an MDS that does not answer must not cost every
        lookup an open, nor queue them behind each other's."""
        layout = self._layout()
        return self._slot.get(lambda: self._open(self.namespace()), layout)

    def object_key(self, key: Any) -> bytes:
        m = self.metadata
        world = int(getattr(key, "world_size", None) or getattr(m, "world_size", 1) or 1)
        worker = getattr(key, "worker_id", None)
        worker = int(getattr(m, "worker_id", 0) or 0) if worker is None else int(worker)
        h = getattr(key, "chunk_hash_hex", None)
        if h is None:
            ch = getattr(key, "chunk_hash", None)
            if isinstance(ch, int):
                h = f"{ch:x}"
            elif isinstance(ch, (bytes, bytearray)):
                h = bytes(ch).hex()
            else:
                h = str(ch) if ch is not None else key.to_string()
        parts = [escape_key_part(h).replace("@", "%40")]
        for k, v in sorted((str(k), str(v)) for k, v in (getattr(key, "tags", None) or ())):
            parts.append(f"{_tag_part(k)}:{_tag_part(v)}")
        layer = getattr(key, "layer_id", None)
        component = "kv" if layer is None else f"layer-{int(layer)}"
        # The worker as LMCache keyed it, or worker 0 in its MLA "worker id
        # as 0" mode; with that mode off each MLA worker stores its own
        # chunks, which under pipeline parallelism hold different layers.
        if self._mla_worker0:
            worker = 0
        tp = (world, worker)
        return ObjectKey(pool="lmcache", hash="@".join(parts), tp=tp, component=component).render_bytes()

    # -- plumbing ---------------------------------------------------------

    def _pool(self) -> Optional[concurrent.futures.ThreadPoolExecutor]:
        """The connector's threads; None once it is closed, so a call after
        close starts no threads that no close would end (the call then runs
        on the caller's thread, where it fails at once: a miss)."""
        if self._executor is None:
            with self._pool_lock:
                if self._closed:
                    return None
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="dfkv-lmcache")
        return self._executor

    async def _run(self, fn, *args, release_on_cancel: bool = False):
        """fn(*args) on the connector's threads. LMCache cancels a get that
        outlives its blocking timeout; the read still finishes on its
        thread, and then its MemoryObjs are released rather than lost."""
        pool = self._pool()
        if pool is None:
            return fn(*args)
        fut = asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if release_on_cancel:
                def drop(f):
                    if not f.cancelled() and f.exception() is None:
                        _release([o for o in (f.result() if isinstance(f.result(), list) else [f.result()])])
                fut.add_done_callback(drop)
            raise

    def _warn(self, what: str, e: BaseException) -> None:
        if isinstance(e, NotConnected):
            # The failed open said why, once; each miss meanwhile would
            # say it again.
            logger.debug("dfkv LMCache connector: %s skipped: %s", what, e)
            return
        logger.warning("dfkv LMCache connector: %s failed: %s: %s", what, type(e).__name__, e)

    # -- writes -----------------------------------------------------------

    def _envelope_for(self, obj: Any) -> Tuple[bytes, memoryview]:
        payload = _payload(obj)
        shapes, dtypes = _obj_shapes(obj)
        env = Envelope(_fmt_value(obj.meta.fmt), self.serde, [tuple(int(d) for d in s) for s in shapes],
                       [_canon_dtype(d) for d in dtypes], len(payload))
        return env.encode(), payload

    def _put_many(self, keys: List[Any], objs: List[Any]) -> None:
        okeys, items, names = [], [], []
        for k, o in zip(keys, objs):
            try:
                env, payload = self._envelope_for(o)
                okeys.append(self.object_key(k))
                items.append([env, payload])
                names.append(k)
            except (ValueError, TypeError, AttributeError) as e:
                logger.warning("dfkv LMCache connector: chunk %s not stored: %s", k, e)
        if not okeys:
            return
        # Any failure here (a node, the namespace, the client) only loses
        # cache entries: it is logged and never reaches LMCache's threads.
        if len(okeys) == 1:
            try:
                self.client.put_sg(okeys[0], items[0])
            except Exception as e:
                self._warn(f"put of {names[0]}", e)
            return
        try:
            st = self.client.batch_put_sg(okeys, items)
        except Exception as e:
            self._warn(f"batched put of {len(okeys)} chunks", e)
            return
        bad = [(k, s) for k, s in zip(names, st) if s != Status.OK]
        if bad:
            logger.warning("dfkv LMCache connector: %d of %d chunk puts failed, first %s: %s",
                           len(bad), len(okeys), bad[0][0], bad[0][1].name)

    async def put(self, key: Any, memory_obj: Any) -> None:
        await self._write([key], [memory_obj])

    async def batched_put(self, keys: List[Any], memory_objs: List[Any]) -> None:
        await self._write(list(keys), list(memory_objs))

    async def _write(self, keys: List[Any], objs: List[Any]) -> None:
        """_put_many on the connector's threads, holding a reference to
        every MemoryObj until it is done. LMCache drops its own reference
        as soon as put returns, and also when put is cancelled, while the
        thread may still be sending from the buffer (libdfkv writes the
        pieces to the socket in place): without this reference the
        allocator could hand the buffer to another chunk mid-send and the
        store would keep that chunk's bytes under this key."""
        held = _hold(objs)
        pool = self._pool()
        if pool is None:
            self._put_held(keys, objs, held)
            return
        try:
            fut = asyncio.get_running_loop().run_in_executor(pool, self._put_held, keys, objs, held)
        except BaseException:
            _release(held)
            raise
        await asyncio.shield(fut)

    def _put_held(self, keys: List[Any], objs: List[Any], held: List[Any]) -> None:
        try:
            self._put_many(keys, objs)
        finally:
            _release(held)

    # -- reads ------------------------------------------------------------

    def _allocate(self, shapes: list, dtypes: list, fmt: Any) -> Any:
        try:
            o = self.local_cpu_backend.allocate(shapes if len(shapes) > 1 else shapes[0],
                                                dtypes if len(dtypes) > 1 else dtypes[0], fmt)
        except Exception as e:  # LMCache's allocator raises on a scheduler-only backend
            self._warn("allocating a chunk", e)
            return None
        if o is None:
            logger.warning("dfkv LMCache connector: the local CPU backend could not allocate a chunk")
        return o

    def _fmt(self, value: int) -> Any:
        try:
            return type(self.meta_fmt)(value)
        except (ValueError, TypeError):
            return value

    def _check(self, key: Any, env: Envelope) -> Optional[int]:
        """Raise ValueError naming how env differs from what this engine
        would write for key; returns the token count for a chunk key."""
        if env.serde != self.serde:
            raise ValueError(f"serde {env.serde!r}, this engine reads {self.serde!r}")
        if env.fmt in _BINARY_FMTS:
            if self.serde == "naive":
                raise ValueError(f"opaque memory format {env.fmt} under serde 'naive'")
            if len(env.shapes) != 1:
                raise ValueError(f"opaque value with {len(env.shapes)} groups")
            return None
        expect_dtypes = [_canon_dtype(d) for d in self.meta_dtypes]
        if getattr(key, "layer_id", None) is not None:
            # One layer of a chunk: LMCache allocates it from the stored
            # shape; the dtype must still be one of this engine's.
            for d in env.dtypes:
                if d not in expect_dtypes:
                    raise ValueError(f"dtype {d}, this engine has {expect_dtypes}")
            if size_bytes(env.shapes, env.dtypes) != env.payload_len:
                raise ValueError(f"shapes {env.shapes} do not add up to {env.payload_len} payload bytes")
            return None
        if env.fmt != _fmt_value(self.meta_fmt):
            raise ValueError(f"memory format {env.fmt}, this engine uses {_fmt_value(self.meta_fmt)}")
        expect = [tuple(int(d) for d in s) for s in self.meta_shapes]
        if len(env.shapes) != len(expect):
            raise ValueError(f"{len(env.shapes)} KV-layer groups, this engine has {len(expect)}")
        if list(env.dtypes) != expect_dtypes:
            raise ValueError(f"dtypes {env.dtypes}, this engine has {expect_dtypes}")
        chunk = int(self.metadata.chunk_size)
        tokens = None
        for i, (got, want) in enumerate(zip(env.shapes, expect)):
            if len(got) != len(want) or len(got) < 3:
                raise ValueError(f"group {i} shape {got}, this engine has {want}")
            if got[:2] != want[:2] or got[3:] != want[3:]:
                raise ValueError(f"group {i} shape {got}, this engine has {want}")
            t = got[2]
            if not 1 <= t <= chunk or (tokens is not None and t != tokens):
                raise ValueError(f"group {i} holds {t} tokens (chunk size {chunk})")
            tokens = t
        if size_bytes(env.shapes, env.dtypes) != env.payload_len:
            raise ValueError(f"shapes {env.shapes} do not add up to {env.payload_len} payload bytes")
        return tokens

    def _read_many(self, keys: List[Any], prefix: bool) -> List[Any]:
        """Read keys in one batch round trip (a second one only for values
        larger than a full chunk, such as a layer-wise one). With prefix,
        the result is cut at the first miss: nothing after a failed
        allocation is requested, and whatever was read after the first
        miss is released."""
        n = len(keys)
        out: List[Any] = [None] * n
        if not n:
            return out
        try:
            okeys = [self.object_key(k) for k in keys]
            shapes = list(self.meta_shapes)
            dtypes = list(self.meta_dtypes)
            full = size_bytes(shapes, dtypes)
            env_n = envelope_size(len(shapes))
        except Exception as e:  # a key or a layout that cannot be read at all
            self._warn("preparing a read", e)
            return out
        envs = [bytearray(envelope_size(MAX_GROUPS)) for _ in range(n)]
        objs: List[Any] = [None] * n
        items = []
        for i, k in enumerate(keys):
            if getattr(k, "layer_id", None) is not None:
                items.append([envs[i]])
                continue
            objs[i] = self._allocate(shapes, dtypes, self.meta_fmt)
            if objs[i] is None:
                if prefix:
                    n = i
                    break
                items.append([memoryview(envs[i])[:env_n]])
            else:
                items.append([memoryview(envs[i])[:env_n], memoryview(objs[i].byte_array).cast("B")[:full]])
        if n == 0:
            return out
        try:
            st, stored = self.client.batch_get_sg(okeys[:n], items[:n])
        except Exception as e:
            self._warn(f"batched get of {n} chunks", e)
            _release(objs)
            return out
        second = []
        for i in range(n):
            out[i], again = self._finish(keys[i], st[i], stored[i], envs[i], objs[i], env_n)
            if again is not None:
                second.append((i, again))
        if second:
            self._read_again(keys, okeys, second, out)
        if prefix:
            for i, o in enumerate(out):
                if o is None:
                    _release(out[i + 1:])
                    out[i + 1:] = [None] * (len(out) - i - 1)
                    break
        return out

    def _finish(self, key: Any, status: Status, stored: int, env_buf: bytearray, obj: Any, env_n: int):
        """(the MemoryObj or None, (envelope, exact MemoryObj) when a
        second read is needed). obj is consumed: returned or released."""
        if status == Status.NOT_FOUND:
            _release(obj)
            return None, None
        if status not in (Status.OK, Status.TOO_LARGE):
            logger.warning("dfkv LMCache connector: get of %s failed: %s", key, status.name)
            _release(obj)
            return None, None
        ob = memoryview(obj.byte_array).cast("B") if obj is not None else None
        if ob is not None:
            # The envelope was read into env_buf[:env_n] and the rest of the
            # value into obj: a writer with another group count wrote a
            # longer or shorter envelope, so join the two to parse it.
            extra = max(0, min(stored - env_n, envelope_size(MAX_GROUPS) - env_n, len(ob)))
            head = bytes(env_buf[:env_n]) + bytes(ob[:extra])
        else:
            head = bytes(env_buf)
        try:
            env = Envelope.decode(head, stored)
            tokens = self._check(key, env)
        except ValueError as e:
            logger.warning("dfkv LMCache connector: chunk %s ignored (a miss): %s", key, e)
            _release(obj)
            return None, None
        shift = envelope_size(len(env.shapes)) - env_n
        in_obj = status == Status.OK and ob is not None and shift >= 0
        if in_obj and shift == 0 and env.fmt not in _BINARY_FMTS and getattr(key, "layer_id", None) is None:
            if tokens == int(self.metadata.chunk_size):
                return obj, None
            if len(env.shapes) == 1:
                try:
                    obj = self.reshape_partial_chunk(obj, env.payload_len)
                    if getattr(obj.meta, "shapes", None):
                        # LMCache's reshape updates only the single shape.
                        obj.meta.shapes = [obj.meta.shape]
                    return obj, None
                except ValueError as e:
                    logger.warning("dfkv LMCache connector: chunk %s ignored (a miss): %s", key, e)
                    _release(obj)
                    return None, None
        # Another shape than the one allocated: allocate it exactly and
        # copy what was read, or read again when it did not fit.
        exact = self._allocate_like(env)
        if exact is None:
            _release(obj)
            return None, None
        if in_obj:
            dst = memoryview(exact.byte_array).cast("B")
            dst[:env.payload_len] = ob[shift:shift + env.payload_len]
            _release(obj)
            return exact, None
        _release(obj)
        return None, (env, exact)

    def _allocate_like(self, env: Envelope) -> Any:
        if env.fmt in _BINARY_FMTS:
            size_type = type(self.meta_shapes[0])
            return self._allocate([size_type([env.payload_len, 0, 0, 0])], [None], self._fmt(env.fmt))
        size_type = type(self.meta_shapes[0])
        by_name = {_canon_dtype(d): d for d in self.meta_dtypes}
        return self._allocate([size_type(list(s)) for s in env.shapes], [by_name[d] for d in env.dtypes],
                              self._fmt(env.fmt))

    def _read_again(self, keys, okeys, second, out) -> None:
        idx = [i for i, _ in second]
        bufs = [[bytearray(envelope_size(len(env.shapes))), memoryview(obj.byte_array).cast("B")[:env.payload_len]]
                for _, (env, obj) in second]
        try:
            st, stored = self.client.batch_get_sg([okeys[i] for i in idx], bufs)
        except Exception as e:
            self._warn(f"second read of {len(idx)} chunks", e)
            _release([obj for _, (_, obj) in second])
            return
        for j, (i, (env, obj)) in enumerate(second):
            try:
                if st[j] != Status.OK:
                    raise ValueError(f"{st[j].name} on the second read")
                again = Envelope.decode(bufs[j][0], stored[j])
                if (again.fmt, again.shapes, again.dtypes, again.payload_len) != \
                        (env.fmt, env.shapes, env.dtypes, env.payload_len):
                    raise ValueError("replaced between the two reads")
                out[i] = obj
            except ValueError as e:
                logger.warning("dfkv LMCache connector: chunk %s ignored (a miss): %s", keys[i], e)
                _release(obj)

    async def get(self, key: Any) -> Any:
        return (await self._run(self._read_many, [key], False, release_on_cancel=True))[0]

    async def batched_get(self, keys: List[Any]) -> List[Any]:
        return await self._run(self._read_many, list(keys), False, release_on_cancel=True)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any]) -> List[Any]:
        """The consecutive chunks from keys[0] that could be read, in one
        batch round trip; everything read after the first miss is
        released, as LMCache's default does."""
        got = await self._run(self._read_many, list(keys), True, release_on_cancel=True)
        out = []
        for o in got:
            if o is None:
                break
            out.append(o)
        return out

    # -- lookups ----------------------------------------------------------

    def exists_sync(self, key: Any) -> bool:
        """Whether one chunk is stored. Every failure, an unreachable node's
        Unavailable included, is logged and answered as a miss."""
        try:
            return self.client.exist(self.object_key(key))
        except Exception as e:
            self._warn(f"exists of {key}", e)
            return False

    async def exists(self, key: Any) -> bool:
        return await self._run(self.exists_sync, key)

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        """Consecutive stored chunks from keys[0] (stop at the first miss),
        one parallel lookup; an unreachable node's chunks count as misses.
        pin=True keeps the counted chunks where they are until they are
        read (or server.lease_ms passes)."""
        if not keys:
            return 0
        try:
            return self.client.exist_prefix([self.object_key(k) for k in keys], pin=pin)
        except Exception as e:
            self._warn(f"batched contains of {len(keys)} chunks", e)
            return 0

    async def batched_async_contains(self, lookup_id: str, keys: List[Any], pin: bool = False) -> int:
        """Like batched_contains. pin=True asks the nodes to keep the
        counted chunks where they are (RAM or disk) until LMCache reads
        them (a GET of each ends its pin) or server.lease_ms passes. A
        chunk larger than a disk extent is not pinned and may still be
        evicted before the read, which then returns a shorter prefix
        (LMCache recomputes the rest)."""
        return await self._run(self.batched_contains, list(keys), pin)

    def support_batched_get(self) -> bool:
        return True

    def support_batched_put(self) -> bool:
        return True

    def support_batched_contains(self) -> bool:
        return True

    def support_batched_async_contains(self) -> bool:
        return True

    def support_batched_get_non_blocking(self) -> bool:
        return True

    def remove_sync(self, key: Any) -> bool:
        try:
            return self.client.remove(self.object_key(key))
        except Exception as e:
            self._warn(f"remove of {key}", e)
            return False

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when every node answers STATS, else the first failure's status."""
        try:
            stats = await self._run(lambda: self.client.stats())
        except DfkvError as e:
            return int(e.status)
        except Exception:
            return int(Status.INTERNAL)
        for doc in stats.values():
            if isinstance(doc, dict) and "error" in doc:
                try:
                    return int(Status[doc.get("status", "UNAVAILABLE")])
                except KeyError:
                    return int(Status.UNAVAILABLE)
        return 0

    async def list(self) -> List[str]:
        """dfkv cannot enumerate keys (nodes see only hashed BlockKeys): []."""
        return []

    async def close(self) -> None:
        """Close the client off the event-loop thread: libdfkv's close
        blocks (an embedded store flushes its RAM tier to disk)."""
        self._closed = True
        try:
            fut = asyncio.get_running_loop().run_in_executor(None, self._close_sync)
        except RuntimeError:  # the loop's default executor is already shut down
            self._close_sync()
            return
        await fut

    def _close_sync(self) -> None:
        self._slot.close()
        with self._pool_lock:
            self._closed = True
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"<DfkvConnector {self.endpoints!r} tenant={self.tenant!r}>"


def _tag_part(s: str) -> str:
    return escape_key_part(s).replace("@", "%40").replace(":", "%3A")


class DfkvConnectorAdapter(_AdapterBase):
    """ConnectorAdapter for ``plugin://dfkv[.instance]`` (the Remote
    Storage Plugin route) and ``dfkv://`` URLs."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        if url.startswith(SCHEME):
            return True
        if url.startswith(PLUGIN_SCHEME):
            return url[len(PLUGIN_SCHEME):].split(".", 1)[0].strip("/") == PLUGIN_TYPE
        return False

    def create_connector(self, context: Any) -> DfkvConnector:
        url = context.url
        plugin = getattr(context, "plugin_name", None)
        if plugin is None and url.startswith(PLUGIN_SCHEME):
            plugin = url[len(PLUGIN_SCHEME):].strip("/")
        return DfkvConnector(url=url if url.startswith(SCHEME) else None, loop=context.loop,
                             local_cpu_backend=context.local_cpu_backend, config=getattr(context, "config", None),
                             metadata=getattr(context, "metadata", None), plugin_name=plugin)
