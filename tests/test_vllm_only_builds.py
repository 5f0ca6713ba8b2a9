"""The generic route for architectures only vLLM defines (harness/inputs/models/tiny_vllm.py),
proven by vLLM itself: three of them, of different kinds, built as `{arch: X}` builds them and
loaded by vLLM TP1 eager on CPU, which generates 4 tokens. vLLM's loader refuses a checkpoint
that leaves a parameter unset ("Following weights were not initialized from checkpoint"), so a
load is the proof that the derived names and shapes are complete.

Starts real vLLM processes (about 1-2 min each on 2 cores): only under `make test-vllm`, which
sets HARNESS_TEST_VLLM=1; without vLLM installed these tests then fail, by design."""

from __future__ import annotations

import importlib.util
import os

import pytest

from harness.engines import get_engine
from harness.inputs import models
from harness.inputs.models import ArchModel, tiny_vllm
from tests.kit import ROOT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("HARNESS_TEST_VLLM"), reason="real vLLM engine starts: run `make test-vllm`"),
]


def bench():
    spec = importlib.util.spec_from_file_location("bench_vllm_only_builds", ROOT / "bench" / "vllm_only_builds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a dense model under another name (vLLM's llama.py), routed experts split per expert (w1/w2/w3),
# a subclass whose config is named in its base class's module (MiMo is vLLM's Qwen2)
@pytest.mark.parametrize("arch", ["InternLM3ForCausalLM", "PhiMoEForCausalLM", "MiMoForCausalLM"])
def test_a_vllm_only_arch_builds_a_checkpoint_vllm_loads_completely(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    python = str(get_engine("vllm").python())
    assert tiny_vllm.builds(arch), f"{arch} is a transformers class here: not this route's"
    directory = models.build_tiny(ArchModel(arch=arch), models.builder_python(python, arch=arch), timeout_s=300)
    assert bench().load(python, str(directory), timeout_s=400) is None


def test_a_vllm_only_multimodal_arch_gets_its_towers_processor_and_chat_template(tmp_path, monkeypatch):
    """Cosmos 3 Omni (a config transformers maps no processor to): the route sizes its towers,
    writes Qwen3-VL's processor, its image tokens and a chat template, and puts the weights where
    vLLM's cosmos3.py reads them (`transformer/`); InternS2 Mobius reads a field of its text
    config the route adds, which the written config must hold for vLLM's own load."""
    import json

    from transformers import AutoTokenizer

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    python = str(get_engine("vllm").python())
    arch = "Cosmos3ForConditionalGeneration"
    directory = models.build_tiny(ArchModel(arch=arch), models.builder_python(python, arch=arch), timeout_s=300)
    assert (directory / "transformer" / "model.safetensors").is_file()
    assert json.loads((directory / "processor_config.json").read_text())["processor_class"] == "Qwen3VLProcessor"
    assert "<|vision_start|><|image_pad|><|vision_end|>" in (directory / "chat_template.jinja").read_text()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert len(tokenizer("<|image_pad|>", add_special_tokens=False)["input_ids"]) == 1
    arch = "InternS2MobiusForConditionalGeneration"
    directory = models.build_tiny(ArchModel(arch=arch), models.builder_python(python, arch=arch), timeout_s=300)
    assert json.loads((directory / "config.json").read_text())["text_config"]["num_blocks"] >= 1
