"""vLLM KV connector on dfkv (layout ``vllm-multiwr-v4``).

Written against vLLM's v1 connector API in the newest upstream versions we
could read (vllm-project/vllm ``vllm/distributed/kv_transfer/kv_connector/v1/base.py``
at 003df2961dd8, ``vllm/v1/core/sched/scheduler.py`` at 00024d314514,
``vllm/v1/worker/kv_connector_model_runner_mixin.py`` at 00f4240ee645 and
``kv_connector/factory.py`` with typed connector selection; the stand-in in
contrib/python/tests/vllm_upstream.py replays them): the constructor
takes (vllm_config, role, kv_cache_config), which the factory insists on
for a connector loaded through kv_connector_module_path; the class
implements SupportsHMA, which the factory requires while the hybrid KV
cache manager is on (vLLM's default). When vllm is importable the class
subclasses the real base classes; otherwise shims with the same names
stand in, so ``import dfkv.vllm`` never needs vLLM.

Load it with

    --kv-transfer-config '{"kv_connector": "DfkvConnector",
      "kv_connector_module_path": "dfkv.vllm", "kv_role": "kv_both",
      "kv_connector_extra_config": {"dfkv_mds": "10.0.0.9:7700", "dfkv_tenant": "team-a"}}'

Nodes come from an MDS (dfkv_mds / $DFKV_CLIENT_MDS, optionally
dfkv_group) or a static list (dfkv_members / $DFKV_CLIENT_MEMBERS); with both
set, a failed open through the MDS falls back to the static list. Nodes
or an MDS that do not answer at start do not stop vLLM: blocks miss, and
the open is retried every dfkv_reopen_interval_s (2). Nodes
that require credentials take a token: dfkv_token, else $DFKV_CLIENT_TOKEN
(or $DFKV_TOKEN). vLLM prints its configuration, extra config included,
when it starts, so set the token in the environment. Nodes serving TLS
take dfkv_tls (1), dfkv_tls_ca and, for mutual TLS, dfkv_tls_cert and
dfkv_tls_key (else $DFKV_CLIENT_TLS, $DFKV_CLIENT_TLS_CA, ...).

Storage: per block. One object per (block hash, TP rank, PP rank, DCP
rank) holds that rank's K and V of every layer it owns, in layer order,
each layer's block as the engine's paged buffer has it (K then V for the
[2, blocks, ...] layouts, the whole block for MLA or block-first layouts).
With several KV-cache groups (the hybrid KV cache manager) each layer's
block comes from its own group's block table; such a model loads only
with dfkv_hybrid_loads set, since vLLM's scheduler cannot take back failed
blocks of a request with several block tables (it raises). MLA KV is the
same on every TP rank, so one rank per DCP shard (TP rank == DCP rank,
rank 0 without DCP) writes it and every rank reads it. Device buffers, and buffers whose
physical order differs from their shape (FlashInfer's HND layout), go
through row-major host copies, so what is stored is always the logical
order. A load checks the stored length against the buffers it fills: an
object of another shape is a failed block, never partial KV. Object key:
ObjectKey(pool="vllm", hash=<block hash>, tp=(tp, rank or -1 for MLA),
pp=(pp, rank), dcp=(dcp, rank), component="kv"). DP replicas are whole
model copies with identical KV, so they share blocks.

Block hashes are vLLM's request.block_hashes (they cover multimodal
inputs, LoRA and cache salt; run with --prefix-caching-hash-algo sha256 or
sha256_cbor and one PYTHONHASHSEED so they agree across processes).
Without them, a request with only text tokens is hashed here (SHA-256
chain over the tokens); any other request, and one given as prompt
embeddings, is not cached.

Timing. The scheduler never waits on the network: get_num_new_matched_tokens
queues the request's keys for a lookup thread, which looks up everything
queued in one batch, and answers None ("ask again") until the result is
there. Loads and saves run on a worker thread pool: a load the scheduler
made asynchronous (the default) is reported through get_finished, a save
keeps its request's blocks from being freed (request_finished returns
True) until get_finished reports it sent. Failed loads come back from
get_block_ids_with_load_errors, so vLLM recomputes those blocks (and they
are saved again); nothing a node does raises into the engine. A forward
that read a synchronous load computes on top of it, so what it computed is
saved only when the request finishes, once any failure is known and
recomputed.

Synchronous loads (dfkv_load_async=0, hybrid models) go layer by layer:
a block's object holds its layers one after another, so start_load_kv
submits one ranged batch read per layer (that layer's bytes of every block
of the step, in layer order, on threads of their own so queued saves do not
delay them) and returns, and wait_for_layer_load(layer) waits only for that
layer's bytes: the forward computes layer 0 while later layers arrive. The
wait before the last layer waits for all of them. The first read of a block
tells its stored length, so an object of another size is a failed block as
before, and so is a block any of whose layers fails to load (its earlier
layers are then recomputed too). Staged pieces (device buffers, HND
layouts) are copied into place layer by layer. A layout whose per-layer
sizes are not known loads whole blocks in start_load_kv.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import logging
import re
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ._common import ClientSlot, Endpoints, NotConnected, dtype_name, escape_key_part, setting, switch
from .client import Client
from .errors import DfkvError, Status
from .identity import LAYOUT_VLLM, LayerGeometry, NamespaceDescriptor, ObjectKey, TopologySizes, layout_fingerprint

logger = logging.getLogger(__name__)

try:  # pragma: no cover - depends on the environment
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1 as _Base,
                                                                   KVConnectorMetadata as _MetaBase,
                                                                   KVConnectorRole)
    VLLM_AVAILABLE = True
except ImportError:
    VLLM_AVAILABLE = False

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        SCHEDULER = 0
        WORKER = 1

    class _MetaBase:  # type: ignore[no-redef]
        pass

    class _Base:  # type: ignore[no-redef]
        """Shim of vLLM's KVConnectorBase_V1 (same method names)."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            self._connector_metadata = None
            self._vllm_config = vllm_config
            if getattr(vllm_config, "kv_transfer_config", None) is None:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata: Any) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def _get_connector_metadata(self) -> Any:
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self) -> bool:
            return self._connector_metadata is not None

        def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
            return

        def get_finished(self, finished_req_ids: set):
            return None, None

        def get_block_ids_with_load_errors(self) -> set:
            return set()

        def shutdown(self) -> None:
            return None

        def request_finished(self, request: Any, block_ids: List[int]):
            return False, None

try:  # pragma: no cover - depends on the vLLM version
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:
    class SupportsHMA:  # type: ignore[no-redef]
        """Shim of vLLM's SupportsHMA marker (request_finished_all_groups)."""

try:  # pragma: no cover - depends on the vLLM version
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats as _StatsBase
except ImportError:
    @dataclass
    class _StatsBase:  # type: ignore[no-redef]
        """Shim of vLLM's KVConnectorStats (a dict of serializable data)."""

        data: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- stats

_COUNTERS = ("loads", "load_blocks", "load_bytes", "load_failed_blocks",
             "saves", "save_blocks", "save_bytes", "save_failed_blocks",
             "lookups", "lookup_blocks", "lookup_hit_blocks")
_SERIES = ("load_seconds", "save_seconds", "lookup_seconds")


@dataclass
class DfkvConnectorStats(_StatsBase):
    """Transfer counts, bytes and per-transfer latency since the last report.

    Plain ints and lists of floats, so vLLM can ship it from the workers to
    the scheduler and the logger; aggregate() sums the counters and joins
    the latency series, reduce() turns them into what the log line shows."""

    data: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k in _COUNTERS:
            self.data.setdefault(k, 0)
        for k in _SERIES:
            self.data.setdefault(k, [])

    def record(self, kind: str, blocks: int, nbytes: int, seconds: float, failed: int = 0) -> None:
        d = self.data
        d[kind + "s"] += 1
        d[kind + "_blocks"] += int(blocks)
        if kind != "lookup":
            d[kind + "_bytes"] += int(nbytes)
            d[kind + "_failed_blocks"] += int(failed)
        else:
            d["lookup_hit_blocks"] += int(nbytes)
        d[kind + "_seconds"].append(float(seconds))

    def reset(self) -> None:
        self.data = {}
        self.__post_init__()

    def is_empty(self) -> bool:
        return not any(self.data.get(k) for k in ("loads", "saves", "lookups"))

    def clone_and_reset(self) -> "DfkvConnectorStats":
        old = DfkvConnectorStats(data=copy.deepcopy(self.data))
        self.reset()
        return old

    def aggregate(self, other: Any) -> "DfkvConnectorStats":
        od = getattr(other, "data", None) or {}
        for k in _COUNTERS:
            self.data[k] += int(od.get(k, 0))
        for k in _SERIES:
            self.data[k].extend(od.get(k, ()))
        return self

    def reduce(self) -> Dict[str, Any]:
        d = self.data

        def ms(series: List[float], q: float) -> float:
            if not series:
                return 0.0
            s = sorted(series)
            return round(1000 * s[min(len(s) - 1, int(q * len(s)))], 3)

        out: Dict[str, Any] = {}
        for kind in ("load", "save"):
            secs = d[kind + "_seconds"]
            out[f"{kind}s"] = d[kind + "s"]
            out[f"{kind}_blocks"] = d[kind + "_blocks"]
            out[f"{kind}_failed_blocks"] = d[kind + "_failed_blocks"]
            out[f"{kind}_MB"] = round(d[kind + "_bytes"] / 1e6, 3)
            out[f"{kind}_avg_ms"] = round(1000 * sum(secs) / len(secs), 3) if secs else 0.0
            out[f"{kind}_p90_ms"] = ms(secs, 0.9)
            total = sum(secs)
            out[f"{kind}_MBps"] = round(d[kind + "_bytes"] / 1e6 / total, 1) if total > 0 else 0.0
        out["lookups"] = d["lookups"]
        out["lookup_hit_rate"] = round(d["lookup_hit_blocks"] / d["lookup_blocks"], 4) if d["lookup_blocks"] else 0.0
        out["lookup_p90_ms"] = ms(d["lookup_seconds"], 0.9)
        return out


# ---------------------------------------------------------------- metadata

@dataclass
class BlockTransfer:
    """Blocks of one request to load or save: hashes[i] <-> block_ids[i].

    block_ids[i] is the block of position i in every KV-cache group (a
    tuple, one id per group) or, with a single group, a plain int."""

    req_id: str
    hashes: List[str]
    block_ids: List[Any]
    # A load the scheduler made asynchronous: reported via get_finished.
    is_async: bool = False


@dataclass
class DfkvConnectorMetadata(_MetaBase):
    loads: List[BlockTransfer] = field(default_factory=list)
    saves: List[BlockTransfer] = field(default_factory=list)
    # Finished requests whose blocks the scheduler holds until the workers
    # report their saves done (request_finished returned True for them).
    finished_sending_wanted: List[str] = field(default_factory=list)
    # Requests preempted in this step: their in-flight saves must end before
    # the freed blocks are written again.
    preempted_req_ids: List[str] = field(default_factory=list)


@dataclass
class _ReqState:
    request: Any
    hashes: List[str]
    block_ids: List[List[int]] = field(default_factory=list)  # per group
    stored_upto: int = 0  # blocks [0, stored_upto) are in dfkv (found, loaded or saved)
    prompt_len: int = 0
    local_computed: int = 0  # tokens vLLM already had (its prefix cache)
    hit_blocks: int = 0
    allocated: bool = False  # update_state_after_alloc ran since the last lookup
    saved_any: bool = False
    # The last load: its first position and the block ids of each of its
    # positions, to tell which position a failed block id stood for.
    load_first: int = 0
    load_ids: List[Any] = field(default_factory=list)
    # Hits are capped here after a load failed at this position, so a
    # request vLLM sends back to the connector does not load it again.
    hit_cap: Optional[int] = None
    # A load fed a forward directly (synchronous): what that forward
    # computed is saved only when the request finishes, when vLLM has
    # reported any failed block and recomputed what depended on it.
    sync_loaded: bool = False


@dataclass
class _LayerLoads:
    """A step's synchronous loads in flight, one ranged read per layer.

    Blocks are the positions of every transfer, in order; a layer's job
    sets events[layer] once its bytes of every block are in (or failed)."""

    trs: List[BlockTransfer]
    keys: List[bytes]
    block_ids: List[Any]
    events: Dict[str, threading.Event]
    last: str  # the last layer in layer order: waiting for it waits for all
    t0: float
    futures: List[Future] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    dead: Set[int] = field(default_factory=set)  # blocks (indexes) that failed some layer
    end: float = 0.0


@dataclass
class _Lookup:
    keys_per_block: List[List[bytes]]
    hashes: Tuple[str, ...]
    submitted: float
    done: bool = False
    hit_blocks: int = 0
    done_at: float = 0.0
    event: threading.Event = field(default_factory=threading.Event)


def _hash_str(h: Any) -> str:
    if isinstance(h, (bytes, bytearray)):
        return bytes(h).hex()
    inner = getattr(h, "block_hash", None)  # BlockHashWithGroupId
    if inner is not None:
        return _hash_str(inner)
    hv = getattr(h, "hash_value", None)  # older BlockHashType
    return str(hv if hv is not None else h)


def token_chain_hashes(tokens: List[int], block_size: int) -> List[str]:
    """SHA-256 chain over whole blocks of token ids (u32le each)."""
    out, prev = [], b""
    for i in range(len(tokens) // block_size):
        blk = tokens[i * block_size:(i + 1) * block_size]
        prev = hashlib.sha256(prev + struct.pack(f"<{len(blk)}I", *blk)).digest()
        out.append(prev.hex())
    return out


def _in_place(piece: Any) -> bool:
    """Whether dfkv can read and write a block piece where it lies: in host
    memory and row-major. Anything else (a device buffer; a paged buffer
    whose physical order differs from its shape, as FlashInfer's HND layout
    is under vLLM's NHD shape) goes through a row-major host copy, so the
    stored bytes are always the piece in its logical order and workers with
    different physical layouts of the same shape share blocks."""
    return piece.device.type == "cpu" and piece.is_contiguous()


def _resumed(cached: Any, i: int, rid: str) -> bool:
    """Whether cached request i (rid) resumes after preemption: vLLM says so
    with resumed_from_preemption[i], or, in newer versions, by listing it
    in resumed_req_ids."""
    flags = getattr(cached, "resumed_from_preemption", None)
    if flags is not None and i < len(flags) and flags[i]:
        return True
    ids = getattr(cached, "resumed_req_ids", None)
    return ids is not None and rid in ids


def _per_group(ids: Any) -> List[List[int]]:
    """vLLM's block ids as one list per KV-cache group: newer versions give
    a tuple of lists, older ones a flat list for their single group."""
    if ids is None:
        return []
    ids = list(ids)
    if ids and isinstance(ids[0], (list, tuple)):
        return [list(g) for g in ids]
    return [ids]


def _layer_index(name: str, fallback: int) -> int:
    m = re.search(r"\.(\d+)\.", "." + name + ".")
    return int(m.group(1)) if m else fallback


# The block vLLM's block pool keeps as a placeholder (a sliding-window
# position that fell out of the window): it holds no KV of the request.
NULL_BLOCK = 0


class DfkvConnector(_Base, SupportsHMA):
    """vLLM KVConnectorBase_V1 storing whole-prompt blocks in dfkv."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before kv_cache_config joined the signature
            super().__init__(vllm_config, role)
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        ktc = vllm_config.kv_transfer_config
        self.extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self.endpoints = Endpoints.from_settings(self.extra, "dfkv vLLM connector")
        mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
        self.block_size = int(cc.block_size)
        self.use_mla = bool(getattr(mc, "use_mla", False))
        self.tp = int(getattr(pc, "tensor_parallel_size", 1) or 1)
        self.pp = int(getattr(pc, "pipeline_parallel_size", 1) or 1)
        self.dcp = int(getattr(pc, "decode_context_parallel_size", 1) or 1)
        self.pcp = int(getattr(pc, "prefill_context_parallel_size", 1) or 1)
        if self.pcp > 1:
            # Each PCP rank holds a different shard of a block's tokens, and
            # the object key has no PCP rank: ranks would overwrite each
            # other's shards and loads would return another rank's.
            raise ValueError(f"dfkv vLLM connector: prefill context parallel size {self.pcp} is not supported; "
                             "run with prefill_context_parallel_size = 1")
        hf = getattr(mc, "hf_config", None)
        self.num_layers = int(getattr(hf, "num_hidden_layers", 0) or mc.get_num_layers(pc))
        self.kv_heads = 1 if self.use_mla else int(mc.get_total_num_kv_heads())
        self.head_size = int(mc.get_head_size())
        cache_dtype = getattr(cc, "cache_dtype", "auto")
        self.dtype = dtype_name(mc.dtype if cache_dtype in (None, "auto") else cache_dtype)
        self._init_groups(kv_cache_config)
        self.tp_rank, self.pp_rank, self.dcp_rank = self._ranks() if role == KVConnectorRole.WORKER else (0, 0, 0)
        # MLA KV is identical on every TP rank holding the same DCP shard:
        # the first of them writes it, the others would only repeat the
        # same bytes over the network.
        self.writes = (not self.use_mla) or self.tp_rank == self.dcp_rank
        # On/off settings take every spelling the dfkv binary takes (an
        # unknown word is refused, not read as its opposite).
        on = switch(setting(self.extra, "dfkv_load_async", None, None), "dfkv_load_async", "dfkv vLLM connector")
        self.load_async = True if on is None else on
        if self.num_groups > 1:
            # vLLM finishes an asynchronous load with one block table
            # (a single KV-cache group); hybrid models load in the step.
            self.load_async = False
        # vLLM's scheduler handles failed blocks (get_block_ids_with_load_errors)
        # for one KV-cache group only: with several, one failed load stops
        # the engine (its block table does not unpack). So hybrid models
        # only save unless this is set, accepting that risk.
        self.hybrid_loads = bool(switch(setting(self.extra, "dfkv_hybrid_loads", None, None), "dfkv_hybrid_loads",
                                        "dfkv vLLM connector"))
        self.lookup_wait = float(setting(self.extra, "dfkv_lookup_wait_ms", None, 0)) / 1000
        self.lookup_timeout = float(setting(self.extra, "dfkv_lookup_timeout_ms", None, 2000)) / 1000
        self.lookup_ttl = float(setting(self.extra, "dfkv_lookup_ttl_ms", None, 1000)) / 1000
        # The client opens here, so a setting libdfkv refuses stops vLLM at
        # start; nodes or an MDS that do not answer yet only make misses
        # (the client property retries), so a cache outage at start is not
        # an inference outage.
        self._slot = ClientSlot("dfkv vLLM connector", float(setting(self.extra, "dfkv_reopen_interval_s", None, 2.0)))
        try:
            self.client
        except DfkvError as e:
            if e.status == Status.INVALID:
                raise
            logger.warning("dfkv vLLM connector: cannot reach the dfkv nodes yet (%s); blocks miss until they "
                           "answer (retried every %.0f s)", e, self._slot.reopen_s)
        self._stats = DfkvConnectorStats()
        self._stats_lock = threading.Lock()
        # scheduler side
        self._reqs: Dict[str, _ReqState] = {}
        self._pending_loads: List[BlockTransfer] = []
        self._pending_saves: List[BlockTransfer] = []
        self._sends_to_announce: List[str] = []
        self._awaiting_sent: Set[str] = set()  # finished, blocks held until the workers' saves end
        self._loading: Set[str] = set()  # asynchronous loads not yet reported finished
        self._lookups: Dict[str, _Lookup] = {}
        self._lk_cv = threading.Condition()
        self._lk_queue: List[_Lookup] = []
        self._lk_thread: Optional[threading.Thread] = None
        self._closed = False
        # worker side
        self._layers: List[Tuple[str, Any, int]] = []  # (name, paged buffer, group)
        self._load_errors: set = set()
        self._io: Optional[ThreadPoolExecutor] = None
        self._io_threads = int(setting(self.extra, "dfkv_io_threads", None, 4))
        # Synchronous layer-wise loads run on threads of their own: behind
        # the saves queued on _io they would hold the forward back.
        self._layer_io: Optional[ThreadPoolExecutor] = None
        self._layer_loads: Optional[_LayerLoads] = None
        # Per layer (register_kv_caches): the byte offset and length of its
        # pieces in a block's object; None where a layout's are unknown.
        self._layer_offsets: Optional[List[int]] = None
        self._layer_bytes: Optional[List[int]] = None
        self._jobs_lock = threading.Lock()
        self._load_jobs: Dict[str, List[Future]] = {}
        self._save_jobs: Dict[str, List[Future]] = {}
        self._want_sent: Set[str] = set()
        # This step's saves, until wait_for_save starts them: get_finished
        # may run first (vLLM defers wait_for_save past it for speculative
        # decoding), and must not report their requests sent before.
        self._unstarted: List[BlockTransfer] = []

    # -- setup -----------------------------------------------------------

    def _init_groups(self, kv_cache_config: Any) -> None:
        """Learn the KV-cache groups: which layers each holds and whether
        vLLM may free a running request's blocks in it (sliding window and
        chunked local attention drop positions that left the window)."""
        groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or [])
        self.num_groups = max(1, len(groups))
        self._layer_group: Dict[str, int] = {}
        self._frees_while_running = False
        for g, grp in enumerate(groups):
            spec = getattr(grp, "kv_cache_spec", None)
            kind = type(spec).__name__
            if "Mamba" in kind or "Linear" in kind:
                raise ValueError(f"dfkv vLLM connector: KV-cache group {g} is {kind}, whose state is not "
                                 "per-token KV blocks; run this model without the dfkv connector")
            bs = getattr(spec, "block_size", None)
            if bs is not None and int(bs) != self.block_size:
                raise ValueError(f"dfkv vLLM connector: KV-cache group {g} has block size {bs}, not the "
                                 f"cache block size {self.block_size}; blocks of different sizes cannot share a hash")
            if spec is not None and kind not in ("FullAttentionSpec", "MLAAttentionSpec"):
                self._frees_while_running = True
            for name in getattr(grp, "layer_names", ()) or ():
                self._layer_group[name] = g

    @property
    def client(self) -> Client:
        """The open client, opening it if needed. One thread opens, outside
        the lock (with an MDS, open is network I/O); every other caller,
        meanwhile and for dfkv_reopen_interval_s after a failed open, gets
        NotConnected at once, which lookups, loads and saves turn into
        misses and failed blocks (see ClientSlot)."""
        return self._slot.get(self._open_client)

    def _open_client(self) -> Client:
        ep = self.endpoints
        lib = setting(self.extra, "dfkv_library", "DFKV_LIBRARY")
        opts = dict(timeout_ms=int(setting(self.extra, "dfkv_timeout_ms", None, 0)),
                    dial_timeout_ms=int(setting(self.extra, "dfkv_dial_timeout_ms", None, 0)), library=lib)
        # Through the MDS; when it is down and static members are set, one
        # warning and the static list: the engine keeps its cache tier.
        return ep.open_client(self.namespace(), "dfkv vLLM connector", logger, **opts)

    # -- identity --------------------------------------------------------

    def _ranks(self) -> Tuple[int, int, int]:
        e = self.extra
        if "dfkv_tp_rank" in e:
            return int(e["dfkv_tp_rank"]), int(e.get("dfkv_pp_rank", 0)), int(e.get("dfkv_dcp_rank", 0))
        try:  # needs a vLLM worker
            from vllm.distributed.parallel_state import get_pp_group, get_tensor_model_parallel_rank
            tp_rank = get_tensor_model_parallel_rank()
            pp_rank = get_pp_group().rank_in_group
            try:
                from vllm.distributed.parallel_state import get_dcp_group
                dcp_rank = get_dcp_group().rank_in_group if self.dcp > 1 else 0
            except Exception:
                dcp_rank = 0
            return int(tp_rank), int(pp_rank), int(dcp_rank)
        except Exception as e:
            raise RuntimeError("dfkv vLLM connector: cannot learn this worker's TP/PP ranks from vLLM; "
                               "set kv_connector_extra_config dfkv_tp_rank/dfkv_pp_rank") from e

    def namespace(self) -> NamespaceDescriptor:
        mc = self.vllm_config.model_config
        per_rank_heads = self.kv_heads if self.use_mla else max(1, self.kv_heads // self.tp)
        fields = [
            ("block_object", [1]),  # one object per block holding every layer of a rank
            ("kv_block_shape", [2 if not self.use_mla else 1, self.block_size, per_rank_heads, self.head_size]),
            ("use_mla", [int(self.use_mla)]),
        ]
        if self.num_groups > 1:
            # Which group each layer's block came from: a hybrid model's
            # object is only meaningful to a worker grouping layers alike.
            names = sorted(self._layer_group, key=lambda n: (_layer_index(n, 0), n))
            fields.append(("kv_groups", [self.num_groups] + [self._layer_group[n] for n in names]))
        return NamespaceDescriptor(
            tenant=str(setting(self.extra, "dfkv_tenant", None, "default")),
            model_id=str(mc.model), model_revision=str(getattr(mc, "revision", None) or ""),
            layout_id=LAYOUT_VLLM, dtype=self.dtype, layout_fingerprint=layout_fingerprint(fields),
            block_tokens=self.block_size,
            layer_geometry=LayerGeometry(self.num_layers, self.kv_heads, self.head_size),
            group=str(setting(self.extra, "dfkv_group", None, "")),
            topology_sizes=TopologySizes(dp=1, tp=self.tp, pcp=self.pcp, dcp=self.dcp, pp=self.pp),
        )

    def object_key(self, block_hash: str, tp_rank: int, pp_rank: int, dcp_rank: int = 0) -> bytes:
        return ObjectKey(pool="vllm", hash=escape_key_part(block_hash),
                         tp=(self.tp, -1 if self.use_mla else tp_rank), pp=(self.pp, pp_rank),
                         dcp=(self.dcp, dcp_rank), pcp=(self.pcp, 0), component="kv").render_bytes()

    def _all_rank_keys(self, block_hash: str) -> List[bytes]:
        tps = [0] if self.use_mla else range(self.tp)
        return [self.object_key(block_hash, t, p, d) for t in tps for p in range(self.pp) for d in range(self.dcp)]

    def _request_hashes(self, request: Any) -> Optional[List[str]]:
        if getattr(request, "prompt_token_ids", None) is None:
            return None  # prompt embeddings: no token ids to name the blocks by
        hs = getattr(request, "block_hashes", None)
        if hs:
            return [_hash_str(h) for h in hs]
        if getattr(request, "mm_features", None) or getattr(request, "mm_hashes", None) \
                or getattr(request, "lora_request", None) or getattr(request, "cache_salt", None):
            return None  # token ids alone would alias these
        return token_chain_hashes(list(request.prompt_token_ids), self.block_size)

    @property
    def requires_kv_delivery(self) -> bool:
        # A cache, not a hand-off: a save lost to preemption is a later miss.
        return False

    # -- scheduler side: lookups -----------------------------------------

    def _lookup_loop(self) -> None:
        """Answers every queued lookup with one batched existence check, so
        the scheduling loop never waits on the network."""
        while True:
            with self._lk_cv:
                while not self._lk_queue and not self._closed:
                    self._lk_cv.wait()
                if self._closed:
                    return
                batch, self._lk_queue = self._lk_queue, []
            t0 = time.monotonic()
            uniq: Dict[bytes, int] = {}
            for lk in batch:
                for keys in lk.keys_per_block:
                    for k in keys:
                        uniq.setdefault(k, len(uniq))
            try:
                # Pinned: the blocks counted as hits are loaded next.
                st, _ = self.client.batch_exist(list(uniq), pin=True)
                ok = [s == Status.OK for s in st]
            except Exception as e:  # a closed client or a library fault: no hits
                log = logger.debug if isinstance(e, NotConnected) else logger.warning
                log("dfkv vLLM connector: lookup of %d keys failed: %s", len(uniq), e)
                ok = [False] * len(uniq)
            now = time.monotonic()
            for lk in batch:
                hit = 0
                for keys in lk.keys_per_block:
                    if not all(ok[uniq[k]] for k in keys):
                        break
                    hit += 1
                lk.hit_blocks, lk.done_at, lk.done = hit, now, True
                lk.event.set()
                with self._stats_lock:
                    self._stats.record("lookup", len(lk.keys_per_block), hit, now - t0)

    def _submit_lookup(self, hashes: Sequence[str]) -> _Lookup:
        lk = _Lookup([self._all_rank_keys(h) for h in hashes], tuple(hashes), time.monotonic())
        with self._lk_cv:
            if self._lk_thread is None:
                self._lk_thread = threading.Thread(target=self._lookup_loop, name="dfkv-vllm-lookup", daemon=True)
                self._lk_thread.start()
            self._lk_queue.append(lk)
            self._lk_cv.notify()
        return lk

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        rid = request.request_id
        hashes = self._request_hashes(request)
        if hashes is None:
            return 0, False
        prompt_len = len(request.prompt_token_ids)
        hashes = hashes[:prompt_len // self.block_size]
        st = self._reqs.get(rid)
        if st is None:
            st = self._reqs[rid] = _ReqState(request=request, hashes=hashes, prompt_len=prompt_len)
        st.request, st.hashes, st.prompt_len, st.local_computed = request, hashes, prompt_len, num_computed_tokens
        st.allocated = False
        # Leave at least one prompt token to compute.
        usable = min(len(hashes), (prompt_len - 1) // self.block_size)
        if self.num_groups > 1 and not self.hybrid_loads:
            usable = 0  # saved for engines that load them; nothing to load here
        if usable <= 0:
            st.hit_blocks = 0
            return 0, False
        now = time.monotonic()
        want = tuple(hashes[:usable])
        lk = self._lookups.get(rid)
        if lk is None or lk.hashes != want or (lk.done and now - lk.done_at > self.lookup_ttl):
            lk = self._lookups[rid] = self._submit_lookup(want)
            if self.lookup_wait > 0:
                lk.event.wait(self.lookup_wait)
        if not lk.done:
            if now - lk.submitted > self.lookup_timeout:
                # The nodes are too slow to answer: compute rather than
                # hold the request back any longer.
                self._lookups.pop(rid, None)
                st.hit_blocks = 0
                return 0, False
            return None, False
        st.hit_blocks = lk.hit_blocks if st.hit_cap is None else min(lk.hit_blocks, st.hit_cap)
        need = st.hit_blocks * self.block_size - num_computed_tokens
        if need <= 0:
            return 0, False
        return need, self.load_async

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        ids = blocks.get_block_ids() if hasattr(blocks, "get_block_ids") else blocks
        st.block_ids = _per_group(ids)
        if st.allocated:
            return  # the second call after an asynchronous load: nothing more to load
        st.allocated = True
        self._lookups.pop(request.request_id, None)
        st.stored_upto = max(st.stored_upto, st.hit_blocks)
        if num_external_tokens <= 0:
            return
        first = st.local_computed // self.block_size
        last = first + num_external_tokens // self.block_size
        positions = self._positions(st.block_ids, first, last)
        if len(positions) < last - first:
            return  # cannot happen with vLLM's allocator; loading nothing is safe
        st.load_first, st.load_ids = first, positions
        self._pending_loads.append(BlockTransfer(request.request_id, st.hashes[first:last], positions,
                                                 is_async=self.load_async))
        if self.load_async:
            self._loading.add(request.request_id)
        else:
            st.sync_loaded = True

    def _positions(self, groups: List[List[int]], first: int, last: int, stop_at_null: bool = False) -> List[Any]:
        """Block ids of positions [first, last) in every group: an int with
        one group, a tuple with several. With stop_at_null, the list ends
        at the first position some group holds no block for."""
        out: List[Any] = []
        for i in range(first, last):
            if any(i >= len(g) for g in groups):
                break
            ids = tuple(g[i] for g in groups)
            if stop_at_null and NULL_BLOCK in ids:
                break
            out.append(ids[0] if len(ids) == 1 else ids)
        return out

    def _save_upto(self, st: _ReqState, done_tokens: int) -> Optional[BlockTransfer]:
        """The save of st's prompt blocks computed by done_tokens that dfkv
        does not have yet."""
        full = min(done_tokens, st.prompt_len) // self.block_size
        full = min(full, len(st.hashes))
        publishable = getattr(st.request, "num_publishable_block_hashes", None)
        if isinstance(publishable, int):
            full = min(full, publishable)
        if full <= st.stored_upto:
            return None
        positions = self._positions(st.block_ids, st.stored_upto, full, stop_at_null=True)
        if not positions:
            return None
        end = st.stored_upto + len(positions)
        tr = BlockTransfer(st.request.request_id, st.hashes[st.stored_upto:end], positions)
        st.stored_upto = end
        st.saved_any = True
        return tr

    def build_connector_meta(self, scheduler_output: Any) -> DfkvConnectorMetadata:
        meta = DfkvConnectorMetadata(loads=self._pending_loads, saves=self._pending_saves,
                                     finished_sending_wanted=self._sends_to_announce,
                                     preempted_req_ids=sorted(getattr(scheduler_output, "preempted_req_ids", None)
                                                              or ()))
        self._pending_loads, self._pending_saves, self._sends_to_announce = [], [], []
        for rid in meta.preempted_req_ids:
            st = self._reqs.get(rid)
            if st is not None:
                st.load_ids = []  # freed: a failure reported for them is another request's
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", {}) or {}
        progress: List[Tuple[str, int]] = []
        for new in getattr(scheduler_output, "scheduled_new_reqs", []) or []:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = _per_group(new.block_ids)
            progress.append((new.req_id, new.num_computed_tokens + scheduled.get(new.req_id, 0)))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None and hasattr(cached, "req_ids"):
            new_ids = getattr(cached, "new_block_ids", None) or []
            for i, rid in enumerate(cached.req_ids):
                st = self._reqs.get(rid)
                if st is None:
                    continue
                nb = _per_group(new_ids[i]) if i < len(new_ids) else []
                if nb:
                    if _resumed(cached, i, rid):
                        # A request resumed after preemption gets its whole
                        # block list anew; appending it would shift every
                        # later save onto the wrong blocks.
                        st.block_ids = nb
                    else:
                        if len(st.block_ids) != len(nb):
                            st.block_ids = [[] for _ in nb]
                        for g, extra in zip(st.block_ids, nb):
                            g.extend(extra)
                progress.append((rid, cached.num_computed_tokens[i] + scheduled.get(rid, 0)))
        for rid, done_tokens in progress:
            st = self._reqs[rid]
            if st.sync_loaded:
                # The forward that read a synchronous load computed on top
                # of it: if a loaded block was bad, so is what came after.
                # Whether it was is known for sure only at request_finished.
                continue
            tr = self._save_upto(st, done_tokens)
            if tr is not None:
                meta.saves.append(tr)
        return meta

    def update_connector_output(self, connector_output: Any) -> None:
        bad = set(getattr(connector_output, "invalid_block_ids", None) or ())
        if bad:
            self._note_failed_loads(bad)
        for rid in getattr(connector_output, "finished_recving", None) or ():
            self._loading.discard(rid)
            st = self._reqs.get(rid)
            if st is not None:
                st.load_ids = []  # its failed blocks came no later than this
        for rid in getattr(connector_output, "finished_sending", None) or ():
            self._awaiting_sent.discard(rid)

    def _note_failed_loads(self, bad: Set[int]) -> None:
        """A load failed at some position: vLLM recomputes from there, so
        those blocks are saved again (replacing a bad object), and a request
        vLLM asks about again (every block failed) does not load them again
        (the same object would fail the same way, for ever)."""
        for st in self._reqs.values():
            for i, ids in enumerate(st.load_ids):
                if set(self._real_ids(ids)) & bad:
                    pos = st.load_first + i
                    st.stored_upto = min(st.stored_upto, pos)
                    st.hit_cap = pos if st.hit_cap is None else min(st.hit_cap, pos)
                    break

    def has_pending_push_work(self) -> bool:
        # Keep the engine stepping while blocks wait on our transfers, or a
        # finished request's blocks stay held until the next request comes.
        return bool(self._awaiting_sent or self._loading)

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Optional[dict]]:
        return self._finished(request, _per_group(block_ids))

    def request_finished_all_groups(self, request: Any,
                                    block_ids: Tuple[List[int], ...]) -> Tuple[bool, Optional[dict]]:
        return self._finished(request, _per_group(block_ids))

    def _finished(self, request: Any, groups: List[List[int]]) -> Tuple[bool, Optional[dict]]:
        rid = request.request_id
        st = self._reqs.pop(rid, None)
        self._lookups.pop(rid, None)
        if rid in self._loading:
            # The load still writes into these blocks: vLLM frees them when
            # a worker reports the load finished.
            return True, None
        if st is None:
            return False, None
        if groups and st.allocated:
            # Prompt blocks computed in the last step were never in a
            # scheduler output after it: save them now, from the blocks
            # vLLM hands over (held until the save is done).
            st.block_ids = groups
            done = int(getattr(request, "num_computed_tokens", 0) or 0)
            tr = self._save_upto(st, done)
            if tr is not None:
                self._pending_saves.append(tr)
        if not st.saved_any:
            return False, None
        self._awaiting_sent.add(rid)
        self._sends_to_announce.append(rid)
        return True, None

    # -- worker side -----------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        """Remember the paged buffers in layer order, each with its
        KV-cache group. Layouts: [2, blocks, ...] (K and V planes) or
        [blocks, ...] (MLA / block-first)."""
        named = sorted(kv_caches.items(), key=lambda kv: (_layer_index(kv[0], 0), kv[0]))
        self._layers = [(n, t, self._layer_group.get(n, 0)) for n, t in named]
        self._layer_offsets, self._layer_bytes = None, None
        try:
            sizes = [self._layer_size(t) for _, t, _ in self._layers]
        except Exception:  # a buffer that is not a tensor as we know them
            sizes = [None]
        if self._layers and all(n is not None and n > 0 for n in sizes):
            self._layer_bytes = [int(n) for n in sizes]  # type: ignore[arg-type]
            self._layer_offsets = [sum(self._layer_bytes[:i]) for i in range(len(sizes))]

    def _planes(self, t: Any) -> bool:
        """Whether a paged buffer is [2, blocks, ...]: a block is a K and a V piece."""
        return not self.use_mla and t.dim() >= 4 and t.shape[0] == 2

    def _layer_size(self, t: Any) -> Optional[int]:
        """The bytes of one block's pieces of layer buffer t (what _pieces
        takes from it), or None for a buffer of fewer than two dimensions,
        which holds no block per index."""
        if self._planes(t):
            dims = [2] + list(t.shape[2:])
        elif t.dim() >= 2:
            dims = list(t.shape[1:])
        else:
            return None
        n = int(t.element_size())
        for d in dims:
            n *= int(d)
        return n

    def _layer_pieces(self, ids: Any, li: int, throwaway_null: bool = False) -> List[Any]:
        """Layer li's pieces of one position: ids is the position's block
        (an int) or one block per group (a tuple). With throwaway_null, a
        group holding no block at a position of several groups (out of its
        window) gets host buffers to take a load's bytes instead."""
        per_group = ids if isinstance(ids, (tuple, list)) else (ids,)
        _, t, g = self._layers[li]
        b = per_group[g] if g < len(per_group) else per_group[0]
        ps = [t[0, b], t[1, b]] if self._planes(t) else [t[b]]
        if throwaway_null and len(per_group) > 1 and b == NULL_BLOCK:
            ps = [p.new_empty(p.shape, device="cpu") for p in ps]
        return ps

    def _pieces(self, ids: Any) -> List[Any]:
        """The block pieces of one position, in layer order."""
        return [p for li in range(len(self._layers)) for p in self._layer_pieces(ids, li)]

    def _keys(self, hashes: List[str]) -> List[bytes]:
        return [self.object_key(h, self.tp_rank, self.pp_rank, self.dcp_rank) for h in hashes]

    def _pool(self) -> ThreadPoolExecutor:
        if self._io is None:
            self._io = ThreadPoolExecutor(max_workers=max(1, self._io_threads), thread_name_prefix="dfkv-vllm-io")
        return self._io

    @staticmethod
    def _real_ids(ids: Any) -> List[int]:
        per_group = ids if isinstance(ids, (tuple, list)) else (ids,)
        return [b for b in per_group if b != NULL_BLOCK]

    def _load(self, tr: BlockTransfer) -> Set[int]:
        """Loads tr's blocks into the paged buffers; returns the ids of the
        blocks that did not load (a miss, a node error, an object of
        another size). Never raises: whatever fails is a failed block."""
        t0 = time.monotonic()
        failed: Set[int] = set()
        nbytes = 0
        try:
            items, staged = [], []
            for ids in tr.block_ids:
                it = [p for li in range(len(self._layers)) for p in self._layer_pieces(ids, li, throwaway_null=True)]
                items.append(it)
                staged.append([p if _in_place(p) else p.new_empty(p.shape, device="cpu") for p in it])
            want = [sum(int(p.numel()) * p.element_size() for p in it) for it in items]
            st, stored = self.client.batch_get_sg(self._keys(tr.hashes), staged)
            for ids, s, n, w, it, sit in zip(tr.block_ids, st, stored, want, items, staged):
                if s != Status.OK or n != w:
                    failed.update(self._real_ids(ids))
                    continue
                nbytes += w
                for p, sp in zip(it, sit):
                    if sp is not p:
                        p.copy_(sp)
        except Exception as e:
            logger.warning("dfkv vLLM connector: load of %d blocks for request %s failed: %s",
                           len(tr.block_ids), tr.req_id, e)
            for ids in tr.block_ids:
                failed.update(self._real_ids(ids))
        nfailed = sum(1 for ids in tr.block_ids if set(self._real_ids(ids)) & failed)
        if nfailed:
            logger.info("dfkv vLLM connector: %d of %d blocks of request %s did not load; vLLM recomputes them",
                        nfailed, len(tr.block_ids), tr.req_id)
        with self._stats_lock:
            self._stats.record("load", len(tr.block_ids), nbytes, time.monotonic() - t0, nfailed)
        return failed

    def _start_layer_loads(self, trs: List[BlockTransfer]) -> None:
        """Starts trs (synchronous loads) as one ranged batch read per
        layer, in layer order; wait_for_layer_load waits for each. Never
        raises: what cannot start is failed blocks."""
        ld = None
        try:
            names = [n for n, _, _ in self._layers]
            ld = _LayerLoads(trs, [k for tr in trs for k in self._keys(tr.hashes)],
                             [ids for tr in trs for ids in tr.block_ids],
                             {n: threading.Event() for n in names}, names[-1], time.monotonic())
            self._layer_loads = ld
            if self._layer_io is None:
                self._layer_io = ThreadPoolExecutor(max_workers=max(1, self._io_threads),
                                                    thread_name_prefix="dfkv-vllm-layer")
            for li in range(len(names)):
                ld.futures.append(self._layer_io.submit(self._load_layer, ld, li))
        except Exception as e:
            logger.warning("dfkv vLLM connector: layer-wise load for %d requests could not start: %s", len(trs), e)
            if ld is None:
                for tr in trs:
                    for ids in tr.block_ids:
                        self._load_errors.update(self._real_ids(ids))
                return
            with ld.lock:
                ld.dead.update(range(len(ld.block_ids)))
            for ev in ld.events.values():
                ev.set()  # a job that did start sets its own again; the rest never run

    def _load_layer(self, ld: _LayerLoads, li: int) -> None:
        """Reads layer li of every block of ld still alive into the paged
        buffers, then sets the layer's event. A block whose read fails, or
        whose stored length is not the whole block's, is dead. Never raises."""
        alive: List[int] = []
        try:
            with ld.lock:
                alive = [j for j in range(len(ld.keys)) if j not in ld.dead]
            if not alive:
                return
            offsets, sizes = self._layer_offsets or [], self._layer_bytes or []
            whole = offsets[-1] + sizes[-1]
            targets = [self._layer_pieces(ld.block_ids[j], li, throwaway_null=True) for j in alive]
            staged = [[p if _in_place(p) else p.new_empty(p.shape, device="cpu") for p in it] for it in targets]
            st, stored = self.client.batch_get_range_sg([ld.keys[j] for j in alive], [offsets[li]] * len(alive),
                                                        staged)
            bad = []
            for j, s, n, it, sit in zip(alive, st, stored, targets, staged):
                if s != Status.OK or n != whole:
                    bad.append(j)
                    continue
                for p, sp in zip(it, sit):
                    if sp is not p:
                        p.copy_(sp)
            with ld.lock:
                ld.dead.update(bad)
        except Exception as e:
            logger.warning("dfkv vLLM connector: load of layer %s of %d blocks failed: %s",
                           self._layers[li][0], len(alive), e)
            with ld.lock:
                ld.dead.update(alive)
        finally:
            with ld.lock:
                ld.end = max(ld.end, time.monotonic())
            ld.events[self._layers[li][0]].set()

    def _finish_layer_loads(self) -> None:
        """Waits for the synchronous layer-wise loads in flight, if any,
        and takes their failed blocks into _load_errors, as _load's are."""
        ld, self._layer_loads = self._layer_loads, None
        if ld is None:
            return
        try:
            for ev in ld.events.values():
                ev.wait()
            with ld.lock:
                dead, end = set(ld.dead), ld.end or time.monotonic()
            for j in dead:
                self._load_errors.update(self._real_ids(ld.block_ids[j]))
            whole = sum(self._layer_bytes or ())
            first = 0
            for tr in ld.trs:
                n = len(tr.block_ids)
                nfailed = sum(1 for j in range(first, first + n) if j in dead)
                first += n
                if nfailed:
                    logger.info("dfkv vLLM connector: %d of %d blocks of request %s did not load; "
                                "vLLM recomputes them", nfailed, n, tr.req_id)
                with self._stats_lock:
                    self._stats.record("load", n, (n - nfailed) * whole, end - ld.t0, nfailed)
        except Exception as e:
            logger.warning("dfkv vLLM connector: finishing a layer-wise load failed: %s", e)
            for ids in ld.block_ids:
                self._load_errors.update(self._real_ids(ids))

    def _save(self, tr: BlockTransfer) -> int:
        """Writes tr's blocks; returns how many failed. Never raises: a
        failed save is only a later miss."""
        t0 = time.monotonic()
        bad, nbytes = len(tr.hashes), 0
        try:
            items = []
            for ids in tr.block_ids:
                items.append([p if _in_place(p) else p.new_empty(p.shape, device="cpu").copy_(p)
                              for p in self._pieces(ids)])
            st = self.client.batch_put_sg(self._keys(tr.hashes), items)
            bad = sum(s != Status.OK for s in st)
            nbytes = sum(sum(int(p.numel()) * p.element_size() for p in it)
                         for it, s in zip(items, st) if s == Status.OK)
        except NotConnected as e:
            # The failed open said why, once; each save meanwhile is a miss
            # later, not a warning now.
            logger.debug("dfkv vLLM connector: save for request %s skipped: %s", tr.req_id, e)
            with self._stats_lock:
                self._stats.record("save", len(tr.hashes), 0, time.monotonic() - t0, bad)
            return bad
        except Exception as e:
            logger.warning("dfkv vLLM connector: save for request %s failed: %s", tr.req_id, e)
        if bad:
            logger.warning("dfkv vLLM connector: %d of %d block saves failed for request %s",
                           bad, len(tr.hashes), tr.req_id)
        with self._stats_lock:
            self._stats.record("save", len(tr.hashes), nbytes, time.monotonic() - t0, bad)
        return bad

    def _wait_saves(self, req_ids: Optional[Iterable[str]] = None) -> None:
        with self._jobs_lock:
            if req_ids is None:
                futs = [f for fs in self._save_jobs.values() for f in fs]
            else:
                futs = [f for r in req_ids for f in self._save_jobs.get(r, ())]
        if futs:
            wait_futures(futs)

    def handle_preemptions(self, preempted: Any) -> None:
        """Ends the saves of preempted requests before vLLM reuses their
        blocks (it passes the preempted ids, or this step's metadata)."""
        ids = preempted if isinstance(preempted, (set, frozenset, list, tuple)) else \
            getattr(preempted, "preempted_req_ids", None) or ()
        self._finish_layer_loads()
        self._wait_saves(ids)

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        # A forward that never waited for its last layer (it failed, or
        # skipped a layer) leaves its loads to end here, before new ones.
        self._finish_layer_loads()
        super().bind_connector_metadata(connector_metadata)
        if self._frees_while_running:
            # Sliding-window groups free a running request's blocks that
            # left the window: nothing may still read them in this step.
            self._wait_saves()
        else:
            self._wait_saves(getattr(connector_metadata, "preempted_req_ids", None) or ())
        self._want_sent.update(getattr(connector_metadata, "finished_sending_wanted", None) or ())
        self._unstarted = [tr for tr in getattr(connector_metadata, "saves", None) or () if tr.hashes] \
            if self.writes else []

    def clear_connector_metadata(self) -> None:
        # A step without a forward may skip wait_for_save (older vLLM):
        # its saves read blocks no forward changed and vLLM still holds.
        self._finish_layer_loads()
        self._start_saves()
        super().clear_connector_metadata()

    def _start_saves(self) -> None:
        trs, self._unstarted = self._unstarted, []
        for tr in trs:
            fut = self._pool().submit(self._save, tr)
            with self._jobs_lock:
                self._save_jobs.setdefault(tr.req_id, []).append(fut)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        self._finish_layer_loads()
        sync: List[BlockTransfer] = []
        for tr in meta.loads:
            if tr.is_async:
                fut = self._pool().submit(self._load, tr)
                with self._jobs_lock:
                    self._load_jobs.setdefault(tr.req_id, []).append(fut)
            elif tr.hashes:
                sync.append(tr)
        if not sync:
            return
        if self._layer_offsets is None:
            # Layer sizes unknown: whole blocks, done before the forward.
            for tr in sync:
                self._load_errors |= self._load(tr)
        else:
            # This step's forward reads them: wait_for_layer_load holds
            # each layer back until its bytes are in.
            self._start_layer_loads(sync)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Waits until layer_name's bytes of this step's synchronous loads
        are in its paged buffer; before the last layer, until every layer's
        are and their failed blocks are known. Other names return at once."""
        ld = self._layer_loads
        if ld is None:
            return
        if layer_name == ld.last:
            self._finish_layer_loads()
            return
        ev = ld.events.get(layer_name)
        if ev is not None:
            ev.wait()

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # whole blocks (all layers) are written after the forward

    def wait_for_save(self) -> None:
        """Starts this step's saves on the I/O threads and returns: vLLM
        does not touch the saved blocks again before get_finished reports
        the request (blocks of finished requests are held, preempted ones
        wait in handle_preemptions)."""
        self._get_connector_metadata()
        self._finish_layer_loads()
        self._start_saves()

    def get_finished(self, finished_req_ids: set):
        self._finish_layer_loads()
        sending, recving = set(), set()
        with self._jobs_lock:
            for rid, futs in list(self._load_jobs.items()):
                if all(f.done() for f in futs):
                    del self._load_jobs[rid]
                    for f in futs:
                        self._load_errors |= f.result()
                    recving.add(rid)
            for rid, futs in list(self._save_jobs.items()):
                left = [f for f in futs if not f.done()]
                if left:
                    self._save_jobs[rid] = left
                else:
                    del self._save_jobs[rid]
            unstarted = {tr.req_id for tr in self._unstarted}
            for rid in list(self._want_sent):
                if rid not in self._save_jobs and rid not in unstarted:
                    self._want_sent.discard(rid)
                    sending.add(rid)
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self) -> set:
        self._finish_layer_loads()
        errs, self._load_errors = self._load_errors, set()
        return errs

    def get_kv_connector_stats(self) -> Optional[DfkvConnectorStats]:
        with self._stats_lock:
            if self._stats.is_empty():
                return None
            return self._stats.clone_and_reset()

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None) -> DfkvConnectorStats:
        return DfkvConnectorStats(data=dict(data)) if data is not None else DfkvConnectorStats()

    def shutdown(self) -> None:
        with self._lk_cv:
            self._closed = True
            self._lk_cv.notify_all()
        if self._lk_thread is not None:
            self._lk_thread.join(timeout=30)
        self._finish_layer_loads()
        if self._layer_io is not None:
            self._layer_io.shutdown(wait=True)
        if self._io is not None:
            self._io.shutdown(wait=True)
        self._slot.close()
