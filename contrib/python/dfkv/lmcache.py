"""LMCache remote storage on dfkv (layout ``lmcache/raw-v1``).

Interfaces verified against LMCache/LMCache
``lmcache/v1/storage_backend/connector/base_connector.py`` (RemoteConnector:
async exists/get/put/list/close, sync exists_sync, support_batched_* and
batched_get/batched_put, init_chunk_meta/reshape_partial_chunk),
``connector/__init__.py`` (ConnectorAdapter(schema), can_parse,
create_connector(ConnectorContext: url, loop, local_cpu_backend, config,
metadata)), ``external_adapter.py`` (external:// builds
``cls(loop=, local_cpu_backend=, config=)``) and the batched_contains /
batched_async_contains(lookup_id, keys, pin) forms of the redis and fs
connectors (prefix count, stop at the first miss). When lmcache is
importable the classes subclass the real bases; otherwise local shims with
the same names stand in.

Configure LMCache with either

    remote_url: "dfkv://10.0.0.1:7600,10.0.0.2:7600?tenant=team-a"
        (DfkvConnectorAdapter must be discoverable: LMCache scans its own
        connector package for *_adapter modules; ship
        lmcache/v1/storage_backend/connector/dfkv_adapter.py containing
        ``from dfkv.lmcache import DfkvConnectorAdapter``)
or, with no file in LMCache's tree,

    remote_url: "external://127.0.0.1:0/dfkv.lmcache/?connector_name=DfkvConnector"
    extra_config: {dfkv_members: "10.0.0.1:7600,10.0.0.2:7600", dfkv_tenant: team-a}

Values are the chunk's raw bytes, no RemoteMetadata envelope (DESIGN.md
§2); the shape, dtype and format needed to allocate a chunk on get come
from LMCache's engine metadata (kv_shape, kv_dtype, use_mla), which is part
of the namespace, and a short stored length is a partial chunk
(reshape_partial_chunk). Object key: ObjectKey(pool="lmcache",
hash=<chunk hash>, tp=(world_size, worker_id), component="kv").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, List, Optional
from urllib.parse import parse_qs

from ._common import dtype_name, escape_key_part, setting
from .client import Client
from .errors import Status
from .identity import LAYOUT_LMCACHE, LayerGeometry, NamespaceDescriptor, ObjectKey, TopologySizes, layout_fingerprint

logger = logging.getLogger(__name__)

try:  # pragma: no cover - depends on the environment
    from lmcache.v1.storage_backend.connector import ConnectorAdapter as _AdapterBase
    from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector as _RemoteConnectorBase
    LMCACHE_AVAILABLE = True
except ImportError:
    LMCACHE_AVAILABLE = False

    class _RemoteConnectorBase:  # type: ignore[no-redef]
        """Shim of LMCache's RemoteConnector (same method names)."""

        def post_init(self) -> None:
            pass

        def support_ping(self) -> bool:
            return False

        def support_batched_get(self) -> bool:
            return False

        def support_batched_put(self) -> bool:
            return False

        def reshape_partial_chunk(self, memory_obj: Any, bytes_read: int) -> Any:
            if bytes_read % self.single_token_size or bytes_read > self.full_chunk_size:
                raise ValueError(f"bytes_read {bytes_read} is not whole tokens of {self.single_token_size} bytes "
                                 f"within a {self.full_chunk_size}-byte chunk")
            if bytes_read == self.full_chunk_size:
                return memory_obj
            shape = list(memory_obj.meta.shape)
            shape[2] = bytes_read // self.single_token_size
            memory_obj.raw_data = memory_obj.raw_data[:bytes_read]
            memory_obj.meta.shape = type(memory_obj.meta.shape)(shape)
            return memory_obj

    class _AdapterBase:  # type: ignore[no-redef]
        """Shim of LMCache's ConnectorAdapter."""

        def __init__(self, schema: str = "") -> None:
            self.schema = schema

SCHEME = "dfkv://"


def parse_dfkv_url(url: str):
    """dfkv://host:port[,host:port...][/][?tenant=..&group=..] -> (members, params)."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not a dfkv URL: {url!r}")
    rest = url[len(SCHEME):]
    rest, _, query = rest.partition("?")
    hosts = [h for h in rest.strip("/").split(",") if h]
    for h in hosts:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"dfkv URL {url!r}: member {h!r} is not host:port")
    if not hosts:
        raise ValueError(f"dfkv URL {url!r} names no members")
    params = {k: v[0] for k, v in parse_qs(query).items()}
    return ",".join(hosts), params


class DfkvConnector(_RemoteConnectorBase):
    """LMCache RemoteConnector storing chunks in dfkv."""

    def __init__(self, url: Optional[str] = None, loop: Any = None, local_cpu_backend: Any = None,
                 config: Any = None, metadata: Any = None) -> None:
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.config = config
        extra = dict(getattr(config, "extra_config", None) or {})
        params = {}
        members = None
        if url:
            members, params = parse_dfkv_url(url)
        self.members = members or setting(extra, "dfkv_members", "DFKV_MEMBERS")
        if not self.members:
            raise ValueError("dfkv LMCache connector: no members; use remote_url dfkv://host:port,... "
                             "or extra_config dfkv_members")
        self.tenant = params.get("tenant") or setting(extra, "dfkv_tenant", None, "default")
        self.group = params.get("group") or setting(extra, "dfkv_group", None, "")
        self.revision = params.get("revision") or setting(extra, "dfkv_model_revision", None, "")
        self.library = setting(extra, "dfkv_library", "DFKV_LIBRARY")
        self.metadata = None
        self._client: Optional[Client] = None
        if metadata is not None:
            self.init_chunk_meta(config, metadata)

    # -- chunk geometry and identity ------------------------------------

    def init_chunk_meta(self, config: Any, metadata: Any) -> None:
        """Always derive the chunk shape from the engine metadata: dfkv
        stores no per-chunk metadata, so get() must know how to allocate."""
        if metadata is None:
            return
        self.metadata = metadata
        kv = list(metadata.kv_shape)  # (layers, 2 or 1, chunk tokens, kv heads, head size)
        self.save_chunk_meta = False
        try:
            import torch
            self.meta_shape = torch.Size([kv[1], kv[0], kv[2], kv[3] * kv[4]])
            elem = torch.tensor([], dtype=metadata.kv_dtype).element_size()
        except ImportError:
            self.meta_shape = (kv[1], kv[0], kv[2], kv[3] * kv[4])
            elem = int(getattr(metadata, "kv_dtype_size", 2))
        self.meta_dtype = metadata.kv_dtype
        try:
            from lmcache.v1.memory_management import MemoryFormat
            self.meta_fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
        except ImportError:
            self.meta_fmt = "KV_MLA_FMT" if metadata.use_mla else "KV_2LTD"
        n = elem
        for d in kv:
            n *= d
        self.full_chunk_size = n
        self.single_token_size = n // kv[2]

    def namespace(self) -> NamespaceDescriptor:
        m = self.metadata
        if m is None:
            raise RuntimeError("dfkv LMCache connector: no engine metadata yet (init_chunk_meta not called)")
        kv = [int(x) for x in m.kv_shape]
        world = int(getattr(m, "world_size", 1) or 1)
        return NamespaceDescriptor(
            tenant=str(self.tenant), model_id=str(m.model_name), model_revision=str(self.revision),
            layout_id=LAYOUT_LMCACHE, dtype=dtype_name(m.kv_dtype),
            layout_fingerprint=layout_fingerprint([("kv_shape", kv), ("use_mla", [int(bool(m.use_mla))]),
                                                   ("chunk_bytes", [self.full_chunk_size])]),
            block_tokens=kv[2], layer_geometry=LayerGeometry(kv[0], kv[3] * world if not m.use_mla else kv[3], kv[4]),
            group=str(self.group), topology_sizes=TopologySizes(tp=world),
        )

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.members, self.namespace(), library=self.library)
        return self._client

    def object_key(self, key: Any) -> bytes:
        m = self.metadata
        world = int(getattr(key, "world_size", getattr(m, "world_size", 1)) or 1)
        worker = int(getattr(key, "worker_id", getattr(m, "worker_id", 0)) or 0)
        chunk = getattr(key, "chunk_hash", None)
        h = escape_key_part(chunk if chunk is not None else key.to_string())
        tp = (world, -1 if getattr(m, "use_mla", False) else worker)
        return ObjectKey(pool="lmcache", hash=h, tp=tp, component="kv").render_bytes()

    @staticmethod
    def _buffer(memory_obj: Any) -> Any:
        t = getattr(memory_obj, "tensor", None)
        return t if t is not None else memory_obj.byte_array

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- RemoteConnector --------------------------------------------------

    def exists_sync(self, key: Any) -> bool:
        return self.client.exists(self.object_key(key))

    async def exists(self, key: Any) -> bool:
        return await self._run(self.exists_sync, key)

    def _allocate(self) -> Any:
        return self.local_cpu_backend.allocate(self.meta_shape, self.meta_dtype, self.meta_fmt)

    def _get_sync(self, key: Any) -> Any:
        return self._batched_get_sync([key])[0]

    async def get(self, key: Any) -> Any:
        return await self._run(self._get_sync, key)

    def _batched_get_sync(self, keys: List[Any]) -> List[Any]:
        objs = []
        for _ in keys:
            o = self._allocate()
            if o is None:
                logger.warning("dfkv LMCache connector: local CPU backend could not allocate a chunk")
            objs.append(o)
        idx = [i for i, o in enumerate(objs) if o is not None]
        out: List[Any] = [None] * len(keys)
        if not idx:
            return out
        st, stored = self.client.batch_get_into([self.object_key(keys[i]) for i in idx],
                                                [self._buffer(objs[i]) for i in idx])
        for j, i in enumerate(idx):
            o = objs[i]
            if st[j] != Status.OK:
                o.ref_count_down()
                continue
            try:
                out[i] = self.reshape_partial_chunk(o, stored[j])
            except ValueError as e:
                logger.warning("dfkv LMCache connector: chunk %r: %s", keys[i], e)
                o.ref_count_down()
        return out

    async def batched_get(self, keys: List[Any]) -> List[Any]:
        return await self._run(self._batched_get_sync, keys)

    def _put_sync(self, key: Any, memory_obj: Any) -> None:
        self.client.put(self.object_key(key), self._buffer(memory_obj))

    async def put(self, key: Any, memory_obj: Any) -> None:
        await self._run(self._put_sync, key, memory_obj)

    def _batched_put_sync(self, keys: List[Any], memory_objs: List[Any]) -> None:
        st = self.client.batch_put([self.object_key(k) for k in keys], [self._buffer(o) for o in memory_objs])
        bad = [(k, s) for k, s in zip(keys, st) if s != Status.OK]
        if bad:
            logger.warning("dfkv LMCache connector: %d of %d chunk puts failed, first %r: %s",
                           len(bad), len(keys), bad[0][0], bad[0][1].name)

    async def batched_put(self, keys: List[Any], memory_objs: List[Any]) -> None:
        await self._run(self._batched_put_sync, keys, memory_objs)

    def support_batched_get(self) -> bool:
        return True

    def support_batched_put(self) -> bool:
        return True

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[Any]) -> int:
        """Consecutive stored chunks from keys[0] (stop at the first miss),
        one parallel dfkv_exist_prefix."""
        return self.client.exist_prefix([self.object_key(k) for k in keys])

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[Any], pin: bool = False) -> int:
        return await self._run(self.batched_contains, keys)

    def remove_sync(self, key: Any) -> bool:
        return self.client.remove(self.object_key(key))

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when every member answers STATS, else the first failure's status."""
        stats = await self._run(self.client.stats)
        for doc in stats.values():
            if isinstance(doc, dict) and "error" in doc:
                return int(Status[doc.get("status", "UNAVAILABLE")])
        return 0

    async def list(self) -> List[str]:
        """dfkv cannot enumerate keys (nodes see only hashed BlockKeys): []."""
        return []

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __repr__(self) -> str:
        return f"<DfkvConnector members={self.members!r} tenant={self.tenant!r}>"


class DfkvConnectorAdapter(_AdapterBase):
    """ConnectorAdapter for dfkv:// URLs."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        return url.startswith(SCHEME)

    def create_connector(self, context: Any) -> DfkvConnector:
        return DfkvConnector(url=context.url, loop=context.loop, local_cpu_backend=context.local_cpu_backend,
                             config=getattr(context, "config", None), metadata=getattr(context, "metadata", None))
