"""Everything that splits the model over ranks: process groups, collectives, the
tensor-parallel layers, and parallelize() that swaps them into a plain LlamaStage.

Rank layout (as vLLM): global rank = dp_rank * tp * pp + pp_rank * tp + tp_rank, so the
TP ranks of one stage are neighbours, TP rank r of stage i talks to TP rank r of stage
i+1, and each data-parallel replica (a whole tp x pp engine serving its share of the
prompts) is a contiguous block of ranks.

The TP collectives are torch custom ops (as vLLM's): torch.compile keeps each as one
opaque node that runs the real gloo/NCCL call, so a stage compiles to a single graph.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.engines.launch.rankside import in_collective
from harness.engines.reference import faults

if TYPE_CHECKING:
    from harness.engines.reference.model import LlamaStage, SparseMoE


@dataclass
class ParallelContext:
    rank: int
    world_size: int
    tp: int
    pp: int
    sp: bool
    device: torch.device
    backend: str
    tp_group: dist.ProcessGroup | None = field(default=None, repr=False)
    dp: int = 1  # data-parallel replicas
    replica_group: dist.ProcessGroup | None = field(default=None, repr=False)  # this replica's ranks (None: the world)
    # fault switches that act in the parallel code
    faults: tuple[str, ...] = ()
    # Expert parallelism: a mixture-of-experts layer's experts are split over the TP
    # ranks of a stage (whole experts each), instead of each expert over them (vLLM's
    # enable_expert_parallel with TP: its EP group is the TP group).
    ep: bool = False

    @property
    def replica_size(self) -> int:
        return self.tp * self.pp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.replica_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def pp_rank(self) -> int:
        return self.rank % self.replica_size // self.tp

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    def global_rank(self, pp_rank: int, tp_rank: int) -> int:
        """The rank at (pp_rank, tp_rank) of this rank's own replica."""
        return self.dp_rank * self.replica_size + pp_rank * self.tp + tp_rank

    @property
    def prev_stage_peer(self) -> int:
        return self.global_rank(self.pp_rank - 1, self.tp_rank)

    @property
    def next_stage_peer(self) -> int:
        return self.global_rank(self.pp_rank + 1, self.tp_rank)

    @property
    def driver_rank(self) -> int:
        """The rank that samples for this replica: TP rank 0 of its last stage."""
        return self.global_rank(self.pp - 1, 0)

    @property
    def writer_rank(self) -> int:
        """The rank that writes the run's outputs: the first replica's driver."""
        return (self.pp - 1) * self.tp

    def token_shard(self, num_tokens: int) -> slice:
        """This rank's own SP token slice [r*n/tp, (r+1)*n/tp) of a padded batch."""
        n = num_tokens // self.tp
        return slice(self.tp_rank * n, (self.tp_rank + 1) * n)


def init_parallel(tp: int, pp: int, sp: bool, device_kind: str, dp: int = 1) -> ParallelContext:
    """Join the process group (torchrun env vars, env:// init) and make the TP groups
    (and, with several data-parallel replicas, one group per replica)."""
    import datetime
    import os

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world_size != dp * tp * pp:
        raise RuntimeError(f"WORLD_SIZE={world_size} but dp*tp*pp={dp * tp * pp}")
    if device_kind == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    elif device_kind == "cpu":
        device, backend = torch.device("cpu"), "gloo"
    else:
        raise ValueError(f"unknown device {device_kind!r} (cpu or cuda)")
    # A long timeout: the harness's own watchdog decides when a run hangs.
    # the rendezvous: each rank waits for the others
    with in_collective():
        dist.init_process_group(
            backend, init_method="env://", rank=rank, world_size=world_size, timeout=datetime.timedelta(minutes=30)
        )
    ctx = ParallelContext(rank, world_size, tp, pp, sp, device, backend, dp=dp)
    # new_group is collective over the world: every rank creates every group, in order.
    size = ctx.replica_size
    for replica in range(dp):
        for stage in range(pp):
            ranks = [replica * size + stage * tp + r for r in range(tp)]
            with in_collective():
                group = dist.new_group(ranks)
            if (replica, stage) == (ctx.dp_rank, ctx.pp_rank):
                ctx.tp_group = group
    for replica in range(dp if dp > 1 else 0):
        with in_collective():
            group = dist.new_group(list(range(replica * size, (replica + 1) * size)))
        if replica == ctx.dp_rank:
            ctx.replica_group = group
    return ctx


# --- collectives -----------------------------------------------------------------------
# The module-level context the TP layers use; set by parallelize().
_CTX: ParallelContext | None = None
# TP collectives this rank really ran, by kind: the evidence that TP (all-reduce) or SP
# (token reduce-scatter, all-gather) took effect (evidence.py). Counted in the ops' real
# bodies, so compiled graphs count too.
COLLECTIVES: Counter[str] = Counter()


def _ctx() -> ParallelContext:
    """The context parallelize() set: the TP layers and collectives exist only after it."""
    if _CTX is None:
        raise RuntimeError("no parallel context: parallelize() sets it before any collective runs")
    return _CTX


# The collectives are custom ops, as in vLLM: torch.compile traces each as one opaque
# node (its fake function gives the output shape), so a stage forward compiles to one
# graph with no breaks, and the op runs the real gloo/NCCL call at run time.
# Every gloo/NCCL call here runs inside rankside.in_collective(): a heartbeat marked
# "waiting on peers" for the launcher's stall detector, which then calls a run hung
# within its window (harness/engines/launch/stall.py) instead of at the scenario timeout.


@torch.library.custom_op("harness_reference::all_reduce", mutates_args=())
def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    out = x.contiguous().clone()
    COLLECTIVES["all_reduce"] += 1
    with in_collective():
        dist.all_reduce(out, group=_ctx().tp_group)
    return _perturbed(out)


def _perturbed(out: torch.Tensor) -> torch.Tensor:
    """Fault tp-allreduce-perturb@EPS: TP rank 1's all-reduce result gets +EPS on even
    and -EPS on odd hidden channels. Fixed (no randomness), so a run is reproducible, and
    the first all-reduce of a forward is the embedding's: the error starts before layer 0."""
    ctx = _ctx()
    eps = faults.active(ctx.faults, "tp-allreduce-perturb")
    if eps is False or ctx.tp_rank != 1:
        return out
    signs = 1 - 2 * (torch.arange(out.shape[-1], device=out.device) % 2)
    return out + float(eps) * signs.to(out.dtype)


@_all_reduce.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("harness_reference::all_gather", mutates_args=())
def _all_gather(x: torch.Tensor, dim: int) -> torch.Tensor:
    x = x.contiguous()
    ctx = _ctx()
    parts = [torch.empty_like(x) for _ in range(ctx.tp)]
    COLLECTIVES["all_gather"] += 1
    with in_collective():
        dist.all_gather(parts, x, group=ctx.tp_group)
    return torch.cat(parts, dim=dim)


@_all_gather.register_fake
def _(x, dim):
    return torch.cat([x] * _ctx().tp, dim=dim)


@torch.library.custom_op("harness_reference::reduce_scatter_tokens", mutates_args=())
def _reduce_scatter_tokens(x: torch.Tensor) -> torch.Tensor:
    """NCCL has a real reduce-scatter; gloo does not everywhere, so there we all-reduce
    and slice (same result, more traffic). This is the one place that choice is made."""
    x = x.contiguous()
    ctx = _ctx()
    COLLECTIVES["reduce_scatter_tokens"] += 1
    if ctx.backend == "nccl":
        out = torch.empty((x.shape[0] // ctx.tp, *x.shape[1:]), dtype=x.dtype, device=x.device)
        with in_collective():
            dist.reduce_scatter_tensor(out, x, group=ctx.tp_group)
        return out
    full = x.clone()
    with in_collective():
        dist.all_reduce(full, group=ctx.tp_group)
    return full[ctx.token_shard(x.shape[0])].contiguous()


@_reduce_scatter_tokens.register_fake
def _(x):
    return x.new_empty((x.shape[0] // _ctx().tp, *x.shape[1:]))


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    return x if _ctx().tp == 1 else _all_reduce(x)


def tp_all_gather(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x if _ctx().tp == 1 else _all_gather(x, dim)


def tp_reduce_scatter_tokens(x: torch.Tensor) -> torch.Tensor:
    """Sum over TP ranks, keeping only this rank's token shard (dim 0)."""
    return x if _ctx().tp == 1 else _reduce_scatter_tokens(x)


def send_tensor_dict(tensors: dict[str, torch.Tensor], dst: int) -> None:
    """Send a stage's intermediate tensors: first their keys, then each tensor in that
    order. The receiver is told what comes, as vLLM's send_tensor_dict tells it, so a
    buffer that lacks a key fails on that key instead of desynchronising the stream."""
    keys = sorted(tensors)
    send_json(keys, dst=dst)
    for key in keys:
        with in_collective():
            dist.send(tensors[key].contiguous(), dst=dst)


def recv_tensor_dict(buffers: dict[str, torch.Tensor], src: int) -> dict[str, torch.Tensor]:
    """Receive, key by key as the sender announced them, into buffers allocated from the
    model's declaration."""
    for key in recv_json(src=src):
        with in_collective():
            dist.recv(buffers[key], src=src)
    return buffers


def send_json(obj, dst: int) -> None:
    """Send a JSON-able object (the non-tensor fields of an inter-stage message)."""
    data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
    device = _ctx().device
    with in_collective():
        dist.send(torch.tensor([data.numel()], dtype=torch.int64, device=device), dst=dst)
        dist.send(data.to(device), dst=dst)


def recv_json(src: int) -> Any:
    device = _ctx().device
    size = torch.empty(1, dtype=torch.int64, device=device)
    with in_collective():
        dist.recv(size, src=src)
        data = torch.empty(int(size), dtype=torch.uint8, device=device)
        dist.recv(data, src=src)
    return json.loads(bytes(data.cpu().tolist()).decode())


def broadcast_json(obj: Any, src: int) -> Any:
    """The JSON-able `obj` of rank `src`, on every rank of its replica."""
    ctx = _ctx()
    if ctx.replica_size == 1:
        return obj
    size = torch.zeros(1, dtype=torch.int64, device=ctx.device)
    if ctx.rank == src:
        data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8).to(ctx.device)
        size[0] = data.numel()
    with in_collective():
        dist.broadcast(size, src=src, group=ctx.replica_group)
    if ctx.rank != src:
        data = torch.empty(int(size), dtype=torch.uint8, device=ctx.device)
    with in_collective():
        dist.broadcast(data, src=src, group=ctx.replica_group)
    return json.loads(bytes(data.cpu().tolist()).decode())


def broadcast_from(x: torch.Tensor, src: int) -> torch.Tensor:
    """Broadcast over this rank's replica (e.g. sampled tokens from its driver rank)."""
    ctx = _ctx()
    if ctx.replica_size > 1:
        with in_collective():
            dist.broadcast(x, src=src, group=ctx.replica_group)
    return x


# --- tensor-parallel layers ------------------------------------------------------------


class ColumnParallelLinear(nn.Module):
    """Output features split over TP ranks (weight [out/tp, in]); no communication after.
    Under SP the input is a token shard, so it is all-gathered along tokens first."""

    def __init__(self, in_features: int, out_features_local: int, sp: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features_local, in_features), requires_grad=False)
        self.sp = sp

    def forward(self, x):
        if self.sp:
            x = tp_all_gather(x, dim=0)
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """Input features split over TP ranks (weight [out, in/tp]); partial sums are
    all-reduced, or under SP reduce-scattered along tokens so each rank keeps its shard."""

    def __init__(self, in_features_local: int, out_features: int, sp: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features_local), requires_grad=False)
        self.sp = sp

    def forward(self, x):
        y = F.linear(x, self.weight)
        return tp_reduce_scatter_tokens(y) if self.sp else tp_all_reduce(y)


class VocabParallelEmbedding(nn.Module):
    """Rows [start, end) of the embedding; ids outside look up zeros, and the partial
    embeddings are summed over TP ranks. Under SP the stage slices the full result into
    token shards itself (LlamaStage._first_stage_inputs), as vLLM slices the residual."""

    def __init__(self, vocab_start: int, vocab_end: int, hidden: int):
        super().__init__()
        self.vocab_start, self.vocab_end = vocab_start, vocab_end
        self.weight = nn.Parameter(torch.empty(vocab_end - vocab_start, hidden), requires_grad=False)

    def forward(self, ids):
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local = (ids - self.vocab_start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside[:, None], 0)
        return tp_all_reduce(out)


class VocabParallelLMHead(nn.Module):
    """Rows [start, end) of lm_head; the local logits are all-gathered along the vocab so
    every rank of the last stage holds the full logits. Under SP the token shards are
    gathered first."""

    def __init__(self, vocab_start: int, vocab_end: int, hidden: int, sp: bool):
        super().__init__()
        self.vocab_start, self.vocab_end = vocab_start, vocab_end
        self.weight = nn.Parameter(torch.empty(vocab_end - vocab_start, hidden), requires_grad=False)
        self.sp = sp

    def forward(self, x):
        if self.sp:
            x = tp_all_gather(x, dim=0)
        return tp_all_gather(F.linear(x, self.weight), dim=-1)


def sp_shard_tokens(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """This TP rank's own SP token shard of a full-token tensor."""
    shard = _ctx().token_shard(x.shape[dim])
    return x[shard] if dim == 0 else x[(slice(None),) * dim + (shard,)]


def sp_shard_residual(x: torch.Tensor) -> torch.Tensor:
    """This TP rank's shard of the full residual stream."""
    ctx = _ctx()
    if "sp-residual-first-shard" in ctx.faults:
        # vLLM PR 33322: every rank took residual[0:n/tp]
        return x[: x.shape[0] // ctx.tp]
    return sp_shard_tokens(x)


def shard_range(total: int, rank: int, size: int) -> tuple[int, int]:
    """[start, end) of an even split (total must divide by size)."""
    if total % size:
        raise ValueError(f"{total} does not divide by tp={size}")
    n = total // size
    return rank * n, (rank + 1) * n


def expert_share(num_experts: int, ctx: ParallelContext) -> list[int]:
    """The global ids of the experts this rank holds: all of them without EP (each split
    over the TP ranks), its contiguous 1/tp of them under EP (vLLM's linear expert map)."""
    if not ctx.ep:
        return list(range(num_experts))
    return list(range(*shard_range(num_experts, ctx.tp_rank, ctx.tp)))


def _ep_routing(ctx: ParallelContext) -> Callable[[torch.Tensor, int, list[int]], torch.Tensor]:
    """The routing of an EP rank, with the EP fault switches where they act: the expert
    map (global expert id -> this rank's local expert) and the dispatch of tokens."""
    from harness.engines.reference.model import routing_weights

    if faults.active(ctx.faults, "ep-expert-map-ignored"):
        # a global expert id used as a local index: rank r runs its experts for the
        # tokens routed to experts 0..n-1, which only rank 0 holds
        return lambda logits, top_k, ids: routing_weights(logits, top_k, list(range(len(ids))))
    if faults.active(ctx.faults, "ep-dispatch-drop-token") and ctx.tp_rank == ctx.tp - 1:
        # the batch's first token never reaches the last EP rank
        def dropping(logits, top_k, ids):
            weights = routing_weights(logits, top_k, ids)
            return torch.cat([torch.zeros_like(weights[:1]), weights[1:]])

        return dropping
    return routing_weights


def _parallelize_moe(moe: SparseMoE, ctx: ParallelContext, hidden: int) -> None:
    """Keep this rank's experts (EP) or this rank's slice of every expert (TP), and set
    the hooks: under SP the layer routes all tokens (gathered), and the partial outputs
    are summed over the TP ranks like a row-parallel linear's."""
    tp, sp = ctx.tp, ctx.sp
    moe.expert_ids = expert_share(len(moe.expert_ids), ctx)
    if not ctx.ep:
        moe.intermediate_size //= tp
    experts, width = len(moe.expert_ids), moe.intermediate_size
    moe.w13 = nn.Parameter(torch.empty(experts, 2 * width, hidden), requires_grad=False)
    moe.w2 = nn.Parameter(torch.empty(experts, hidden, width), requires_grad=False)
    if ctx.ep:
        moe.route = _ep_routing(ctx)
    if tp > 1:
        moe.gather_tokens = (lambda x: tp_all_gather(x, dim=0)) if sp else None
        moe.combine = tp_reduce_scatter_tokens if sp else tp_all_reduce


def parallelize(stage: LlamaStage, ctx: ParallelContext) -> LlamaStage:
    """Swap the plain modules of a (meta-device) LlamaStage for TP ones with local
    shapes, and divide its local head / intermediate counts. Weights are loaded after."""
    from harness.engines.reference.model import SparseMoE

    global _CTX
    _CTX = ctx
    cfg, tp, sp = stage.cfg, ctx.tp, ctx.sp
    hidden, d = cfg.hidden_size, cfg.head_dim
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        if getattr(cfg, name) % tp:
            raise ValueError(f"{name}={getattr(cfg, name)} does not divide by tp={tp}")
    with torch.device("meta"):
        vocab_rows = shard_range(cfg.vocab_size, ctx.tp_rank, tp)
        if stage.embed_tokens is not None:
            stage.embed_tokens = VocabParallelEmbedding(*vocab_rows, hidden)
        if stage.embed_per_layer is not None:
            width = stage.embed_per_layer.get_parameter("weight").shape[1]
            stage.embed_per_layer = VocabParallelEmbedding(*vocab_rows, width)
        if stage.lm_head is not None:
            stage.lm_head = VocabParallelLMHead(*shard_range(cfg.vocab_size, ctx.tp_rank, tp), hidden, sp)
        for layer in stage.decoder_layers():
            attn, mlp = layer.self_attn, layer.mlp
            attn.num_heads //= tp
            attn.num_kv_heads //= tp
            attn.qkv_proj = ColumnParallelLinear(hidden, (attn.num_heads + 2 * attn.num_kv_heads) * d, sp)
            attn.o_proj = RowParallelLinear(attn.num_heads * d, hidden, sp)
            if isinstance(mlp, SparseMoE):
                _parallelize_moe(mlp, ctx, hidden)
                continue
            mlp.intermediate_size //= tp
            mlp.gate_up_proj = ColumnParallelLinear(hidden, 2 * mlp.intermediate_size, sp)
            mlp.down_proj = RowParallelLinear(mlp.intermediate_size, hidden, sp)
    if sp:
        stage.shard_tokens, stage.shard_residual = sp_shard_tokens, sp_shard_residual
    return stage
