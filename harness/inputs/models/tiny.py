"""Build a tiny random checkpoint of any transformers architecture.

    python harness/inputs/models/tiny.py --arch Qwen3ForCausalLM --seed 0 \
        --overrides '{"num_hidden_layers": 4}' --corpus CORPUS.txt --out DIR

Run by the interpreter of the engine that will serve the model (vLLM's venv has its
own transformers pin), so the config fields written are the ones that engine reads.
This file is a script: standard library, torch, transformers and tokenizers only, no
harness import, because the engine's interpreter may not have the harness's
dependencies.

The config starts from the architecture's own defaults (its config class with no
arguments) and is shrunk by SHRINK: every field that the config has (directly or
through its attribute_map, so GPT-2's n_embd counts as hidden_size) is set to a small
value, in the text config and in every sub-config (vision, audio towers). The user's
overrides are applied last and win; `--extra-config` keys, which the config class does
not declare but the engine reads, are written into config.json as given. Weights come from transformers' own init under
torch.manual_seed(seed), so the names and shapes are what the architecture declares.

Errors a user can cause exit with code 2 and one line on stderr starting with
"tiny-model:", which the harness shows as is.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

# run as a script (the engine's interpreter): its folder is on sys.path
try:
    import tiny_mm
    import tiny_vllm
except ImportError:  # imported by the harness's own tests
    from harness.inputs.models import tiny_mm, tiny_vllm

VOCAB = 512
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]  # ids 0, 1, 2

# field -> small value. Counts are only ever lowered (a default below the small value is
# kept); sizes are set. head_dim 32: vLLM's CPU attention accepts 32 and up.
SHRINK_COUNTS = {
    "num_hidden_layers": 2,
    "num_layers": 2,
    "depth": 2,
    "num_attention_heads": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 2048,
}
SHRINK_SIZES = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "ffn_hidden_size": 256,  # Falcon
    # GPT-2 family (None by default: 4 x hidden, then left alone)
    "n_inner": 256,
    "ffn_dim": 256,
    "head_dim": 32,
    # GPT-J / CodeGen: rotary on part of each head, at most head_dim
    "rotary_dim": 16,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "kv_lora_rank": 32,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 32,
}
SUB_CONFIGS = ("text_config", "vision_config", "audio_config")


class UserError(Exception):
    """Bad input from the scenario file: unknown architecture, rejected overrides."""


def refused(exc: UserError) -> int:
    """The one line the harness shows for a build the user's scenario file caused; exit 2."""
    print(f"tiny-model: {' '.join(str(exc).split())}", file=sys.stderr)
    return 2


def model_class(arch: str):
    import transformers

    cls = getattr(transformers, arch, None)
    if cls is None or not hasattr(cls, "config_class") or not hasattr(cls, "from_pretrained"):
        known = [n for n in dir(transformers) if n.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel"))]
        close = difflib.get_close_matches(arch, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(
            f"unknown architecture '{arch}': not a model class of transformers "
            f"{transformers.__version__} in {sys.executable}{hint}"
        )
    return cls


def shrink(config) -> None:
    """Make `config` (and its sub-configs) tiny, in place."""
    for name in SUB_CONFIGS:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            shrink(sub)
    original_layers = getattr(config, "num_hidden_layers", None)
    for field, small in SHRINK_COUNTS.items():
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > small:
            _set(config, field, small)
    for field, small in SHRINK_SIZES.items():
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool):
            _set(config, field, small)
    _fit_layer_lists(config, original_layers)
    if hasattr(config, "vocab_size"):
        config.vocab_size = VOCAB


def _set(config, field: str, value) -> None:
    try:
        setattr(config, field, value)
    except AttributeError:
        # a derived, read-only field (Falcon's head_dim): it follows the others
        pass


def _fit_layer_lists(config, original_layers: int | None) -> None:
    """A per-layer list (layer_types, mlp_layer_types, activation_sparsity_pattern: one
    entry per layer of the default config) gets one entry per layer of the tiny one. A
    list of kinds keeps every kind it had: a model may require each kind to appear
    (Gemma3n looks up its first full-attention layer)."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or not isinstance(original_layers, int):
        return
    for field, values in list(vars(config).items()):
        if not isinstance(values, list) or len(values) != original_layers or len(values) <= layers:
            continue
        if field.endswith("layer_types"):
            missing = [k for k in dict.fromkeys(values) if k not in values[:layers]]
            _set(config, field, values[: max(0, layers - len(missing))] + missing[:layers])
        else:
            _set(config, field, values[:layers])


def apply_overrides(config, overrides: dict) -> None:
    for field, value in overrides.items():
        current = getattr(config, field, None)
        if current is None and not hasattr(config, field):
            raise UserError(f"override '{field}' is not a field of {type(config).__name__}")
        if isinstance(value, dict) and hasattr(current, "to_dict"):
            apply_overrides(current, value)
        else:
            setattr(config, field, value)


def check_extra_config(config, extra: dict) -> None:
    """Extra keys are for what the config class does not declare; a declared field
    belongs under `overrides:`, where the config's own checks see it. A sub-config's
    extra keys go under its name ({text_config: {norm_topk_prob: true}})."""
    for name in SUB_CONFIGS:
        if isinstance(extra.get(name), dict) and hasattr(getattr(config, name, None), "to_dict"):
            check_extra_config(getattr(config, name), extra[name])
    declared = [k for k in extra if k not in SUB_CONFIGS and (hasattr(config, k) or k in getattr(config, "attribute_map", {}))]
    if declared:
        raise UserError(f"extra_config {declared} are fields of {type(config).__name__}: set them under `overrides:`")


def write_extra_config(out: Path, extra: dict) -> None:
    # leave transformers' own bytes alone: goldens hold the checkpoint's digest
    if not extra:
        return

    def add(config: dict) -> None:
        for key, value in extra.items():
            if key in SUB_CONFIGS and isinstance(value, dict) and isinstance(config.get(key), dict):
                config[key].update(value)
            else:
                config[key] = value

    tiny_mm.edit_config_json(out, add)


def set_special_ids(config) -> None:
    for holder in (config, getattr(config, "text_config", None)):
        if holder is None:
            continue
        for field, token_id in (("bos_token_id", 0), ("eos_token_id", 1), ("pad_token_id", 2)):
            if hasattr(holder, field):
                setattr(holder, field, token_id)


def build_model(arch: str, seed: int, overrides: dict, extra_config: dict | None = None):
    import torch

    cls = model_class(arch)
    config = cls.config_class(**tiny_mm.default_sub_configs(getattr(cls.config_class, "model_type", "")))
    tiny_config(config, overrides, extra_config or {})
    torch.manual_seed(seed)
    try:
        # transformers 5 checks a config only when asked (or on save)
        if hasattr(config, "validate"):
            config.validate()
        model = cls(config)
    except Exception as exc:
        # the config's own checks: a rejected override or shrink
        raise UserError(
            f"{arch} rejects its config ({type(exc).__name__}: {exc}); set the fields it names under `overrides:`"
        ) from None
    return model.eval()


def write_tokenizer(
    corpus: Path, out: Path, named: dict[str, str] | None = None, added: list[str] | None = None, fields: dict | None = None
) -> None:
    """A byte-level BPE (VOCAB ids) trained on `corpus`, with <s>, </s>, <pad>, then
    the `named` special tokens of a multimodal family (tokenizer.image_token and such)
    and its `added` plain tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(added or []),
        special_tokens=SPECIAL_TOKENS + list(dict.fromkeys((named or {}).values())),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus.read_text().splitlines(), trainer=trainer)
    if added:
        from tokenizers import AddedToken

        tokenizer.add_tokens([AddedToken(t, normalized=False) for t in added])
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": 2048,
    }
    if named:
        config["extra_special_tokens"] = named
    config.update(fields or {})
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overrides", default="{}", help="JSON object of config fields")
    p.add_argument("--extra-config", default="{}", help="JSON object of keys the config class does not declare")
    p.add_argument("--corpus", type=Path, required=True, help="text to train the tokenizer on, a line per text")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if tiny_vllm.builds(args.arch):
        return write_vllm_only(args)
    try:
        extra = json.loads(args.extra_config)
        model = build_model(args.arch, args.seed, json.loads(args.overrides), extra)
    except UserError as exc:
        return refused(exc)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    write_extra_config(args.out, extra)
    if tiny_mm.is_multimodal(model.config):
        tiny_mm.write_hub_layout(model, args.out)
    return write_text_and_media_files(args, model.config)


def write_text_and_media_files(args, config) -> int:
    """The tokenizer, and a multimodal model's processor, chat template and the files its
    family's loader reads, beside the weights: the same for both routes."""
    multimodal = tiny_mm.is_multimodal(config)
    model_type = config.model_type
    write_tokenizer(
        args.corpus,
        args.out,
        tiny_mm.named_tokens(model_type) if multimodal else {},
        tiny_mm.added_tokens(model_type) if multimodal else [],
        tiny_mm.tokenizer_fields(model_type) if multimodal else {},
    )
    if multimodal:
        tiny_mm.write_weight_folder(model_type, args.out)
        tiny_mm.write_hub_config(model_type, args.out)
        try:
            write_processor(args.arch, config, args.out)
        except UserError as exc:
            return refused(exc)
    return 0


def write_vllm_only(args) -> int:
    """An architecture only vLLM defines: its config class and weight names from vLLM
    (tiny_vllm.py), shrunk by the same rules; no transformers model in the loop."""
    from safetensors.torch import save_file

    extra = json.loads(args.extra_config)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if args.arch in tiny_vllm.LAYOUTS:
            config = tiny_config(tiny_vllm.config_of(args.arch), json.loads(args.overrides), extra)
            config.save_pretrained(args.out)
            pieces = [
                tiny_vllm.Piece(n, s, n.endswith(("norm.weight", "layernorm.weight")))
                for n, s in tiny_vllm.LAYOUTS[args.arch][1](config).items()
            ]
        else:
            config, pieces = derive_vllm_only(args.arch, json.loads(args.overrides), extra, args.out)
    except UserError as exc:
        return refused(exc)
    except tiny_vllm.Refused as exc:
        return refused(UserError(f"{args.arch} (vLLM-only, built from vLLM's model class): {exc}"))
    save_file(tiny_vllm.weights_of(pieces, args.seed), args.out / "model.safetensors", metadata={"format": "pt"})
    write_extra_config(args.out, extra)
    return write_text_and_media_files(args, config)


def tiny_config(config, overrides: dict, extra: dict):
    """`config` (a default one, of transformers' class or vLLM's) made tiny, in place: the
    shrink, the special ids, a multimodal model's towers and token ids, then the scenario's
    overrides. Both routes make their configs here, so a tower is sized the same either way."""
    shrink(config)
    set_special_ids(config)
    multimodal = tiny_mm.is_multimodal(config)
    if multimodal:
        tiny_mm.shrink_towers(config)
        tiny_mm.set_token_ids(config, tiny_mm.token_ids(tiny_mm.named_tokens(config.model_type), len(SPECIAL_TOKENS)))
    apply_overrides(config, overrides)
    if multimodal and not _names(overrides, "rope_parameters"):
        # the rope split follows the head: an override of the text head's size (Qwen3.5's 128
        # for vLLM's gated-delta-net kernel) splits the new one, unless it gives its own rope
        tiny_mm.fit_mrope(config)
    check_extra_config(config, extra)
    return config


def _names(overrides: dict, field: str) -> bool:
    """Whether `field` is set anywhere in `overrides`, a sub-config's included."""
    return any(key == field or (isinstance(value, dict) and _names(value, field)) for key, value in overrides.items())


def derive_vllm_only(arch: str, overrides: dict, extra: dict, out: Path) -> tuple[Any, list]:
    """The generic route (tiny_vllm.py): each config class vLLM's source points to (LlamaConfig
    last, for a model whose checkpoints bring their own config class), shrunk, until vLLM's
    model class instantiates for one; a field the model reads and the class lacks is added
    (tiny_vllm.guessed_value). The config is written to `out` and returned with the checkpoint
    layout, which the model's own load_weights checks. tiny_vllm.Refused says why none would do."""
    cls, sources = tiny_vllm.registered(arch)
    candidates = tiny_vllm.config_candidates(arch, *tiny_vllm.config_classes(), sources)
    tried = []
    for model_type in [*candidates, *(["llama"] if "llama" not in candidates else [])]:
        try:
            config = tiny_config(tiny_vllm.config_for(model_type), overrides, extra)
            config.architectures = [arch]
            config.save_pretrained(out)
            model = instantiated_with_fields(config, tiny_vllm.engine_config(str(out)), out)
        except Exception as exc:  # this config is not the one: the next candidate, the reason kept
            tried.append(f"{model_type}: {type(exc).__name__}: {tiny_vllm._one_line(exc)}")
            continue
        return config, checked_layout(model)
    raise tiny_vllm.Refused(
        f"vLLM's {cls.__module__} does not instantiate with any config it points to (" + "; ".join(tried) + ")"
    )


# a model that reads more undeclared fields than this is not one the guesses will fit
MAX_ADDED_FIELDS = 16


def instantiated_with_fields(config, vllm_config, out: Path):
    """vLLM's model on the meta device; each field it reads that `config` lacks is added with a
    guessed tiny value (to `config`, rewritten to `out`, and to vLLM's copy) and it is tried again."""
    added: dict = {}
    while True:
        try:
            return tiny_vllm.meta_model(vllm_config)
        except AttributeError as exc:
            field = tiny_vllm.missing_field(exc)
            value = tiny_vllm.guessed_value(field, config) if field else None
            if field is None or value is None or field in added or len(added) >= MAX_ADDED_FIELDS:
                raise
            added[field] = value
            # the model may read it from the text config (vLLM's hf_text_config): the saved
            # config's text_config gets it too, or the engine's own load would miss it again
            holders = (
                config,
                getattr(config, "text_config", None),
                vllm_config.model_config.hf_config,
                vllm_config.model_config.hf_text_config,
            )
            for holder in {id(c): c for c in holders if c is not None}.values():
                setattr(holder, field, value)
            config.save_pretrained(out)


def checked_layout(model) -> list:
    count = tiny_vllm.parameter_count(model)
    if count > tiny_vllm.MAX_PARAMETERS:
        raise tiny_vllm.Refused(
            f"its tiny config still makes {count / 1e6:.0f}M parameters (the limit is "
            f"{tiny_vllm.MAX_PARAMETERS / 1e6:.0f}M): a size field the shrink rules do not know; set it under `overrides:`"
        )
    try:
        pieces = tiny_vllm.checkpoint_layout(model)
    except Exception as exc:  # a layer the naming rules do not know: its words are the reason
        raise tiny_vllm.Refused(
            f"its parameters cannot be named back ({type(exc).__name__}: {tiny_vllm._one_line(exc)})"
        ) from None
    left = tiny_vllm.unloaded(model, pieces)
    if left:
        raise tiny_vllm.Refused(
            f"its load_weights leaves {len(left)} parameters unset from the derived names: {', '.join(left[:4])}"
            + (" ..." if len(left) > 4 else "")
        )
    return pieces


def write_processor(arch: str, config, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    try:
        tiny_mm.write_processor(config, tokenizer, out)
    except Exception as exc:
        # the processor's own checks: what the generic sizing got wrong
        raise UserError(
            f"{arch}: its processor rejects the tiny model ({type(exc).__name__}: {exc}); "
            "set the fields it names under `overrides:`"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
