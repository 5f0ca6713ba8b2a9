"""The model: a Llama-style decoder stage in plain PyTorch, with no parallelism in it.

This file holds only the math of one pipeline stage. Everything that splits the model
over ranks lives in parallel.py, which swaps the plain linears and embeddings built
here for tensor-parallel ones (torchtitan style: build the plain model on the meta
device, parallelise it, then load only the local shards). The model code therefore
never talks to other ranks; it reads its local head counts from its own attributes,
which parallelize() divides by the TP size.

Structure mirrors vLLM, because later fault switches re-create vLLM bugs here:
  * the residual stream travels beside the hidden states: layer(hidden, residual)
    -> (hidden, residual), with a fused add+RMSNorm; the first layer gets None;
  * a pipeline stage hands the next one an intermediate-tensors dict whose keys and
    shapes are declared in ONE place, `LlamaStage.intermediate_shapes`;
  * one attention path serves prefill and decode over a flat token dimension with
    per-token (sequence slot, position) and a per-layer KV cache.

Two model variants add what real models add at the PP boundary (harness/inputs/zoo/variants.py):
  * per-layer inputs (Gemma 3n / Gemma4): a second embedding of the token ids, made on
    the first stage and read by every layer, so it crosses every PP boundary; these
    models fold the residual into the hidden states at a boundary (no `residual` key);
  * images (Qwen3-VL): a small vision encoder whose patch embeddings replace the image
    placeholder tokens and whose "deepstack" projections are added to the hidden states
    after the first few layers. Text-only batches carry zero tensors, never None.
A third replaces the MLP: a mixture of experts (Mixtral-style routing, SparseMoE), whose
experts parallel.py splits over the TP ranks either each expert (TP) or whole (EP).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.engines.reference import INTERMEDIATE_KEYS  # the families this module implements


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    model_type: str = "llama"
    per_layer_input_size: int = 0  # llama-pli: width of each layer's own input
    # llama-vl: the placeholder token an image's patches replace
    image_token_id: int = -1
    image_size: int = 0
    patch_size: int = 0
    # llama-vl: layers 0..n-1 get the image's deepstack embeddings
    deepstack_layers: int = 0
    # llama-moe: experts per layer (each a SwiGLU MLP of intermediate_size)
    num_experts: int = 0
    # llama-moe: experts each token is routed to (top-k)
    num_experts_per_tok: int = 0

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2 if self.patch_size else 0

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> ModelConfig:
        return cls.from_dict(json.loads((Path(model_dir) / "config.json").read_text()))

    @classmethod
    def from_dict(cls, cfg: dict) -> ModelConfig:
        model_type = cfg.get("model_type", "llama")
        if model_type not in INTERMEDIATE_KEYS:
            raise ValueError(f"reference engine runs {', '.join(INTERMEDIATE_KEYS)} models, got model_type={model_type!r}")
        for flag in ("attention_bias", "mlp_bias"):
            if cfg.get(flag, False):
                raise ValueError(f"reference engine does not implement {flag}=true")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"reference engine only implements hidden_act=silu, got {cfg.get('hidden_act')!r}")
        heads = cfg["num_attention_heads"]
        return cls(
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            vocab_size=cfg["vocab_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=_rope_theta(cfg),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            model_type=model_type,
            per_layer_input_size=cfg.get("per_layer_input_size", 0),
            image_token_id=cfg.get("image_token_id", -1),
            image_size=cfg.get("vision_image_size", 0),
            patch_size=cfg.get("vision_patch_size", 0),
            deepstack_layers=cfg.get("deepstack_layers", 0),
            num_experts=cfg.get("num_local_experts", 0) if model_type == "llama-moe" else 0,
            num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if model_type == "llama-moe" else 0,
        )


def _rope_theta(cfg: dict) -> float:
    """rope_theta from either config layout (transformers>=5 `rope_parameters`, or the
    older top-level `rope_theta` + `rope_scaling`); only the default rope type exists here."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise ValueError(f"reference engine does not implement rope type {rope_type!r} (only 'default')")
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def pp_layer_split(num_layers: int, pp_size: int) -> list[range]:
    """Contiguous layers of each pipeline stage. Every stage gets num_layers // pp layers;
    the remainder goes one each to the stages just before the last one (the last stage
    also carries the final norm and lm_head), as vLLM's get_pp_indices does.
    E.g. 5 layers, pp=3 -> [0,1] [2,3] [4]."""
    if not 1 <= pp_size <= num_layers:
        raise ValueError(f"pp={pp_size} needs 1 <= pp <= num_hidden_layers={num_layers}")
    sizes = [num_layers // pp_size] * pp_size
    for i in range(num_layers % pp_size):
        sizes[-2 - i] += 1
    starts = [sum(sizes[:i]) for i in range(pp_size)]
    return [range(s, s + n) for s, n in zip(starts, sizes)]


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 like HF, with vLLM's fused residual add:
    norm(x) -> y, or norm(x, residual) -> (norm(x + residual), x + residual)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is not None:
            # The add happens in the model dtype, as in HF's `residual + hidden`.
            x = x + residual
            residual = x
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * h.to(dtype)
        return out if residual is None else (out, residual)


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    # Same expression as HF's default rope init, so float32 results match bit for bit.
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").to(torch.float32) / head_dim
    return 1.0 / (theta**exponents)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim] rotated by each token's own position (rotate-half layout)."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype)[:, None, :]
    sin = emb.sin().to(x.dtype)[:, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def paged_attention(q, k, v, kv_cache, positions, seq_slots, kv_len: int, scale: float, one_seq: bool = False):
    """Attention over a flat batch of tokens, the same code for prefill and decode.

    q [T, hq, d], k/v [T, hkv, d]; kv_cache = (k_cache, v_cache), each
    [slots, max_len, hkv, d]. Each token first writes its k/v at (slot, position), then
    attends to the cache entries of its own slot with key position <= its position.
    `kv_len` (a host int, max position + 1 in the batch) bounds the keys looked at.
    Padding tokens use the trash slot (the last one) at position 0, so they never
    touch a real sequence and never produce NaN.
    `one_seq` (a host bool): every real token is in the slot of the first one (a
    prefill of one prompt), so the keys are read once for all tokens instead of once
    per token (T x L x hkv x d); padding tokens then read that slot's key 0 (finite,
    discarded).
    """
    k_cache, v_cache = kv_cache
    k_cache.index_put_((seq_slots, positions), k)
    v_cache.index_put_((seq_slots, positions), v)
    t, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.view(t, hkv, hq // hkv, d)  # GQA: query head h reads kv head h // group
    if one_seq:
        keys = k_cache.index_select(0, seq_slots[:1])[0, :kv_len]  # [L, hkv, d]
        values = v_cache.index_select(0, seq_slots[:1])[0, :kv_len]
        scores = torch.einsum("tkgd,lkd->tkgl", qg, keys) * scale
    else:
        keys = k_cache[:, :kv_len][seq_slots]  # [T, L, hkv, d]
        values = v_cache[:, :kv_len][seq_slots]
        scores = torch.einsum("tkgd,tlkd->tkgl", qg, keys) * scale
    key_pos = torch.arange(kv_len, device=q.device)
    visible = key_pos[None, :] <= positions[:, None]  # [T, L]
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores.to(torch.float32), dim=-1).to(q.dtype)
    out = torch.einsum("tkgl,lkd->tkgd" if one_seq else "tkgl,tlkd->tkgd", probs, values)
    return out.reshape(t, hq * d)


class Attention(nn.Module):
    inv_freq: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        # Local head counts: parallelize() divides them by the TP size.
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.scale = cfg.head_dim**-0.5
        qkv_out = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim
        # q, k and v fused into one projection, as vLLM's QKVParallelLinear: under SP
        # this means one token all-gather per layer instead of three.
        self.qkv_proj: nn.Module = nn.Linear(cfg.hidden_size, qkv_out, bias=False)
        self.o_proj: nn.Module = nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False)

    def forward(self, x, positions, seq_slots, kv_cache, kv_len: int, one_seq: bool = False):
        qkv = self.qkv_proj(x)
        d = self.head_dim
        q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1)
        t = q.shape[0]
        q = apply_rope(q.view(t, self.num_heads, d), positions, self.inv_freq)
        k = apply_rope(k.view(t, self.num_kv_heads, d), positions, self.inv_freq)
        v = v.view(t, self.num_kv_heads, d)
        out = paged_attention(q, k, v, kv_cache, positions, seq_slots, kv_len, self.scale, one_seq)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.intermediate_size = cfg.intermediate_size  # local; parallelize() divides it
        # gate and up fused, as vLLM's MergedColumnParallelLinear.
        self.gate_up_proj: nn.Module = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj: nn.Module = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class SparseMoE(nn.Module):
    """Mixtral's sparse MLP: a router scores every expert, each token goes to its top-k,
    and their outputs are summed with the softmax weights renormalised over the top-k.

    The experts' weights are stacked, as vLLM's FusedMoE keeps them: w13 [experts,
    2 * intermediate, hidden] (gate and up) and w2 [experts, hidden, intermediate]. Every
    expert held here runs over every token and is weighted by that token's routing
    weight for it (zero where not routed): three batched matmuls, no data-dependent
    shapes, so a compiled graph is small and holds for every batch, and the model stays
    free of dispatch code. `expert_ids` are the global ids of the experts held here (all
    of them, until parallelize() gives this rank its share under expert parallelism);
    `gather_tokens` and `combine` are the hooks parallelize() sets: the tokens this rank
    routes in, and how partial outputs become the layer's output (identity on one rank)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.intermediate_size = cfg.intermediate_size  # local; parallelize() divides it without EP
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)  # the router, on every rank
        e, i, h = cfg.num_experts, cfg.intermediate_size, cfg.hidden_size
        self.w13 = nn.Parameter(torch.empty(e, 2 * i, h), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(e, h, i), requires_grad=False)
        self.expert_ids = list(range(cfg.num_experts))
        # x -> the tokens routed here (SP: all of them)
        self.gather_tokens: Callable[[torch.Tensor], torch.Tensor] | None = None
        # partial output -> this rank's output of the layer
        self.combine: Callable[[torch.Tensor], torch.Tensor] | None = None
        # (router logits, top_k, expert_ids) -> [T, local experts]
        self.route: Callable[[torch.Tensor, int, list[int]], torch.Tensor] = routing_weights

    def forward(self, x):
        if self.gather_tokens is not None:
            x = self.gather_tokens(x)
        weights = self.route(self.gate(x), self.top_k, self.expert_ids).to(x.dtype)
        gate, up = torch.einsum("th,eoh->eto", x, self.w13).split(self.intermediate_size, dim=-1)
        per_expert = torch.einsum("eti,ehi->eth", F.silu(gate) * up, self.w2)
        out = torch.einsum("te,eth->th", weights, per_expert)
        return out if self.combine is None else self.combine(out)


def routing_weights(router_logits: torch.Tensor, top_k: int, expert_ids: list[int]) -> torch.Tensor:
    """[T, experts] router logits -> [T, len(expert_ids)]: each token's weight for each of
    the given (global) experts, its renormalised softmax weight where the expert is in
    its top-k and zero elsewhere. In float32, as Mixtral routes."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    top_w, top_i = probs.topk(top_k, dim=-1)
    top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    ids = torch.tensor(expert_ids, device=router_logits.device)
    return ((top_i[:, :, None] == ids[None, None, :]) * top_w[:, :, None]).sum(dim=1)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.layer_id = layer_id  # global index, names the HF weights
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp: SparseMoE | MLP = SparseMoE(cfg) if cfg.num_experts else MLP(cfg)
        pli = cfg.per_layer_input_size
        self.per_layer_proj = nn.Linear(pli, cfg.hidden_size, bias=False) if pli else None

    def forward(self, hidden, residual, positions, seq_slots, kv_cache, kv_len: int, per_layer_input=None, one_seq: bool = False):
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, positions, seq_slots, kv_cache, kv_len, one_seq)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        hidden = self.mlp(hidden)
        # None only when a stage lost them (the fault that re-creates vLLM PR 40786)
        if per_layer_input is not None:
            assert self.per_layer_proj is not None, "per-layer inputs come only with per_layer_input_size"
            hidden = hidden + self.per_layer_proj(per_layer_input)
        return hidden, residual


class VisionEncoder(nn.Module):
    """Image -> one embedding per patch (they replace the placeholder tokens), plus one
    deepstack projection of them per early decoder layer. Runs on the first stage,
    outside the compiled forward, replicated on every TP rank (it is tiny)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.patch_size = cfg.patch_size
        self.patch_embed = nn.Linear(3 * cfg.patch_size**2, cfg.hidden_size, bias=False)
        self.deepstack = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False) for _ in range(cfg.deepstack_layers)
        )

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pixels [3, S, S] in [0, 1] -> (embeds [patches, H], deepstack [layers, patches, H])."""
        p = self.patch_size
        c, s, _ = pixels.shape
        patches = pixels.reshape(c, s // p, p, s // p, p).permute(1, 3, 0, 2, 4).reshape(-1, c * p * p)
        embeds = self.patch_embed(patches.to(self.patch_embed.weight.dtype))
        return embeds, torch.stack([proj(embeds) for proj in self.deepstack])


class LlamaStage(nn.Module):
    """The layers `layer_ids` of a Llama model (or a variant), plus the embedding (and
    the variants' extra inputs) on the first stage and the final norm + lm_head on the
    last one."""

    def __init__(self, cfg: ModelConfig, layer_ids: range, is_first: bool, is_last: bool):
        super().__init__()
        self.cfg = cfg
        self.is_first, self.is_last = is_first, is_last
        self.layer_ids = layer_ids
        # the embeddings and lm_head are nn.Modules: parallelize() swaps in vocab-parallel ones
        self.embed_tokens: nn.Module | None = nn.Embedding(cfg.vocab_size, cfg.hidden_size) if is_first else None
        pli_width = cfg.num_hidden_layers * cfg.per_layer_input_size
        self.embed_per_layer: nn.Module | None = nn.Embedding(cfg.vocab_size, pli_width) if is_first and pli_width else None
        self.visual = VisionEncoder(cfg) if is_first and cfg.model_type == "llama-vl" else None
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in layer_ids)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if is_last else None
        self.lm_head: nn.Module | None = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if is_last else None
        # Set by parallelize() under SP: token sharding of the stream at the first stage.
        self.shard_tokens: Callable[[torch.Tensor, int], torch.Tensor] | None = None  # (x, dim) -> this rank's token shard
        self.shard_residual: Callable[[torch.Tensor], torch.Tensor] | None = None  # x -> this rank's residual shard
        self.faults: frozenset[str] = frozenset()  # fault switches that act in the model

    def decoder_layers(self) -> Iterator[DecoderLayer]:
        """The stage's layers, typed (an nn.ModuleList yields plain Modules)."""
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer), "a stage holds only DecoderLayers"
            yield layer

    def intermediate_shapes(self, num_tokens: int, dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """THE declaration of what crosses a stage boundary for `num_tokens` local tokens:
        key -> (shape, dtype). A non-last stage sends exactly this; a non-first stage
        allocates its receive buffer from it (make_empty_intermediate_tensors)."""
        widths = {
            "hidden_states": self.cfg.hidden_size,
            "residual": self.cfg.hidden_size,
            "per_layer_inputs": self.cfg.num_hidden_layers * self.cfg.per_layer_input_size,
        }
        return {key: ((num_tokens, widths[key]), dtype) for key in INTERMEDIATE_KEYS[self.cfg.model_type]}

    def make_empty_intermediate_tensors(self, num_tokens: int, dtype: torch.dtype, device) -> dict[str, torch.Tensor]:
        """Receive buffer for the previous stage's intermediate tensors (vLLM's
        make_empty_intermediate_tensors)."""
        shapes = self.intermediate_shapes(num_tokens, dtype)
        if "pp-buffer-missing-key" in self.faults:
            # vLLM PR 37622: the buffer forgot a key the forward reads
            shapes.pop("residual", None)
        return {key: torch.empty(shape, dtype=dt, device=device) for key, (shape, dt) in shapes.items()}

    def embed_images(self, pixels: list[torch.Tensor], input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The multimodal inputs of one batch (llama-vl, first stage): image embeddings
        scattered onto the placeholder tokens (zero rows elsewhere), the placeholder mask,
        and the deepstack embeddings [layers, T, H]. Always tensors, also for text-only
        batches: a captured graph must keep the branch that adds them (vLLM PR 43617)."""
        cfg, t = self.cfg, input_ids.shape[0]
        assert self.visual is not None, "images reach only a llama-vl first stage, which has the vision encoder"
        weight = self.visual.patch_embed.weight
        embeds = torch.zeros(t, cfg.hidden_size, dtype=weight.dtype, device=weight.device)
        deepstack = torch.zeros(cfg.deepstack_layers, t, cfg.hidden_size, dtype=weight.dtype, device=weight.device)
        mask = torch.zeros(t, 1, dtype=weight.dtype, device=weight.device)
        # without images a generated placeholder id is just a token
        if pixels:
            rows = (input_ids == cfg.image_token_id).nonzero().flatten()
            if len(rows) != cfg.num_patches * len(pixels):
                raise ValueError(
                    f"batch has {len(rows)} image placeholder tokens for {len(pixels)} images of {cfg.num_patches} patches each"
                )
            images = [self.visual(px.to(weight.device)) for px in pixels]
            embeds[rows] = torch.cat([e for e, _ in images])
            deepstack[:, rows] = torch.cat([d for _, d in images], dim=1)
            mask[rows] = 1
        return {"image_embeds": embeds, "image_mask": mask, "deepstack": deepstack}

    def _first_stage_inputs(self, input_ids, mm):
        """(hidden, residual, per_layer_inputs, deepstack) at the start of the first stage."""
        assert self.embed_tokens is not None, "only the first stage, which has the embedding, starts the stream"
        stream = self.embed_tokens(input_ids)
        if mm is not None:
            stream = stream * (1 - mm["image_mask"]) + mm["image_embeds"]
        deepstack = mm.get("deepstack") if mm is not None else None
        pli = self.embed_per_layer(input_ids) if self.embed_per_layer is not None else None
        if self.shard_tokens is None:
            return stream, None, pli, deepstack
        assert self.shard_residual is not None, "parallelize() sets both SP hooks together"
        # SP: the stream enters as this rank's residual shard plus a zero update, so the
        # first fused add+norm sees exactly the shard (the slice vLLM PR 33322 got wrong).
        residual = self.shard_residual(stream)
        pli = self.shard_tokens(pli, 0) if pli is not None else None
        deepstack = self.shard_tokens(deepstack, 1) if deepstack is not None else None
        return torch.zeros_like(residual), residual, pli, deepstack

    def forward(self, input_ids, positions, seq_slots, kv_caches, kv_len: int, intermediate=None, mm=None, one_seq: bool = False):
        """First stage reads input_ids (and `mm`, the multimodal inputs of llama-vl),
        later stages read `intermediate`; `one_seq`: every real token is in one sequence
        slot (paged_attention). Returns (the intermediate dict on a non-last
        stage or the logits on the last one, the stream at each place [places, T, H]: on the
        first stage the embedding's output first, then the stream after each layer)."""
        deepstack = None
        if self.is_first:
            hidden, residual, pli, deepstack = self._first_stage_inputs(input_ids, mm)
        else:
            hidden = intermediate["hidden_states"]
            has_residual = "residual" in INTERMEDIATE_KEYS[self.cfg.model_type]
            residual = intermediate["residual"] if has_residual else None
            pli = intermediate.get("per_layer_inputs")
        # vLLM PR 40786: the layers got the per-layer inputs only on the first stage
        # (they are still handed on, so a deeper pipeline does not crash on them)
        layers_get_pli = self.is_first or "pp-drop-per-layer-inputs" not in self.faults
        # The first stage also records the stream as it enters layer 0 (the embedding's
        # output, an all-reduce under TP): a fault there is a place of its own.
        states = [hidden if residual is None else hidden + residual] if self.is_first else []
        for layer_id, layer, kv_cache in zip(self.layer_ids, self.layers, kv_caches):
            layer_pli = None
            if pli is not None and layers_get_pli:
                width = self.cfg.per_layer_input_size
                layer_pli = pli[:, layer_id * width : (layer_id + 1) * width]
            hidden, residual = layer(hidden, residual, positions, seq_slots, kv_cache, kv_len, layer_pli, one_seq)
            if deepstack is not None and layer_id < deepstack.shape[0]:
                hidden = hidden + deepstack[layer_id]
            states.append(hidden + residual)
        layer_states = torch.stack(states)
        if not self.is_last:
            if "residual" not in INTERMEDIATE_KEYS[self.cfg.model_type]:
                # these models hand over one stream (no residual key), as Gemma does
                return {"hidden_states": hidden + residual, "per_layer_inputs": pli}, layer_states
            return {"hidden_states": hidden, "residual": residual}, layer_states
        assert self.norm is not None and self.lm_head is not None, "the last stage has the final norm and lm_head"
        hidden = self.norm(hidden, residual)[0]
        return self.lm_head(hidden), layer_states
