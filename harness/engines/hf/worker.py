"""The hf engine's one process: `python -m harness.engines.hf.worker BRIEF.json`.

Imports only stdlib, torch, transformers (and PIL, numpy for media). Writes the
EngineOutputs contract: for a prompt with an image, the single image placeholder
is expanded to the image's feature size first, as vLLM does, so rows line up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any


def load_model(brief):
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(brief.model_dir)
    model_cls = getattr(transformers, config.architectures[0])
    model = model_cls.from_pretrained(brief.model_dir, dtype=getattr(torch, brief.dtype), attn_implementation="eager")
    return _text_without_pixels(model.eval()), config


def _text_without_pixels(model):
    """`model`, or where its forward cannot run without an image (BLIP-2's requires
    pixel_values) a callable that gives a text-only prompt to its language model, as vLLM
    does: the prompt has no image features to merge."""
    import inspect

    wanted = inspect.signature(model.forward).parameters.get("pixel_values")
    if wanted is None or wanted.default is not inspect.Parameter.empty or not hasattr(model, "language_model"):
        return model

    def forward(**inputs):
        if inputs.get("pixel_values") is None:
            inputs.pop("pixel_values", None)
            return model.language_model(**inputs)
        return model(**inputs)

    return forward


class Prompter:
    """Turns a run-brief prompt (+ its images) into model inputs.

    A checkpoint with its processor (processor_config.json: the tiny multimodal models
    of harness/inputs/models/tiny_mm.py, published multimodal models) goes through that
    processor, which expands each placeholder to the image's feature tokens as vLLM
    does. The zoo's hand-made Qwen2.5-VL has an image processor only; its one image pad
    is expanded here by the image's grid."""

    def __init__(self, brief, config):
        from pathlib import Path

        self.config = config
        # transformers' processor classes: no types to check against
        self.processor: Any = None
        self.image_processor: Any = None
        if (Path(brief.model_dir) / "processor_config.json").is_file():
            from transformers import AutoProcessor

            self.processor = AutoProcessor.from_pretrained(brief.model_dir)
        elif getattr(config, "image_token_id", None) is not None:
            from transformers import AutoImageProcessor

            self.image_processor = AutoImageProcessor.from_pretrained(brief.model_dir)

    def inputs(self, ids: list[int], media: dict, generated: Sequence[int] = ()) -> dict:
        """Inputs of the prompt `ids` (with its `media`: runbrief.prompt_media's answer) followed by
        `generated` tokens. The generated ones are appended as ids after the expansion:
        decoding them to text and tokenizing again could merge them differently."""
        import torch

        if not any(media.values()):
            return {"input_ids": torch.tensor([list(ids) + list(generated)])}
        if self.processor is not None:
            # the prompt's own text, placeholders and all: the processor expands them
            text = self.processor.tokenizer.decode(ids)
            inputs = dict(self.processor(text=text, return_tensors="pt", **_processor_media(media)))
        else:
            inputs = self._qwen_inputs(ids, _image(media["images"][0]))
        return _extended(inputs, list(generated))

    def _qwen_inputs(self, ids: list[int], image) -> dict:
        import torch

        pixels = self.image_processor(images=[image], return_tensors="pt")
        merge = self.image_processor.merge_size
        count = int(pixels["image_grid_thw"].prod()) // (merge * merge)
        pad = self.config.image_token_id
        at = ids.index(pad)
        expanded = torch.tensor([ids[:at] + [pad] * count + ids[at + 1 :]])
        # 1 marks image tokens: without it transformers silently falls back to 1-D text
        # positions instead of the 3-D (t, h, w) rope positions of the image tokens
        return {
            "input_ids": expanded,
            "pixel_values": pixels["pixel_values"],
            "image_grid_thw": pixels["image_grid_thw"],
            "mm_token_type_ids": (expanded == pad).int(),
        }


def _image(path: str):
    from PIL import Image

    return Image.open(path).convert("RGB")


def _processor_media(media: dict) -> dict:
    """The processor's keyword arguments for a prompt's media."""
    import numpy as np

    kwargs: dict = {}
    if media["images"]:
        kwargs["images"] = [_image(p) for p in media["images"]]
    if media["videos"]:
        from transformers.video_utils import VideoMetadata

        from harness.contract.runbrief import video_metadata

        kwargs["videos"] = [np.load(p, allow_pickle=False) for p in media["videos"]]
        told = [video_metadata(len(frames)) for frames in kwargs["videos"]]
        kwargs["video_metadata"] = [VideoMetadata(**{k: v for k, v in m.items() if k != "do_sample_frames"}) for m in told]
        kwargs["do_sample_frames"] = False
    if media["audios"]:
        kwargs["audio"] = [np.load(p, allow_pickle=False) for p in media["audios"]]
        from harness.contract.runbrief import AUDIO_RATE

        kwargs["sampling_rate"] = AUDIO_RATE
    return kwargs


def _extended(inputs: dict, generated: list[int]) -> dict:
    """`inputs` with text tokens appended: every per-token tensor grows (the attention
    mask by ones, token-type markers by zeros: text)."""
    import torch

    if not generated:
        return inputs
    ids = inputs["input_ids"]
    out = {}
    for key, value in inputs.items():
        if torch.is_tensor(value) and value.shape == ids.shape:
            tail = (
                torch.tensor([generated]) if key == "input_ids" else torch.full((1, len(generated)), int(key == "attention_mask"))
            )
            value = torch.cat([value, tail.to(value.dtype)], dim=1)
        out[key] = value
    return out


def next_logprobs(model, inputs: dict):
    """[L, V] float32 next-token logprobs of every position."""
    import torch

    with torch.no_grad():
        logits = model(**inputs).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


def run_logprobs(model, prompter, w: dict) -> dict:
    import torch

    from harness.contract.runbrief import prompt_media

    k = int(w["top_k"])
    ids, lps, offsets = [], [], [0]
    for i, prompt in enumerate(w["prompts"]):
        top = next_logprobs(model, prompter.inputs(list(prompt), prompt_media(w, i))).topk(k, dim=-1)
        ids.append(top.indices)
        lps.append(top.values)
        offsets.append(offsets[-1] + top.indices.shape[0])
    return {"topk_ids": torch.cat(ids).long(), "topk_logprobs": torch.cat(lps).float(), "offsets": torch.tensor(offsets)}


def run_greedy(model, prompter, w: dict) -> dict:
    import torch

    from harness.contract.runbrief import prompt_media

    k, n = int(w["top_k"]), int(w["max_new_tokens"])
    tokens, ids, lps = [], [], []
    for i, prompt in enumerate(w["prompts"]):
        gen: list[int] = []
        p_ids, p_lps = [], []
        for _ in range(n):
            top = next_logprobs(model, prompter.inputs(list(prompt), prompt_media(w, i), gen))[-1].topk(k)
            p_ids.append(top.indices)
            p_lps.append(top.values)
            gen.append(int(top.indices[0]))
        tokens.append(gen)
        ids.append(torch.stack(p_ids))
        lps.append(torch.stack(p_lps))
    return {"tokens": torch.tensor(tokens), "topk_ids": torch.stack(ids).long(), "topk_logprobs": torch.stack(lps).float()}


def run_generate(model, prompter, w: dict) -> dict:
    """Greedy generation with the `generate` stop rule (harness/contract/runbrief.py), one prompt
    at a time: text prompts decode through the model's KV cache (past_key_values);
    prompts with media re-run the whole sequence each step, as run_greedy does."""
    import torch

    from harness.contract.outputs import EngineOutputs
    from harness.contract.runbrief import generate_params, prompt_media, stop_reached

    n, stop, eos = generate_params(w)
    seqs = []
    for i, prompt in enumerate(w["prompts"]):
        gen: list[int] = []
        past, media = None, prompt_media(w, i)
        inputs = prompter.inputs(list(prompt), media)
        while len(gen) < n and not stop_reached(gen, stop, eos):
            with torch.no_grad():
                if any(media.values()):
                    logits = model(**prompter.inputs(list(prompt), media, gen)).logits[0, -1]
                else:
                    out = model(**inputs, past_key_values=past, use_cache=True)
                    logits, past = out.logits[0, -1], out.past_key_values
            gen.append(int(torch.log_softmax(logits.float(), dim=-1).argmax()))
            inputs = {"input_ids": torch.tensor([[gen[-1]]])}
        seqs.append(gen)
    return EngineOutputs.generate_fields(seqs, n)


def run(brief) -> None:
    import transformers

    from harness.contract.outputs import EngineOutputs
    from harness.contract.phases import PhaseMarks

    phases = PhaseMarks(brief.output_dir)
    phases.mark("start")
    if brief.axes.tp != 1 or brief.axes.pp != 1 or brief.axes.sp or brief.axes.compile:
        raise ValueError(f"the hf engine runs one process, eager (got settings {brief.settings})")
    t0 = time.perf_counter()
    model, config = load_model(brief)
    prompter = Prompter(brief, config)
    phases.mark("load")
    runners = {"logprobs": run_logprobs, "greedy": run_greedy, "generate": run_generate}
    out = EngineOutputs()
    for w in brief.workloads:
        out.put(w["name"], **runners[w["kind"]](model, prompter, w))
    phases.mark("workloads")
    out.describe_run(brief, "hf", transformers=transformers.__version__, timings={"run_s": time.perf_counter() - t0})
    out.save(brief.output_dir)
    phases.mark("write")


def main() -> None:
    from harness.contract.runbrief import RunBrief

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness.engines.hf.worker BRIEF.json")
    run(RunBrief.load(sys.argv[1]))


if __name__ == "__main__":
    from harness.engines.launch.rankside import run_rank

    # the whole package is the engine (transformers run eagerly): its exception is a crash
    run_rank(main, engine_code=("harness.engines.hf",))
