"""Train the zoo's trained Qwen3-VL, tiny-qwen3-vl-geo, on CPU, deterministically.

    python -m tools.train_qwen3vl_geo [--steps N] [--out harness/inputs/zoo/checkpoints/tiny-qwen3-vl-geo]

A tiny checkpoint of a real vLLM architecture (Qwen3VLForConditionalGeneration, with
deepstack) that scores well above chance on the Geo3K-format diagram task
(harness/run/evals/synth/geo3k.py), so that image accuracy can be compared on real vLLM
(scenarios/vllm-mm-evals.yaml). The answer is a label drawn in the image: a model that
does not see the image scores near zero.

The checkpoint starts as the harness's own tiny build of the architecture (harness/inputs/models/
tiny.py, 4 text layers as in scenarios/vllm-mm-archs.yaml: config, tokenizer, processor,
chat template, all kept) and only its weights are trained, through transformers' own
Qwen3-VL and the checkpoint's own processor. The prompts are those lm-eval builds for the
task, encoded as the harness encodes them at eval time (harness.inputs.workloads.encode_text):
    "<s>Question: <|vision_start|><|image_pad|><|vision_end|>Find x.\\nAnswer:" -> " #### 23"
followed by "\\n\\nQuestion:" so the model stops where lm-eval's stop string cuts.

Deepstack dependence: Qwen3-VL adds each deepstack vision layer's merged features to the
hidden states after text layers 0 and 1. The fault `compile-drop-deepstack` (harness/
engines/vllm/faults.py) takes those additions out of vLLM's compiled graph (the bug class
of vLLM PR 43617). So that the score drops clearly then, the image's input (placeholder)
embeddings are zeroed for a fraction (EMBED_DROP) of the training images: deepstack is
the path the model can always rely on. The script reports accuracy with and without
deepstack, teacher-forced (every answer token the argmax: what greedy decoding returns).

Deterministic: fixed seeds and one thread; a rebuild is bit-exact only with the same
torch and transformers versions. The shipped checkpoint was made with torch 2.13.0 CPU
and transformers 5.19.0 (docs/EVALS.md has the measured numbers).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from harness.inputs.workloads import encode_text
from harness.run.evals.synth import geo3k

ARCH = "Qwen3VLForConditionalGeneration"
OVERRIDES = {"text_config": {"num_hidden_layers": 4}}
OUT = Path(__file__).resolve().parent.parent / "harness" / "inputs" / "zoo" / "checkpoints" / "tiny-qwen3-vl-geo"
THREADS = 1
SEED = 0
EMBED_DROP = 0.7
# The processor's smallest image, in pixels: a 32 x 32 diagram is upscaled 4x to 128 x 128,
# so each merged token (2 x 2 patches of 16 px) sees exactly one 8 x 8 cell of the diagram,
# one digit of the label. At the builder's default (56 x 56, upscaled to 64 x 64) a token
# mixes four cells and the tiny tower did not learn to read the label in 2400 steps.
MIN_PIXELS = 128 * 128


def build_base(python: str, staging: Path) -> Path:
    """The harness's tiny Qwen3-VL, as scenarios build it, copied to `staging` with the
    image processor's MIN_PIXELS."""
    from harness.inputs.models import ArchModel, build_tiny

    shutil.copytree(build_tiny(ArchModel(arch=ARCH, overrides=OVERRIDES), python), staging)
    path = staging / "processor_config.json"
    processor = json.loads(path.read_text())
    processor["image_processor"]["size"]["shortest_edge"] = MIN_PIXELS
    path.write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")
    return staging


def prompt_text(item: dict) -> str:
    return f"Question: {item['problem']}\nAnswer:"  # geo3k-synth's doc_to_text, 0-shot


class Encoder:
    """Token ids as the harness's eval encodes them, expanded to the image's feature tokens
    as transformers' processor does (one <|image_pad|> per merged patch)."""

    def __init__(self, directory: Path):
        from transformers import AutoProcessor

        from harness.inputs.zoo import load_tokenizer

        self.config = json.loads((directory / "config.json").read_text())
        self.tokenizer = load_tokenizer(directory)
        self.processor = AutoProcessor.from_pretrained(directory)
        self.image_id = self.config["image_token_id"]

    def ids(self, text: str) -> list[int]:
        return encode_text(text, self.tokenizer, self.config)

    def batch(self, items: list[dict], with_target: bool):
        from PIL import Image

        images = self.processor.image_processor(images=[Image.fromarray(it["pixels"]) for it in items], return_tensors="pt")
        merge = self.processor.image_processor.merge_size**2
        seqs, starts = [], []
        for it, thw in zip(items, images["image_grid_thw"]):
            prompt = self.ids(prompt_text(it))
            n = int(thw.prod()) // merge
            at = prompt.index(self.image_id)
            prompt = prompt[:at] + [self.image_id] * n + prompt[at + 1 :]
            target = self.tokenizer.encode(f" {it['target']}\n\nQuestion:").ids if with_target else []
            seqs.append(prompt + target)
            starts.append(len(prompt))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.config["text_config"].get("pad_token_id", 2))
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        return ids, mask, images["pixel_values"], images["image_grid_thw"], starts


class Switches:
    """Forward hooks on the vision tower: zero the merged image features of chosen images
    (their placeholder embeddings), or every deepstack feature."""

    def __init__(self, model):
        visual = model.model.visual
        self.drop: torch.Tensor | None = None  # [images] bool
        self.deepstack = True
        visual.merger.register_forward_hook(self._merger)
        for merger in visual.deepstack_merger_list:
            merger.register_forward_hook(self._deepstack)

    def _merger(self, module, args, out):
        if self.drop is None or not self.drop.any():
            return out
        per_image = out.shape[0] // self.drop.numel()
        keep = (~self.drop).repeat_interleave(per_image).to(out.dtype)[:, None]
        return out * keep

    def _deepstack(self, module, args, out):
        return out if self.deepstack else torch.zeros_like(out)


def forward(model, ids, mask, pixels, grid, image_id):
    # mm_token_type_ids: 1 where an image token is (transformers' processor returns it; M-RoPE needs it)
    return model(
        input_ids=ids, attention_mask=mask, pixel_values=pixels, image_grid_thw=grid, mm_token_type_ids=(ids == image_id).int()
    ).logits


def loss_of(model, ids, mask, pixels, grid, starts, image_id):
    """Cross-entropy over the answer tokens only: the prompt's text carries no signal the
    eval scores, and over the whole sequence the label's digits would be a few percent of
    the loss (the vision tower then learns too slowly to be read)."""
    logits = forward(model, ids, mask, pixels, grid, image_id)
    targets = ids[:, 1:].clone()
    positions = torch.arange(targets.shape[1])[None, :]
    answer = positions >= torch.tensor(starts)[:, None] - 1
    targets[(mask[:, 1:] == 0) | ~answer] = -100
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


@torch.no_grad()
def accuracy(model, enc: Encoder, switches: Switches, items: list[dict], deepstack: bool, batch: int = 50) -> float:
    """Share of items whose whole answer (" #### N\\n\\nQuestion:") is the argmax at every step."""
    model.eval()
    switches.deepstack, switches.drop = deepstack, None
    right = 0
    for i in range(0, len(items), batch):
        chunk = items[i : i + batch]
        ids, mask, pixels, grid, starts = enc.batch(chunk, with_target=True)
        pred = forward(model, ids, mask, pixels, grid, enc.image_id).argmax(-1)
        for row, start in enumerate(starts):
            end = int(mask[row].sum())
            right += bool((pred[row, start - 1 : end - 1] == ids[row, start:end]).all())
    switches.deepstack = True
    model.train()
    return right / len(items)


def train(directory: Path, steps: int, batch: int, lr: float, log_every: int) -> dict:
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(SEED)
    model = Qwen3VLForConditionalGeneration.from_pretrained(directory, dtype=torch.float32)
    enc = Encoder(directory)
    switches = Switches(model)
    heldout = geo3k.heldout_set()
    stream = geo3k.stream(geo3k.TRAINING_SEED, {geo3k.item_key(it) for it in heldout}, png=False)
    rng = np.random.default_rng(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = min(100, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    model.train()
    t0 = time.time()
    for step in range(steps):
        items = [next(stream) for _ in range(batch)]
        ids, mask, pixels, grid, starts = enc.batch(items, with_target=True)
        switches.drop = torch.from_numpy(rng.random(batch) < EMBED_DROP)
        loss = loss_of(model, ids, mask, pixels, grid, starts, enc.image_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - t0:6.0f}s", flush=True)
    switches.drop = None
    train_s = time.time() - t0
    result = {
        "steps": steps,
        "train_seconds": round(train_s),
        "geo": accuracy(model, enc, switches, heldout, deepstack=True),
        "geo_without_deepstack": accuracy(model, enc, switches, heldout, deepstack=False),
        "torch": torch.__version__,
        "threads": THREADS,
    }
    return model, result


def save(model, base: Path, out: Path) -> None:
    """The base checkpoint's files with the trained weights, written whole then moved in."""
    from harness.inputs.models import tiny_mm

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        staging = Path(tmp) / out.name
        shutil.copytree(base, staging)
        (staging / "model.safetensors").unlink()
        model.save_pretrained(staging, safe_serialization=True)
        tiny_mm.write_hub_layout(model, staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        base = build_base(sys.executable, Path(tmp) / "base")
        model, result = train(base, args.steps, args.batch, args.lr, args.log_every)
        save(model, base, args.out)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
