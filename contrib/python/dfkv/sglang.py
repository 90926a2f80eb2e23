"""SGLang HiCache storage backend on dfkv (layout ``sglang-hicache/raw-v1``).

Written against sgl-project/sglang as of commit 001067fffe33:
``python/sglang/srt/mem_cache/hicache_storage.py`` (HiCacheStorage with the
v1 zero-copy calls and the v2 hybrid-pool calls, PoolTransfer,
PoolTransferResult), ``.../mem_cache/storage/backend_factory.py`` (the
"dynamic" backend is built as ``backend_class(storage_config, kwargs)``,
then ``register_mem_pool_host`` is called), ``.../managers/
cache_controller.py`` and ``.../mem_cache/hybrid_cache/
hybrid_cache_controller.py`` (which calls are made, from which threads),
``.../mem_cache/pool_host/{mha,mla,mamba}.py`` (``get_page_buffer_meta``
and the flat data page per layout) and ``.../metrics/collector.py``
(StorageMetrics). When sglang is importable the classes here subclass the
real HiCacheStorage and StorageMetrics; otherwise local shims with the same
names stand in, so this module always imports.

Launch (README):

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-mem-layout page_first --hicache-io-backend kernel \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "dfkv",
         "module_path": "dfkv.sglang", "class_name": "DfkvHiCacheStorage",
         "interface_v1": 1,
         "dfkv_mds": "10.0.0.9:7700", "dfkv_tenant": "team-a"}'

``"interface_v1": 1`` is what makes SGLang's controller call batch_get_v1 /
batch_set_v1 (pages straight between dfkv and the host pool) for a dynamic
backend; without it SGLang takes its generic path, one extra copy per page,
and this backend logs a warning. ``dfkv_mds`` (or $DFKV_CLIENT_MDS) finds the
nodes through an MDS and follows node changes without a restart;
``dfkv_members`` (or $DFKV_CLIENT_MEMBERS) is a static list, used alone or as the
fallback when the MDS cannot be reached at open. Nodes that require
credentials take a token: ``dfkv_token``, else $DFKV_CLIENT_TOKEN (or
$DFKV_TOKEN); the environment keeps it out of the server arguments SGLang
prints at start-up. Nodes serving TLS take ``dfkv_tls`` (1), ``dfkv_tls_ca``
and, for mutual TLS, ``dfkv_tls_cert`` and ``dfkv_tls_key`` (or
$DFKV_CLIENT_TLS, $DFKV_CLIENT_TLS_CA, ...).

Identity. The namespace is a canonical descriptor: tenant, model_name,
``dfkv_model_revision``, this layout ID, the host pool's dtype, page size,
layer geometry, ``dfkv_group`` and the tp/cp/pp sizes; the layout
fingerprint hashes the host pool's memory layout and per-rank page shape.
Attention-DP replicas hold the same pages for the same tokens, so the DP
rank and size are in neither the namespace nor the key: replicas share.
Each page is one object: ObjectKey(pool=<pool name>, hash=<SGLang page
hash>, tp/pcp/pp coordinates (tp rank -1 = replicated for MLA), component)
whose bytes are the host pool's flat data page (get_data_page(flat=True)).
The zero-copy path reads and writes the same bytes straight from the
page's buffers in one batch scatter-gather call when the pool's
get_page_buffer_meta parts, in order, are the flat page (page_first,
page_first_direct, page_head; page_first_kv_split, which has no flat page,
stores its parts concatenated); layer_first goes through get_data_page /
set_from_flat_data_page. Extra pools of hybrid models (Mamba, SWA, indexer,
draft) get their own pool name and a component naming their page shape.

Failures. Every call SGLang's prefetch and backup threads make answers a
miss / False per page on any failure (a node down, killed mid-transfer, an
MDS unreachable, a page of the wrong size) and never raises: those threads
catch nothing else and are never restarted. A stored page whose size is not
the page's is refused as a miss with one log line per batch.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._common import ClientSlot, Endpoints, RawBuffer, dtype_name, escape_key_part, setting
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

        def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
            if not hasattr(self, "registered_pools"):
                self.registered_pools = {}
            self.registered_pools[host_pool_name] = host_pool

        def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
            for i, k in enumerate(keys):
                if not self.exists(k):
                    return i
            return len(keys)

        def clear(self) -> None:
            pass

        def get_stats(self):
            return None

try:  # pragma: no cover - depends on the environment
    from sglang.srt.mem_cache.hicache_storage import PoolTransferResult
except ImportError:
    @dataclass
    class PoolTransferResult:  # type: ignore[no-redef]
        """Shim of sglang's batch_exists_v2 answer."""

        kv_hit_pages: int
        extra_pool_hit_pages: Dict[str, int]

try:  # pragma: no cover - depends on the environment
    from sglang.srt.metrics.collector import StorageMetrics as _StorageMetricsBase
except Exception:  # ImportError, or a collector that cannot import here
    @dataclass
    class _StorageMetricsBase:  # type: ignore[no-redef]
        """Shim of sglang's StorageMetrics (the four lists it logs)."""

        prefetch_pgs: List[int] = field(default_factory=list)
        backup_pgs: List[int] = field(default_factory=list)
        prefetch_bandwidth: List[float] = field(default_factory=list)
        backup_bandwidth: List[float] = field(default_factory=list)


@dataclass
class DfkvStorageMetrics(_StorageMetricsBase):
    """get_stats()'s answer: SGLang's StorageMetrics (so its collector,
    which asserts that type, logs the four lists: pages and GB/s per batch
    since the last call) plus this backend's counters since it started.
    A hit or miss is one page read; bytes count page payload; *_seconds
    sum the wall time of the calls (latency = seconds / calls)."""

    hits: int = 0
    misses: int = 0
    refused_pages: int = 0
    pages_written: int = 0
    write_failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    get_calls: int = 0
    get_seconds: float = 0.0
    set_calls: int = 0
    set_seconds: float = 0.0
    exists_calls: int = 0
    exists_seconds: float = 0.0
    errors: int = 0


# Memory layouts of SGLang's host pools; the code is identity (fingerprint).
_LAYOUT_CODES = {"layer_first": 0, "page_first": 1, "page_first_direct": 2, "page_head": 3,
                 "page_first_kv_split": 4}
# Layouts whose get_page_buffer_meta parts of one page, in the order given,
# are the page's flat data page (page_head included: both its K and V parts
# are one contiguous run per page), or, for page_first_kv_split, the only
# byte form the page has (its pools refuse get_data_page).
_ZERO_COPY_LAYOUTS = ("page_first", "page_first_direct", "page_head", "page_first_kv_split")
_KV = "kv"
_GB = float(1 << 30)
_LOG_EVERY_S = 10.0


def _pool_name(name: Any) -> str:
    """PoolName.MAMBA -> "mamba" (str-Enum value), strings pass through."""
    return str(getattr(name, "value", name))


def _as_int(v: Any) -> int:
    return int(v.item() if hasattr(v, "item") else v)


# The longest a StorageMetrics series grows between two get_stats calls.
_MAX_SERIES = 100000


def _whole_page(status: Status, stored: int, want: int, wrong: List[Tuple[int, int]]) -> bool:
    """Whether a read gave a whole page of exactly want bytes. A stored
    value of another size (read short, or too large for the page) is noted
    in wrong as (stored, want): it is refused as a miss, never used."""
    if (status == Status.OK and stored != want) or status == Status.TOO_LARGE:
        wrong.append((stored, want))
    return status == Status.OK and stored == want


def _nbytes(t: Any) -> int:
    n = getattr(t, "nbytes", None)
    if n is not None:
        return int(n)
    if hasattr(t, "element_size"):
        return int(t.element_size() * t.numel())
    return memoryview(t).nbytes


def _count(indices: Any) -> int:
    n = getattr(indices, "numel", None)
    return int(n()) if callable(n) else len(indices)


def _kv_dtype(pool: Any, default: Any = None) -> str:
    """The dtype of the KV a host pool holds. SGLang's host pools take
    device_pool.store_dtype as their dtype, which is uint8 for every fp8
    format (fp8 is stored as bytes); the device pool's dtype names the
    format, so fp8_e4m3 and fp8_e5m2 caches never share a namespace."""
    dev = getattr(pool, "device_pool", None)
    dt = getattr(dev, "dtype", None) if dev is not None else None
    if dt is None:
        dt = getattr(pool, "dtype") if default is None else getattr(pool, "dtype", default)
    return dtype_name(dt)


class _Plan:
    """How the pages of one host pool are keyed and moved, fixed when the
    pool is registered so a pool this backend cannot serve is refused then,
    not on the prefetch thread."""

    __slots__ = ("name", "pool", "layout", "page_size", "zero_copy", "component", "replicated")

    def __init__(self, name: str, pool: Any, component: str, replicated: bool) -> None:
        layout = getattr(pool, "layout", None)
        if layout is not None and layout not in _LAYOUT_CODES:
            raise ValueError(f"dfkv HiCache backend: host pool {name!r} has memory layout {layout!r}, which this "
                             f"backend does not know (known: {', '.join(_LAYOUT_CODES)}); refusing it now rather "
                             "than failing its pages later")
        has_meta = callable(getattr(pool, "get_page_buffer_meta", None))
        has_flat = all(callable(getattr(pool, m, None)) for m in
                       ("get_data_page", "set_from_flat_data_page", "get_dummy_flat_data_page"))
        if not has_meta and not has_flat:
            raise ValueError(f"dfkv HiCache backend: host pool {name!r} ({type(pool).__name__}) has neither "
                             "get_page_buffer_meta nor the flat data page methods")
        self.name, self.pool, self.layout = name, pool, layout
        self.page_size = int(getattr(pool, "page_size", 1) or 1)
        # Zero-copy where the parts are the stored bytes; else the flat page
        # copy path; a pool with only parts and no known layout gets
        # zero-copy when a page is one part (checked per call).
        self.zero_copy = has_meta and (layout in _ZERO_COPY_LAYOUTS or not has_flat)
        self.component, self.replicated = component, replicated


class DfkvHiCacheStorage(_HiCacheStorageBase):
    """HiCacheStorage on dfkv. Keys are SGLang's page hashes (strings).

    extra_config settings (env fallback): dfkv_mds ($DFKV_CLIENT_MDS),
    dfkv_members ($DFKV_CLIENT_MEMBERS), dfkv_group ($DFKV_GROUP), dfkv_tenant
    ("default"), dfkv_model_revision (""), dfkv_timeout_ms,
    dfkv_batch_concurrency, dfkv_library ($DFKV_LIBRARY), dfkv_token
    ($DFKV_CLIENT_TOKEN, $DFKV_TOKEN; never logged), dfkv_tls
    ($DFKV_CLIENT_TLS), dfkv_tls_ca, dfkv_tls_cert, dfkv_tls_key,
    dfkv_tls_server_name ($DFKV_CLIENT_TLS_CA, ...),
    dfkv_reopen_interval_s (2: how often a failed open is retried),
    dfkv_clear_track_max (1048576: written keys remembered for clear()).
    Without a registered host pool the geometry must be given as dfkv_dtype,
    dfkv_page_size, dfkv_layers, dfkv_kv_heads, dfkv_head_dim and
    dfkv_mem_layout.
    """

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        self.storage_config = storage_config
        self.extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.endpoints = Endpoints.from_settings(self.extra, "dfkv HiCache backend")
        if not (getattr(storage_config, "model_name", None) or setting(self.extra, "dfkv_model_id")):
            # The model is part of every page's identity: without it two
            # models of the same geometry would read each other's KV.
            raise ValueError("dfkv HiCache backend: SGLang passed no model_name; set dfkv_model_id in "
                             "--hicache-storage-backend-extra-config")
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        c = storage_config
        tp_size, tp_rank = int(getattr(c, "tp_size", 1) or 1), int(getattr(c, "tp_rank", 0) or 0)
        self._tp = (tp_size, tp_rank)
        # No dp coordinate: attention-DP replicas compute the same KV for the
        # same tokens (tp here is already the attention-TP group), so their
        # pages are one set of objects.
        self._coords = dict(
            pcp=(int(getattr(c, "attn_cp_size", 1) or 1), int(getattr(c, "attn_cp_rank", 0) or 0)),
            dcp=(1, 0),
            pp=(int(getattr(c, "pp_size", 1) or 1), int(getattr(c, "pp_rank", 0) or 0)),
        )
        self._metrics_on = bool(getattr(c, "enable_storage_metrics", False))
        # SGLang decides with bool(extra_config.get("interface_v1", 0)):
        # read it as it does, or "true" would fail here while SGLang used it.
        if not bool(self.extra.get("interface_v1", 0)):
            logger.warning("dfkv HiCache backend: extra_config lacks \"interface_v1\": 1, so SGLang moves pages "
                           "through its generic path (an extra copy per page) instead of batch_get_v1/batch_set_v1")
        self._slot = ClientSlot("dfkv HiCache backend", float(self.extra.get("dfkv_reopen_interval_s", 2.0)))
        self.mem_pool_host = None
        self._plans: Dict[str, _Plan] = {}
        self._stats_lock = threading.Lock()
        self._m = DfkvStorageMetrics()
        self._log_at: Dict[str, Tuple[float, int]] = {}
        self._written: Dict[bytes, None] = {}  # insertion-ordered set
        self._written_dropped = 0
        self._track_max = int(self.extra.get("dfkv_clear_track_max", 1 << 20))
        if self._track_max < 0:
            raise ValueError(f"dfkv HiCache backend: dfkv_clear_track_max {self._track_max}: want 0 or more "
                             f"(how many written keys clear() remembers to remove)")
        pool = (kwargs or {}).get("mem_pool_host") if isinstance(kwargs, dict) else None
        if pool is not None:
            self.register_mem_pool_host(pool)

    @property
    def supports_zero_copy_page_io(self) -> bool:
        """Newer SGLang asks this before using batch_get_v1/batch_set_v1."""
        return True

    # -- identity --------------------------------------------------------

    def _geometry(self):
        pool = self.mem_pool_host
        e = self.extra
        if pool is not None:
            layout = getattr(pool, "layout", "layer_first")
            page_size = int(getattr(pool, "page_size"))
            layers = int(getattr(pool, "layer_num", 1) or 1)
            dtype = _kv_dtype(pool)
            if self.is_mla or hasattr(pool, "kv_cache_dim"):
                kv_heads, rank_heads = 1, 1
                head_dim = int(getattr(pool, "kv_cache_dim", 0) or
                               (int(getattr(pool, "kv_lora_rank")) + int(getattr(pool, "qk_rope_head_dim"))))
            else:
                rank_heads = int(getattr(pool, "head_num"))
                head_dim = int(getattr(pool, "head_dim"))
                kv_heads = rank_heads * self._tp[0]  # model-level heads
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
            rank_heads = kv_heads if self.is_mla else max(1, kv_heads // self._tp[0])
            page_bytes = int(e.get("dfkv_page_bytes", 0))
        if layout not in _LAYOUT_CODES:
            raise ValueError(f"dfkv HiCache backend: unknown host memory layout {layout!r} "
                             f"(known: {', '.join(_LAYOUT_CODES)})")
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
            topology_sizes=TopologySizes(dp=1, tp=self._tp[0], pcp=self._coords["pcp"][0], dcp=1,
                                         pp=self._coords["pp"][0]),
        )

    def _object_key(self, key: Any, pool: str = _KV, component: str = "page", replicated: Optional[bool] = None) -> bytes:
        rep = self.is_mla if replicated is None else replicated
        return ObjectKey(pool=pool, hash=escape_key_part(key), component=component,
                         tp=(self._tp[0], -1 if rep else self._tp[1]), **self._coords).render_bytes()

    def object_key(self, key: str) -> bytes:
        """The KV page object key of an SGLang page hash."""
        return self._object_key(key)

    def _plan_keys(self, plan: _Plan, keys: Sequence[Any]) -> List[bytes]:
        return [self._object_key(k, plan.name, plan.component, plan.replicated) for k in keys]

    # -- the client --------------------------------------------------------

    def _open(self) -> Client:
        ns = self.namespace()
        e = self.extra
        opts = dict(timeout_ms=int(e.get("dfkv_timeout_ms", 0)), batch_concurrency=int(e.get("dfkv_batch_concurrency", 0)),
                    library=setting(e, "dfkv_library", "DFKV_LIBRARY"))
        return self.endpoints.open_client(ns, "dfkv HiCache backend", logger, **opts)

    @property
    def client(self) -> Client:
        """The open client, opening it if needed (see ClientSlot: one
        thread opens; the others, meanwhile and for dfkv_reopen_interval_s
        after a failed open, get NotConnected, which the I/O calls turn
        into misses)."""
        return self._slot.get(self._open)

    def _reset_client(self) -> None:
        self._slot.reset()
        with self._stats_lock:
            # The old keys belong to the old namespace: clear() can no
            # longer name them.
            self._written_dropped += len(self._written)
            self._written.clear()

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Register the KV host pool. An unknown memory layout is refused
        here, with its name, so the engine fails at start-up. Opens the
        client now so a bad setting shows at start; an unreachable MDS
        without a static fallback is only logged (pages miss until it
        answers)."""
        plan = _Plan(_KV, mem_pool_host, "page", self.is_mla)
        super().register_mem_pool_host(mem_pool_host)
        self._plans[_KV] = plan
        self._reset_client()  # the namespace depends on the pool's geometry
        self.namespace()  # geometry errors surface here
        try:
            self.client
        except DfkvError as err:
            if err.status == Status.INVALID:
                raise  # a setting libdfkv refuses: fail at start-up
            logger.warning("dfkv HiCache backend: cannot reach the dfkv nodes yet (%s); pages miss until they "
                           "answer (retried every %.0f s)", err, self._slot.reopen_s)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Register one pool of a hybrid model (SGLang passes every entry,
        the KV anchor included). A pool's pages are keyed by its name and a
        component naming its page shape, so a sidecar whose page format
        changes is a miss, never someone else's bytes. Sidecars are
        replicated across TP ranks for MLA models like the KV pages, except
        Mamba state, which is TP-sharded (SGLang backs it up on every rank)."""
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = _pool_name(host_pool_name)
        if name == _KV:
            if self.mem_pool_host is None:
                self.register_mem_pool_host(host_pool)
            elif host_pool is not self.mem_pool_host:
                self._plans[_KV] = _Plan(_KV, host_pool, "page", self.is_mla)
            return
        per_token = getattr(host_pool, "get_size_per_token", None)
        fp = layout_fingerprint([
            ("mem_layout", [_LAYOUT_CODES.get(getattr(host_pool, "layout", None), 255)]),
            ("page_tokens", [int(getattr(host_pool, "page_size", 1) or 1)]),
            ("bytes_per_token", [int(per_token()) if callable(per_token) else 0]),
            ("layers", [int(getattr(host_pool, "layer_num", getattr(host_pool, "num_mamba_layers", 0)) or 0)]),
        ])
        dt = escape_key_part(_kv_dtype(host_pool, "raw"))
        self._plans[name] = _Plan(name, host_pool, f"page.{dt}.{fp:016x}", self.is_mla and name != "mamba")

    # -- failure handling --------------------------------------------------

    def _log(self, what: str, msg: str, *args: Any) -> None:
        """One warning per `what` per _LOG_EVERY_S, naming how many were
        suppressed: a node down must not flood the engine's log."""
        now = time.monotonic()
        with self._stats_lock:
            last, quiet = self._log_at.get(what, (0.0, 0))
            if last and now - last < _LOG_EVERY_S:
                self._log_at[what] = (last, quiet + 1)
                return
            self._log_at[what] = (now, 0)
        if quiet:
            msg += " (%d similar messages suppressed)"
            args = args + (quiet,)
        logger.warning(msg, *args)

    def _guard(self, what: str, fallback: Callable[[], Any], fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or fallback() after one log line if it raises."""
        try:
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - the controller threads must never see it
            with self._stats_lock:
                self._m.errors += 1
            self._log(what, "dfkv HiCache backend: %s failed, answering misses: %s: %s",
                      what, type(err).__name__, err)
            return fallback()

    def _note_statuses(self, what: str, statuses: Sequence[Status]) -> None:
        # TOO_LARGE on a read is a stored page of another size: _refused
        # says so.
        quiet = (Status.OK, Status.NOT_FOUND, Status.TOO_LARGE) if what.startswith("read") else (Status.OK,)
        bad = sorted({status_name(s) for s in statuses if s not in quiet})
        if bad:
            self._log(what + "-status", "dfkv HiCache backend: %s: %d of %d pages failed (%s)", what,
                      sum(s not in quiet for s in statuses), len(statuses), ", ".join(bad))

    def _account(self, read: bool, pages: int, ok: int, nbytes: int, seconds: float, refused: int = 0) -> None:
        with self._stats_lock:
            m = self._m
            if read:
                m.get_calls += 1
                m.get_seconds += seconds
                m.hits += ok
                m.misses += pages - ok
                m.refused_pages += refused
                m.bytes_read += nbytes
            else:
                m.set_calls += 1
                m.set_seconds += seconds
                m.pages_written += ok
                m.write_failures += pages - ok
                m.bytes_written += nbytes
            if self._metrics_on and pages:
                # Each series is emptied by get_stats; until it is called
                # they stop at _MAX_SERIES, so a backend nobody reads
                # metrics from holds bounded memory.
                bw = nbytes / _GB / seconds if seconds > 0 else 0.0
                pgs, bws = (m.prefetch_pgs, m.prefetch_bandwidth) if read else (m.backup_pgs, m.backup_bandwidth)
                if len(pgs) < _MAX_SERIES:
                    pgs.append(pages)
                    bws.append(bw)

    def _track(self, okeys: Sequence[bytes], ok: Sequence[bool]) -> None:
        with self._stats_lock:
            for k, good in zip(okeys, ok):
                if good:
                    self._written[k] = None
            while len(self._written) > self._track_max:
                self._written.pop(next(iter(self._written)))
                self._written_dropped += 1

    # -- page movement ------------------------------------------------------

    def _parts(self, plan: _Plan, n: int, host_indices: Any) -> Optional[List[List[RawBuffer]]]:
        """Per page, its buffers in stored order; None when the pool's parts
        are not the stored bytes (the copy path must be used)."""
        ptrs, sizes = plan.pool.get_page_buffer_meta(host_indices)
        if len(ptrs) != len(sizes) or len(ptrs) % n:
            raise ValueError(f"pool {plan.name!r}: {len(ptrs)} page buffers for {n} pages")
        per = len(ptrs) // n
        if per > 1 and plan.layout not in _ZERO_COPY_LAYOUTS:
            return None
        return [[RawBuffer(ptrs[i * per + j], sizes[i * per + j]) for j in range(per)] for i in range(n)]

    def _page_index(self, plan: _Plan, host_indices: Any, i: int) -> int:
        return _as_int(host_indices[i * plan.page_size])

    def _check_indices(self, plan: _Plan, keys: Sequence[Any], host_indices: Any) -> bool:
        n = _count(host_indices) if host_indices is not None else 0
        if n != len(keys) * plan.page_size:
            self._log("indices-" + plan.name, "dfkv HiCache backend: pool %r: %d host indices for %d pages of %d "
                      "tokens; nothing moved", plan.name, n, len(keys), plan.page_size)
            return False
        return True

    def _refused(self, plan: _Plan, sizes: List[Tuple[int, int]]) -> None:
        stored, want = sizes[0]
        self._log("size-" + plan.name, "dfkv HiCache backend: pool %r: %d stored pages have another size than "
                  "this engine's page (e.g. %d bytes stored, %d expected: a different writer layout or build); "
                  "refused as misses", plan.name, len(sizes), stored, want)

    def _get_pages(self, plan: _Plan, keys: List[Any], host_indices: Any) -> List[bool]:
        if not keys:
            return []
        if not self._check_indices(plan, keys, host_indices):
            return [False] * len(keys)
        t0 = time.perf_counter()
        okeys = self._plan_keys(plan, keys)
        items = self._parts(plan, len(keys), host_indices) if plan.zero_copy else None
        wrong: List[Tuple[int, int]] = []
        out: List[bool] = []
        nbytes = 0
        if items is not None:
            st, stored = self.client.batch_get_sg(okeys, items)
            for s, n, it in zip(st, stored, items):
                want = sum(b.nbytes for b in it)
                good = _whole_page(s, n, want, wrong)
                out.append(good)
                nbytes += want if good else 0
        else:
            pool = plan.pool
            pages = [pool.get_dummy_flat_data_page() for _ in keys]
            st, stored = self.client.batch_get_into(okeys, pages)
            for i, (s, n, page) in enumerate(zip(st, stored, pages)):
                want = _nbytes(page)
                good = _whole_page(s, n, want, wrong)
                if good:
                    pool.set_from_flat_data_page(self._page_index(plan, host_indices, i), page)
                    nbytes += want
                out.append(good)
        self._note_statuses("read of pool %r" % plan.name, st)
        if wrong:
            self._refused(plan, wrong)
        self._account(True, len(keys), sum(out), nbytes, time.perf_counter() - t0, len(wrong))
        return out

    def _set_pages(self, plan: _Plan, keys: List[Any], host_indices: Any) -> List[bool]:
        if not keys:
            return []
        if not self._check_indices(plan, keys, host_indices):
            return [False] * len(keys)
        t0 = time.perf_counter()
        okeys = self._plan_keys(plan, keys)
        items = self._parts(plan, len(keys), host_indices) if plan.zero_copy else None
        if items is not None:
            st = self.client.batch_put_sg(okeys, items)
            sizes = [sum(b.nbytes for b in it) for it in items]
        else:
            pool = plan.pool
            pages = []
            for i in range(len(keys)):
                p = pool.get_data_page(self._page_index(plan, host_indices, i), flat=True)
                contiguous = getattr(p, "contiguous", None)
                pages.append(contiguous() if callable(contiguous) else p)
            st = self.client.batch_put(okeys, pages)
            sizes = [_nbytes(p) for p in pages]
        out = [s == Status.OK for s in st]
        self._note_statuses("write of pool %r" % plan.name, st)
        self._track(okeys, out)
        self._account(False, len(keys), sum(out), sum(n for n, good in zip(sizes, out) if good),
                      time.perf_counter() - t0)
        return out

    def _kv_plan(self) -> _Plan:
        plan = self._plans.get(_KV)
        if plan is None:
            raise RuntimeError("batch_get_v1/batch_set_v1 need register_mem_pool_host first")
        return plan

    # -- v1: the KV pool, zero-copy -----------------------------------------

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Read pages straight into the host pool slots of host_indices; one
        bool per page, False for a miss, a failure or a wrong-size page."""
        return self._guard("batch_get_v1", lambda: [False] * len(keys),
                           lambda: self._get_pages(self._kv_plan(), list(keys), host_indices))

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        """Write pages straight from the host pool slots of host_indices."""
        return self._guard("batch_set_v1", lambda: [False] * len(keys),
                           lambda: self._set_pages(self._kv_plan(), list(keys), host_indices))

    def _exist_prefix(self, plan: _Plan, keys: Sequence[Any]) -> int:
        if not keys:
            return 0
        t0 = time.perf_counter()
        # Pinned: SGLang loads the pages it is told exist (its prefetch
        # follows), and a page evicted in between would be a failed load.
        n = self.client.exist_prefix(self._plan_keys(plan, keys), pin=True)
        with self._stats_lock:
            self._m.exists_calls += 1
            self._m.exists_seconds += time.perf_counter() - t0
        return n

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """Consecutive stored pages from keys[0], one parallel lookup; 0 on
        failure. Pages on an unreachable node count as missing."""
        kv = self._plans.get(_KV) or _Plan(_KV, _NoPool(), "page", self.is_mla)
        return self._guard("batch_exists", lambda: 0, self._exist_prefix, kv, list(keys))

    # -- v2: hybrid pools --------------------------------------------------

    def _transfer_plan(self, transfer: Any) -> Optional[_Plan]:
        name = _pool_name(getattr(transfer, "name", None))
        plan = self._plans.get(name)
        if plan is None:
            self._log("unregistered-" + name, "dfkv HiCache backend: pool %r was never registered "
                      "(register_mem_host_pool_v2); its pages miss", name)
        elif _pool_name(getattr(transfer, "target", "host")) not in ("host", "None"):
            self._log("target-" + name, "dfkv HiCache backend: pool %r: transfers to %s memory are not "
                      "supported; its pages miss", name, _pool_name(transfer.target))
            return None
        return plan

    def _exists_v2(self, keys: List[str], pool_transfers: Any) -> Any:
        """The usable prefix is one length L at which every pool's policy
        holds together: all-pages pools have pages 0..L-1, trailing pools
        the pages just before L. Each pool's own longest prefix, taken
        apart and then the minimum, is not that: a trailing pool may hold
        state at the end of the KV prefix only, and once another pool cuts
        the prefix shorter, the state at the new end is missing, so SGLang
        would be told to load KV whose companion state is not stored."""
        kv = self._plans.get(_KV) or _Plan(_KV, _NoPool(), "page", self.is_mla)
        kv_pages = self._exist_prefix(kv, keys)
        hits: Dict[Any, int] = {_KV: kv_pages} if kv_pages else {}
        final = kv_pages
        tails: List[Tuple[int, List[bool]]] = []  # (trailing pages, present per page) per trailing pool
        for t in pool_transfers or []:
            if final == 0:
                break
            plan = self._transfer_plan(t)
            if plan is None:
                final = 0
                break
            if _pool_name(getattr(t, "hit_policy", "all_pages")) == "trailing_pages":
                # Only the last len(t.keys) pages of a prefix need this
                # pool's state.
                trailing = max(1, len(t.keys or []))
                present = self.client.batch_exists(self._plan_keys(plan, keys[:kv_pages]), pin=True)
                boundary = next((end for end in range(kv_pages, 0, -1)
                                 if all(present[max(0, end - trailing):end])), 0)
                tails.append((trailing, present))
            else:
                boundary = self._exist_prefix(plan, keys[:kv_pages])
            if boundary:
                hits[t.name] = boundary
            final = min(final, boundary)
        while final > 0 and not all(all(present[max(0, final - n):final]) for n, present in tails):
            final -= 1
        return PoolTransferResult(final, hits)

    def batch_exists_v2(self, keys: List[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        """The usable prefix over the KV pages and every extra pool, by each
        pool's hit policy (all pages, or the trailing pages only)."""
        return self._guard("batch_exists_v2", lambda: PoolTransferResult(0, {}),
                           self._exists_v2, list(keys), pool_transfers)

    def _io_v2(self, transfers: Any, move: Callable[[_Plan, List[Any], Any], List[bool]]) -> Dict[Any, List[bool]]:
        out: Dict[Any, List[bool]] = {}
        for t in transfers or []:
            keys = list(t.keys or [])
            plan = self._transfer_plan(t)
            out[t.name] = self._guard(f"v2 transfer of pool {_pool_name(t.name)!r}", lambda: [False] * len(keys),
                                      move, plan, keys, t.host_indices) if plan is not None else [False] * len(keys)
        return out

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Read each transfer's pages into its pool; per pool name, one bool
        per key."""
        return self._guard("batch_get_v2", lambda: {t.name: [False] * len(t.keys or []) for t in transfers or []},
                           self._io_v2, transfers, self._get_pages)

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Write each transfer's pages from its pool."""
        return self._guard("batch_set_v2", lambda: {t.name: [False] * len(t.keys or []) for t in transfers or []},
                           self._io_v2, transfers, self._set_pages)

    # -- generic (copying) path -------------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """Read a page into target_location (a flat page tensor); None on a
        miss or when the stored page is not exactly that size."""
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def _batch_get(self, keys: List[str], target_locations: Any) -> List[Any]:
        t0 = time.perf_counter()
        okeys = [self.object_key(k) for k in keys]
        if target_locations is None:
            out = self.client.batch_get(okeys)
            self._account(True, len(keys), sum(v is not None for v in out),
                          sum(len(v) for v in out if v is not None), time.perf_counter() - t0)
            return out
        st, stored = self.client.batch_get_into(okeys, list(target_locations))
        out, wrong = [], []
        for t, s, n in zip(target_locations, st, stored):
            want = _nbytes(t)
            if (s == Status.OK and n != want) or s == Status.TOO_LARGE:
                wrong.append((n, want))
            out.append(t if s == Status.OK and n == want else None)
        self._note_statuses("read of pool 'kv'", st)
        if wrong:
            self._refused(self._plans.get(_KV) or _Plan(_KV, _NoPool(), "page", self.is_mla), wrong)
        self._account(True, len(keys), sum(v is not None for v in out),
                      sum(_nbytes(v) for v in out if v is not None), time.perf_counter() - t0, len(wrong))
        return out

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        return self._guard("batch_get", lambda: [None] * len(keys), self._batch_get, list(keys), target_locations)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], None if value is None else [value],
                              None if target_location is None else [target_location])

    def _batch_set(self, keys: List[str], pages: Any) -> bool:
        t0 = time.perf_counter()
        okeys = [self.object_key(k) for k in keys]
        st = self.client.batch_put(okeys, list(pages))
        ok = [s == Status.OK for s in st]
        self._note_statuses("write of pool 'kv'", st)
        self._track(okeys, ok)
        self._account(False, len(keys), sum(ok), sum(_nbytes(p) for p, g in zip(pages, ok) if g),
                      time.perf_counter() - t0)
        return all(ok)

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
        return self._guard("batch_set", lambda: False, self._batch_set, list(keys), pages)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- maintenance ---------------------------------------------------

    def clear(self) -> bool:
        """Remove the pages this backend instance wrote (every pool) in its
        namespace. dfkv nodes see only hashed block keys, so a namespace
        cannot be listed: pages written by other processes or ranks, by an
        earlier run, before the host pool was re-registered, or beyond the
        dfkv_clear_track_max most recent ones stay until evicted, and then
        this returns False and says how many."""
        with self._stats_lock:
            keys = list(self._written)
            self._written.clear()
            dropped, self._written_dropped = self._written_dropped, 0
        kept: List[bytes] = []  # pages still stored: the next clear() tries them again
        done = 0
        try:
            while done < len(keys):
                chunk = keys[done:done + 1024]
                st = self.client.batch_remove(chunk)
                kept += [k for k, s in zip(chunk, st) if s not in (Status.OK, Status.NOT_FOUND)]
                done += len(chunk)
        except Exception as err:  # noqa: BLE001 - an admin call; report, do not raise
            self._track_again(kept + keys[done:])
            logger.warning("dfkv HiCache backend: clear() failed: %s", err)
            return False
        self._track_again(kept)
        failed = len(kept)
        if failed or dropped:
            logger.warning("dfkv HiCache backend: clear() removed %d pages; %d could not be removed, %d written "
                           "ones were no longer tracked (they stay until evicted)", len(keys) - failed, failed, dropped)
            return False
        logger.info("dfkv HiCache backend: clear() removed the %d pages this backend wrote", len(keys))
        return True

    def _track_again(self, keys: List[bytes]) -> None:
        """Remember keys clear() could not remove, so a later clear() does
        not report done while they are still stored."""
        if not keys:
            return
        with self._stats_lock:
            for k in keys:
                self._written[k] = None
            while len(self._written) > self._track_max:
                self._written.pop(next(iter(self._written)))
                self._written_dropped += 1

    def get_stats(self) -> DfkvStorageMetrics:
        """SGLang's StorageMetrics (its per-batch lists, handed over and
        emptied as SGLang's own backends do) with this backend's running
        counters (see DfkvStorageMetrics)."""
        with self._stats_lock:
            m = self._m
            out = DfkvStorageMetrics(**{k: getattr(m, k) for k in m.__dataclass_fields__})
            m.prefetch_pgs, m.backup_pgs, m.prefetch_bandwidth, m.backup_bandwidth = [], [], [], []
        return out

    def close(self) -> None:
        self._slot.close()


class _NoPool:
    """Stands in for a pool when only keys are needed (batch_exists before
    any pool is registered, on the generic path)."""

    page_size = 1

    def get_page_buffer_meta(self, host_indices: Any):  # pragma: no cover - never moves pages
        raise RuntimeError("no host pool registered")
