"""The tiny model zoo: HF-format checkpoints built locally, deterministically.

Nothing may come from a model hub, so every model is built from a config, seeded
weights and a byte-level BPE tokenizer trained on the vendored GSM8K text. A built
checkpoint lands in the cache dir and is verified against the checksum recorded
here, so a golden made on one machine is valid on another; a mismatch is an error
that says so rather than a silent numeric drift.

Weights come from numpy's PCG64 generator (stable across numpy versions by
numpy's own policy), not torch's RNG, so the checksum does not move with torch.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    config: dict  # HF config.json contents
    seed: int
    sha256: str  # over CHECKPOINT_FILES, see checkpoint_sha256
    # Scale of the output head: a wider logit spread keeps greedy decoding away
    # from near-ties, which random tiny models are otherwise full of.
    head_scale: float = 4.0
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _llama_config(**overrides) -> dict:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 512,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
    }
    config.update(overrides)
    return config


ZOO: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            name="tiny-llama",
            config=_llama_config(),
            seed=0,
            sha256="beb3997011e4405844ca34ad56c1106da0284638a541365029d60f5324fdb30f",
            notes="float32, hidden 64, 4 layers, 4 query / 2 KV heads (GQA), vocab 512",
        ),
    ]
}


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "harness")) / "models"


def get_spec(name: str) -> ModelSpec:
    if name not in ZOO:
        raise KeyError(f"unknown model '{name}': the zoo has {', '.join(sorted(ZOO))} (harness/zoo.py)")
    return ZOO[name]


def checkpoint_sha256(directory: Path) -> str:
    digest = hashlib.sha256()
    for fname in CHECKPOINT_FILES:
        digest.update(fname.encode())
        digest.update((directory / fname).read_bytes())
    return digest.hexdigest()


def model_dir(name: str) -> Path:
    """The verified checkpoint of a zoo model, built into the cache on first use."""
    spec = get_spec(name)
    target = cache_root() / f"{name}-{spec.sha256[:12]}"
    if not _complete(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        # Concurrent scenarios (pytest -n, --jobs) may ask at once: one builds.
        with open(str(target) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _complete(target):
                _build_into(spec, target)
    return target


def _complete(directory: Path) -> bool:
    return all((directory / f).exists() for f in CHECKPOINT_FILES)


def _build_into(spec: ModelSpec, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=target.parent))
    try:
        build(spec, staging)
        actual = checkpoint_sha256(staging)
        if actual != spec.sha256:
            raise RuntimeError(
                f"model '{spec.name}' built with checksum {actual[:16]}..., expected "
                f"{spec.sha256[:16]}... (harness/zoo.py). The build is not reproducible on this "
                "machine (different numpy/safetensors/tokenizers?); goldens made elsewhere will "
                f"not apply. Inspect the build in {staging}, or update the recorded checksum and "
                "regenerate goldens with `make golden`."
            )
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build(spec: ModelSpec, directory: Path) -> None:
    """Write config, seeded weights and the tokenizer of `spec` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(spec.config, indent=1, sort_keys=True))
    _write_weights(spec, directory / "model.safetensors")
    _write_tokenizer(spec.config["vocab_size"], directory)


def _write_weights(spec: ModelSpec, path: Path) -> None:
    import numpy as np
    import torch
    from safetensors.torch import save_file

    rng = np.random.default_rng(spec.seed)
    tensors = {}
    for name, shape, std in _llama_weight_shapes(spec.config, spec.head_scale):
        if std is None:  # norm weights: near 1, not exactly, so a missed norm shows
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            values = std * rng.standard_normal(shape)
        tensors[name] = torch.from_numpy(values.astype(np.float32))
    save_file(tensors, str(path), metadata={"format": "pt"})


def _llama_weight_shapes(config: dict, head_scale: float):
    """(name, shape, std) of every weight, in a fixed order (the RNG stream depends on it).
    std is 1/sqrt(fan_in) for linears, so activations keep their scale through the layers."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    vocab = config["vocab_size"]
    yield "model.embed_tokens.weight", (vocab, hidden), 1.0
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        yield f"{p}.input_layernorm.weight", (hidden,), None
        yield f"{p}.self_attn.q_proj.weight", (heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.k_proj.weight", (kv_heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.v_proj.weight", (kv_heads * head_dim, hidden), hidden**-0.5
        yield f"{p}.self_attn.o_proj.weight", (hidden, heads * head_dim), (heads * head_dim) ** -0.5
        yield f"{p}.post_attention_layernorm.weight", (hidden,), None
        yield f"{p}.mlp.gate_proj.weight", (inter, hidden), hidden**-0.5
        yield f"{p}.mlp.up_proj.weight", (inter, hidden), hidden**-0.5
        yield f"{p}.mlp.down_proj.weight", (hidden, inter), inter**-0.5
    yield "model.norm.weight", (hidden,), None
    if not config.get("tie_word_embeddings", False):
        yield "lm_head.weight", (vocab, hidden), head_scale * hidden**-0.5


def tokenizer_corpus() -> list[str]:
    lines = []
    with open(DATA_DIR / "gsm8k" / "train.jsonl") as f:
        for line in f:
            item = json.loads(line)
            lines.append(item["question"])
            lines.append(item["answer"])
    return lines


def _write_tokenizer(vocab_size: int, directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "model_max_length": 512,
            },
            indent=1,
        )
    )


def load_tokenizer(directory: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(directory / "tokenizer.json"))
