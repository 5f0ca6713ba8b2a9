"""Load this rank's share of an HF Llama (or zoo variant) safetensors checkpoint into a parallelised stage.

A rank reads only what it keeps: its stage's layers (PP) and, of each tensor, its own
rows or columns (TP), through safe_open(...).get_slice, so no rank ever holds the full
model. The fused projections (qkv_proj, gate_up_proj) are assembled from the local
slices of the separate HF tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from harness.engines.reference.model import MLP, LlamaStage, SparseMoE
from harness.engines.reference.parallel import ParallelContext, shard_range


class CheckpointReader:
    """Name -> file index over a single or sharded (model.safetensors.index.json) checkpoint."""

    def __init__(self, model_dir: str | Path):
        model_dir = Path(model_dir)
        index = model_dir / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {name: model_dir / f for name, f in weight_map.items()}
        elif (model_dir / "model.safetensors").exists():
            path = model_dir / "model.safetensors"
            with safe_open(str(path), framework="pt") as f:
                self.files = {name: path for name in f.keys()}
        else:
            raise FileNotFoundError(f"{model_dir} has no model.safetensors or model.safetensors.index.json")
        self._open: dict[Path, safe_open] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def read(self, name: str, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> torch.Tensor:
        """The tensor `name`, or only rows [a, b) / columns [a, b) of it (2-D tensors)."""
        if name not in self.files:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        path = self.files[name]
        if path not in self._open:
            self._open[path] = safe_open(str(path), framework="pt")
        sl = self._open[path].get_slice(name)
        if rows is not None:
            return sl[rows[0] : rows[1]]
        if cols is not None:
            return sl[:, cols[0] : cols[1]]
        return sl[:]


def _assign(module: nn.Module, tensor: torch.Tensor, dtype, device) -> None:
    expected = tuple(module.get_parameter("weight").shape)
    if tuple(tensor.shape) != expected:
        raise ValueError(f"weight shape {tuple(tensor.shape)} != expected local shape {expected}")
    module.weight = nn.Parameter(tensor.to(device=device, dtype=dtype), requires_grad=False)


def _load_mlp(mlp: MLP, ckpt: CheckpointReader, prefix: str, ff_rows: tuple[int, int], dtype, dev) -> None:
    """A SwiGLU MLP's rows `ff_rows` of its intermediate size (all of them: a whole MLP)."""
    gate_up = torch.cat(
        [ckpt.read(prefix + "gate_proj.weight", rows=ff_rows), ckpt.read(prefix + "up_proj.weight", rows=ff_rows)]
    )
    _assign(mlp.gate_up_proj, gate_up, dtype, dev)
    _assign(mlp.down_proj, ckpt.read(prefix + "down_proj.weight", cols=ff_rows), dtype, dev)


def _load_experts(moe: SparseMoE, ckpt: CheckpointReader, prefix: str, intermediate: int, ctx: ParallelContext, dtype) -> None:
    """The router (every rank) and this rank's experts, stacked: whole ones under EP,
    this TP rank's slice of each otherwise."""
    _assign(moe.gate, ckpt.read(prefix + "gate.weight"), dtype, ctx.device)
    rows = (0, intermediate) if ctx.ep else shard_range(intermediate, ctx.tp_rank, ctx.tp)
    names = [f"{prefix}experts.{e}." for e in moe.expert_ids]
    w13 = torch.stack(
        [torch.cat([ckpt.read(n + "gate_proj.weight", rows=rows), ckpt.read(n + "up_proj.weight", rows=rows)]) for n in names]
    )
    w2 = torch.stack([ckpt.read(n + "down_proj.weight", cols=rows) for n in names])
    for name, tensor in (("w13", w13), ("w2", w2)):
        expected = tuple(getattr(moe, name).shape)
        if tuple(tensor.shape) != expected:
            raise ValueError(f"{prefix}{name}: weight shape {tuple(tensor.shape)} != expected local shape {expected}")
        setattr(moe, name, nn.Parameter(tensor.to(device=ctx.device, dtype=dtype), requires_grad=False))


def load_stage(stage: LlamaStage, model_dir: str | Path, ctx: ParallelContext, dtype: torch.dtype) -> None:
    """Fill every (meta) parameter of `stage` with this rank's shard, cast to `dtype`."""
    cfg, r, tp, dev = stage.cfg, ctx.tp_rank, ctx.tp, ctx.device
    ckpt = CheckpointReader(model_dir)
    d = cfg.head_dim
    vocab_rows = shard_range(cfg.vocab_size, r, tp)
    if stage.embed_tokens is not None:
        _assign(stage.embed_tokens, ckpt.read("model.embed_tokens.weight", rows=vocab_rows), dtype, dev)
    if stage.embed_per_layer is not None:
        _assign(stage.embed_per_layer, ckpt.read("model.embed_per_layer.weight", rows=vocab_rows), dtype, dev)
    if stage.visual is not None:  # replicated on every TP rank
        _assign(stage.visual.patch_embed, ckpt.read("visual.patch_embed.weight"), dtype, dev)
        for j, proj in enumerate(stage.visual.deepstack):
            _assign(proj, ckpt.read(f"visual.deepstack.{j}.weight"), dtype, dev)
    if stage.lm_head is not None:
        # Tied embeddings (or a checkpoint that omits lm_head) reuse the embedding rows.
        name = "lm_head.weight"
        if cfg.tie_word_embeddings or name not in ckpt:
            name = "model.embed_tokens.weight"
        _assign(stage.lm_head, ckpt.read(name, rows=vocab_rows), dtype, dev)
        assert stage.norm is not None, "the last stage has the final norm beside lm_head"
        _assign(stage.norm, ckpt.read("model.norm.weight"), dtype, dev)
    for layer in stage.decoder_layers():
        p = f"model.layers.{layer.layer_id}."
        q_rows = shard_range(cfg.num_attention_heads * d, r, tp)
        kv_rows = shard_range(cfg.num_key_value_heads * d, r, tp)
        qkv = torch.cat(
            [
                ckpt.read(p + "self_attn.q_proj.weight", rows=q_rows),
                ckpt.read(p + "self_attn.k_proj.weight", rows=kv_rows),
                ckpt.read(p + "self_attn.v_proj.weight", rows=kv_rows),
            ]
        )
        _assign(layer.self_attn.qkv_proj, qkv, dtype, dev)
        o_cols = shard_range(cfg.num_attention_heads * d, r, tp)
        _assign(layer.self_attn.o_proj, ckpt.read(p + "self_attn.o_proj.weight", cols=o_cols), dtype, dev)
        if isinstance(layer.mlp, SparseMoE):
            _load_experts(layer.mlp, ckpt, p + "mlp.", cfg.intermediate_size, ctx, dtype)
        else:
            _load_mlp(layer.mlp, ckpt, p + "mlp.", shard_range(cfg.intermediate_size, r, tp), dtype, dev)
        _assign(layer.input_layernorm, ckpt.read(p + "input_layernorm.weight"), dtype, dev)
        _assign(layer.post_attention_layernorm, ckpt.read(p + "post_attention_layernorm.weight"), dtype, dev)
        if layer.per_layer_proj is not None:
            _assign(layer.per_layer_proj, ckpt.read(p + "per_layer_proj.weight"), dtype, dev)
    left = [n for n, t in list(stage.named_parameters()) + list(stage.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f"loader left tensors unloaded: {left}")
    # Non-parameter state (rope inv_freq, built on CPU) follows the weights.
    stage.to(dev)
