"""Tiny checkpoints of architectures that only vLLM defines.

Some architectures vLLM serves have no model class in transformers: vLLM brings their
config class itself (vllm/transformers_utils/configs, found through its config
registry by model type) and loads weights under the names its own model's
`load_weights` reads. tiny.py's route (the config class's defaults shrunk, transformers'
own init, `save_pretrained`) has no model to initialise for them. This is the second,
documented route, for the architectures of LAYOUTS only:

1. the config: vLLM's own config class with no arguments, shrunk by tiny.py's rules,
   then the suite's `overrides:` (fields the generic rules do not know, such as a
   family's own expert counts); `architectures` and the special token ids set;
2. the weights: one tensor per name the architecture's vLLM loader reads, with the
   shape the config gives it (LAYOUTS: written from vLLM's model file, each entry says
   where), drawn from N(0, 0.02) under the seed in the table's order; norm weights 1;
3. the tokenizer: tiny.py's.

There is no transformers model to check such a golden against: its golden is vLLM's
own TP1 eager run, and the parallel settings are judged against it.

Like tiny.py this runs in the engine's interpreter and imports no harness module; vLLM
is imported only for an architecture of LAYOUTS.
"""

from __future__ import annotations

from collections.abc import Callable

Shapes = dict[str, tuple[int, ...]]


def _moe_layers(config) -> set[int]:
    """Step3's MoE layers: published config.json files write them as one string "4,5,...";
    the config class's default is a tuple (which vLLM's step3_text.py cannot read: it
    calls .strip() on it, so a checkpoint must carry the string form)."""
    value = config.moe_layers_enum
    if isinstance(value, str):
        return {int(i) for i in value.strip().split(",") if i.strip()}
    return {int(i) for i in value}


def step3_text(config) -> Shapes:
    """vLLM's step3_text.py: attention with one shared KV head and a low-rank query
    (q_proj -> inter_norm -> wq; q/k/v_proj are sliced into its fused qkv_proj by
    Step3TextModel.load_weights' qkv_params_mapping), a dense MLP (`mlp.`) or, on the
    layers of moe_layers_enum, routed experts stacked per projection (`moe.gate_proj.weight`
    [experts, inter, hidden]: the expert_params_mapping) beside a shared expert."""
    h, v = config.hidden_size, config.vocab_size
    q, d, heads = config.share_q_dim, config.head_dim, config.num_attention_heads
    e, moe, shared, dense = (
        config.moe_num_experts,
        config.moe_intermediate_size,
        config.share_expert_dim,
        config.intermediate_size,
    )
    shapes: Shapes = {"model.embed_tokens.weight": (v, h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (d, h),
            p + "self_attn.v_proj.weight": (d, h),
            p + "self_attn.inter_norm.weight": (q,),
            p + "self_attn.wq.weight": (heads * d, q),
            p + "self_attn.o_proj.weight": (h, heads * d),
        }
        if i in _moe_layers(config):
            shapes |= {
                p + "moe.gate.weight": (e, h),
                p + "moe.gate_proj.weight": (e, moe, h),
                p + "moe.up_proj.weight": (e, moe, h),
                p + "moe.down_proj.weight": (e, h, moe),
                p + "share_expert.gate_proj.weight": (shared, h),
                p + "share_expert.up_proj.weight": (shared, h),
                p + "share_expert.down_proj.weight": (h, shared),
            }
        else:
            shapes |= {
                p + "mlp.gate_proj.weight": (dense, h),
                p + "mlp.up_proj.weight": (dense, h),
                p + "mlp.down_proj.weight": (h, dense),
            }
    return shapes | {"model.norm.weight": (h,), "lm_head.weight": (v, h)}


# architecture -> (vLLM's model type for it, the names and shapes its loader reads)
LAYOUTS: dict[str, tuple[str, Callable[..., Shapes]]] = {
    "Step3TextForCausalLM": ("step3_text", step3_text),
}


def builds(arch: str) -> bool:
    return arch in LAYOUTS


def config_of(arch: str):
    """vLLM's own config class for `arch`, with its defaults."""
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    config = _CONFIG_REGISTRY[LAYOUTS[arch][0]]()
    config.architectures = [arch]
    return config


def weights(shapes: Shapes, seed: int) -> dict:
    """A tensor per name of `shapes`, drawn in the table's order under `seed`; norms 1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith(("norm.weight", "layernorm.weight")):
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.randn(shape, generator=generator) * 0.02
    return tensors
