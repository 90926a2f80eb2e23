"""A stand-in for the parts of SGLang that drive a HiCache storage backend.

Written here from a reading of sgl-project/sglang, commit 001067fffe33 (the
newest stored version of these files; it has PoolName's DeepSeek-V4 and
draft pools, HiCacheStorageConfig.dp_rank/dp_size and the KVCC backend):

  python/sglang/srt/mem_cache/hicache_storage.py
      HiCacheStorageConfig, HiCacheStorageExtraInfo, PoolName,
      PoolHitPolicy, PoolTransfer, PoolTransferResult, count_pool_hits,
      STORAGE_BATCH_SIZE and the HiCacheStorage base (v1/v2 methods raise
      NotImplementedError; get/batch_get/set/batch_set/exists abstract).
  python/sglang/srt/mem_cache/storage/backend_factory.py
      the "dynamic" backend: extra_config names backend_name, module_path
      and class_name; the class must subclass HiCacheStorage and is built
      as backend_class(storage_config, kwargs) with kwargs == {}.
  python/sglang/srt/managers/cache_controller.py
      attach: create_backend, then register_mem_pool_host(host pool); the
      zero-copy page functions only when extra_config["interface_v1"] is
      true; prefetch: batch_exists per STORAGE_BATCH_SIZE pages, then
      batch_get_v1 per batch, counting the leading successes; backup:
      all(batch_set_v1(...)) per batch, stopping at the first failure. The
      storage threads catch queue.Empty only and are never restarted, so an
      exception out of the backend ends that thread for the process's life.
  python/sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py
      every host pool entry (KV anchor included) is passed to
      register_mem_host_pool_v2; prefetch asks batch_exists_v2 when a
      request carries extra pools; KV-derived sidecars are read with
      batch_get_v2 inside each KV batch, the others after the KV pages,
      trailing-page pools re-keyed to the last pages actually hit; backup
      writes the extra pools with batch_set_v2 before the KV pages, and on
      MLA TP ranks other than 0 (whose KV backup is skipped) still writes
      the TP-sharded Mamba state.
  python/sglang/srt/mem_cache/pool_host/base.py
      HostKVCache keeps device_pool.store_dtype as its dtype (uint8 for
      the fp8 formats) and the device pool, whose dtype names the format.
  python/sglang/srt/mem_cache/pool_host/mha.py, mla.py, mamba.py
      host pool buffers per layout (layer_first, page_first,
      page_first_direct, page_head, page_first_kv_split),
      get_page_buffer_meta(indices) -> (ptrs, sizes) and the flat data page
      of get_data_page(flat=True) / set_from_flat_data_page.
  python/sglang/srt/metrics/collector.py
      StorageMetrics (four lists) and log_storage_metrics, which asserts
      isinstance(get_stats(), StorageMetrics) when metrics are on.

Only the behaviour a backend can observe is reproduced: no GPU, no TP
all-reduce, no radix tree. Host memory is ctypes memory; index tensors are
torch tensors when torch is importable, else a small tensor-like class.
install() puts these classes under their upstream module names in
sys.modules so the connector imports them as it would import SGLang.
"""

from __future__ import annotations

import ctypes
import importlib
import queue
import sys
import threading
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

STORAGE_BATCH_SIZE = 128


# ------------------------------------------------------ hicache_storage.py

@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class PoolName(str, Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DRAFT = "draft"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: PoolName
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: Dict[str, int]


def count_pool_hits(results: Dict[str, List[bool]]) -> Dict[str, int]:
    return {name: (rs.index(False) if False in rs else len(rs)) for name, rs in results.items()}


class HiCacheStorage(ABC):
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None) -> PoolTransferResult:
        raise NotImplementedError()

    def batch_get_v2(self, transfers, extra_info=None) -> Dict[str, List[bool]]:
        raise NotImplementedError()

    def batch_set_v2(self, transfers, extra_info=None) -> Dict[str, List[bool]]:
        raise NotImplementedError()

    def batch_get_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        raise NotImplementedError()

    def batch_set_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        raise NotImplementedError()

    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None):
        pass

    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        pass

    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        pass

    @abstractmethod
    def exists(self, key) -> bool:
        pass

    def batch_exists(self, keys, extra_info=None) -> int:
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None


# ---------------------------------------------------- metrics/collector.py

@dataclass
class StorageMetrics:
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


class StorageMetricsCollector:
    """What log_storage_metrics reads (the Prometheus histograms are lists)."""

    def __init__(self):
        self.observed = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [], "backup_bandwidth": []}

    def log_storage_metrics(self, storage_metrics=None):
        if storage_metrics is None:
            return
        assert isinstance(storage_metrics, StorageMetrics)
        for name, seen in self.observed.items():
            seen.extend(getattr(storage_metrics, name))


# ---------------------------------------------------- backend_factory.py

class StorageBackendFactory:
    @classmethod
    def create_backend(cls, backend_name, storage_config, mem_pool_host, **kwargs):
        if backend_name == "dynamic" and storage_config.extra_config is not None:
            cfg = storage_config.extra_config
            for f in ("backend_name", "module_path", "class_name"):
                if f not in cfg:
                    raise ValueError(f"Missing required field '{f}' in backend config for 'dynamic' backend")
            module = importlib.import_module(cfg["module_path"])
            backend_class = getattr(module, cfg["class_name"])
            if not issubclass(backend_class, HiCacheStorage):
                raise TypeError(f"Backend class {cfg['class_name']} must inherit from HiCacheStorage")
            return backend_class(storage_config, kwargs)
        raise ValueError(f"Unknown storage backend '{backend_name}'")


# ----------------------------------------------------------- index tensors

class _Scalar(int):
    def item(self):
        return int(self)


class Indices:
    """What a backend touches of a CPU int64 index tensor."""

    def __init__(self, values):
        self._v = [int(x) for x in values]

    def tolist(self):
        return list(self._v)

    def numel(self):
        return len(self._v)

    def __len__(self):
        return len(self._v)

    def __iter__(self):
        return iter(_Scalar(x) for x in self._v)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Indices(self._v[i])
        return _Scalar(self._v[i])


def indices(values):
    values = list(values)
    if torch is not None:
        return torch.tensor(values, dtype=torch.int64)
    return Indices(values)


def page_indices(pages, page_size):
    """Token indices of whole host pages, as the controller allocates them."""
    return indices([p * page_size + t for p in pages for t in range(page_size)])


# ----------------------------------------------------------- host pools

class _Memory:
    def __init__(self, nbytes):
        self.buf = (ctypes.c_char * max(nbytes, 1))()
        self.base = ctypes.addressof(self.buf)
        self.nbytes = nbytes

    def read(self, off, n):
        return ctypes.string_at(self.base + off, n)

    def write(self, off, data):
        ctypes.memmove(self.base + off, bytes(data), len(data))


_PATTERN = bytes(range(251)) * 2


def pattern(seed, n):
    """n bytes of a repeating pattern that differs per seed."""
    s = seed % 251
    reps = _PATTERN[s:s + 251] * (n // 251 + 1)
    return reps[:n]


def _flat_offsets(dims, fixed):
    """Byte-row offsets (in rows of the last dim) of a sub-block, in C order.
    dims: sizes of the buffer's dims except the last; fixed: per dim a
    range of indices taken (the slice get_data_page takes)."""
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    out = [0]
    for d, r in enumerate(fixed):
        out = [o + j * strides[d] for o in out for j in r]
    return out


class KVHostPool:
    """MHATokenToKVPoolHost (planes=2: K then V) or MLATokenToKVPoolHost
    (planes=1, one kv_cache_dim row per token and layer) with upstream's
    buffer dims per layout, get_page_buffer_meta and flat data page."""

    def __init__(self, layout="page_first", pages=8, page_size=4, layers=2, heads=2, head_dim=4, itemsize=2,
                 dtype="bfloat16", mla=False, kv_lora_rank=6, qk_rope_head_dim=2):
        self.layout, self.page_size, self.layer_num = layout, page_size, layers
        self.page_num, self.size = pages, pages * page_size
        # HostKVCache: self.dtype = device_pool.store_dtype, which KVCache
        # makes uint8 for the fp8 formats (stored as bytes).
        store = "uint8" if str(dtype).startswith("float8") else dtype
        self.device_pool = types.SimpleNamespace(dtype=dtype, store_dtype=store)
        self.dtype, self.itemsize, self.mla = store, itemsize, mla
        if mla:
            self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
            self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
            self.planes, self.heads, self.dim = 1, 1, self.kv_cache_dim
        else:
            self.head_num, self.head_dim = heads, head_dim
            self.planes, self.heads, self.dim = 2, heads, head_dim
        self.row = self.dim * itemsize
        L, S, H, P, ps = layers, self.size, self.heads, pages, page_size
        if layout == "layer_first":
            self.dims = (L, S, H)
        elif layout == "page_first":
            self.dims = (S, L, H)
        elif layout == "page_first_direct":
            self.dims = (P, L, ps, H)
        elif layout == "page_head" and not mla:
            self.dims = (P, H, ps, L)
        elif layout == "page_first_kv_split" and mla:
            self.dims = None
        else:
            raise ValueError(f"Unsupported layout: {layout}")
        if self.dims is None:  # separate K (lora) and V (rope) buffers
            self.k_mem = _Memory(P * L * ps * kv_lora_rank * itemsize)
            self.v_mem = _Memory(P * L * ps * qk_rope_head_dim * itemsize)
        else:
            self.plane_rows = 1
            for d in self.dims:
                self.plane_rows *= d
            self.mem = _Memory(self.planes * self.plane_rows * self.row)

    def get_size_per_token(self):
        return self.dim * self.heads * self.layer_num * self.itemsize * self.planes

    def _page_rows(self, index):
        L, H, ps = self.layer_num, self.heads, self.page_size
        p = index // ps
        if self.layout == "layer_first":
            fixed = (range(L), range(index, index + ps), range(H))
        elif self.layout == "page_first":
            fixed = (range(index, index + ps), range(L), range(H))
        elif self.layout == "page_first_direct":
            fixed = (range(p, p + 1), range(L), range(ps), range(H))
        else:  # page_head
            fixed = (range(p, p + 1), range(H), range(ps), range(L))
        rows = _flat_offsets(self.dims, fixed)
        return [plane * self.plane_rows + r for plane in range(self.planes) for r in rows]

    def get_data_page(self, index, flat=True):
        if self.dims is None:
            raise ValueError(f"Unsupported layout: {self.layout}")
        return bytearray(b"".join(self.mem.read(r * self.row, self.row) for r in self._page_rows(int(index))))

    def get_dummy_flat_data_page(self):
        return bytearray(self.page_size * self.get_size_per_token())

    def set_from_flat_data_page(self, index, data_page):
        if self.dims is None:
            raise ValueError(f"Unsupported layout: {self.layout}")
        data = bytes(memoryview(data_page).cast("B")) if not hasattr(data_page, "numpy") else data_page.numpy().tobytes()
        for i, r in enumerate(self._page_rows(int(index))):
            self.mem.write(r * self.row, data[i * self.row:(i + 1) * self.row])

    def get_page_buffer_meta(self, idx):
        assert len(idx) % self.page_size == 0
        idx = idx.tolist()
        ptrs, sizes = [], []
        L, H, ps, row = self.layer_num, self.heads, self.page_size, self.row
        if self.dims is None:
            kb, vb = self.kv_lora_rank * self.itemsize, self.qk_rope_head_dim * self.itemsize
            for i in range(0, len(idx), ps):
                ptrs += [self.k_mem.base + idx[i] * L * kb, self.v_mem.base + idx[i] * L * vb]
                sizes += [L * ps * kb, L * ps * vb]
            return ptrs, sizes
        v_off = self.plane_rows * row
        for i in range(0, len(idx), ps):
            if self.layout == "layer_first":
                for layer in range(L):
                    k = self.mem.base + (layer * self.size + idx[i]) * H * row
                    ptrs += [k, k + v_off] if self.planes == 2 else [k]
                    sizes += [ps * H * row] * self.planes
            else:
                k = self.mem.base + idx[i] * L * H * row
                ptrs += [k, k + v_off] if self.planes == 2 else [k]
                sizes += [L * ps * H * row] * self.planes
        return ptrs, sizes

    # -- test helpers: a page's bytes as stored (the flat page, or the
    # concatenated meta parts where no flat page exists).
    def fill(self, page, seed):
        for ptr, n in zip(*self.get_page_buffer_meta(page_indices([page], self.page_size))):
            ctypes.memmove(ptr, pattern(seed * 31 + ptr, n), n)

    def page_bytes(self, page):
        return b"".join(ctypes.string_at(p, n) for p, n in zip(*self.get_page_buffer_meta(page_indices([page], self.page_size))))


class MambaHostPool:
    """MambaPoolHost, page_first: page_size 1; per slot one temporal state
    then the conv states, each (layers, 1, *shape) contiguous."""

    layout = "page_first"
    page_size = 1

    def __init__(self, slots=8, layers=2, temporal=12, convs=(6, 4), itemsize=2):
        self.num_mamba_layers, self.size = layers, slots
        self.dtype = "bfloat16"
        self.parts = [layers * temporal * itemsize] + [layers * c * itemsize for c in convs]
        self.mems = [_Memory(slots * n) for n in self.parts]

    def get_size_per_token(self):
        return sum(self.parts)

    def get_page_buffer_meta(self, idx):
        ptrs, sizes = [], []
        for i in idx.tolist():
            for m, n in zip(self.mems, self.parts):
                ptrs.append(m.base + i * n)
                sizes.append(n)
        return ptrs, sizes

    def get_data_page(self, index, flat=True):
        return bytearray(b"".join(m.read(int(index) * n, n) for m, n in zip(self.mems, self.parts)))

    def fill(self, slot, seed):
        for m, n in zip(self.mems, self.parts):
            m.write(slot * n, pattern(seed * 17 + n, n))

    def page_bytes(self, slot):
        return bytes(self.get_data_page(slot))


class IndexerHostPool:
    """A DSA-style indexer sidecar (page_first): one part per KV page,
    addressed by the KV pool's host indices."""

    layout = "page_first"

    def __init__(self, pages=8, page_size=4, layers=2, dim=8, itemsize=1):
        self.page_size, self.layer_num, self.dtype = page_size, layers, "uint8"
        self.per_token = layers * dim * itemsize
        self.mem = _Memory(pages * page_size * self.per_token)

    def get_size_per_token(self):
        return self.per_token

    def get_page_buffer_meta(self, idx):
        idx = idx.tolist()
        ptrs = [self.mem.base + idx[i] * self.per_token for i in range(0, len(idx), self.page_size)]
        return ptrs, [self.page_size * self.per_token] * len(ptrs)

    def fill(self, page, seed):
        n = self.page_size * self.per_token
        self.mem.write(page * n, pattern(seed * 7 + 3, n))

    def page_bytes(self, page):
        n = self.page_size * self.per_token
        return self.mem.read(page * n, n)


@dataclass
class PoolEntry:
    name: PoolName
    host_pool: Any


# ---------------------------------------------------- cache_controller.py

@dataclass
class StorageOp:
    hash_value: List[str]
    host_indices: Any = None
    pool_transfers: Optional[List[PoolTransfer]] = None
    completed_tokens: int = 0
    pool_hits: Dict[str, int] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


class HiCacheController:
    """attach_storage_backend and the prefetch / backup threads. The
    scheduler's hand-off between the hit query and the transfer (TP
    all-reduce, host allocation) is the caller's: prefetch_query() then
    prefetch_load() with the host indices it chose."""

    def __init__(self, mem_pool_host, storage_backend="dynamic", extra_config=None, model_name="m",
                 tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, dp_rank=0, dp_size=1, is_mla=False,
                 enable_storage_metrics=False):
        self.mem_pool_host = self.storage_host_pool = mem_pool_host
        self.page_size = mem_pool_host.page_size
        self.storage_config = HiCacheStorageConfig(
            tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=is_mla, enable_storage_metrics=enable_storage_metrics,
            is_page_first_layout=mem_pool_host.layout == "page_first", model_name=model_name,
            dp_rank=dp_rank, dp_size=dp_size, extra_config=dict(extra_config or {}))
        self.backup_skip = is_mla and tp_rank != 0
        self.storage_backend_type = storage_backend
        self.stop_event = threading.Event()
        self.attach_storage_backend(storage_backend)

    def attach_storage_backend(self, storage_backend, host_pools=None):
        self.storage_backend = StorageBackendFactory.create_backend(storage_backend, self.storage_config,
                                                                    self.storage_host_pool)
        self.storage_backend.register_mem_pool_host(self.storage_host_pool)
        self.page_get_func, self.page_set_func = self._generic_page_get, self._generic_page_set
        if storage_backend == "dynamic" and bool(self.storage_config.extra_config.get("interface_v1", 0)):
            self.page_get_func, self.page_set_func = self._page_get_zero_copy, self._page_set_zero_copy
        self.query_queue, self.load_queue, self.backup_queue = queue.Queue(), queue.Queue(), queue.Queue()
        self.threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
                        for f in (self.prefetch_thread_func, self.prefetch_io_aux_func, self.backup_thread_func)]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=5)

    def threads_alive(self):
        return [t.name for t in self.threads if t.is_alive()]

    # -- page functions
    def _page_get_zero_copy(self, op, hashes, host_indices, extra_info=None):
        results = self.storage_backend.batch_get_v1(hashes, host_indices, extra_info)
        inc = 0
        for i in range(len(hashes)):
            if not results[i]:
                break
            inc += 1
        return inc

    def _generic_page_get(self, op, hashes, host_indices, extra_info=None):
        dst = [self.storage_host_pool.get_dummy_flat_data_page() for _ in hashes]
        data = self.storage_backend.batch_get(hashes, dst)
        if data is None:
            return 0
        count = 0
        for i in range(len(hashes)):
            if data[i] is None:
                break
            self.storage_host_pool.set_from_flat_data_page(host_indices[i * self.page_size], data[i])
            count += 1
        return count

    def _generic_page_set(self, hashes, host_indices, extra_info=None):
        data = [self.storage_host_pool.get_data_page(host_indices[i * self.page_size]) for i in range(len(hashes))]
        return self.storage_backend.batch_set(hashes, data)

    def _page_set_zero_copy(self, hashes, host_indices, extra_info=None):
        return all(self.storage_backend.batch_set_v1(hashes, host_indices, extra_info))

    # -- prefetch
    def prefetch_query(self, op: StorageOp):
        self.query_queue.put(op)

    def prefetch_load(self, op: StorageOp):
        self.load_queue.put(op)

    def _storage_hit_query(self, op):
        hits = []
        for start in range(0, len(op.hash_value), STORAGE_BATCH_SIZE):
            batch = op.hash_value[start:start + STORAGE_BATCH_SIZE]
            n = self.storage_backend.batch_exists(batch, HiCacheStorageExtraInfo())
            hits.extend(batch[:n])
            if n < len(batch):
                break
        return hits

    def prefetch_thread_func(self):
        while not self.stop_event.is_set():
            try:
                op = self.query_queue.get(block=True, timeout=0.2)
                op.hash_value = self._storage_hit_query(op)
                op.done.set()
            except queue.Empty:
                continue

    def _page_transfer_kv_batch(self, op, hashes, host_indices, extra_info, kv_derived):
        kv_hits = self.page_get_func(op, hashes, host_indices, extra_info)
        sidecar = {}
        if kv_derived:
            res = self.storage_backend.batch_get_v2(
                [PoolTransfer(name=t.name, host_indices=host_indices, keys=hashes) for t in kv_derived])
            sidecar = count_pool_hits(res)
        return min([kv_hits, *sidecar.values()])

    def _page_transfer(self, op):
        kv_derived = [t for t in op.pool_transfers or [] if t.indices_from_pool == PoolName.KV]
        ok, done = True, 0
        for i in range(0, len(op.hash_value), STORAGE_BATCH_SIZE):
            if not ok:
                break
            batch = op.hash_value[i:i + STORAGE_BATCH_SIZE]
            idx = op.host_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            hit = self._page_transfer_kv_batch(op, batch, idx, HiCacheStorageExtraInfo(), kv_derived)
            ok = hit == len(batch)
            done += hit
        op.completed_tokens = done * self.page_size
        return done

    def prefetch_io_aux_func(self):
        while not self.stop_event.is_set():
            try:
                op = self.load_queue.get(block=True, timeout=0.2)
                self._page_transfer(op)
                op.done.set()
            except queue.Empty:
                continue

    # -- backup
    def write_storage(self, op: StorageOp):
        self.backup_queue.put(op)

    def _page_backup(self, op):
        for i in range(0, len(op.hash_value), STORAGE_BATCH_SIZE):
            batch = op.hash_value[i:i + STORAGE_BATCH_SIZE]
            idx = op.host_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            if not self.page_set_func(batch, idx, HiCacheStorageExtraInfo()):
                break
            op.completed_tokens += self.page_size * len(batch)

    def backup_thread_func(self):
        while not self.stop_event.is_set():
            try:
                op = self.backup_queue.get(block=True, timeout=0.2)
                if not self.backup_skip:
                    self._page_backup(op)
                op.done.set()
            except queue.Empty:
                continue


class HybridCacheController(HiCacheController):
    """hybrid_cache_controller.py: extra host pools ride the v2 calls."""

    def __init__(self, mem_pool_host, entries, **kw):
        self.entries = entries
        super().__init__(mem_pool_host, **kw)

    def attach_storage_backend(self, storage_backend, host_pools=None):
        super().attach_storage_backend(storage_backend)
        for entry in self.entries:
            self.storage_backend.register_mem_host_pool_v2(entry.host_pool, entry.name)

    def _storage_hit_query(self, op):
        if op.pool_transfers:
            res = self.storage_backend.batch_exists_v2(op.hash_value, op.pool_transfers, HiCacheStorageExtraInfo())
        else:
            res = PoolTransferResult(self.storage_backend.batch_exists(op.hash_value, HiCacheStorageExtraInfo()), {})
        return op.hash_value[:res.kv_hit_pages]

    def _page_transfer(self, op):
        done = super()._page_transfer(op)
        if op.pool_transfers and done == len(op.hash_value):
            nonkv = [t for t in op.pool_transfers if t.indices_from_pool != PoolName.KV]
            if nonkv:
                self._sync_trailing_keys(nonkv, op.hash_value, done)
                op.pool_hits = count_pool_hits(self.storage_backend.batch_get_v2(nonkv))
        return done

    def _sync_trailing_keys(self, transfers, all_hashes, kv_hit_pages):
        """Trailing-page pools read the state of the last N pages actually
        hit, not of the N pages the request first asked about."""
        pools = {e.name: e.host_pool for e in self.entries}
        for t in transfers:
            if t.hit_policy != PoolHitPolicy.TRAILING_PAGES:
                continue
            n = len(t.keys) if t.keys else 1
            t.keys = all_hashes[max(0, kv_hit_pages - n):kv_hit_pages]
            if t.host_indices is not None:
                needed = len(t.keys) * getattr(pools.get(t.name), "page_size", self.page_size)
                t.host_indices = t.host_indices[:needed]

    def should_backup(self, transfer):
        # MLA KV and its replicated sidecars are written by TP rank 0 only;
        # Mamba state is TP-sharded, so every rank writes its own.
        return not self.backup_skip or transfer.name == PoolName.MAMBA

    def _page_backup(self, op):
        transfers = [t for t in op.pool_transfers or [] if self.should_backup(t)]
        for t in op.pool_transfers or []:
            if t.indices_from_pool == PoolName.KV:
                t.host_indices = op.host_indices
                if t.keys is None:
                    t.keys = op.hash_value
        results = {}
        if transfers:
            results = self.storage_backend.batch_set_v2(transfers)
            op.pool_hits = count_pool_hits(results)
        if not self.backup_skip:
            super()._page_backup(op)
        else:
            ok = bool(transfers) and all(
                isinstance(results.get(t.name), (list, tuple)) and len(results[t.name]) == len(t.keys or [])
                and all(results[t.name]) for t in transfers)
            op.completed_tokens = len(op.hash_value) * self.page_size if ok else 0

    def backup_thread_func(self):
        # Unlike the base controller, non-zero MLA ranks still run the
        # backup: their TP-sharded sidecars need writing.
        while not self.stop_event.is_set():
            try:
                op = self.backup_queue.get(block=True, timeout=0.2)
                self._page_backup(op)
                op.done.set()
            except queue.Empty:
                continue


# ------------------------------------------------------------- install

_MODULES = {
    "sglang": {},
    "sglang.srt": {},
    "sglang.srt.mem_cache": {},
    "sglang.srt.mem_cache.hicache_storage": dict(
        STORAGE_BATCH_SIZE=STORAGE_BATCH_SIZE, HiCacheStorageConfig=HiCacheStorageConfig,
        HiCacheStorageExtraInfo=HiCacheStorageExtraInfo, PoolName=PoolName, PoolHitPolicy=PoolHitPolicy,
        PoolTransfer=PoolTransfer, PoolTransferResult=PoolTransferResult, count_pool_hits=count_pool_hits,
        HiCacheStorage=HiCacheStorage),
    "sglang.srt.mem_cache.storage": dict(StorageBackendFactory=StorageBackendFactory),
    "sglang.srt.mem_cache.storage.backend_factory": dict(StorageBackendFactory=StorageBackendFactory),
    "sglang.srt.metrics": {},
    "sglang.srt.metrics.collector": dict(StorageMetrics=StorageMetrics,
                                          StorageMetricsCollector=StorageMetricsCollector),
}


def install():
    """Put the stand-in under SGLang's module names; returns an undo."""
    saved = {name: sys.modules.get(name) for name in _MODULES}
    for name, attrs in _MODULES.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # a package, so submodule imports resolve
        sys.modules[name] = m

    def undo():
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return undo
