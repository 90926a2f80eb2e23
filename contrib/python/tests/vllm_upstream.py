"""A stand-in for the parts of vLLM that load and drive a KV connector.

Written here (not copied) to the signatures and call order of the newest
vllm-project/vllm versions found in the code index:

* ``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` (commit
  003df2961dd8830c317a61f9745ccd557da9fa06): KVConnectorRole,
  KVConnectorMetadata, the SupportsHMA mixin with request_finished_all_groups,
  KVConnectorBase_V1(vllm_config, role, kv_cache_config) and its worker and
  scheduler methods, get_num_new_matched_tokens answering (None, False) for
  "ask again later", has_pending_push_work, requires_kv_delivery,
  build_kv_connector_stats;
* ``kv_connector/factory.py`` (the version with typed connector selection;
  the index did not name its commit): a class
  named by kv_connector is imported from kv_connector_module_path, must
  accept kv_cache_config, and must be SupportsHMA unless
  disable_hybrid_kv_cache_manager is set; it is built as
  cls(config, role, kv_cache_config), once per role;
* ``kv_connector/v1/metrics.py`` (the dataclass version; commit not named):
  KVConnectorStats(data) with aggregate,
  reduce, is_empty; the logger rebuilds stats with build_kv_connector_stats;
* ``vllm/v1/core/sched/output.py`` (commit 00e8f1fd0936d138370d01dbe1b4f8e12baf63b1):
  SchedulerOutput, NewRequestData (block_ids a tuple per KV-cache group,
  prompt_token_ids None for prompt embeddings), CachedRequestData
  (resumed_req_ids, new_block_ids, num_computed_tokens);
* ``vllm/v1/core/sched/scheduler.py`` (commit 00024d314514900f361ad072af6931e403b7f589):
  waiting requests ask get_num_new_matched_tokens with the locally cached
  token count (None: skip this step), then update_state_after_alloc, an
  asynchronous load parks the request in WAITING_FOR_REMOTE_KVS until a
  worker reports it in finished_recving (then num_computed_tokens = its
  blocks' tokens, one less if that is the whole request); build_connector_meta
  once per step; failed blocks (invalid_block_ids) cut num_computed_tokens
  at the first failed block of the request and make it recompute;
  request_finished_all_groups (request_finished with the first group for a
  connector without SupportsHMA) may hold the blocks until finished_sending;
  preemption frees the blocks at once and resumes with a whole new list;
* ``vllm/v1/worker/kv_connector_model_runner_mixin.py`` (commit
  00f4240ee6458263d76cf51ca7901ce1350bb4d1) and the model runner:
  handle_preemptions, bind_connector_metadata, start_load_kv before the
  forward when the step has synchronous loads (else after it launches),
  wait_for_layer_load / save_kv_layer per layer, wait_for_save, get_finished
  (before wait_for_save with Engine.defer_finalize, as under speculative
  decoding)
  with the step's finished_req_ids (that mixin asks get_transfer_results,
  a newer base method we could only read about; its default is taken to
  wrap get_finished, which is what is called here), get_block_ids_with_load_errors,
  get_kv_connector_stats, clear_connector_metadata; the metadata is pickled
  on its way from the scheduler to each worker, and the outputs of all
  workers are merged (a transfer is finished once every worker said so).

The block pool keeps block 0 as the null block, as vLLM's does. The "model"
writes into each computed token's slot a value derived from the layer, the
head and the whole token prefix, and before every forward checks every slot
the request reads: KV that came from the wrong place is caught. A forward
that read a wrong slot writes wrong values, as a model attending to wrong
KV does.

Use: ``with installed(): ...`` puts the modules under their vLLM names in
sys.modules (dfkv.vllm then subclasses these classes); Engine runs a
scheduler and one worker per TP rank.
"""

import abc
import contextlib
import enum
import hashlib
import importlib
import inspect
import pickle
import struct
import sys
import types
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

# ---------------------------------------------------------------- base.py


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata(abc.ABC):  # noqa: B024
    """What the scheduler-side connector hands the workers each step."""


class SupportsHMA(abc.ABC):
    @abc.abstractmethod
    def request_finished_all_groups(self, request, block_ids):
        raise NotImplementedError


def supports_hma(connector) -> bool:
    return issubclass(connector, SupportsHMA) if isinstance(connector, type) else isinstance(connector, SupportsHMA)


class KVConnectorBase_V1(abc.ABC):
    def __init__(self, vllm_config, role, kv_cache_config):
        self._connector_metadata = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self):
        return self._role

    @property
    def requires_kv_delivery(self) -> bool:
        return self._kv_transfer_config.is_kv_producer

    # worker side
    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def _get_connector_metadata(self):
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self):
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches):
        return

    def handle_preemptions(self, kv_connector_metadata):
        return

    @abc.abstractmethod
    def start_load_kv(self, forward_context, **kwargs):
        pass

    @abc.abstractmethod
    def wait_for_layer_load(self, layer_name):
        pass

    @abc.abstractmethod
    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    @abc.abstractmethod
    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    # scheduler side
    @abc.abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        pass

    @abc.abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    @abc.abstractmethod
    def build_connector_meta(self, scheduler_output):
        pass

    def update_connector_output(self, connector_output):
        return

    def request_finished(self, request, block_ids):
        return False, None

    def take_events(self):
        return ()

    def has_pending_push_work(self) -> bool:
        return False

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return None


# ---------------------------------------------------------------- metrics.py

@dataclass
class KVConnectorStats:
    data: Dict[str, Any] = field(default_factory=dict)

    def reset(self):
        raise NotImplementedError

    def aggregate(self, other):
        raise NotImplementedError

    def reduce(self):
        raise NotImplementedError

    def is_empty(self):
        raise NotImplementedError


# ---------------------------------------------------------------- parallel_state.py

class _Group:
    def __init__(self, rank):
        self.rank_in_group = rank


class _Ranks:
    tp = 0
    pp = 0
    dcp = 0


def get_tensor_model_parallel_rank():
    return _Ranks.tp


def get_pp_group():
    return _Group(_Ranks.pp)


def get_dcp_group():
    return _Group(_Ranks.dcp)


# ---------------------------------------------------------------- factory.py

def _accepts_kw(cls, name):
    params = inspect.signature(cls.__init__).parameters
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def create_connector(config, role, kv_cache_config):
    ktc = config.kv_transfer_config
    if ktc is None:
        raise ValueError("kv_transfer_config must be set to create a connector")
    if not ktc.kv_connector_module_path:
        raise ValueError(f"Unsupported connector type: {ktc.kv_connector}")
    module = importlib.import_module(ktc.kv_connector_module_path)
    try:
        cls = getattr(module, ktc.kv_connector)
    except AttributeError as e:
        raise AttributeError(f"Class {ktc.kv_connector} not found in {ktc.kv_connector_module_path}") from e
    if not _accepts_kw(cls, "kv_cache_config"):
        raise ValueError(f"Connector {cls.__name__} uses deprecated 2-argument constructor signature")
    if not config.scheduler_config.disable_hybrid_kv_cache_manager and not supports_hma(cls):
        raise ValueError(f"Connector {cls.__name__} does not support HMA but HMA is enabled")
    return cls(config, role, kv_cache_config)


# ---------------------------------------------------------------- module install

_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.base"
_METRICS = "vllm.distributed.kv_transfer.kv_connector.v1.metrics"
_PSTATE = "vllm.distributed.parallel_state"


def _modules():
    mods = {}
    for name in ("vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
                 "vllm.distributed.kv_transfer.kv_connector", "vllm.distributed.kv_transfer.kv_connector.v1"):
        m = types.ModuleType(name)
        m.__path__ = []
        mods[name] = m
    base = types.ModuleType(_BASE)
    for n in ("KVConnectorRole", "KVConnectorMetadata", "SupportsHMA", "supports_hma", "KVConnectorBase_V1"):
        setattr(base, n, globals()[n])
    metrics = types.ModuleType(_METRICS)
    metrics.KVConnectorStats = KVConnectorStats
    pstate = types.ModuleType(_PSTATE)
    for n in ("get_tensor_model_parallel_rank", "get_pp_group", "get_dcp_group"):
        setattr(pstate, n, globals()[n])
    mods[_BASE], mods[_METRICS], mods[_PSTATE] = base, metrics, pstate
    return mods


@contextlib.contextmanager
def installed():
    """These classes under vLLM's module names, for the duration."""
    mods = _modules()
    saved = {n: sys.modules.get(n) for n in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


# ---------------------------------------------------------------- config

@dataclass
class KVTransferConfig:
    kv_connector: str = "DfkvConnector"
    kv_connector_module_path: str = "dfkv.vllm"
    kv_role: str = "kv_both"
    kv_connector_extra_config: Dict[str, Any] = field(default_factory=dict)
    engine_id: str = "engine-0"

    @property
    def is_kv_producer(self):
        return self.kv_role in ("kv_producer", "kv_both")


class ModelConfig:
    def __init__(self, model, layers, kv_heads, head_size, dtype="float32", use_mla=False):
        self.model, self.revision, self.dtype, self.use_mla = model, None, dtype, use_mla
        self.hf_config = types.SimpleNamespace(num_hidden_layers=layers)
        self._kv_heads, self._head_size, self._layers = kv_heads, head_size, layers

    def get_total_num_kv_heads(self):
        return self._kv_heads

    def get_head_size(self):
        return self._head_size

    def get_num_layers(self, parallel_config):
        return self._layers


@dataclass
class CacheConfig:
    block_size: int = 4
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    num_gpu_blocks: int = 64


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1


@dataclass
class SchedulerConfig:
    disable_hybrid_kv_cache_manager: bool = False
    max_num_batched_tokens: int = 64


@dataclass
class VllmConfig:
    model_config: Any
    cache_config: CacheConfig
    parallel_config: ParallelConfig
    scheduler_config: SchedulerConfig
    kv_transfer_config: Optional[KVTransferConfig]


@dataclass
class FullAttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int


@dataclass
class MLAAttentionSpec(FullAttentionSpec):
    pass


@dataclass
class SlidingWindowSpec(FullAttentionSpec):
    sliding_window: int = 8


@dataclass
class MambaSpec:
    block_size: int


@dataclass
class KVCacheGroupSpec:
    layer_names: List[str]
    kv_cache_spec: Any


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_groups: List[KVCacheGroupSpec]


# ---------------------------------------------------------------- output.py

@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: Optional[List[int]]
    mm_features: list
    sampling_params: Any
    pooling_params: Any
    block_ids: tuple
    num_computed_tokens: int
    lora_request: Any
    prompt_embeds: Any = None


@dataclass
class CachedRequestData:
    req_ids: List[str]
    resumed_req_ids: set
    new_token_ids: list
    all_token_ids: dict
    new_block_ids: list
    num_computed_tokens: List[int]
    num_output_tokens: List[int]


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: List[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: Dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: set
    preempted_req_ids: Optional[set] = None
    has_sync_kv_loads: bool = False
    kv_connector_metadata: Any = None


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set] = None
    finished_recving: Optional[set] = None
    invalid_block_ids: set = field(default_factory=set)
    kv_connector_stats: Any = None


# ---------------------------------------------------------------- request

class Status(enum.Enum):
    WAITING = "waiting"
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class Request:
    def __init__(self, request_id, prompt_token_ids, block_size, max_tokens=1, prompt_embeds=None,
                 mm_features=None, lora_request=None, cache_salt=None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids) if prompt_token_ids is not None else None
        self.prompt_embeds = prompt_embeds
        self._prompt = self.prompt_token_ids if self.prompt_token_ids is not None else \
            [0] * len(prompt_embeds)  # embeddings stand for their positions
        self.output_token_ids: List[int] = []
        self.mm_features = mm_features or []
        self.lora_request, self.cache_salt = lora_request, cache_salt
        self.sampling_params, self.pooling_params = types.SimpleNamespace(max_tokens=max_tokens), None
        self.max_tokens = max_tokens
        self.block_size = block_size
        self.status = Status.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1
        self.num_external_computed_tokens = 0
        self.num_preemptions = 0
        self.block_hashes: List[bytes] = []
        self._hash_blocks()

    @property
    def all_token_ids(self):
        return self._prompt + self.output_token_ids

    @property
    def num_tokens(self):
        return len(self._prompt) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self):
        return len(self._prompt)

    def _hash_blocks(self):
        """vLLM-like block hashes: a SHA-256 chain over whole blocks (none
        for prompt embeddings, which token ids do not describe)."""
        if self.prompt_token_ids is None:
            return
        toks, bs = self.all_token_ids, self.block_size
        while (len(self.block_hashes) + 1) * bs <= len(toks):
            i = len(self.block_hashes)
            parent = self.block_hashes[-1] if self.block_hashes else b"root"
            blk = toks[i * bs:(i + 1) * bs]
            self.block_hashes.append(hashlib.sha256(parent + struct.pack(f"<{bs}q", *blk)).digest())

    def append_output(self, tok):
        self.output_token_ids.append(tok)
        self._hash_blocks()


class KVCacheBlocks:
    def __init__(self, groups):
        self._groups = groups

    def get_block_ids(self):
        return tuple(list(g) for g in self._groups)


# ---------------------------------------------------------------- the "model"

def slot_value(tokens, pos, layer, head):
    """What any correct run puts in a token's K slot: a function of the
    token prefix up to pos, the layer and the (global) head."""
    h = zlib.crc32(struct.pack(f"<{pos + 1}q", *tokens[:pos + 1]))
    return float((h % 65521) * 64 + (layer * 8 + head) % 64)


class Worker:
    """One TP rank's model runner with its paged KV buffers (CPU float32)."""

    def __init__(self, engine, tp_rank):
        self.engine, self.tp_rank = engine, tp_rank
        cfg = engine.config
        _Ranks.tp, _Ranks.pp, _Ranks.dcp = tp_rank, 0, 0
        self.connector = create_connector(cfg, KVConnectorRole.WORKER, engine.kv_cache_config)
        mc = cfg.model_config
        self.mla = mc.use_mla
        self.heads = 1 if self.mla else mc.get_total_num_kv_heads() // cfg.parallel_config.tensor_parallel_size
        self.head_size = mc.get_head_size()
        bs, nb = cfg.cache_config.block_size, engine.kv_cache_config.num_blocks
        torch = engine.torch
        self.kv: Dict[str, Any] = {}
        self.layer_group: Dict[str, int] = {}
        for g, grp in enumerate(engine.kv_cache_config.kv_cache_groups):
            for name in grp.layer_names:
                shape = (nb, bs, self.head_size) if self.mla else (2, nb, bs, self.heads, self.head_size)
                self.kv[name] = torch.full(shape, -1.0, dtype=torch.float32)
                self.layer_group[name] = g
        self.connector.register_kv_caches(self.kv)
        self.tables: Dict[str, List[List[int]]] = {}
        self.tokens: Dict[str, List[int]] = {}
        self.mismatches: List[tuple] = []

    def _slot(self, name, block, off):
        t = self.kv[name]
        return (t[block, off], None) if self.mla else (t[0, block, off], t[1, block, off])

    def _expected(self, name, toks, pos):
        torch = self.engine.torch
        layer = int(name.split(".")[2])
        if self.mla:
            v = slot_value(toks, pos, layer, 0)
            return torch.arange(self.head_size, dtype=torch.float32) + v, None
        heads = [slot_value(toks, pos, layer, self.tp_rank * self.heads + h) for h in range(self.heads)]
        k = torch.tensor(heads, dtype=torch.float32)[:, None] + torch.arange(self.head_size, dtype=torch.float32)
        return k, -k

    def _window(self, name):
        spec = self.engine.kv_cache_config.kv_cache_groups[self.layer_group[name]].kv_cache_spec
        return getattr(spec, "sliding_window", None)

    def execute(self, so):
        c = self.connector
        meta = pickle.loads(pickle.dumps(so.kv_connector_metadata))
        for nr in so.scheduled_new_reqs:
            self.tables[nr.req_id] = [list(g) for g in nr.block_ids]
            self.tokens[nr.req_id] = self.engine.requests[nr.req_id].all_token_ids
        cr = so.scheduled_cached_reqs
        for i, rid in enumerate(cr.req_ids):
            self.tokens[rid] = self.engine.requests[rid].all_token_ids
            nb = cr.new_block_ids[i]
            if nb is None:
                continue
            if rid in cr.resumed_req_ids:
                self.tables[rid] = [list(g) for g in nb]
            else:
                for g, extra in zip(self.tables[rid], nb):
                    g.extend(extra)
        computed = {nr.req_id: nr.num_computed_tokens for nr in so.scheduled_new_reqs}
        computed.update(zip(cr.req_ids, cr.num_computed_tokens))
        if so.preempted_req_ids:
            c.handle_preemptions(meta)
        c.bind_connector_metadata(meta)
        if so.has_sync_kv_loads:
            c.start_load_kv(None)
        bs = self.engine.config.cache_config.block_size
        bad = set()  # requests whose forward read wrong KV somewhere
        for name in self.kv:
            c.wait_for_layer_load(name)
            g = self.layer_group[name]
            win = self._window(name)
            for rid, n in so.num_scheduled_tokens.items():
                table, toks, start = self.tables[rid][g], self.tokens[rid], computed[rid]
                for pos in range(start):  # what attention reads
                    if win is not None and pos < start - win:
                        continue
                    k, v = self._slot(name, table[pos // bs], pos % bs)
                    ek, ev = self._expected(name, toks, pos)
                    if not (self.engine.torch.equal(k, ek) and (v is None or self.engine.torch.equal(v, ev))):
                        self.mismatches.append((rid, name, pos))
                        bad.add(rid)
        for name in self.kv:
            g = self.layer_group[name]
            for rid, n in so.num_scheduled_tokens.items():
                table, toks, start = self.tables[rid][g], self.tokens[rid], computed[rid]
                for pos in range(start, start + n):  # what the forward writes
                    k, v = self._slot(name, table[pos // bs], pos % bs)
                    ek, ev = self._expected(name, toks, pos)
                    if rid in bad:
                        # As a real model's: KV computed while attending to
                        # wrong KV is wrong too (and, through the hidden
                        # state, in every later layer).
                        ek = ek + 4096.0
                        ev = ev - 4096.0 if ev is not None else None
                    k.copy_(ek)
                    if v is not None:
                        v.copy_(ev)
            c.save_kv_layer(name, self.kv[name], None)
        if not so.has_sync_kv_loads:
            c.start_load_kv(None)
        if not self.engine.defer_finalize:
            c.wait_for_save()
        sending, recving = c.get_finished(so.finished_req_ids)
        out = KVConnectorOutput(finished_sending=sending, finished_recving=recving,
                                invalid_block_ids=c.get_block_ids_with_load_errors(),
                                kv_connector_stats=c.get_kv_connector_stats())
        if self.engine.defer_finalize:
            # Speculative decoding: vLLM finalizes (wait_for_save, then
            # clear) after the draft model's forward, past get_finished.
            c.wait_for_save()
        c.clear_connector_metadata()
        for rid in so.finished_req_ids:
            self.tables.pop(rid, None)
        return out


# ---------------------------------------------------------------- scheduler + engine

class Engine:
    """A scheduler and one worker per TP rank, stepping like vLLM's engine
    core: schedule, execute on every worker, update from the outputs."""

    def __init__(self, config, kv_cache_config, torch):
        self.config, self.kv_cache_config, self.torch = config, kv_cache_config, torch
        self.bs = config.cache_config.block_size
        self.connector = create_connector(config, KVConnectorRole.SCHEDULER, kv_cache_config)
        self.workers = [Worker(self, r) for r in range(config.parallel_config.tensor_parallel_size)]
        self.requests: Dict[str, Request] = {}
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.blocks: Dict[str, List[List[int]]] = {}
        self.free = list(range(1, kv_cache_config.num_blocks))  # block 0 is the null block
        self.ref: Dict[int, int] = {}
        self.cached: Dict[bytes, int] = {}  # local prefix cache (group 0, one group only)
        self.block_hash: Dict[int, bytes] = {}
        self.finished_req_ids: set = set()
        self.preempted: set = set()
        self.finished_recving: set = set()
        self.failed_recving: set = set()
        self.done_counts: Dict[tuple, int] = {}
        self.computed_tokens: Dict[str, int] = {}  # tokens the forward computed, per request
        self.finished: List[str] = []
        self.stats = None
        self.steps = 0
        self.max_batched = config.scheduler_config.max_num_batched_tokens
        # The model runner's defer_finalize (set while speculative decoding).
        self.defer_finalize = False

    # block pool
    def _alloc(self):
        if not self.free:
            raise RuntimeError("out of blocks")
        b = self.free.pop(0)
        h = self.block_hash.pop(b, None)
        if h is not None and self.cached.get(h) == b:
            del self.cached[h]
        self.ref[b] = 1
        return b

    def _release(self, b):
        if b == 0:
            return
        self.ref[b] -= 1
        if self.ref[b] == 0:
            del self.ref[b]
            self.free.append(b)

    def _free_blocks(self, req):
        for g in self.blocks.pop(req.request_id, []):
            for b in g:
                self._release(b)

    def _groups(self):
        return self.kv_cache_config.kv_cache_groups

    def _ensure_blocks(self, req, upto_tokens, computed_tokens):
        groups = self.blocks.setdefault(req.request_id, [[] for _ in self._groups()])
        need = -(-upto_tokens // self.bs)
        for gi, grp in enumerate(self._groups()):
            win = getattr(grp.kv_cache_spec, "sliding_window", None)
            g = groups[gi]
            while len(g) < need:
                i = len(g)
                if win is not None and (i + 1) * self.bs <= computed_tokens - win:
                    g.append(0)  # already out of the window: the null block
                else:
                    g.append(self._alloc())
            if win is not None:  # free positions that left the window
                for i, b in enumerate(g):
                    if b and (i + 1) * self.bs <= computed_tokens - win:
                        self._release(b)
                        g[i] = 0

    def add_request(self, req):
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def preempt(self, rid):
        req = self.requests[rid]
        self.running.remove(req)
        self._free_blocks(req)
        req.status, req.num_computed_tokens = Status.PREEMPTED, 0
        req.num_preemptions += 1
        self.preempted.add(rid)
        self.waiting.insert(0, req)

    def _local_hit(self, req):
        if len(self._groups()) != 1 or not self.config.cache_config.enable_prefix_caching:
            return [], 0
        hit = []
        for h in req.block_hashes[:(req.num_tokens - 1) // self.bs]:
            if h not in self.cached:
                break
            hit.append(self.cached[h])
        return hit, len(hit) * self.bs

    def _cache_full_blocks(self, req, tokens):
        if len(self._groups()) != 1 or not self.config.cache_config.enable_prefix_caching:
            return
        g = self.blocks.get(req.request_id, [[]])[0]
        for i in range(min(tokens // self.bs, len(req.block_hashes), len(g))):
            h = req.block_hashes[i]
            if h not in self.cached:
                self.cached[h] = g[i]
                self.block_hash[g[i]] = h

    def schedule(self):
        budget = self.max_batched
        new_data, cached_ids, cached_new, cached_computed, resumed = [], [], [], [], set()
        num_sched: Dict[str, int] = {}
        sync_loads = False
        for req in self.running:
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            before = [len(g) for g in self.blocks[req.request_id]]
            self._ensure_blocks(req, req.num_computed_tokens + n, req.num_computed_tokens)
            cached_ids.append(req.request_id)
            cached_new.append(tuple(g[k:] for g, k in zip(self.blocks[req.request_id], before)))
            cached_computed.append(req.num_computed_tokens)
            num_sched[req.request_id] = n
            budget -= n
        for req in list(self.waiting):
            if budget <= 0:
                break
            rid = req.request_id
            if req.status == Status.WAITING_FOR_REMOTE_KVS:
                if rid not in self.finished_recving:
                    continue
                self._remote_kv_ready(req)
                req.status = Status.PREEMPTED if req.num_preemptions else Status.WAITING
            ext, load_async, first = 0, False, req.num_computed_tokens == 0
            if first:
                local, n_local = self._local_hit(req)
                ext, load_async = self.connector.get_num_new_matched_tokens(req, n_local)
                if ext is None:
                    continue  # the connector needs more time: ask again next step
                req.num_external_computed_tokens = ext
                n_computed = n_local + ext
            else:
                local, n_local, n_computed = [], 0, req.num_computed_tokens
            n_new = 0 if load_async else min(req.num_tokens - n_computed, budget)
            if first:
                groups = self.blocks.setdefault(rid, [[] for _ in self._groups()])
                for b in local:
                    if b in self.ref:
                        self.ref[b] += 1
                    else:  # a cached block nobody holds: take it off the free list
                        self.free.remove(b)
                        self.ref[b] = 1
                    groups[0].append(b)
            self._ensure_blocks(req, n_computed + n_new, n_computed)
            self.connector.update_state_after_alloc(req, KVCacheBlocks(self.blocks[rid]), ext if first else 0)
            self.waiting.remove(req)
            if load_async:
                req.status = Status.WAITING_FOR_REMOTE_KVS
                self.waiting.append(req)
                continue
            sync_loads |= ext > 0
            was = req.status
            req.status = Status.RUNNING
            self.running.append(req)
            req.num_computed_tokens = n_computed
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = n_computed
            if was == Status.PREEMPTED:
                cached_ids.append(rid)
                cached_new.append(tuple(list(g) for g in self.blocks[rid]))
                cached_computed.append(n_computed)
                resumed.add(rid)
            else:
                new_data.append(NewRequestData(rid, req.prompt_token_ids, req.mm_features, req.sampling_params,
                                               None, tuple(list(g) for g in self.blocks[rid]), n_computed,
                                               req.lora_request, req.prompt_embeds))
            num_sched[rid] = n_new
            budget -= n_new
        so = SchedulerOutput(
            scheduled_new_reqs=new_data,
            scheduled_cached_reqs=CachedRequestData(cached_ids, resumed, [], {}, cached_new, cached_computed,
                                                    [len(self.requests[r].output_token_ids) for r in cached_ids]),
            num_scheduled_tokens=num_sched, total_num_scheduled_tokens=sum(num_sched.values()),
            finished_req_ids=self.finished_req_ids, preempted_req_ids=self.preempted, has_sync_kv_loads=sync_loads)
        self.finished_req_ids, self.preempted = set(), set()
        so.kv_connector_metadata = self.connector.build_connector_meta(so)
        for rid, n in num_sched.items():
            self.requests[rid].num_computed_tokens += n
            self.computed_tokens[rid] = self.computed_tokens.get(rid, 0) + n
        return so

    def _remote_kv_ready(self, req):
        rid = req.request_id
        if rid in self.failed_recving:
            self.failed_recving.discard(rid)
            if not req.num_computed_tokens:
                self._free_blocks(req)
        else:
            (ids,) = self.blocks[rid]
            n = min(len(ids) * self.bs, req.num_tokens)
            if n == req.num_tokens:
                n -= 1
            req.num_computed_tokens = n
            self._cache_full_blocks(req, n)
        self.finished_recving.discard(rid)

    def _invalid_blocks(self, invalid):
        """The scheduler's handling of blocks that failed to load (recompute
        policy): a request's computed tokens end before its first failed
        block. Like vLLM's, it knows one block table per request only."""
        affected = set()
        for req in list(self.running) + [r for r in self.waiting if r.status == Status.WAITING_FOR_REMOTE_KVS]:
            (ids,) = self.blocks[req.request_id]
            if req.status == Status.WAITING_FOR_REMOTE_KVS:
                n = req.num_computed_tokens if req.request_id in self.failed_recving else len(ids) * self.bs
            else:
                n = req.num_cached_tokens
            for idx, b in enumerate(ids[:-(-n // self.bs)]):
                if b in invalid:
                    lost = n - idx * self.bs
                    req.num_computed_tokens = idx * self.bs
                    req.num_external_computed_tokens -= lost
                    affected.add(req.request_id)
                    if req.status == Status.WAITING_FOR_REMOTE_KVS:
                        self.failed_recving.add(req.request_id)
                    break
        return affected

    def _finish(self, req):
        req.status = Status.FINISHED
        self.running.remove(req)
        self.finished.append(req.request_id)
        if supports_hma(self.connector):
            delay, _ = self.connector.request_finished_all_groups(req, self.blocks[req.request_id])
        else:
            assert len(self._groups()) == 1
            delay, _ = self.connector.request_finished(req, self.blocks[req.request_id][0])
        self.finished_req_ids.add(req.request_id)
        if not delay:
            self._free_request_blocks(req)

    def _free_request_blocks(self, req):
        self._free_blocks(req)
        del self.requests[req.request_id]

    def _merge(self, outs):
        merged = KVConnectorOutput(finished_sending=set(), finished_recving=set())
        n = len(outs)
        for o in outs:
            merged.invalid_block_ids |= o.invalid_block_ids
            for kind in ("finished_sending", "finished_recving"):
                for rid in getattr(o, kind) or ():
                    k = (kind, rid)
                    self.done_counts[k] = self.done_counts.get(k, 0) + 1
                    if self.done_counts[k] == n:
                        del self.done_counts[k]
                        getattr(merged, kind).add(rid)
            if o.kv_connector_stats is not None:
                merged.kv_connector_stats = o.kv_connector_stats if merged.kv_connector_stats is None else \
                    merged.kv_connector_stats.aggregate(o.kv_connector_stats)
        return merged

    def update_from_output(self, so, outs, mismatch_marks):
        out = self._merge(outs)
        stats = out.kv_connector_stats
        own = self.connector.get_kv_connector_stats()
        if own is not None:
            stats = own if stats is None else stats.aggregate(own)
        if stats is not None:
            # As the logger does: rebuild from the shipped data.
            rebuilt = type(self.connector).build_kv_connector_stats(data=pickle.loads(pickle.dumps(stats.data)))
            self.stats = rebuilt if self.stats is None else self.stats.aggregate(rebuilt)
        failed = self._invalid_blocks(out.invalid_block_ids) if out.invalid_block_ids else set()
        for w, mark in zip(self.workers, mismatch_marks):
            # A step whose forward read failed loads is thrown away.
            w.mismatches[mark:] = [m for m in w.mismatches[mark:] if m[0] not in failed]
        for rid in so.num_scheduled_tokens:
            if rid in failed:
                continue
            req = self.requests.get(rid)
            if req is None or req.status != Status.RUNNING:
                continue
            self._cache_full_blocks(req, req.num_computed_tokens)
            if req.num_computed_tokens >= req.num_tokens:
                req.append_output(sum(req.all_token_ids) % 997 + 1)
                if len(req.output_token_ids) >= req.max_tokens:
                    self._finish(req)
        self.connector.update_connector_output(out)
        for rid in out.finished_recving:
            req = self.requests[rid]
            if req.status == Status.WAITING_FOR_REMOTE_KVS:
                self.finished_recving.add(rid)
            else:
                assert req.status == Status.FINISHED, (rid, req.status)
                self._free_request_blocks(req)
        for rid in out.finished_sending:
            self._free_request_blocks(self.requests[rid])

    def step(self):
        so = self.schedule()
        marks = [len(w.mismatches) for w in self.workers]
        outs = [w.execute(so) for w in self.workers]
        self.update_from_output(so, outs, marks)
        self.steps += 1
        return so

    def busy(self):
        return bool(self.waiting or self.running or self.finished_req_ids or self.connector.has_pending_push_work())

    def run(self, max_steps=2000, sleep=0.001):
        import time
        for _ in range(max_steps):
            if not self.busy():
                return
            self.step()
            time.sleep(sleep)
        raise AssertionError(f"engine still busy after {max_steps} steps: waiting "
                             f"{[(r.request_id, r.status) for r in self.waiting]}, running "
                             f"{[r.request_id for r in self.running]}")

    def mismatches(self):
        return [m for w in self.workers for m in w.mismatches]

    def held_blocks(self):
        return sum(len([b for b in g if b]) for gs in self.blocks.values() for g in gs)

    def shutdown(self):
        for w in self.workers:
            w.connector.shutdown()
        self.connector.shutdown()


def make_config(model, extra, *, layers=2, kv_heads=2, head_size=8, block_size=4, tp=1, use_mla=False,
                dtype="float32", hybrid=False, sliding=None, num_blocks=64, max_batched=64):
    """A VllmConfig and KVCacheConfig for a small model: one full-attention
    group, or with sliding=W a second group of sliding-window layers (every
    odd layer), as the hybrid KV cache manager builds them."""
    mc = ModelConfig(model, layers, kv_heads, head_size, dtype=dtype, use_mla=use_mla)
    cfg = VllmConfig(mc, CacheConfig(block_size=block_size, num_gpu_blocks=num_blocks),
                     ParallelConfig(tensor_parallel_size=tp),
                     SchedulerConfig(disable_hybrid_kv_cache_manager=not hybrid, max_num_batched_tokens=max_batched),
                     KVTransferConfig(kv_connector_extra_config=dict(extra)))
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    spec_cls = MLAAttentionSpec if use_mla else FullAttentionSpec
    heads = 1 if use_mla else kv_heads
    if sliding is None:
        groups = [KVCacheGroupSpec(names, spec_cls(block_size, heads, head_size))]
    else:
        groups = [KVCacheGroupSpec(names[0::2], spec_cls(block_size, heads, head_size)),
                  KVCacheGroupSpec(names[1::2], SlidingWindowSpec(block_size, heads, head_size, sliding))]
    return cfg, KVCacheConfig(num_blocks, groups)
