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
    shapes are declared in ONE place, `LlamaStage.intermediate_spec`;
  * one attention path serves prefill and decode over a flat token dimension with
    per-token (sequence slot, position) and a per-layer KV cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

#: the keys a non-last stage sends and a non-first stage receives (see intermediate_spec)
INTERMEDIATE_KEYS = ("hidden_states", "residual")


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

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> "ModelConfig":
        return cls.from_dict(json.loads((Path(model_dir) / "config.json").read_text()))

    @classmethod
    def from_dict(cls, cfg: dict) -> "ModelConfig":
        archs = cfg.get("architectures") or []
        if cfg.get("model_type", "llama") != "llama" and "LlamaForCausalLM" not in archs:
            raise ValueError(f"reference engine only runs Llama models, got model_type={cfg.get('model_type')!r}")
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
    return 1.0 / (theta ** exponents)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim] rotated by each token's own position (rotate-half layout)."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype)[:, None, :]
    sin = emb.sin().to(x.dtype)[:, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def paged_attention(q, k, v, kv_cache, positions, seq_slots, kv_len: int, scale: float):
    """Attention over a flat batch of tokens, the same code for prefill and decode.

    q [T, hq, d], k/v [T, hkv, d]; kv_cache = (k_cache, v_cache), each
    [slots, max_len, hkv, d]. Each token first writes its k/v at (slot, position), then
    attends to the cache entries of its own slot with key position <= its position.
    `kv_len` (a host int, max position + 1 in the batch) bounds the keys looked at.
    Padding tokens use the trash slot (the last one) at position 0, so they never
    touch a real sequence and never produce NaN.
    """
    k_cache, v_cache = kv_cache
    k_cache.index_put_((seq_slots, positions), k)
    v_cache.index_put_((seq_slots, positions), v)
    keys = k_cache[:, :kv_len][seq_slots]  # [T, L, hkv, d]
    values = v_cache[:, :kv_len][seq_slots]
    t, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.view(t, hkv, hq // hkv, d)  # GQA: query head h reads kv head h // group
    scores = torch.einsum("tkgd,tlkd->tkgl", qg, keys) * scale
    key_pos = torch.arange(kv_len, device=q.device)
    visible = key_pos[None, :] <= positions[:, None]  # [T, L]
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores.to(torch.float32), dim=-1).to(q.dtype)
    out = torch.einsum("tkgl,tlkd->tkgd", probs, values)
    return out.reshape(t, hq * d)


class Attention(nn.Module):
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
        self.qkv_proj = nn.Linear(cfg.hidden_size, qkv_out, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False)

    def forward(self, x, positions, seq_slots, kv_cache, kv_len: int):
        qkv = self.qkv_proj(x)
        d = self.head_dim
        q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1)
        t = q.shape[0]
        q = apply_rope(q.view(t, self.num_heads, d), positions, self.inv_freq)
        k = apply_rope(k.view(t, self.num_kv_heads, d), positions, self.inv_freq)
        v = v.view(t, self.num_kv_heads, d)
        out = paged_attention(q, k, v, kv_cache, positions, seq_slots, kv_len, self.scale)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.intermediate_size = cfg.intermediate_size  # local; parallelize() divides it
        # gate and up fused, as vLLM's MergedColumnParallelLinear.
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.layer_id = layer_id  # global index, names the HF weights
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, hidden, residual, positions, seq_slots, kv_cache, kv_len: int):
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, positions, seq_slots, kv_cache, kv_len)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaStage(nn.Module):
    """The layers `layer_ids` of a Llama model, plus the embedding on the first stage
    and the final norm + lm_head on the last one."""

    def __init__(self, cfg: ModelConfig, layer_ids: range, is_first: bool, is_last: bool):
        super().__init__()
        self.cfg = cfg
        self.is_first, self.is_last = is_first, is_last
        self.layer_ids = layer_ids
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size) if is_first else None
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in layer_ids)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if is_last else None
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if is_last else None

    def intermediate_spec(self, num_tokens: int, dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """THE declaration of what crosses a stage boundary for `num_tokens` local tokens:
        key -> (shape, dtype). A non-last stage sends exactly this; a non-first stage
        allocates its receive buffer from it (make_empty_intermediate_tensors)."""
        shape = (num_tokens, self.cfg.hidden_size)
        return {key: (shape, dtype) for key in INTERMEDIATE_KEYS}

    def make_empty_intermediate_tensors(self, num_tokens: int, dtype: torch.dtype, device) -> dict[str, torch.Tensor]:
        """Receive buffer for the previous stage's intermediate tensors (vLLM's
        make_empty_intermediate_tensors)."""
        return {
            key: torch.empty(shape, dtype=dt, device=device)
            for key, (shape, dt) in self.intermediate_spec(num_tokens, dtype).items()
        }

    def forward(self, input_ids, positions, seq_slots, kv_caches, kv_len: int, intermediate=None):
        """First stage reads input_ids, later stages read `intermediate`. Returns the
        intermediate dict on a non-last stage and the logits on the last one."""
        if self.is_first:
            hidden, residual = self.embed_tokens(input_ids), None
        else:
            hidden, residual = intermediate["hidden_states"], intermediate["residual"]
        for layer, kv_cache in zip(self.layers, kv_caches):
            hidden, residual = layer(hidden, residual, positions, seq_slots, kv_cache, kv_len)
        if not self.is_last:
            return {"hidden_states": hidden, "residual": residual}
        hidden = self.norm(hidden, residual)[0]
        return self.lm_head(hidden)
