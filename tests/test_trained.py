"""The trained zoo models: checksums, and the same math in training, the reference
engine and HF transformers."""

from __future__ import annotations

import pytest
import torch

from harness.contract.runbrief import RunBrief
from harness.inputs import zoo
from harness.inputs.zoo.trained import WEIGHTS
from tools import train_models as train


def test_the_weights_are_shipped():
    # committed to git: a clone without them cannot run the eval suites (make train-models rebuilds)
    assert WEIGHTS.exists(), f"{WEIGHTS} is missing; rebuild it with `make train-models`"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def geo_dir(cache):
    return zoo.model_dir("tiny-llama-geo")


@pytest.fixture(scope="module")
def trained():
    return train.load()


@pytest.fixture(scope="module")
def tokenizer(geo_dir):
    return zoo.load_tokenizer(geo_dir)


@pytest.mark.slow  # builds the trained models
def test_both_models_build_and_verify(cache):
    from safetensors.torch import load_file

    geo, text = zoo.model_dir("tiny-llama-geo"), zoo.model_dir("tiny-llama-arith")
    assert zoo.checkpoint_sha256(geo) == zoo.get_recipe("tiny-llama-geo").sha256
    assert zoo.checkpoint_sha256(text) == zoo.get_recipe("tiny-llama-arith").sha256
    g, t = load_file(str(geo / "model.safetensors")), load_file(str(text / "model.safetensors"))
    assert set(g) - set(t) == {"visual.patch_embed.weight", "visual.deepstack.0.weight", "visual.deepstack.1.weight"}
    assert all(torch.equal(g[k], t[k]) for k in t)


def _prompts(tokenizer, config, tmp_path):
    from harness.inputs.images import encode_png

    arith_prompt = train.arith_prompts(tokenizer, config, 1)[0][0]
    item = train.geo3k.heldout_set(1)[0]
    png = tmp_path / "geo.png"
    png.write_bytes(encode_png(item["pixels"]))
    geo_prompt = train.geo_prompts(tokenizer, config, 1)[0][0]
    return arith_prompt, geo_prompt, png


@pytest.mark.slow  # builds the trained models
def test_reference_engine_reproduces_training_model(geo_dir, trained, tokenizer, tmp_path):
    from harness.engines.reference.pipeline import load_image
    from tests.kit.ranks import run_in_process

    config = zoo.get_recipe("tiny-llama-geo").config
    arith_prompt, geo_prompt, png = _prompts(tokenizer, config, tmp_path)
    workloads = [
        {"name": "text", "kind": "logprobs", "prompts": [arith_prompt], "top_k": 8},
        {"name": "image", "kind": "logprobs", "prompts": [geo_prompt], "images": [str(png)], "top_k": 8},
    ]
    settings = {"tp": 1, "pp": 1, "sp": False, "compile": False}
    brief = RunBrief("test/trained", "reference", str(geo_dir), "float32", settings, workloads, str(tmp_path / "out"), [])
    outputs = run_in_process(brief)
    pixels = load_image(str(png))[None]
    with torch.no_grad():
        expected = {
            "text": trained(torch.tensor([arith_prompt])).log_softmax(-1)[0],
            "image": trained(torch.tensor([geo_prompt]), pixels).log_softmax(-1)[0],
        }
    for name, logprobs in expected.items():
        got = outputs.workload(name)
        ours = logprobs.gather(-1, got["topk_ids"])
        assert (ours - got["topk_logprobs"]).abs().max().item() < 1e-4, name
        assert torch.equal(got["topk_ids"][:, 0], logprobs.argmax(-1)), name


@pytest.mark.slow  # builds the trained models
def test_hf_text_model_matches_geo_model_on_text(cache, trained, tokenizer):
    transformers = pytest.importorskip("transformers")

    model = transformers.LlamaForCausalLM.from_pretrained(zoo.model_dir("tiny-llama-arith"), dtype=torch.float32).eval()
    config = zoo.get_recipe("tiny-llama-geo").config
    prompt = torch.tensor([train.arith_prompts(tokenizer, config, 1)[0][0]])
    with torch.no_grad():
        assert (model(prompt).logits - trained(prompt)).abs().max().item() < 1e-4


@pytest.mark.slow
def test_scores_above_chance_and_need_deepstack(trained, tokenizer):
    """A small slice of the held-out sets (the full numbers: docs/EVALS.md)."""
    config = zoo.get_recipe("tiny-llama-geo").config
    result = train.evaluate(trained, tokenizer, config, n_arith=10, n_geo=40)
    assert result["arith"] >= 0.5, result
    assert result["geo"] >= 0.75, result
    assert result["geo"] - result["geo_no_deepstack"] >= 0.3, result
