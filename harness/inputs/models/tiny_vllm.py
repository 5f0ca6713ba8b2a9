"""Tiny checkpoints of architectures that only vLLM defines.

Many architectures vLLM serves have no model class in transformers (105 of
vLLM 0.32's 258 text generators). tiny.py's route (the config class's defaults shrunk,
transformers' own init, `save_pretrained`) has no model to initialise for them. This is the
second route, generic: everything it writes is derived from vLLM's own model class.

1. The config. The model type comes from vLLM (`config_candidates`): the arch's own name
   among vLLM's config registry (`_CONFIG_REGISTRY`) and transformers' model types
   (PhiMoEForCausalLM -> `phimoe`), then the config classes the source of the arch's vLLM
   module and of its base classes' modules names (InternLM3ForCausalLM is vLLM's
   LlamaForCausalLM: `LlamaConfig` -> `llama`). Each candidate's class (vLLM's where its
   registry has one, else transformers') with no arguments, shrunk by tiny.py's rules, then
   the suite's `overrides:`; the first whose vLLM model instantiates is taken.
2. The weights. vLLM's model class is instantiated for that config on the meta device (no
   memory; a world of one process, `set_current_vllm_config`), refused above
   MAX_PARAMETERS, and each of its parameters is named back to what its `load_weights`
   reads (`checkpoint_layout`): a fused projection split into the parts its stacked
   mappings (`hf_to_vllm_mapper.orig_to_new_stacked`, `packed_modules_mapping`) name, sized
   by the layer's `output_sizes` (qkv_proj <- q_proj, k_proj, v_proj; gate_up_proj <-
   gate_proj, up_proj); routed experts' `w13_weight` / `w2_weight` split per expert by the
   layer's own `get_expert_mapping()` (experts.{e}.gate_proj / up_proj / down_proj, or
   w1 / w3 / w2); the class's `hf_to_vllm_mapper` renames undone. The layout is then fed to
   the model's own `load_weights` as meta tensors: a parameter it leaves unset refuses the
   build with its name, as vLLM's loader would refuse the checkpoint. Tensors are drawn
   from N(0, 0.02) under the seed in the model's parameter order; norm weights 1.
3. The tokenizer: tiny.py's.

Step3TextForCausalLM keeps its hand-written table (LAYOUTS): its committed golden
(scenarios/vllm-native-archs.yaml) was made on those bytes, and the table is the worked
example this route generalises.

There is no transformers model to check such a golden against: its golden is vLLM's own TP1
eager run, and the parallel settings are judged against it.

Like tiny.py this runs in the engine's interpreter and imports no harness module. The pure
rules (naming, splitting, candidates) take plain values and are tested without vLLM
(tests/test_tiny_vllm.py); `builds` is asked in the harness's own interpreter too, where
there is no vLLM.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Shapes = dict[str, tuple[int, ...]]

# a tiny config whose model is still larger than this is refused before any memory is taken
MAX_PARAMETERS = 50_000_000
GENERATOR_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
# shard ids of a stacked mapping, as vLLM's loaders write them
QKV_SHARDS = {"q": 0, "k": 1, "v": 2}


class Refused(Exception):
    """The generic route cannot build this architecture: the message says why."""


# ---------------------------------------------------------------------------------
# Step3: the hand-written table


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


# ---------------------------------------------------------------------------------
# which route


def builds(arch: str) -> bool:
    """Whether `arch` is built by this route: an architecture transformers has no model class
    for (in this interpreter: the harness's, choosing the builder's, or the builder's own)."""
    return arch in LAYOUTS or (arch.endswith(GENERATOR_SUFFIXES) and _transformers_knows(arch) is False)


@functools.cache
def _transformers_knows(arch: str) -> bool | None:
    """Whether transformers here exports `arch` (its lazy module's names: nothing imported);
    None without transformers, where this interpreter builds nothing anyway."""
    try:
        import transformers
    except ImportError:
        return None
    return arch in dir(transformers)


# ---------------------------------------------------------------------------------
# the config: pure rules


def normalized(name: str) -> str:
    """`PhiMoE`, `phimoe`, `Bailing_Moe-V2` -> one spelling to compare."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def arch_stem(arch: str) -> str:
    """The model's name in its architecture: PhiMoEForCausalLM -> PhiMoE."""
    for suffix in (*GENERATOR_SUFFIXES, "Model"):
        if arch.endswith(suffix):
            return arch[: -len(suffix)]
    return arch


def config_names(source: str) -> list[str]:
    """The config class names a module's source mentions, first mention first."""
    return list(dict.fromkeys(re.findall(r"\b([A-Z]\w*Config)\b", source)))


def config_candidates(arch: str, vllm_types: dict[str, str], transformers_types: dict[str, str], sources: list[str]) -> list[str]:
    """The model types to try for `arch`, best first. `vllm_types` and `transformers_types`:
    config class name -> model type; `sources`: the arch's vLLM module's source, then its
    base classes' modules'. The arch's own name as a model type comes first (vLLM's registry,
    then transformers'); then the config classes the sources name, one whose name shares the
    longest start with the arch's first."""
    stem = normalized(arch_stem(arch))
    found: list[str] = []
    for types in (vllm_types, transformers_types):
        found += [t for t in types.values() if normalized(t) == stem]
    named = [n for source in sources for n in config_names(source) if n in vllm_types or n in transformers_types]
    named.sort(key=lambda n: -_common_start(normalized(n.removesuffix("Config")), stem))
    found += [vllm_types.get(n) or transformers_types[n] for n in named]
    return list(dict.fromkeys(found))


def _common_start(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ---------------------------------------------------------------------------------
# the weights: pure rules


@dataclass(frozen=True)
class Piece:
    """One checkpoint tensor: its name and shape, and what fills it (`norm`: ones)."""

    name: str
    shape: tuple[int, ...]
    norm: bool = False


def shard_indices(shard_id) -> tuple[int, ...]:
    """A stacked mapping's shard id as positions: "q"/"k"/"v", an integer, or several (one
    checkpoint tensor that fills shards 0, 1 and 2 of a fused layer: Qwen3.5's in_proj_qkv)."""
    if isinstance(shard_id, (tuple, list)):
        return tuple(i for one in shard_id for i in shard_indices(one))
    return (QKV_SHARDS[shard_id],) if isinstance(shard_id, str) else (int(shard_id),)


def stacked_from_source(source: str) -> dict[str, tuple[str, object]]:
    """The stacked_params_mapping a load_weights writes out ((param_name, shard_name, shard_id)
    tuples: ("qkv_proj", "q_proj", "q")), as a mapper's orig_to_new_stacked."""
    found: dict[str, tuple[str, object]] = {}
    for fused, part, named, number in re.findall(r'\(\s*"([.\w]+)"\s*,\s*"([.\w]+)"\s*,\s*(?:"(\w+)"|(\d+))\s*,?\s*\)', source):
        shard: object = named or int(number)
        if named and named not in QKV_SHARDS:
            continue  # a ("w1", ...) of an expert mapping, not a shard of a fused layer
        found.setdefault("." + part.lstrip("."), ("." + fused.lstrip("."), shard))
    return found


def stacked_parts(
    stacked: dict[str, tuple[str, object]], packed: dict[str, list[str]]
) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """fused module name -> its checkpoint parts in shard order, each with the shards it fills.
    `stacked`: the mappers' orig_to_new_stacked ({".q_proj": (".qkv_proj", "q")}) and the
    stacked_params_mapping of load_weights; `packed`: the class's packed_modules_mapping
    ({"gate_up_proj": ["gate_proj", "up_proj"]}), for a fused name neither names. Names keep
    their leading dots: ".mlp.gate_up_proj"."""
    parts: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for part, (fused, shard_id) in stacked.items():
        parts.setdefault(fused, []).append((part, shard_indices(shard_id)))
    found = {fused: sorted(pairs, key=lambda p: p[1]) for fused, pairs in parts.items()}
    for fused, names in packed.items():
        if not any(k.rsplit(".", 1)[-1] == fused for k in found) and names != [fused]:
            found["." + fused] = [("." + n, (i,)) for i, n in enumerate(names)]
    return found


def split_fused(
    module_path: str,
    leaf: str,
    shape: tuple[int, ...],
    output_sizes: list[int] | None,
    parts: dict[str, list[tuple[str, tuple[int, ...]]]],
) -> list[Piece]:
    """The checkpoint tensors of a parameter `leaf` ("weight", "bias") of the layer at
    `module_path`: one per part where a stacked mapping names the layer and its parts fill its
    output_sizes exactly; the parameter itself otherwise (a fused checkpoint tensor, which a
    merged layer's loader splits itself)."""
    dotted = "." + module_path
    for fused, named in parts.items():
        filled = sorted(i for _, shards in named for i in shards)
        if dotted.endswith(fused) and output_sizes and filled == list(range(len(output_sizes))):
            base = dotted[: -len(fused)].lstrip(".")
            return [
                Piece(f"{base}{name}.{leaf}".lstrip("."), (sum(output_sizes[i] for i in shards), *shape[1:]))
                for name, shards in named
            ]
    return [Piece(f"{module_path}.{leaf}".lstrip("."), shape)]  # a parameter of the model itself: no module path


def split_experts(module_path: str, leaf: str, shape: tuple[int, ...], mapping: list[tuple[str, str, int, str]]) -> list[Piece]:
    """Routed experts' stacked parameter (`w13_weight` [E, 2I, H]: gate and up, or `w2_weight`
    [E, H, I]: down) as the per-expert tensors its layer's get_expert_mapping() reads:
    (param_name "experts.w13_", weight_name "experts.3.gate_proj.", expert 3, shard "w1").
    The checkpoint's names hang where the layer's `experts` module does."""
    kind, _, tail = leaf.partition("_")  # "w13", "weight"
    base = module_path[: module_path.rfind(".experts")] if ".experts" in module_path else module_path.rpartition(".")[0]
    rows = [(expert, weight_name, shard) for param_name, weight_name, expert, shard in mapping if param_name.endswith(f"{kind}_")]
    shards = sorted({shard for _, _, shard in rows})
    size = shape[1] // len(shards) if kind == "w13" else shape[1]
    return [
        Piece(f"{base}.{weight_name}{tail}".lstrip("."), (size, *shape[2:]))
        for expert, weight_name, shard in sorted(rows, key=lambda r: (r[0], shards.index(r[2])))
    ]


def unmapped(name: str, prefix: dict, substr: dict, suffix: dict) -> str:
    """A vLLM parameter name back to its checkpoint name through a WeightsMapper's renames
    (orig -> new), undone in the reverse of the order the mapper applies them; a rename to
    None (a dropped weight) is no way back."""
    for orig, new in suffix.items():
        if new and name.endswith(new):
            name = orig.join(name.rsplit(new, 1))
            break
    for orig, new in prefix.items():
        if new and name.startswith(new):
            name = orig + name[len(new) :]
            break
    for orig, new in substr.items():
        if new and new in name:
            name = name.replace(new, orig, 1)
            break
    return name


# ---------------------------------------------------------------------------------
# vLLM: what this route asks of it (the engine's interpreter only)


def not_standalone(arch: str, draft_heads: Iterable[str], backends: Iterable[str]) -> str | None:
    """Why `arch` has no checkpoint of its own to build, or None: a speculative-decoding draft
    head loads beside its target model (the speculative-decoding axis's, not a model of its own), and vLLM's
    Transformers backend classes run a checkpoint of a transformers class (model_impl)."""
    if arch in draft_heads:
        return "a speculative-decoding draft head: vLLM loads it beside a target model (the spec axis), not alone"
    if arch in backends:
        return "vLLM's Transformers backend: it runs a transformers class's checkpoint (model_impl=transformers), no architecture of its own"
    return None


def registered(arch: str):
    """vLLM's model class for `arch`, and the sources its config may be named in."""
    import importlib
    import inspect

    from vllm.model_executor.models import registry
    from vllm.model_executor.models.registry import ModelRegistry

    entry = ModelRegistry.models.get(arch)
    if entry is None or not hasattr(entry, "module_name"):
        raise Refused(f"{arch} is not an architecture vLLM registers")
    why = not_standalone(arch, registry._SPECULATIVE_DECODING_MODELS, registry._TRANSFORMERS_BACKEND_MODELS)
    if why:
        raise Refused(why)
    cls = getattr(importlib.import_module(entry.module_name), entry.class_name)
    modules = dict.fromkeys(inspect.getmodule(c) for c in cls.__mro__ if c.__module__.startswith("vllm.model_executor"))
    return cls, [inspect.getsource(m) for m in modules if m is not None]


def config_classes() -> tuple[dict[str, str], dict[str, str]]:
    """config class name -> model type: vLLM's config registry's, transformers'."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    vllm_types: dict[str, str] = {}
    for model_type, cls in dict.items(_CONFIG_REGISTRY):  # its values are class names until read
        vllm_types.setdefault(cls if isinstance(cls, str) else cls.__name__, model_type)
    return vllm_types, {cls: model_type for model_type, cls in CONFIG_MAPPING_NAMES.items()}


def config_for(model_type: str):
    """The config class of `model_type` with its defaults: vLLM's where its registry has one."""
    from transformers import AutoConfig
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    if model_type in _CONFIG_REGISTRY:
        return _CONFIG_REGISTRY[model_type]()
    return AutoConfig.for_model(model_type)


def config_of(arch: str):
    """vLLM's own config class for a LAYOUTS `arch`, with its defaults."""
    config = config_for(LAYOUTS[arch][0])
    config.architectures = [arch]
    return config


@functools.cache
def _world_of_one() -> None:
    """vLLM's layers ask the parallel groups their size: a world of one process (gloo)."""
    import socket

    from vllm.distributed import parallel_state

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parallel_state.init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, "gloo")


def _groups_for_current_config() -> None:
    """The TP/PP groups of one process, made afresh for the config being tried: vLLM creates
    the expert-parallel group only for a config it sees as MoE (parallel_state.py), so a group
    made for another candidate's config would not do."""
    from vllm.distributed import parallel_state

    _world_of_one()
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(1, 1)


def engine_config(directory: str):
    """vLLM's VllmConfig for the checkpoint config in `directory`: TP1, eager, float32."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=directory, dtype="float32", enforce_eager=True, skip_tokenizer_init=True, load_format="dummy"
    ).create_engine_config()


def meta_model(vllm_config):
    """vLLM's model for `vllm_config` on the meta device (no memory), as its loader makes it
    (initialize_model)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture

    # a try cut short by a missing field left its attention layers registered under their names
    vllm_config.compilation_config.static_forward_context.clear()
    with set_current_vllm_config(vllm_config):
        _groups_for_current_config()
        cls, _ = get_model_architecture(vllm_config.model_config)
        with torch.device("meta"):
            return cls(vllm_config=vllm_config, prefix="")


def missing_field(exc: BaseException) -> str | None:
    """The config field a model read and its config lacks, from the AttributeError it raised."""
    found = re.fullmatch(r"'(\w*Config)' object has no attribute '(\w+)'", str(exc)) if isinstance(exc, AttributeError) else None
    return found.group(2) if found else None


# a remote-code config's own name for the decoder layer count (TeleChat2's attribute_map
# points num_hidden_layers at n_layer): guessed as 1, the model would have one layer, and a
# pp2 stage none
LAYER_COUNT_FIELDS = frozenset({"n_layer", "n_layers", "num_layers", "num_decoder_layers"})


def guessed_value(field: str, config=None):
    """A tiny value for a config field the config class does not declare, by what its name
    says (a remote-code config's own field: `moe_intermediate_size`, `num_shared_experts`,
    `use_qkv_bias`); a layer count is `config`'s own; None where the name says nothing (the
    model then says what it needs)."""
    words = field.lower().split("_")
    name = "_".join(words)
    if name in LAYER_COUNT_FIELDS:
        return getattr(config, "num_hidden_layers", None) or 2
    rules = (
        (lambda: name.endswith(("experts_per_tok", "topk", "top_k")), 2),
        (lambda: "experts" in words and "shared" in words, 1),
        (lambda: "experts" in words or "expert" in words and "num" in words, 4),
        (lambda: name.endswith(("intermediate_size", "ffn_hidden_size", "inter_dim")), 64),
        (lambda: name.endswith("head_dim"), 32),
        (lambda: "theta" in words or "base" in words and "rope" in name, 10000.0),
        (lambda: words[-1] in ("eps", "epsilon"), 1e-6),
        (lambda: "dropout" in words, 0.0),
        (lambda: words[-1] in ("act", "activation") or name.endswith("activation_function"), "silu"),
        (lambda: words[-1] in ("factor", "ratio", "scale", "multiplier"), 1.0),
        (lambda: words[0] in ("use", "tie", "norm") or words[-1] in ("bias", "norm", "prob"), False),
        (lambda: name == "scoring_func", "softmax"),
        (lambda: words[-1] == "rank", 32),
        (lambda: words[-1] in ("step", "interval", "freq"), 1),
        (lambda: words[-1] in ("head", "heads"), 4),
        (lambda: words[0] in ("num", "n") or words[-1] in ("layers", "groups", "group") or name.endswith("dense_replace"), 1),
        (lambda: "size" in words or "dim" in words, 64),
    )
    for applies, value in rules:
        if applies():
            return value
    return None


def checkpoint_layout(model) -> list[Piece]:
    """Every checkpoint tensor `model`'s load_weights reads, in its parameters' order."""
    modules = dict(model.named_modules())
    parts = stacked_parts(_stacked_mappings(model), getattr(type(model), "packed_modules_mapping", {}) or {})
    mapper = getattr(type(model), "hf_to_vllm_mapper", None)
    pieces: list[Piece] = []
    for name, param in model.named_parameters():
        module_path, _, leaf = name.rpartition(".")
        owner = modules[module_path]
        shape = tuple(param.shape)
        if hasattr(owner, "get_expert_mapping") and leaf.startswith(("w13_", "w2_")):
            found = split_experts(module_path, leaf, shape, owner.get_expert_mapping())
        else:
            found = split_fused(module_path, leaf, shape, getattr(owner, "output_sizes", None), parts)
        norm = "norm" in type(owner).__name__.lower() and leaf == "weight"
        pieces += [Piece(_unmap(p.name, mapper), p.shape, norm) for p in found]
    # a name two parameters share (a tied or aliased one) is one tensor
    return list({p.name: p for p in reversed(pieces)}.values())[::-1]


def _stacked_mappings(model) -> dict:
    """The orig_to_new_stacked of every WeightsMapper the model's classes carry, and the
    stacked_params_mapping their own load_weights write out (under them: the mappers win)."""
    import inspect

    found: dict = {}
    for cls in dict.fromkeys(type(m) for m in model.modules()):
        loader = cls.__dict__.get("load_weights")
        if loader is not None:
            try:
                found = stacked_from_source(inspect.getsource(loader)) | found
            except (OSError, TypeError):  # no source to read (a compiled or generated method)
                pass
        mapper = getattr(cls, "hf_to_vllm_mapper", None)
        found |= dict(getattr(mapper, "orig_to_new_stacked", {}) or {})
    return found


def _unmap(name: str, mapper) -> str:
    """`name` through `mapper`'s renames undone, where its own renames (stacked maps left out,
    get_rename_mapper) take the result back to `name`; `name` itself otherwise."""
    if mapper is None:
        return name
    found = unmapped(name, dict(mapper.orig_to_new_prefix), dict(mapper.orig_to_new_substr), dict(mapper.orig_to_new_suffix))
    return found if mapper.get_rename_mapper().map_name(found) == name else name


def unloaded(model, pieces: list[Piece]) -> list[str]:
    """The model's parameters its own load_weights leaves unset when given `pieces` (meta
    tensors: nothing is allocated), as vLLM's loader counts them; a loader that rejects a
    name or a shape raises Refused with its words."""
    import torch

    expected = {name for name, _ in model.named_parameters()}
    tensors = ((p.name, torch.empty(p.shape, device="meta")) for p in pieces)
    try:
        loaded = model.load_weights(tensors)
    except NotImplementedError as exc:
        if "meta tensor" in str(exc):  # a loader that reads the values (a transpose, a copy out): vLLM's load is the check
            return []
        raise Refused(f"its vLLM loader rejects the derived names (NotImplementedError: {_one_line(exc)})") from None
    except Exception as exc:  # the model's own loader: its complaint is the reason
        raise Refused(f"its vLLM loader rejects the derived names ({type(exc).__name__}: {_one_line(exc)})") from None
    if loaded is None:  # a loader that does not say what it loaded: vLLM's own check cannot run either
        return []
    return sorted(expected - set(loaded))


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def weights(shapes: Shapes, seed: int) -> dict:
    """A tensor per name of `shapes`, drawn in the table's order under `seed`; norms 1."""
    return weights_of([Piece(n, s, n.endswith(("norm.weight", "layernorm.weight"))) for n, s in shapes.items()], seed)


def weights_of(pieces: Iterable[Piece], seed: int) -> dict:
    """A tensor per piece, drawn in order under `seed` from N(0, 0.02); a norm's weight 1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for piece in pieces:
        if piece.norm:
            tensors[piece.name] = torch.ones(piece.shape)
        else:
            tensors[piece.name] = torch.randn(piece.shape, generator=generator) * 0.02
    return tensors
