"""Evidence for the multimodal golden findings (docs/ARCHITECTURES.md, "What the multimodal
golden runs found"): transformers' own model, changed in exactly one way, against a
committed vLLM golden.

    python bench/evidence/hf_variants.py mm-prefix vllm-mm-archs/gemma3 vllm-mm-one-image/paligemma
    python bench/evidence/hf_variants.py plain-mrope vllm-mm-archs/cohere-compass
    PYTHONPATH=. .venv-vllm/bin/python bench/evidence/hf_variants.py vllm-pixels vllm-mm-archs/qianfan-ocr

Each variant runs every logprobs workload of the golden through the hf engine's own
prompt path (harness/engines/hf/worker.py), once as transformers has it and once changed,
and compares both with the golden under the float32 bounds every scenario is held to.
When the changed run agrees and the plain one does not, that one change is the whole
disagreement between vLLM and transformers:

mm-prefix    every token_type_ids entry 0, then 1. Gemma 3 and PaliGemma are prefix-LM
             models: transformers lets the tokens its processor marks (Gemma 3: an
             image's tokens; PaliGemma: the whole prompt) attend both ways. vLLM 0.32's
             CPU attention cannot (platforms/cpu.py ignores use_mm_prefix): causal.
             Gemma 3 reads 0 as causal text, PaliGemma 1 as the causal suffix.
plain-mrope  Cohere Compass's text rope as vLLM computes it (get_rope with mrope_section:
             plain frequencies, sections T | H | W). transformers pre-rotates the H and W
             frequencies (even ones to H, odd ones to W) and lays the sections out H | W | T
             (modeling_cohere_compass.py compute_default_rope_parameters,
             recomposition_frequencies), which moves text tokens too.
vllm-pixels  the image tiles as vLLM's own InternVL processor makes them
             (transformers_utils/processors/internvl.py: PIL resize, then torchvision's
             bicubic), instead of transformers' GotOcr2 image processor. Needs vLLM
             importable: run it with vLLM's interpreter.
"""

from __future__ import annotations

import sys
import tempfile

import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.roots import builtin_scenarios
from harness.contract.runbrief import RunBrief
from harness.engines.hf import worker
from harness.inputs import models
from harness.inputs import workloads as wl
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.zoo import load_tokenizer
from harness.run import golden as goldens
from harness.run.compare.numeric import compare_logprobs
from harness.run.compare.tolerances import tolerance_for


def typed(value: int):
    """A Prompter whose every token_type_ids entry is `value`."""

    class Typed(worker.Prompter):
        def inputs(self, ids, media, generated=()):
            out = super().inputs(ids, media, generated)
            if "token_type_ids" in out:
                out["token_type_ids"] = torch.full_like(out["token_type_ids"], value)
            return out

    return Typed


class VllmPixels(worker.Prompter):
    """Image tiles made by vLLM's InternVL processor, with the tiling the model's config gives."""

    def inputs(self, ids, media, generated=()):
        from PIL import Image
        from vllm.transformers_utils.processors.internvl import image_to_pixel_values_internvl

        out = super().inputs(ids, media, generated)
        if media["images"]:
            size = self.config.vision_config.image_size
            size = size[0] if isinstance(size, (list, tuple)) else size
            tiles = [
                image_to_pixel_values_internvl(
                    Image.open(p).convert("RGB"), input_size=size, min_num=1, max_num=12, use_thumbnail=True
                )
                for p in media["images"]
            ]
            out["pixel_values"] = torch.cat(tiles).to(out["pixel_values"].dtype)
        return out


def plain_mrope() -> None:
    """Cohere Compass's text rotary embedding computed as vLLM's MRotaryEmbedding does."""
    from transformers.models.cohere_compass import modeling_cohere_compass as mcc

    rotary = mcc.CohereCompassRotaryEmbedding  # the text model's (the tower has its own)

    def frequencies(config, device=None, layer_type=None, **_):
        base = config.rope_parameters[layer_type]["rope_theta"]
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return (1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))).to(device), 1.0

    def sections(self, freq, layer_type):  # axis 0 (t) in section 0, h in 1, w in 2
        parts = freq.split([*self.mrope_section[layer_type]], dim=-1)
        return torch.cat([torch.cat([part[axis] for axis, part in enumerate(parts)], dim=-1)] * 2, dim=-1)

    rotary.compute_default_rope_parameters = staticmethod(frequencies)
    rotary.recomposition_frequencies = sections


def logit_scale() -> None:
    """Command A Vision's logits scaled by its text config's logit_scale, as vLLM's Cohere2 text
    model does (commandr.py LogitsProcessor(scale=config.logit_scale)); transformers'
    Cohere2VisionForConditionalGeneration leaves them unscaled (its Cohere2ForCausalLM scales)."""
    from transformers.models.cohere2_vision import modeling_cohere2_vision as mcv

    model = mcv.Cohere2VisionForConditionalGeneration
    plain = model.forward

    def forward(self, *args, **kwargs):
        out = plain(self, *args, **kwargs)
        out.logits = out.logits * self.config.text_config.logit_scale
        return out

    model.forward = forward


VARIANTS = {  # name -> (labelled Prompter classes, a patch of transformers applied before the changed runs)
    "mm-prefix": ({"token_type_ids all 0": typed(0), "token_type_ids all 1": typed(1)}, None),
    "plain-mrope": ({"vLLM's plain M-RoPE": worker.Prompter}, plain_mrope),
    "vllm-pixels": ({"vLLM's InternVL pixels": VllmPixels}, None),
    "logit-scale": ({"logits times text_config.logit_scale": worker.Prompter}, logit_scale),
}


def compare(key: str, variant: str) -> None:
    suite_name, arch = key.split("/")
    suite = load_suite(builtin_scenarios() / f"{suite_name}.yaml")
    model = models.resolve(suite.archs[arch], sys.executable)
    resolved = wl.tokenize(suite.workloads, model.directory, load_tokenizer(model.directory))
    golden = EngineOutputs.load(goldens.golden_dir(key))
    changed, patch = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        brief = RunBrief(
            f"{key}/hf", "hf", str(model.directory), suite.dtype, {"tp": 1, "pp": 1, "compile": False}, resolved, tmp
        )
        runs = [("as transformers has it", worker.Prompter)] + list(changed.items())
        for i, (label, prompter) in enumerate(runs):
            if i == 1 and patch:
                patch()
            hf_model, config = worker.load_model(brief)  # after the patch: the rope is built at load
            for w in (w for w in resolved if w["kind"] == "logprobs"):
                result = compare_logprobs(
                    w["name"],
                    golden.workload(w["name"]),
                    worker.run_logprobs(hf_model, prompter(brief, config), w),
                    tolerance_for(suite.dtype),
                )
                print(
                    f"{key} {w['name']}: transformers, {label}, vs the vLLM golden: "
                    f"{'agrees' if result.passed else 'differs'}: {result.summary}",
                    flush=True,
                )


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in VARIANTS:
        raise SystemExit(f"usage: hf_variants.py {{{','.join(VARIANTS)}}} SUITE/ARCH...")
    for golden_key in sys.argv[2:]:
        compare(golden_key, sys.argv[1])
