"""vLLM KV connector on dfkv (layout ``vllm-multiwr-v4``).

Interface verified against vllm-project/vllm
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` (KVConnectorBase_V1:
__init__(vllm_config, role, kv_cache_config); scheduler side
get_num_new_matched_tokens(request, num_computed_tokens) -> (int | None,
bool), update_state_after_alloc(request, blocks, num_external_tokens),
build_connector_meta(scheduler_output), request_finished(request, block_ids)
-> (bool, dict | None); worker side register_kv_caches(kv_caches),
start_load_kv(forward_context, **kwargs), wait_for_layer_load(layer_name),
save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs),
wait_for_save(), get_finished(finished_req_ids) -> (set | None, set | None),
get_block_ids_with_load_errors()). When vllm is importable the class
subclasses the real base; otherwise a shim with the same names stands in.

Load it with

    --kv-transfer-config '{"kv_connector": "DfkvConnector",
      "kv_connector_module_path": "dfkv.vllm", "kv_role": "kv_both",
      "kv_connector_extra_config": {"dfkv_members": "10.0.0.1:7600,10.0.0.2:7600",
                                     "dfkv_tenant": "team-a"}}'

Storage: per block. One object per (block hash, TP rank, PP rank) holds
that rank's K and V of every layer it owns, in layer order, each layer's
block as the engine's paged buffer has it (K then V for the [2, blocks, ...]
layouts, the whole block for MLA or block-first layouts). Saves and loads
are one batch scatter-gather call per step straight between the paged
buffers and the nodes (row-major CPU buffers in place; device buffers, and
buffers whose physical order differs from their shape such as FlashInfer's
HND layout, are staged through row-major host copies, so what is stored is
always the logical order and workers with different physical layouts share
blocks). Object key: ObjectKey(pool="vllm", hash=<block
hash>, tp=(tp, rank or -1 for MLA), pp=(pp, rank), dcp=(dcp, rank),
component="kv"). DP replicas are whole model copies with identical KV, so
dp is (1, 0) and replicas share blocks.

Block hashes are vLLM's request.block_hashes (they cover multimodal inputs,
LoRA and cache salt; run with --prefix-caching-hash-algo sha256 or
sha256_cbor so they agree across processes). Without them, a request with
only text tokens is hashed here (SHA-256 chain over the tokens); any other
request is not cached.

Only whole prompt blocks are stored, and at least one prompt token is
always left to compute. Loads are synchronous (all in start_load_kv).
"""

from __future__ import annotations

import enum
import hashlib
import logging
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ._common import dtype_name, escape_key_part, setting
from .client import Client
from .errors import Status
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


@dataclass
class BlockTransfer:
    """Blocks of one request to load or save: hashes[i] <-> block_ids[i]."""

    req_id: str
    hashes: List[str]
    block_ids: List[int]


@dataclass
class DfkvConnectorMetadata(_MetaBase):
    loads: List[BlockTransfer] = field(default_factory=list)
    saves: List[BlockTransfer] = field(default_factory=list)


@dataclass
class _ReqState:
    hashes: List[str]
    block_ids: List[int] = field(default_factory=list)
    stored_upto: int = 0  # blocks [0, stored_upto) are in dfkv (loaded or saved)
    prompt_len: int = 0
    local_computed: int = 0  # tokens vLLM already had (its prefix cache)


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


def _layer_index(name: str, fallback: int) -> int:
    m = re.search(r"\.(\d+)\.", "." + name + ".")
    return int(m.group(1)) if m else fallback


class DfkvConnector(_Base):
    """vLLM KVConnectorBase_V1 storing whole-prompt blocks in dfkv."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before kv_cache_config joined the signature
            super().__init__(vllm_config, role)
        self.vllm_config = vllm_config
        ktc = vllm_config.kv_transfer_config
        self.extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self.members = setting(self.extra, "dfkv_members", "DFKV_MEMBERS")
        if not self.members:
            raise ValueError("dfkv vLLM connector: no members; set kv_connector_extra_config.dfkv_members "
                             "or $DFKV_MEMBERS")
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
        self.tp_rank, self.pp_rank, self.dcp_rank = self._ranks() if role == KVConnectorRole.WORKER else (0, 0, 0)
        self.client = Client(self.members, self.namespace(), library=setting(self.extra, "dfkv_library", "DFKV_LIBRARY"))
        # scheduler side
        self._reqs: Dict[str, _ReqState] = {}
        self._pending_loads: List[BlockTransfer] = []
        # worker side
        self._layers: List[Tuple[str, Any]] = []
        self._load_errors: set = set()

    # -- identity --------------------------------------------------------

    def _ranks(self) -> Tuple[int, int, int]:
        e = self.extra
        if "dfkv_tp_rank" in e:
            return int(e["dfkv_tp_rank"]), int(e.get("dfkv_pp_rank", 0)), int(e.get("dfkv_dcp_rank", 0))
        try:  # pragma: no cover - needs a vLLM worker
            from vllm.distributed.parallel_state import get_pp_group, get_tensor_model_parallel_rank
            tp_rank = get_tensor_model_parallel_rank()
            pp_rank = get_pp_group().rank_in_group
            try:
                from vllm.distributed.parallel_state import get_dcp_group
                dcp_rank = get_dcp_group().rank_in_group
            except Exception:
                dcp_rank = 0
            return tp_rank, pp_rank, dcp_rank
        except Exception as e:
            raise RuntimeError("dfkv vLLM connector: cannot learn this worker's TP/PP ranks from vLLM; "
                               "set kv_connector_extra_config dfkv_tp_rank/dfkv_pp_rank") from e

    def namespace(self) -> NamespaceDescriptor:
        mc = self.vllm_config.model_config
        per_rank_heads = self.kv_heads if self.use_mla else max(1, self.kv_heads // self.tp)
        fp = layout_fingerprint([
            ("block_object", [1]),  # one object per block holding every layer of a rank
            ("kv_block_shape", [2 if not self.use_mla else 1, self.block_size, per_rank_heads, self.head_size]),
            ("use_mla", [int(self.use_mla)]),
        ])
        return NamespaceDescriptor(
            tenant=str(setting(self.extra, "dfkv_tenant", None, "default")),
            model_id=str(mc.model), model_revision=str(getattr(mc, "revision", None) or ""),
            layout_id=LAYOUT_VLLM, dtype=self.dtype, layout_fingerprint=fp, block_tokens=self.block_size,
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
        hs = getattr(request, "block_hashes", None)
        if hs:
            return [_hash_str(h) for h in hs]
        if getattr(request, "mm_features", None) or getattr(request, "mm_hashes", None) \
                or getattr(request, "lora_request", None) or getattr(request, "cache_salt", None):
            return None  # token ids alone would alias these
        return token_chain_hashes(list(request.prompt_token_ids), self.block_size)

    # -- scheduler side --------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        prompt_len = len(request.prompt_token_ids)
        hashes = self._request_hashes(request)
        if hashes is None:
            return 0, False
        # Leave at least one prompt token to compute.
        usable = min(len(hashes), (prompt_len - 1) // self.block_size)
        hashes = hashes[:prompt_len // self.block_size]
        st = self._reqs.setdefault(request.request_id, _ReqState(hashes=hashes, prompt_len=prompt_len))
        st.hashes, st.prompt_len, st.local_computed = hashes, prompt_len, num_computed_tokens
        if usable <= 0:
            return 0, False
        per = len(self._all_rank_keys(hashes[0]))
        keys = [k for h in hashes[:usable] for k in self._all_rank_keys(h)]
        hit_blocks = self.client.exist_prefix(keys) // per
        st.stored_upto = hit_blocks
        need = hit_blocks * self.block_size - num_computed_tokens
        return (need, False) if need > 0 else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        ids = blocks.get_block_ids()[0] if hasattr(blocks, "get_block_ids") else list(blocks)
        st.block_ids = list(ids)
        if num_external_tokens <= 0:
            return
        first = st.local_computed // self.block_size
        last = st.stored_upto
        self._pending_loads.append(BlockTransfer(request.request_id, st.hashes[first:last], st.block_ids[first:last]))

    def build_connector_meta(self, scheduler_output: Any) -> DfkvConnectorMetadata:
        meta = DfkvConnectorMetadata(loads=self._pending_loads)
        self._pending_loads = []
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", {}) or {}
        progress: List[Tuple[str, int]] = []
        for new in getattr(scheduler_output, "scheduled_new_reqs", []) or []:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            ids = new.block_ids[0] if new.block_ids and isinstance(new.block_ids[0], (list, tuple)) else new.block_ids
            st.block_ids = list(ids)
            progress.append((new.req_id, new.num_computed_tokens + scheduled.get(new.req_id, 0)))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None and hasattr(cached, "req_ids"):
            for i, rid in enumerate(cached.req_ids):
                st = self._reqs.get(rid)
                if st is None:
                    continue
                nb = cached.new_block_ids[i] if getattr(cached, "new_block_ids", None) else None
                if nb:
                    ids = list(nb[0] if isinstance(nb[0], (list, tuple)) else nb)
                    if _resumed(cached, i, rid):
                        # A request resumed after preemption gets its whole
                        # block list anew; appending it would shift every
                        # later save onto the wrong blocks.
                        st.block_ids = ids
                    else:
                        st.block_ids.extend(ids)
                progress.append((rid, cached.num_computed_tokens[i] + scheduled.get(rid, 0)))
        for rid, done_tokens in progress:
            st = self._reqs[rid]
            full = min(done_tokens, st.prompt_len) // self.block_size
            full = min(full, len(st.hashes), len(st.block_ids))
            if full > st.stored_upto:
                meta.saves.append(BlockTransfer(rid, st.hashes[st.stored_upto:full], st.block_ids[st.stored_upto:full]))
                st.stored_upto = full
        return meta

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Optional[dict]]:
        self._reqs.pop(request.request_id, None)
        return False, None

    # -- worker side -----------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        """Remember the paged buffers in layer order. Layouts: [2, blocks,
        ...] (K and V planes) or [blocks, ...] (MLA / block-first)."""
        named = list(kv_caches.items())
        named.sort(key=lambda kv: _layer_index(kv[0], 0))
        self._layers = named

    def _pieces(self, block_id: int) -> List[Any]:
        out = []
        for _, t in self._layers:
            if not self.use_mla and t.dim() >= 4 and t.shape[0] == 2:
                out += [t[0, block_id], t[1, block_id]]
            else:
                out.append(t[block_id])
        return out

    def _keys(self, hashes: List[str]) -> List[bytes]:
        return [self.object_key(h, self.tp_rank, self.pp_rank, self.dcp_rank) for h in hashes]

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for tr in meta.loads:
            if not tr.hashes:
                continue
            items = [self._pieces(b) for b in tr.block_ids]
            staged = [[p if _in_place(p) else p.new_empty(p.shape, device="cpu") for p in it] for it in items]
            st, _ = self.client.batch_get_sg(self._keys(tr.hashes), staged)
            for b, s, it, sit in zip(tr.block_ids, st, items, staged):
                if s != Status.OK:
                    self._load_errors.add(b)
                    continue
                for p, sp in zip(it, sit):
                    if sp is not p:
                        p.copy_(sp)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv loads every layer before the forward pass

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # whole blocks (all layers) are written in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        for tr in meta.saves:
            if not tr.hashes:
                continue
            items = [[p if _in_place(p) else p.new_empty(p.shape, device="cpu").copy_(p) for p in self._pieces(b)]
                     for b in tr.block_ids]
            st = self.client.batch_put_sg(self._keys(tr.hashes), items)
            bad = sum(s != Status.OK for s in st)
            if bad:
                logger.warning("dfkv vLLM connector: %d of %d block saves failed for request %s",
                               bad, len(st), tr.req_id)

    def get_block_ids_with_load_errors(self) -> set:
        errs, self._load_errors = self._load_errors, set()
        return errs

    def get_finished(self, finished_req_ids: set):
        return None, None

    def shutdown(self) -> None:
        self.client.close()
