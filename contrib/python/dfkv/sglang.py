"""SGLang HiCache storage backend on dfkv (layout ``sglang-hicache/raw-v1``).

Interface verified against sgl-project/sglang
``python/sglang/srt/mem_cache/hicache_storage.py`` (HiCacheStorage,
HiCacheStorageConfig; the HiCacheFile reference backend) and
``python/sglang/srt/mem_cache/storage/backend_factory.py`` (the "dynamic"
backend is built as ``backend_class(storage_config, kwargs)``, then
``register_mem_pool_host`` is called); zero-copy page meta follows the host
pools' ``get_page_buffer_meta(indices) -> (ptr_list, size_list)`` as the
Mooncake backend uses it. When sglang is importable, DfkvHiCacheStorage
subclasses the real HiCacheStorage; otherwise a local shim with the same
method names and defaults stands in, so this module always imports.

Launch (README):

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "dfkv",
         "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
         "dfkv_members": "10.0.0.1:7600,10.0.0.2:7600", "dfkv_tenant": "team-a"}'

Identity. The namespace is a canonical descriptor: tenant, model_name,
``dfkv_model_revision``, this layout ID, the host pool's dtype, page size,
layer geometry, ``dfkv_group`` and the dp/tp/cp/pp sizes; the layout
fingerprint hashes the host pool's memory layout and per-rank page shape.
Each page is one object: ObjectKey(pool="kv", hash=<SGLang page hash>,
dp/tp/pcp/pp coordinates (tp rank -1 = replicated for MLA), component="page")
whose bytes are the flat data page exactly as HostKVCache.get_data_page(
flat=True) lays it out. The v1 zero-copy path writes/reads the same bytes
straight from the page's buffers (one batch scatter-gather call) when the
pool's component order is the flat order (page_first, page_first_direct, or
one component per page); other layouts go through get_data_page /
set_from_flat_data_page.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, List, Optional

from ._common import RawBuffer, dtype_name, escape_key_part, setting
from .client import Client
from .errors import DfkvError, Status, status_name
from .identity import LAYOUT_SGLANG_HICACHE, LayerGeometry, NamespaceDescriptor, ObjectKey, TopologySizes, layout_fingerprint

logger = logging.getLogger(__name__)

try:  # pragma: no cover - depends on the environment
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _HiCacheStorageBase
    SGLANG_AVAILABLE = True
except ImportError:
    SGLANG_AVAILABLE = False

    class _HiCacheStorageBase:  # type: ignore[no-redef]
        """Shim of sglang's HiCacheStorage (same method names and defaults)."""

        def register_mem_pool_host(self, mem_pool_host: Any) -> None:
            self.mem_pool_host = mem_pool_host

        def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
            for i, k in enumerate(keys):
                if not self.exists(k):
                    return i
            return len(keys)

        def clear(self) -> None:
            pass

        def get_stats(self):
            return None

# Memory layouts of SGLang's host pools; the code is identity (fingerprint).
_LAYOUT_CODES = {"layer_first": 0, "page_first": 1, "page_first_direct": 2, "page_head": 3}
# Layouts whose get_page_buffer_meta components, concatenated in order, are
# exactly the flat data page.
_FLAT_IS_META_ORDER = ("page_first", "page_first_direct")


class DfkvHiCacheStorage(_HiCacheStorageBase):
    """HiCacheStorage on dfkv. Keys are SGLang's page hashes (strings).

    extra_config settings (env fallback): dfkv_members ($DFKV_MEMBERS),
    dfkv_tenant ("default"), dfkv_model_revision (""), dfkv_group (""),
    dfkv_timeout_ms, dfkv_batch_concurrency, dfkv_library ($DFKV_LIBRARY).
    Without a registered host pool the geometry must be given as dfkv_dtype,
    dfkv_page_size, dfkv_layers, dfkv_kv_heads, dfkv_head_dim and
    dfkv_mem_layout.
    """

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        self.storage_config = storage_config
        self.extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.members = setting(self.extra, "dfkv_members", "DFKV_MEMBERS")
        if not self.members:
            raise ValueError("dfkv HiCache backend: no members; set extra_config dfkv_members "
                             "(\"host:port,host:port\") or $DFKV_MEMBERS")
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        c = storage_config
        tp_size, tp_rank = int(getattr(c, "tp_size", 1)), int(getattr(c, "tp_rank", 0))
        self._coords = dict(
            dp=(int(getattr(c, "dp_size", 1) or 1), int(getattr(c, "dp_rank", 0) or 0)),
            # MLA's latent cache is the same on every TP rank: one shared object.
            tp=(tp_size, -1 if self.is_mla else tp_rank),
            pcp=(int(getattr(c, "attn_cp_size", 1) or 1), int(getattr(c, "attn_cp_rank", 0) or 0)),
            dcp=(1, 0),
            pp=(int(getattr(c, "pp_size", 1) or 1), int(getattr(c, "pp_rank", 0) or 0)),
        )
        self._lock = threading.Lock()
        self._client: Optional[Client] = None
        self.mem_pool_host = None
        self.counters = {"get_pages": 0, "get_hits": 0, "set_pages": 0, "set_ok": 0, "exists_queries": 0}
        pool = (kwargs or {}).get("mem_pool_host") if isinstance(kwargs, dict) else None
        if pool is not None:
            self.register_mem_pool_host(pool)

    # -- identity --------------------------------------------------------

    def _geometry(self):
        pool = self.mem_pool_host
        e = self.extra
        if pool is not None:
            layout = getattr(pool, "layout", "layer_first")
            page_size = int(getattr(pool, "page_size"))
            layers = int(getattr(pool, "layer_num"))
            dtype = dtype_name(getattr(pool, "dtype"))
            if self.is_mla:
                kv_heads = 1
                head_dim = int(getattr(pool, "kv_cache_dim", 0) or
                               (int(getattr(pool, "kv_lora_rank")) + int(getattr(pool, "qk_rope_head_dim"))))
                rank_heads = 1
            else:
                rank_heads = int(getattr(pool, "head_num"))
                head_dim = int(getattr(pool, "head_dim"))
                kv_heads = rank_heads * self._coords["tp"][0]  # model-level heads
            per_token = getattr(pool, "get_size_per_token", None)
            page_bytes = int(per_token()) * page_size if callable(per_token) else 0
        else:
            need = ("dfkv_dtype", "dfkv_page_size", "dfkv_layers", "dfkv_kv_heads", "dfkv_head_dim")
            missing = [k for k in need if k not in e]
            if missing:
                raise RuntimeError(f"dfkv HiCache backend: no host pool registered and extra_config lacks {missing}; "
                                   "the namespace needs the KV geometry")
            layout = e.get("dfkv_mem_layout", "layer_first")
            page_size, layers = int(e["dfkv_page_size"]), int(e["dfkv_layers"])
            kv_heads, head_dim, dtype = int(e["dfkv_kv_heads"]), int(e["dfkv_head_dim"]), str(e["dfkv_dtype"])
            rank_heads = kv_heads if self.is_mla else max(1, kv_heads // self._coords["tp"][0])
            page_bytes = int(e.get("dfkv_page_bytes", 0))
        if layout not in _LAYOUT_CODES:
            raise RuntimeError(f"dfkv HiCache backend: unknown host memory layout {layout!r}")
        return layout, page_size, layers, kv_heads, head_dim, rank_heads, dtype, page_bytes

    def namespace(self) -> NamespaceDescriptor:
        layout, page_size, layers, kv_heads, head_dim, rank_heads, dtype, page_bytes = self._geometry()
        c = self.storage_config
        fp = layout_fingerprint([
            ("mem_layout", [_LAYOUT_CODES[layout]]),
            ("is_mla", [int(self.is_mla)]),
            ("page_tokens", [page_size]),
            ("rank_page_shape", [layers, rank_heads, head_dim]),
            ("page_bytes", [page_bytes]),
        ])
        return NamespaceDescriptor(
            tenant=str(setting(self.extra, "dfkv_tenant", None, "default")),
            model_id=str(getattr(c, "model_name", None) or setting(self.extra, "dfkv_model_id")),
            model_revision=str(setting(self.extra, "dfkv_model_revision", None, "")),
            layout_id=LAYOUT_SGLANG_HICACHE, dtype=dtype, layout_fingerprint=fp, block_tokens=page_size,
            layer_geometry=LayerGeometry(layers, kv_heads, head_dim),
            group=str(setting(self.extra, "dfkv_group", None, "")),
            topology_sizes=TopologySizes(dp=self._coords["dp"][0], tp=self._coords["tp"][0],
                                         pcp=self._coords["pcp"][0], dcp=1, pp=self._coords["pp"][0]),
        )

    def object_key(self, key: str) -> bytes:
        return ObjectKey(pool="kv", hash=escape_key_part(key), component="page", **self._coords).render_bytes()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                e = self.extra
                self._client = Client(self.members, self.namespace(),
                                      timeout_ms=int(e.get("dfkv_timeout_ms", 0)),
                                      batch_concurrency=int(e.get("dfkv_batch_concurrency", 0)),
                                      library=setting(e, "dfkv_library", "DFKV_LIBRARY"))
            return self._client

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        with self._lock:  # the namespace depends on the pool's geometry
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- HiCacheStorage --------------------------------------------------

    @staticmethod
    def _nbytes(t: Any) -> int:
        n = getattr(t, "nbytes", None)
        if n is not None:
            return int(n)
        if hasattr(t, "element_size"):
            return int(t.element_size() * t.numel())
        return memoryview(t).nbytes

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """Read a page into target_location (a flat page tensor); None on a
        miss or when the stored page is not exactly that size."""
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        okeys = [self.object_key(k) for k in keys]
        self.counters["get_pages"] += len(keys)
        if target_locations is None:
            out = self.client.batch_get(okeys)
            self.counters["get_hits"] += sum(v is not None for v in out)
            return out
        st, stored = self.client.batch_get_into(okeys, list(target_locations))
        out = []
        for t, s, n in zip(target_locations, st, stored):
            ok = s == Status.OK and n == self._nbytes(t)
            out.append(t if ok else None)
        self.counters["get_hits"] += sum(v is not None for v in out)
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], None if value is None else [value],
                              None if target_location is None else [target_location])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Store one page per key, from values or, when the caller passes
        the pages as target_locations instead, from those. False (and a
        warning) when nothing to store was given or a page was refused; the
        storage interface answers with a bool, never an exception."""
        pages = values if values is not None else target_locations
        if pages is None:
            logger.warning("dfkv HiCache: batch_set of %d keys without values or target_locations; nothing stored", len(keys))
            return False
        okeys = [self.object_key(k) for k in keys]
        try:
            st = self.client.batch_put(okeys, list(pages))
        except (TypeError, ValueError, DfkvError) as e:  # a page the client cannot read
            logger.warning("dfkv HiCache: batch_set of %d keys refused: %s", len(keys), e)
            return False
        self.counters["set_pages"] += len(keys)
        self.counters["set_ok"] += sum(s == Status.OK for s in st)
        failed = [status_name(s) for s in st if s != Status.OK]
        if failed:
            logger.warning("dfkv HiCache: %d of %d pages not stored (%s)", len(failed), len(keys), ", ".join(sorted(set(failed))))
        return not failed

    def exists(self, key: str) -> bool:
        return self.client.exists(self.object_key(key))

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """Consecutive stored pages from keys[0], one parallel dfkv_exist_prefix."""
        self.counters["exists_queries"] += 1
        return self.client.exist_prefix([self.object_key(k) for k in keys])

    def _page_meta(self, keys: List[str], host_indices: Any):
        pool = self.mem_pool_host
        if pool is None:
            raise RuntimeError("dfkv HiCache backend: batch_get_v1/batch_set_v1 need register_mem_pool_host first")
        layout = getattr(pool, "layout", "layer_first")
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys):
            raise RuntimeError(f"dfkv HiCache backend: {len(ptrs)} page buffers for {len(keys)} keys")
        per = len(ptrs) // len(keys)
        if per > 1 and layout not in _FLAT_IS_META_ORDER:
            return None  # component order differs from the flat page: copy path
        items = [[RawBuffer(ptrs[i * per + j], sizes[i * per + j]) for j in range(per)] for i in range(len(keys))]
        return items

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Read pages straight into the host pool slots of host_indices."""
        items = self._page_meta(keys, host_indices)
        self.counters["get_pages"] += len(keys)
        if items is None:
            return self._batch_get_v1_copy(keys, host_indices)
        st, stored = self.client.batch_get_sg([self.object_key(k) for k in keys], items)
        out = [s == Status.OK and n == sum(b.nbytes for b in it) for s, n, it in zip(st, stored, items)]
        self.counters["get_hits"] += sum(out)
        return out

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Write pages straight from the host pool slots of host_indices."""
        items = self._page_meta(keys, host_indices)
        self.counters["set_pages"] += len(keys)
        if items is None:
            return self._batch_set_v1_copy(keys, host_indices)
        st = self.client.batch_put_sg([self.object_key(k) for k in keys], items)
        out = [s == Status.OK for s in st]
        self.counters["set_ok"] += sum(out)
        return out

    def _page_index(self, host_indices: Any, i: int) -> int:
        ps = int(getattr(self.mem_pool_host, "page_size", 1) or 1)
        v = host_indices[i * ps]
        return int(v.item() if hasattr(v, "item") else v)

    def _batch_get_v1_copy(self, keys: List[str], host_indices: Any) -> List[bool]:
        pool = self.mem_pool_host
        pages = [pool.get_dummy_flat_data_page() for _ in keys]
        got = self.batch_get(keys, pages)
        out = []
        for i, page in enumerate(got):
            if page is not None:
                pool.set_from_flat_data_page(self._page_index(host_indices, i), page)
            out.append(page is not None)
        return out

    def _batch_set_v1_copy(self, keys: List[str], host_indices: Any) -> List[bool]:
        pool = self.mem_pool_host
        pages = [pool.get_data_page(self._page_index(host_indices, i), flat=True).contiguous() for i in range(len(keys))]
        st = self.client.batch_put([self.object_key(k) for k in keys], pages)
        out = [s == Status.OK for s in st]
        self.counters["set_ok"] += sum(out)
        return out

    def clear(self) -> bool:
        """dfkv cannot enumerate a namespace (the nodes see only hashed
        BlockKeys), so clear is a logged no-op returning False."""
        logger.warning("dfkv HiCache backend: clear() is not supported; blocks age out by eviction")
        return False

    def get_stats(self):
        """None, as the base class: SGLang's storage metrics object is not
        built here. Counters are in self.counters."""
        return None

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
