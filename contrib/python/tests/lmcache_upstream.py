"""A stand-in for the parts of LMCache that build and drive a remote
connector, so dfkv.lmcache is exercised the way LMCache uses it without
LMCache installed (it is not packaged for Debian and PyPI is out of reach).

Written here, not copied; the signatures, construction path and call
sequence follow LMCache/LMCache as read on its dev branch (files of
early 2026):

- lmcache/v1/storage_backend/connector/base_connector.py, the version whose
  RemoteConnector docstring has the "NOTE on lazy shape properties":
  __init__(config, metadata) asserts metadata, keeps it, sets
  save_chunk_meta, meta_fmt and remote_metadata_bytes; meta_shapes,
  meta_dtypes, full_chunk_size_bytes and single_token_size are read-only
  properties; reshape_partial_chunk refuses 0 and ragged reads; the
  batched_async_contains / batched_get_non_blocking defaults.
- connector/__init__.py at 0109660ce57fe9c046eb7953dfb56fb1e3c6d9fd:
  ConnectorContext(url, loop, local_cpu_backend, config, metadata,
  plugin_name), ConnectorManager loading remote_storage_plugins adapters
  from extra_config "remote_storage_plugin.<name>.module_path" and
  ".class_name", the first adapter whose can_parse(url) is true wins,
  CreateConnector wrapping the result in InstrumentedRemoteConnector.
- connector/instrumented_connector.py: put and batched_put release the
  MemoryObjs in a finally once the connector's call ends (the reference
  the naive serializer took), batched_put logs instead of raising; the
  rest passes through (metrics left out).
- storage_backend/__init__.py: one RemoteBackend per remote_storage_plugins
  entry, with plugin_name; the backend then asks for "plugin://<name>".
- remote_backend.py (the plugin_name version): which connector methods it
  calls, with what, and what it does with exceptions, time-outs and
  MemoryObjs (get_blocking, batched_get_blocking, batched_async_contains,
  batched_get_non_blocking, submit_put_task, batched_submit_put_task,
  batched_contains, remove); and, as at
  009eca101c71ae583489ed4bc616c589f2edcdf7, the MLA "worker id as 0"
  mode: a worker other than 0 puts nothing and looks up and reads its
  keys as worker 0's (key.with_new_worker_id(0)) in contains,
  batched_contains, get_blocking, batched_get_blocking and
  batched_async_contains.
- lmcache/utils.py at 0353be824aebefb9fd4fbdca022746adbf252d3b:
  CacheEngineKey(model_name, world_size, worker_id, chunk_hash, dtype,
  request_configs) with tags from "lmcache.tag.*" request configs,
  chunk_hash_hex, LayerCacheEngineKey.layer_id.
- lmcache/v1/metadata.py at 0ca52cb17ed482c6bd20c08555e03cd4aa9027b2:
  LMCacheMetadata.get_shapes/get_dtypes/get_num_groups over the KV-layer
  groups, falling back to the deprecated kv_shape.
- lmcache/v1/memory_management.py: MemoryFormat values, MemoryObjMetadata,
  TensorMemoryObj (raw_data, tensor, byte_array through ctypes, ref
  counting that frees into its allocator), BytesBufferMemoryObj;
  LocalCPUBackend.allocate(shapes, dtypes, fmt, eviction, busy_loop).
- lmcache/v1/protocol.py: init_remote_metadata_info(num_groups).
- naive_serde: CreateSerde(serde_type, metadata, config); naive and kivi
  pass the MemoryObj through (kivi is a TODO upstream), cachegen turns it
  into a BytesBufferMemoryObj of compressed bytes. The naive serializer
  takes a reference (ref_count_up) that InstrumentedRemoteConnector drops;
  a BytesBufferMemoryObj is not reference counted. The cachegen codec here
  is zlib with a token count, not CacheGen's GPU coder: what matters to a
  connector is that the stored bytes are opaque and of another length.

Works without torch (dtypes and sizes are then small local classes), and
with torch uses real torch dtypes, torch.Size and uint8 tensors. The CPU
backend counts the MemoryObjs it has handed out and not had back, which is
how the tests see a leak.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import ctypes
import enum
import importlib
import logging
import struct
import sys
import threading
import time
import types
import zlib
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, List, Optional

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

logger = logging.getLogger("lmcache_upstream")

# ------------------------------------------------------------ dtypes, sizes

if torch is not None:
    Size = torch.Size
    float16, bfloat16, float32, uint8 = torch.float16, torch.bfloat16, torch.float32, torch.uint8

    def itemsize(dtype):
        return torch.empty((), dtype=dtype).element_size()
else:
    class Size(tuple):
        def numel(self):
            n = 1
            for d in self:
                n *= d
            return n

    class _DType:
        def __init__(self, name, nbytes):
            self.name, self.itemsize = name, nbytes

        def __str__(self):
            return "torch." + self.name

        __repr__ = __str__

    float16, bfloat16, float32, uint8 = _DType("float16", 2), _DType("bfloat16", 2), _DType("float32", 4), _DType("uint8", 1)

    def itemsize(dtype):
        return dtype.itemsize


def get_size_bytes(shapes, dtypes):
    assert len(shapes) == len(dtypes)
    return sum(Size(s).numel() * itemsize(d) for s, d in zip(shapes, dtypes))


# --------------------------------------------------------------- lmcache.utils

@dataclass
class CacheEngineKey:
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: Any
    request_configs: Optional[dict] = field(default_factory=dict)
    tags: Optional[tuple] = field(init=False, default=None)

    def __post_init__(self):
        tags = [(k[len("lmcache.tag."):], v) for k, v in (self.request_configs or {}).items()
                if k.startswith("lmcache.tag.")]
        self.tags = tuple(tags) if tags else None

    def __hash__(self):
        return hash((self.model_name, self.world_size, self.worker_id, self.chunk_hash, str(self.dtype), self.tags))

    @property
    def chunk_hash_hex(self):
        return self.chunk_hash.hex() if isinstance(self.chunk_hash, bytes) else f"{self.chunk_hash:x}"

    def to_string(self):
        s = f"{self.model_name}@{self.world_size}@{self.worker_id}@{self.chunk_hash_hex}@{self.dtype}"
        if self.tags:
            s += "@" + "@".join(f"{k}%{v}" for k, v in self.tags)
        return s

    def with_new_worker_id(self, worker_id):
        return CacheEngineKey(self.model_name, self.world_size, worker_id, self.chunk_hash, self.dtype,
                              self.request_configs)

    def split_layers(self, num_layers):
        return [LayerCacheEngineKey(self.model_name, self.world_size, self.worker_id, self.chunk_hash, self.dtype,
                                    self.request_configs, layer_id=i) for i in range(num_layers)]


@dataclass
class LayerCacheEngineKey(CacheEngineKey):
    layer_id: int = 0

    def __hash__(self):
        return hash((super().__hash__(), self.layer_id))


# ------------------------------------------------------- lmcache.v1.config

class LMCacheEngineConfig:
    def __init__(self, chunk_size=256, remote_url=None, remote_serde="naive", remote_storage_plugins=None,
                 extra_config=None, use_layerwise=False, blocking_timeout_secs=10, max_local_cpu_size=5.0):
        self.chunk_size, self.remote_url, self.remote_serde = chunk_size, remote_url, remote_serde
        self.remote_storage_plugins, self.extra_config = remote_storage_plugins, extra_config
        self.use_layerwise, self.blocking_timeout_secs = use_layerwise, blocking_timeout_secs
        self.max_local_cpu_size = max_local_cpu_size

    def get_extra_config_value(self, key, default=None):
        return (self.extra_config or {}).get(key, default)


# ----------------------------------------------------- lmcache.v1.metadata

@dataclass
class KVLayerGroup:
    num_layers: int
    hidden_dim_size: int
    dtype: Any


@dataclass
class KVLayerGroupsManager:
    kv_layer_groups: List[KVLayerGroup] = field(default_factory=list)

    @property
    def num_groups(self):
        return len(self.kv_layer_groups)


@dataclass
class LMCacheMetadata:
    model_name: str
    world_size: int
    local_world_size: int
    worker_id: int
    local_worker_id: int
    kv_dtype: Any
    kv_shape: tuple  # (num_layer, 2, chunk_size, num_kv_head, head_size), deprecated upstream
    use_mla: bool = False
    role: Optional[str] = None
    served_model_name: Optional[str] = None
    chunk_size: int = 256
    kv_layer_groups_manager: KVLayerGroupsManager = field(default_factory=KVLayerGroupsManager)

    def get_dtypes(self):
        if self.kv_layer_groups_manager.kv_layer_groups:
            return [g.dtype for g in self.kv_layer_groups_manager.kv_layer_groups]
        return [self.kv_dtype]

    def get_shapes(self, num_tokens=None):
        t = self.chunk_size if num_tokens is None else num_tokens
        if self.kv_layer_groups_manager.kv_layer_groups:
            kv = 1 if self.use_mla else 2
            return [Size([kv, g.num_layers, t, g.hidden_dim_size]) for g in self.kv_layer_groups_manager.kv_layer_groups]
        s = self.kv_shape
        return [Size([s[1], s[0], t, s[3] * s[4]])]

    def get_num_groups(self):
        return self.kv_layer_groups_manager.num_groups or 1


# ----------------------------------------------- lmcache.v1.memory_management

class MemoryFormat(enum.Enum):
    UNDEFINED = 0
    KV_2LTD = 1
    KV_T2D = 2
    KV_2TD = 3
    BINARY = 4
    BINARY_BUFFER = 5
    KV_MLA_FMT = 6


@dataclass
class MemoryObjMetadata:
    shape: Any
    dtype: Any
    address: int
    phy_size: int
    ref_count: int
    pin_count: int = 0
    fmt: MemoryFormat = MemoryFormat.UNDEFINED
    cached_positions: Any = None
    shapes: Optional[list] = None
    dtypes: Optional[list] = None


class MemoryObj(metaclass=abc.ABCMeta):
    def __init__(self, metadata):
        self.meta = metadata

    def get_shape(self):
        return self.meta.shape

    def get_dtype(self):
        return self.meta.dtype

    def get_memory_format(self):
        return self.meta.fmt


class TensorMemoryObj(MemoryObj):
    def __init__(self, raw_data, metadata, parent_allocator=None):
        super().__init__(metadata)
        self.raw_data, self.parent_allocator, self.valid = raw_data, parent_allocator, True
        self.lock = threading.Lock()

    def get_size(self):
        shapes = self.meta.shapes or [self.meta.shape]
        dtypes = self.meta.dtypes or [self.meta.dtype]
        return get_size_bytes(shapes, dtypes)

    @property
    def tensor(self):
        if torch is None or len(self.meta.shapes or [1]) != 1:
            return None
        return self.raw_data[:self.get_size()].view(self.meta.dtype).view(self.meta.shape)

    @property
    def byte_array(self):
        if torch is None:
            return self.raw_data
        n = self.raw_data.numel() * self.raw_data.element_size()
        return memoryview((ctypes.c_ubyte * n).from_address(self.raw_data.data_ptr()))

    def ref_count_up(self):
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self):
        with self.lock:
            self.meta.ref_count -= 1
            if self.meta.ref_count < 0:
                raise AssertionError("MemoryObj released twice")
            free = self.meta.ref_count == 0 and self.parent_allocator is not None and self.meta.pin_count == 0
        if free:
            self.parent_allocator.free(self)

    def get_ref_count(self):
        return self.meta.ref_count


class BytesBufferMemoryObj(MemoryObj):
    def __init__(self, raw_bytes, metadata=None):
        self.raw_data = raw_bytes
        super().__init__(metadata or MemoryObjMetadata(Size([len(raw_bytes), 0, 0, 0]), None, 0, 0, 1,
                                                       fmt=MemoryFormat.BINARY_BUFFER))

    def get_size(self):
        return len(self.raw_data)

    @property
    def byte_array(self):
        return self.raw_data

    @property
    def tensor(self):
        return None

    def ref_count_up(self):  # upstream: not reference counted
        pass

    def ref_count_down(self):
        pass


# ------------------------------------ storage_backend.local_cpu_backend

class LocalCPUBackend:
    """allocate() as upstream's; counts what is out (live) so a test sees
    every MemoryObj a connector kept or lost. capacity limits how many
    may be out at once (None when full, as upstream's pool does).
    reuse=True hands freed memory out again, as upstream's preallocated
    pool does (a benchmark needs that: new memory's first touch would
    cost more than a transfer); tests keep every allocation fresh."""

    def __init__(self, config, metadata, capacity=None, reuse=False):
        self.config, self.metadata, self.capacity = config, metadata, capacity
        self.live = set()
        self.allocations = 0
        self._lock = threading.Lock()
        self.reuse, self._spare = reuse, {}

    def allocate(self, shapes, dtypes, fmt=None, eviction=True, busy_loop=True):
        if not isinstance(shapes, list):
            shapes, dtypes = [shapes], [dtypes]
        fmt = fmt or MemoryFormat.KV_2LTD
        if fmt == MemoryFormat.BINARY_BUFFER:  # upstream: a plain bytearray, not from the pinned pool
            return BytesBufferMemoryObj(bytearray(int(shapes[0][0])))
        with self._lock:
            if self.capacity is not None and len(self.live) >= self.capacity:
                return None
            n = get_size_bytes(shapes, dtypes)
            spare = self._spare.get(n)
            if spare:
                raw = spare.pop()
            else:
                raw = torch.zeros(n, dtype=torch.uint8) if torch is not None else memoryview(bytearray(n))
            meta = MemoryObjMetadata(Size(shapes[0]), dtypes[0], 0, n, 1, fmt=fmt,
                                     shapes=[Size(s) for s in shapes], dtypes=list(dtypes))
            obj = TensorMemoryObj(raw, meta, self)
            self.live.add(id(obj))
            self.allocations += 1
            return obj

    def free(self, obj):
        with self._lock:
            self.live.discard(id(obj))
            if self.reuse and isinstance(obj, TensorMemoryObj):
                raw = obj.raw_data
                self._spare.setdefault(len(raw) if torch is None else raw.numel(), []).append(raw)

    def get_full_chunk_size_bytes(self):
        return get_size_bytes(self.metadata.get_shapes(), self.metadata.get_dtypes())


# ----------------------------------------------------- lmcache.v1.protocol

REMOTE_METADATA_BYTES = None


def init_remote_metadata_info(num_groups):
    global REMOTE_METADATA_BYTES
    REMOTE_METADATA_BYTES = 4 * (2 + 5 * num_groups)


def get_remote_metadata_bytes():
    assert REMOTE_METADATA_BYTES is not None
    return REMOTE_METADATA_BYTES


# ------------------------------------------ connector/base_connector.py

class RemoteConnector(metaclass=abc.ABCMeta):
    def __init__(self, config, metadata):
        assert metadata is not None
        self._connector_metadata = metadata
        self.save_chunk_meta = (config.extra_config is None or config.extra_config.get("save_chunk_meta", True)
                                or config.use_layerwise)
        self.meta_fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
        init_remote_metadata_info(metadata.get_num_groups())
        self.remote_metadata_bytes = get_remote_metadata_bytes()

    @property
    def meta_shapes(self):
        return self._connector_metadata.get_shapes()

    @property
    def meta_dtypes(self):
        return self._connector_metadata.get_dtypes()

    @property
    def full_chunk_size_bytes(self):
        return get_size_bytes(self.meta_shapes, self.meta_dtypes)

    @property
    def single_token_size(self):
        return self.full_chunk_size_bytes // self._connector_metadata.chunk_size

    def reshape_partial_chunk(self, memory_obj, bytes_read):
        if bytes_read == 0 or bytes_read % self.single_token_size != 0 or bytes_read > self.full_chunk_size_bytes:
            raise ValueError(f"bytes_read: {bytes_read} is illegal, single_token_size: {self.single_token_size}, "
                             f"full_chunk_size_bytes: {self.full_chunk_size_bytes}")
        if bytes_read == self.full_chunk_size_bytes:
            return memory_obj
        shape = list(memory_obj.meta.shape)
        shape[2] = bytes_read // self.single_token_size
        memory_obj.raw_data = memory_obj.raw_data[:bytes_read]
        memory_obj.meta.shape = Size(shape)
        return memory_obj

    def post_init(self):
        pass

    @abc.abstractmethod
    async def exists(self, key): ...

    @abc.abstractmethod
    def exists_sync(self, key): ...

    @abc.abstractmethod
    async def get(self, key): ...

    @abc.abstractmethod
    async def put(self, key, memory_obj): ...

    @abc.abstractmethod
    async def list(self): ...

    @abc.abstractmethod
    async def close(self): ...

    def support_ping(self):
        return False

    async def ping(self):
        raise NotImplementedError

    def support_batched_get(self):
        return False

    async def batched_get(self, keys):
        raise NotImplementedError

    def support_batched_put(self):
        return False

    async def batched_put(self, keys, memory_objs):
        raise NotImplementedError

    def support_batched_async_contains(self):
        return True

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        results = await asyncio.gather(*(self.exists(k) for k in keys))
        return results.index(False) if False in results else len(results)

    def support_batched_get_non_blocking(self):
        return True

    async def batched_get_non_blocking(self, lookup_id, keys):
        results = await asyncio.gather(*(self.get(k) for k in keys), return_exceptions=True)
        out, failed = [], False
        for r in results:
            if failed:
                if isinstance(r, MemoryObj):
                    r.ref_count_down()
            elif isinstance(r, MemoryObj):
                out.append(r)
            else:
                failed = True
        return out

    def remove_sync(self, key):
        raise NotImplementedError

    def batched_contains(self, keys):
        raise NotImplementedError

    def support_batched_contains(self):
        return False


class PreRefactorRemoteConnector(metaclass=abc.ABCMeta):
    """The base before the refactor: class attributes, init_chunk_meta,
    no __init__ arguments."""

    save_chunk_meta = True
    meta_shape = None
    full_chunk_size = None

    def init_chunk_meta(self, config, metadata):
        pass


# ----------------------------------------------------- connector/__init__.py

def extract_plugin_type(plugin_name):
    return plugin_name.split(".", 1)[0]


class ConnectorContext:
    def __init__(self, url, loop, local_cpu_backend, config, metadata, plugin_name=None):
        self.url, self.loop, self.local_cpu_backend = url, loop, local_cpu_backend
        self.config, self.metadata, self.plugin_name = config, metadata, plugin_name


class ConnectorAdapter(abc.ABC):
    def __init__(self, schema=""):
        self.schema = schema

    def can_parse(self, url):
        return self.schema != "" and url.startswith(self.schema)

    @abc.abstractmethod
    def create_connector(self, context): ...


class InstrumentedRemoteConnector:
    """Upstream wraps every connector for metrics (instrumented_connector.py).
    Metrics aside it passes calls through, except that put and batched_put
    release the MemoryObjs they were given when the connector's call ends,
    also when it raised or was cancelled (the reference the serializer
    took), and batched_put logs an exception instead of raising it unless
    the connector requires put completion."""

    def __init__(self, connector):
        self._connector = connector

    def __getattr__(self, name):
        return getattr(self._connector, name)

    async def put(self, key, memory_obj):
        try:
            await self._connector.put(key, memory_obj)
        finally:
            memory_obj.ref_count_down()

    async def batched_put(self, keys, memory_objs):
        try:
            await self._connector.batched_put(keys, memory_objs)
        except Exception as e:
            logger.warning("batched put error: %s", e)
            requires = getattr(self._connector, "requires_put_completion", None)
            if callable(requires) and requires():
                raise
        finally:
            for memory_obj in memory_objs:
                memory_obj.ref_count_down()


class ConnectorManager:
    def __init__(self, url, loop, local_cpu_backend, config=None, metadata=None, plugin_name=None):
        self.context = ConnectorContext(url, loop, local_cpu_backend, config, metadata, plugin_name)
        self.adapters = []
        self._remote_adapters_plugin_launcher(config)

    def _remote_adapters_plugin_launcher(self, config):
        if config is None:
            return
        for name in set(config.remote_storage_plugins or ()):
            try:
                extra = config.extra_config
                if extra is None:
                    continue
                module_path = extra.get(f"remote_storage_plugin.{name}.module_path")
                class_name = extra.get(f"remote_storage_plugin.{name}.class_name")
                if not module_path or not class_name:
                    logger.warning("Remote connector %s missing adapter module_path or class_name", name)
                    continue
                adapter = getattr(importlib.import_module(module_path), class_name)()
                if not isinstance(adapter, ConnectorAdapter):
                    logger.warning("Remote connector %s adapter does not implement ConnectorAdapter", name)
                    continue
                self.adapters.append(adapter)
            except (ImportError, AttributeError) as e:
                logger.error("Failed to load remote connector %s: %s", name, e)

    def create_connector(self):
        for adapter in self.adapters:
            if adapter.can_parse(self.context.url):
                return adapter.create_connector(self.context)
        raise ValueError(f"No adapter found for URL: {self.context.url}")


def CreateConnector(url, loop, local_cpu_backend, config=None, metadata=None, plugin_name=None):
    if "://" not in url:
        raise ValueError(f"Invalid remote url {url}: missing scheme")
    return InstrumentedRemoteConnector(
        ConnectorManager(url, loop, local_cpu_backend, config, metadata, plugin_name).create_connector())


# ------------------------------------------------------------ naive_serde

class NaiveSerializer:
    def serialize(self, memory_obj):
        # Upstream takes a reference here; InstrumentedRemoteConnector.put
        # drops it when the connector's put ends.
        memory_obj.ref_count_up()
        return memory_obj


class NaiveDeserializer:
    def deserialize(self, memory_obj):
        return memory_obj


class CacheGenSerializer:
    def __init__(self, config, metadata):
        self.metadata = metadata

    def serialize(self, memory_obj):
        n = memory_obj.get_size()
        tokens = memory_obj.meta.shape[2]
        return BytesBufferMemoryObj(struct.pack("<I", tokens) + zlib.compress(bytes(memory_obj.byte_array[:n])))


class CacheGenDeserializer:
    def __init__(self, config, metadata):
        self.metadata = metadata

    def deserialize(self, memory_obj):
        raw = bytes(memory_obj.byte_array)
        (tokens,) = struct.unpack_from("<I", raw)
        data = bytearray(zlib.decompress(raw[4:]))
        shapes = self.metadata.get_shapes(tokens)
        dtypes = self.metadata.get_dtypes()
        meta = MemoryObjMetadata(shapes[0], dtypes[0], 0, len(data), 1, fmt=MemoryFormat.KV_2LTD,
                                 shapes=shapes, dtypes=dtypes)
        raw_data = torch.frombuffer(data, dtype=torch.uint8) if torch is not None else memoryview(data)
        return TensorMemoryObj(raw_data, meta)


def CreateSerde(serde_type, metadata, config):
    if serde_type in ("naive", "kivi"):
        return NaiveSerializer(), NaiveDeserializer()
    if serde_type == "cachegen":
        return CacheGenSerializer(config, metadata), CacheGenDeserializer(config, metadata)
    raise ValueError(f"Invalid type: {serde_type}")


# ---------------------------------------------------------- remote_backend

class RemoteBackend:
    def __init__(self, config, metadata, loop, local_cpu_backend, dst_device="cpu", plugin_name=None):
        self.put_tasks = set()
        self.lock = threading.Lock()
        self.plugin_name = plugin_name
        if plugin_name is not None:
            self.remote_url = f"plugin://{plugin_name}"
        else:
            if config.remote_url is None:
                raise ValueError("remote_url must be provided when not using plugin_name")
            self.remote_url = config.remote_url
        self.local_cpu_backend, self.loop, self.config, self.metadata = local_cpu_backend, loop, config, metadata
        self.connection = None
        self.min_reconnect_interval = 10
        self.failure_time = -1000000.0
        self.init_connection()
        self.serializer, self.deserializer = CreateSerde(config.remote_serde, metadata, config)
        self._mla_worker_id_as0_mode = (config.get_extra_config_value("remote_enable_mla_worker_id_as0", metadata.use_mla)
                                        and metadata.use_mla and metadata.world_size > 1 and metadata.worker_id != 0)
        self._get_blocking_failed_count = 0
        self._put_failed_count = 0
        self.pending = []  # test hook: futures of submitted puts (upstream keeps none)

    def init_connection(self):
        if self.connection is not None:
            return
        if time.time() - self.failure_time < self.min_reconnect_interval:
            return
        try:
            url = f"plugin://{self.plugin_name}" if self.plugin_name is not None else self.config.remote_url
            self.connection = CreateConnector(url, self.loop, self.local_cpu_backend, self.config, self.metadata,
                                              plugin_name=self.plugin_name)
        except Exception as e:
            self.failure_time = time.time()
            logger.warning("Failed to initialize/re-establish remote connection: %s", e)
            self.connection = None

    def contains(self, key, pin=False):
        if self.connection is None:
            return False
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        try:
            if self.config.get_extra_config_value("use_exists_sync", False):
                return self.connection.exists_sync(key)
            return asyncio.run_coroutine_threadsafe(self.connection.exists(key), self.loop).result()
        except Exception as e:
            logger.warning("Remote connection failed in contains: %s", e)
            return False

    def batched_contains(self, keys, pin=False):
        if self.connection is None:
            return 0
        if not self.connection.support_batched_contains():
            n = 0
            for k in keys:
                if not self.contains(k, pin):
                    break
                n += 1
            return n
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        try:
            return self.connection.batched_contains(keys)
        except Exception as e:
            logger.warning("Remote connection failed in batched_contains: %s", e)
            return 0

    def _put_callback(self, future, keys):
        with self.lock:
            self.put_tasks.difference_update(keys)
        try:
            future.result()
        except Exception as e:
            self._put_failed_count += 1
            logger.error("Put task failed for key %s: %s", keys, e)

    def submit_put_task(self, key, memory_obj):
        if self.connection is None or self._mla_worker_id_as0_mode:
            f = Future()
            f.set_result(None)
            return f
        memory_obj.ref_count_up()
        with self.lock:
            self.put_tasks.add(key)
        compressed = self.serializer.serialize(memory_obj)
        memory_obj.ref_count_down()
        future = asyncio.run_coroutine_threadsafe(self.connection.put(key, compressed), self.loop)
        future.add_done_callback(lambda f: self._put_callback(f, [key]))
        self.pending.append(future)
        return future

    def batched_submit_put_task(self, keys, memory_objs, transfer_spec=None):
        if self.connection is None:
            return
        if not self.connection.support_batched_put():
            for k, o in zip(keys, memory_objs):
                self.submit_put_task(k, o)
            return
        for o in memory_objs:
            o.ref_count_up()
        try:
            compressed = [self.serializer.serialize(o) for o in memory_objs]
        finally:
            for o in memory_objs:
                o.ref_count_down()
        future = asyncio.run_coroutine_threadsafe(self.connection.batched_put(keys, compressed), self.loop)
        future.add_done_callback(lambda f: self._put_callback(f, list(keys)))
        self.pending.append(future)

    def wait_puts(self, timeout=30):
        """Test hook: wait for every submitted put."""
        for f in self.pending:
            with contextlib.suppress(Exception):
                f.result(timeout)
        self.pending = []

    def get_blocking(self, key):
        if self.local_cpu_backend is None or self.connection is None:
            return None
        if self._mla_worker_id_as0_mode:
            key = key.with_new_worker_id(0)
        future = asyncio.run_coroutine_threadsafe(self.connection.get(key), self.loop)
        try:
            memory_obj = future.result(self.config.blocking_timeout_secs)
        except Exception as e:
            if isinstance(e, FutureTimeout):
                future.cancel()
            logger.warning("Error occurred in get_blocking: %s, return None", e)
            memory_obj = None
        if memory_obj is None:
            self._get_blocking_failed_count += 1
            return None
        try:
            return self.deserializer.deserialize(memory_obj)
        except Exception as e:
            logger.warning("Remote object deserialization failed: %s", e)
            self._get_blocking_failed_count += 1
            return None

    def batched_get_blocking(self, keys):
        if self.local_cpu_backend is None or self.connection is None:
            return [None] * len(keys)
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        if self.connection.support_batched_get():
            future = asyncio.run_coroutine_threadsafe(self.connection.batched_get(keys), self.loop)
            try:
                memory_objs = future.result(self.config.blocking_timeout_secs)
            except Exception as e:
                if isinstance(e, FutureTimeout):
                    future.cancel()
                logger.warning("Error occurred in batched_get_blocking: %s", e)
                memory_objs = [None] * len(keys)
        else:
            memory_objs = [self.get_blocking(k) for k in keys]
        out = []
        for o in memory_objs:
            try:
                out.append(None if o is None else self.deserializer.deserialize(o))
            except Exception as e:
                logger.warning("Remote object deserialization failed: %s", e)
                out.append(None)
        return out

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        if self.connection is None:
            return 0
        if self._mla_worker_id_as0_mode:
            keys = [k.with_new_worker_id(0) for k in keys]
        try:
            assert self.connection.support_batched_async_contains()
            return await asyncio.wait_for(self.connection.batched_async_contains(lookup_id, keys, pin),
                                          self.config.blocking_timeout_secs)
        except asyncio.TimeoutError:
            logger.warning("batched_async_contains timed out")
            return 0
        except Exception as e:
            logger.warning("Error occurred in batched_async_contains: %s", e)
            return 0

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        if self.local_cpu_backend is None or self.connection is None:
            return []
        try:
            return await asyncio.wait_for(self.connection.batched_get_non_blocking(lookup_id, keys),
                                          self.config.blocking_timeout_secs)
        except asyncio.TimeoutError:
            logger.warning("batched_get_non_blocking timed out")
            return []
        except Exception as e:
            logger.warning("Error occurred in batched_get_non_blocking: %s", e)
            return []

    def remove(self, key, force=True):
        if self.connection is None:
            return False
        try:
            return self.connection.remove_sync(key)
        except Exception as e:
            logger.warning("Failed to remove key %s from remote backend: %s", key, e)
            return False

    def close(self):
        try:
            asyncio.run_coroutine_threadsafe(self.connection.close(), self.loop).result()
        except Exception as e:
            logger.warning("Error occurred when closing remote connection: %s", e)


def create_remote_backends(config, metadata, loop, local_cpu_backend):
    """The remote_storage_plugins part of upstream's CreateStorageBackends."""
    out = {}
    for name in config.remote_storage_plugins or ():
        assert local_cpu_backend is not None, "Remote backend requires local CPU backend as a buffer."
        try:
            out[f"RemoteBackend-{name}"] = RemoteBackend(config, metadata, loop, local_cpu_backend, plugin_name=name)
        except Exception as e:
            logger.error("Failed to create remote backend for plugin %s: %s", name, e)
    return out


# ---------------------------------------------------------- installation

class LoopThread:
    """LMCache runs connector coroutines on an event loop in its own thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


_MODULES = {
    "lmcache": {},
    "lmcache.utils": {"CacheEngineKey": CacheEngineKey, "LayerCacheEngineKey": LayerCacheEngineKey,
                      "get_size_bytes": get_size_bytes},
    "lmcache.v1": {},
    "lmcache.v1.config": {"LMCacheEngineConfig": LMCacheEngineConfig},
    "lmcache.v1.metadata": {"LMCacheMetadata": LMCacheMetadata},
    "lmcache.v1.memory_management": {"MemoryFormat": MemoryFormat, "MemoryObj": MemoryObj,
                                     "MemoryObjMetadata": MemoryObjMetadata, "TensorMemoryObj": TensorMemoryObj,
                                     "BytesBufferMemoryObj": BytesBufferMemoryObj},
    "lmcache.v1.protocol": {"init_remote_metadata_info": init_remote_metadata_info,
                            "get_remote_metadata_bytes": get_remote_metadata_bytes},
    "lmcache.v1.storage_backend": {},
    "lmcache.v1.storage_backend.local_cpu_backend": {"LocalCPUBackend": LocalCPUBackend},
    "lmcache.v1.storage_backend.connector": {"ConnectorAdapter": ConnectorAdapter, "ConnectorContext": ConnectorContext,
                                             "ConnectorManager": ConnectorManager, "CreateConnector": CreateConnector,
                                             "extract_plugin_type": extract_plugin_type},
    "lmcache.v1.storage_backend.connector.base_connector": {"RemoteConnector": RemoteConnector},
    "lmcache.v1.storage_backend.naive_serde": {"CreateSerde": CreateSerde},
    "lmcache.v1.storage_backend.remote_backend": {"RemoteBackend": RemoteBackend},
}


@contextlib.contextmanager
def installed(pre_refactor=False):
    """Make `import lmcache...` find this stand-in (the pre-refactor
    connector base with pre_refactor) and yield dfkv.lmcache imported
    afresh against it; on exit everything is put back."""
    saved = {name: sys.modules.get(name) for name in list(_MODULES) + ["dfkv.lmcache"]}
    try:
        for name, attrs in _MODULES.items():
            mod = types.ModuleType(name)
            mod.__path__ = []  # a package, so submodules resolve
            mod.__dict__.update(attrs)
            if pre_refactor and name.endswith("base_connector"):
                mod.RemoteConnector = PreRefactorRemoteConnector
            sys.modules[name] = mod
        sys.modules.pop("dfkv.lmcache", None)
        yield importlib.import_module("dfkv.lmcache")
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
        import dfkv
        if saved["dfkv.lmcache"] is not None:
            dfkv.lmcache = saved["dfkv.lmcache"]
