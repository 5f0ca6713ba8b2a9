"""The tiny model zoo: HF-format checkpoints built locally, deterministically.

Nothing may come from a model hub, so every model is built from a config, seeded
weights and a byte-level BPE tokenizer trained on the vendored GSM8K text. A built
checkpoint lands in the cache dir and is verified against the checksum recorded in
its recipe, so a golden made on one machine is valid on another; a mismatch is an error
that says so rather than a silent numeric drift. Every model is listed in table.py;
each recipe lives in its family's module (llama, variants, trained, hf_families).

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
from pathlib import Path

from harness.contract import plugins
from harness.contract.roots import DATA_DIR, cache_dir
from harness.inputs.zoo.recipe import ModelRecipe
from harness.inputs.zoo.table import ZOO

CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]


class ModelUnavailable(KeyError):
    """A model an installed package registers that cannot be had: its message names the
    package and the error."""

    # KeyError would print the repr of the message
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _plugins() -> dict[str, list[plugins.Plugin]]:
    """Models of installed packages (entry point group `harness.models`), by name; a
    name the zoo's own table has is the zoo's (the table wins)."""
    return {n: found for n, found in plugins.discover(plugins.MODELS_GROUP).items() if n not in ZOO}


def model_names() -> list[str]:
    """Every model name a scenario's `model:` may use here: the table's, then the
    installed packages'. Reads metadata only: nothing is imported or built."""
    return list(ZOO) + sorted(_plugins())


def has_model(name: str) -> bool:
    return name in ZOO or name in _plugins()


_loaded: dict[plugins.Plugin, ModelRecipe] = {}


def get_recipe(name: str) -> ModelRecipe:
    if name in ZOO:
        return ZOO[name]
    found = _plugins().get(name)
    if not found:
        raise KeyError(
            f"unknown model '{name}': the zoo has {', '.join(model_names())} (harness/inputs/zoo/table.py, "
            "and the `harness.models` entry points of installed packages)"
        )
    if len(found) > 1:
        raise ModelUnavailable(f"model {plugins.ambiguity(name, found)}")
    plugin = found[0]
    if plugin not in _loaded:
        _loaded[plugin] = _plugin_recipe(plugin)
    return _loaded[plugin]


def _plugin_recipe(plugin: plugins.Plugin) -> ModelRecipe:
    """The ModelRecipe an entry point names: the recipe itself, or a callable that returns it."""
    try:
        obj = plugin.load()
        if callable(obj) and not isinstance(obj, ModelRecipe):
            obj = obj()
    except plugins.PluginError as exc:
        raise ModelUnavailable(f"model {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a third party's factory may raise anything
        raise ModelUnavailable(
            f"model '{plugin.name}' of package {plugin.origin()}: its factory raised {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(obj, ModelRecipe):
        raise ModelUnavailable(
            f"model '{plugin.name}' of package {plugin.origin()} is {obj!r}, not a "
            "harness.inputs.zoo.recipe.ModelRecipe (or a callable returning one)"
        )
    if obj.name != plugin.name:
        raise ModelUnavailable(
            f"model '{plugin.name}' of package {plugin.origin()} is a recipe named '{obj.name}': "
            "the entry point's name and the recipe's name must be the same"
        )
    return obj


def inventory() -> list[tuple[str, str, str, str]]:
    """(name, where from, status, detail) of every model registered here: "ready",
    "does not load" (with why), or "shadowed" (a package's model the table's own hides).
    Imports the packages' modules; builds nothing."""
    rows = [(name, "built-in (harness/inputs/zoo/table.py)", "ready", recipe.notes) for name, recipe in ZOO.items()]
    for name, found in sorted(plugins.discover(plugins.MODELS_GROUP).items()):
        if name in ZOO:
            rows += [(name, p.origin(), "shadowed", f"ignored: '{name}' is a built-in zoo model, which wins") for p in found]
            continue
        try:
            rows.append((name, found[0].origin() if len(found) == 1 else "several packages", "ready", get_recipe(name).notes))
        except KeyError as exc:
            rows += [(name, p.origin(), "does not load", str(exc)) for p in found]
    return rows


def checkpoint_sha256(directory: Path) -> str:
    digest = hashlib.sha256()
    for fname in CHECKPOINT_FILES:
        digest.update(fname.encode())
        digest.update((directory / fname).read_bytes())
    return digest.hexdigest()


def model_dir(name: str) -> Path:
    """The verified checkpoint of a zoo model, built into the cache on first use."""
    recipe = get_recipe(name)
    target = cache_dir("models") / f"{name}-{recipe.sha256[:12]}"
    if not _complete(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        # Concurrent scenarios (pytest -n, --jobs) may ask at once: one builds.
        with open(str(target) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _complete(target):
                _build_into(recipe, target)
    return target


def _complete(directory: Path) -> bool:
    return all((directory / f).exists() for f in CHECKPOINT_FILES)


def _build_into(recipe: ModelRecipe, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{recipe.name}-", dir=target.parent))
    try:
        build(recipe, staging)
        actual = checkpoint_sha256(staging)
        if actual != recipe.sha256:
            raise RuntimeError(
                f"model '{recipe.name}' built with checksum {actual[:16]}..., expected "
                f"{recipe.sha256[:16]}... (its family module, listed in harness/inputs/zoo/table.py). The build is not reproducible on this "
                "machine (different numpy/safetensors/tokenizers?); goldens made elsewhere will "
                f"not apply. Inspect the build in {staging}, or update the recorded checksum and "
                "regenerate goldens with `make golden`."
            )
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build(recipe: ModelRecipe, directory: Path) -> None:
    """Write config, seeded weights and the tokenizer of `recipe` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(recipe.config, indent=1, sort_keys=True))
    recipe.write_weights(recipe, directory / "model.safetensors")
    vocab = recipe.config.get("vocab_size") or recipe.config["text_config"]["vocab_size"]
    _write_tokenizer(vocab, directory, recipe.extra_special_tokens)


def tokenizer_corpus() -> list[str]:
    lines = []
    with open(DATA_DIR / "gsm8k" / "train.jsonl") as f:
        for line in f:
            item = json.loads(line)
            lines.append(item["question"])
            lines.append(item["answer"])
    return lines


def _write_tokenizer(vocab_size: int, directory: Path, extra_special: tuple[str, ...] = ()) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + list(extra_special),
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
