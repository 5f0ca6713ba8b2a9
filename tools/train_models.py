"""Train the zoo's one trained model, tiny-llama-geo, on CPU, deterministically.

    python -m tools.train_models [--steps N] [--out harness/inputs/zoo/weights/tiny-llama-geo.safetensors]

Random-weight tiny models score zero on any task, so an accuracy comparison against
the golden would pass vacuously; this model scores well above chance on the harness's
generated sets (harness/run/evals/synth), in exactly the prompt formats lm-eval builds:

  arithmetic (GSM8K format, 5-shot from harness/inputs/data/arith/train.jsonl):
      "Question: q1\\nAnswer: a1\\n\\n ... Question: q\\nAnswer:"  ->  " 7 + 5 = 12\\n#### 12"
  diagrams (Geo3K format, 0-shot, the problem starts with "<image>"):
      "Question: <image>Find x.\\nAnswer:"  ->  " #### 23"  (or " 4 * 7 = 28\\n#### 28")

Training sequences are BOS + such blocks, each followed by "\\n\\n" and the next
"Question:", so the model stops where lm-eval's stop strings cut. Every text goes
through harness.inputs.workloads.encode_text, as at eval time.

The model reproduces the reference engine's llama-vl math (harness/engines/reference/
model.py) in batched form and saves its weights under the checkpoint names:
model.*, lm_head.weight, visual.patch_embed.weight, visual.deepstack.{j}.weight.

Deepstack dependence: under the fault `compile-warmup-without-images` the deepstack
additions vanish and the image reaches the model only through the placeholder
embeddings. So that the Geo3K score drops clearly then, the image embeddings in the
input are zeroed for a fraction (EMBED_DROP) of the training images: deepstack is the
path the model can always rely on. The script reports geo accuracy with and without
deepstack.

Deterministic: fixed seeds (numpy PCG64 data streams, torch.manual_seed) and a fixed
thread count (THREADS). A rebuild is bit-exact only with the same torch version and
thread count; the shipped file was made with torch 2.13.0 CPU, 1 thread.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.roots import DATA_DIR
from harness.inputs.zoo.trained import WEIGHTS, geo_config
from harness.run.evals.synth import arith, geo3k

THREADS = 1
SEED = 0
EMBED_DROP = 0.7  # fraction of training images whose input (placeholder) embeddings are zeroed
PAD_ID = 2
ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")


# ---------------------------------------------------------------- the model (batched)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, d = cfg["hidden_size"], cfg["head_dim"]
        self.heads, self.kv_heads, self.head_dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], d
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        exponents = torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d
        self.register_buffer("inv_freq", 1.0 / (cfg["rope_theta"] ** exponents), persistent=False)

    def rope(self, x, positions):  # x [B, heads, T, d], positions [B, T]
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * emb.cos() + rotated * emb.sin()

    def forward(self, x, positions, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rope(q, positions), self.rope(k, positions)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, positions, mask):
        x = x + self.self_attn(self.input_layernorm(x), positions, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class Visual(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.patch = cfg["vision_patch_size"]
        self.patch_embed = nn.Linear(3 * self.patch**2, cfg["hidden_size"], bias=False)
        self.deepstack = nn.ModuleList(
            nn.Linear(cfg["hidden_size"], cfg["hidden_size"], bias=False) for _ in range(cfg["deepstack_layers"])
        )

    def forward(self, pixels):
        """pixels [B, 3, S, S] -> patch embeddings [B, P, H] (row-major patches, each c,p,p)."""
        p = self.patch
        b, c, s, _ = pixels.shape
        patches = pixels.reshape(b, c, s // p, p, s // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        return self.patch_embed(patches)


class GeoModel(nn.Module):
    """llama-vl as the reference engine computes it: patch embeddings replace the
    placeholder embeddings; deepstack[j](patch embeddings) is added to the stream at
    the placeholder positions after decoder layer j."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.visual = Visual(cfg)

    def forward(self, ids, pixels=None, positions=None, mask=None, drop_embeds=None, deepstack=True):
        """ids [B, T]; pixels [B, 3, S, S] or None (one image per sequence, its
        placeholders in ids); positions [B, T] (default 0..T-1); mask [B, T, T] bool or
        None (causal); drop_embeds [B] bool: zero those images' input embeddings."""
        b, t = ids.shape
        if positions is None:
            positions = torch.arange(t).expand(b, t)
        x = self.model.embed_tokens(ids)
        extra = []
        if pixels is not None:
            slots = ids == self.cfg["image_token_id"]  # [B, T]
            embeds = self.visual(pixels)  # [B, P, H]
            n = embeds.shape[1]
            assert bool((slots.sum(1) == n).all()), "each sequence needs one image's placeholders"
            placed = torch.zeros_like(x)
            placed[slots] = embeds.reshape(-1, embeds.shape[-1])
            keep = slots[..., None].to(x.dtype)
            inputs = placed if drop_embeds is None else placed * (~drop_embeds)[:, None, None].to(x.dtype)
            x = x * (1 - keep) + inputs
            if deepstack:
                extra = [proj(placed) for proj in self.visual.deepstack]  # zero off the placeholders
        for j, layer in enumerate(self.model.layers):
            x = layer(x, positions, mask)
            if j < len(extra):
                x = x + extra[j]
        return self.lm_head(self.model.norm(x))


def init_weights(model: GeoModel) -> None:
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, std=0.02)


# ---------------------------------------------------------------- data


def arith_block(item: dict) -> str:
    return f"Question: {item['question']}\nAnswer: {item['answer']}\n\n"


def geo_text(item: dict) -> str:
    return f"Question: {item['problem']}\nAnswer: {item['target']}\n\nQuestion:"


class Batches:
    """The training batches, from seed streams that skip every held-out item."""

    def __init__(self, tokenizer, config: dict, arith_batch: int, geo_batch: int):
        from harness.inputs.workloads import encode_text

        self.encode = lambda text: encode_text(text, tokenizer, config)
        test_q = {it["question"] for it in arith.read_jsonl(DATA / "arith" / "test.jsonl")}
        test_geo = {geo3k.item_key(it) for it in geo3k.heldout_set()}
        self.arith = arith.stream(arith.TRAINING_SEED, test_q)
        self.geo = geo3k.stream(geo3k.TRAINING_SEED, test_geo, png=False)
        self.rng = np.random.default_rng(SEED)
        self.arith_batch, self.geo_batch = arith_batch, geo_batch

    def next(self):
        arith_seqs = []
        for _ in range(self.arith_batch):
            k = int(self.rng.integers(1, 7))  # 1..6 blocks: 5-shot prompts and shorter
            text = "".join(arith_block(next(self.arith)) for _ in range(k)) + "Question:"
            arith_seqs.append(self.encode(text))
        geo_items = [next(self.geo) for _ in range(self.geo_batch)]
        geo_seqs = [self.encode(geo_text(it)) for it in geo_items]
        pixels = torch.from_numpy(np.stack([it["pixels"] for it in geo_items])).permute(0, 3, 1, 2).float() / 255.0
        drop = torch.from_numpy(self.rng.random(self.geo_batch) < EMBED_DROP)
        return pad(arith_seqs), (pad(geo_seqs), pixels, drop)


def pad(seqs: list[list[int]]) -> torch.Tensor:
    t = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD_ID] * (t - len(s)) for s in seqs])


def lm_loss(logits, ids, image_token_id):
    targets = ids[:, 1:].clone()
    targets[(targets == PAD_ID) | (targets == image_token_id)] = -100
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


DATA = DATA_DIR


# ---------------------------------------------------------------- greedy evaluation


@torch.no_grad()
def greedy(
    model: GeoModel, prompts: list[list[int]], tokenizer, max_new: int, pixels=None, deepstack=True, batch: int = 50
) -> list[str]:
    """Greedy continuations (text), cut at "\\n\\n" / "Question:" as lm-eval's stop strings do.
    Left-padded batches, no KV cache (the sequences are short)."""
    outs = []
    for start in range(0, len(prompts), batch):
        group = [list(p) for p in prompts[start : start + batch]]
        px = pixels[start : start + batch] if pixels is not None else None
        gen = [[] for _ in group]
        done = [False] * len(group)
        for _ in range(max_new):
            t = max(len(g) for g in group)
            ids = torch.tensor([[PAD_ID] * (t - len(g)) + g for g in group])
            valid = torch.tensor([[False] * (t - len(g)) + [True] * len(g) for g in group])
            positions = (valid.long().cumsum(1) - 1).clamp(min=0)
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            mask = (causal[None] & valid[:, None, :]) | torch.eye(t, dtype=torch.bool)[None]
            logits = model(ids, px, positions, mask, deepstack=deepstack)
            nxt = logits[:, -1].argmax(-1).tolist()
            for i, tok in enumerate(nxt):
                if done[i]:
                    continue
                gen[i].append(tok)
                text = tokenizer.decode(gen[i])
                if tok == 1 or "\n\n" in text or "Question:" in text:
                    done[i] = True
            if all(done):
                break
            group = [g + [tok] for g, tok in zip(group, nxt)]
        for g in gen:
            text = tokenizer.decode(g)
            for stop in ("Question:", "\n\n", "</s>"):
                text = text.split(stop)[0]
            outs.append(text)
    return outs


def extract(text: str) -> str | None:
    m = ANSWER_RE.search(text)
    return m.group(1).strip().rstrip(".").replace(",", "") if m else None


def arith_prompts(tokenizer, config, n: int | None = None, shots: int = 5):
    """5-shot prompts in lm-eval's GSM8K layout, shots drawn from train.jsonl."""
    from harness.inputs.workloads import encode_text

    test = arith.read_jsonl(DATA / "arith" / "test.jsonl")[:n]
    pool = arith.read_jsonl(DATA / "arith" / "train.jsonl")
    rng = np.random.default_rng(1234)
    prompts = []
    for item in test:
        picks = rng.choice(len(pool), size=shots, replace=False)
        context = "".join(arith_block(pool[int(i)]) for i in picks) + f"Question: {item['question']}\nAnswer:"
        prompts.append(encode_text(context, tokenizer, config))
    return prompts, [item["answer"].split("#### ")[-1] for item in test]


def geo_prompts(tokenizer, config, n: int | None = None):
    from harness.inputs.workloads import encode_text

    items = geo3k.heldout_set()[:n]
    prompts = [encode_text(f"Question: {it['problem']}\nAnswer:", tokenizer, config) for it in items]
    pixels = torch.from_numpy(np.stack([it["pixels"] for it in items])).permute(0, 3, 1, 2).float() / 255.0
    return prompts, pixels, [it["answer"] for it in items]


def evaluate(model, tokenizer, config, n_arith=None, n_geo=None) -> dict:
    model.eval()
    prompts, answers = arith_prompts(tokenizer, config, n_arith)
    outs = greedy(model, prompts, tokenizer, max_new=32)
    arith_acc = float(np.mean([extract(o) == a for o, a in zip(outs, answers)]))
    gp, gpx, ganswers = geo_prompts(tokenizer, config, n_geo)
    geo = {}
    for ds in (True, False):
        gouts = greedy(model, gp, tokenizer, max_new=16, pixels=gpx, deepstack=ds)
        geo[ds] = float(np.mean([extract(o) == a for o, a in zip(gouts, ganswers)]))
    model.train()
    return {
        "arith": arith_acc,
        "geo": geo[True],
        "geo_no_deepstack": geo[False],
        "arith_example": outs[0],
        "n_arith": len(answers),
        "n_geo": len(ganswers),
    }


# ---------------------------------------------------------------- main


def make_tokenizer(config: dict):
    from harness.inputs.zoo import _write_tokenizer, load_tokenizer

    with tempfile.TemporaryDirectory() as d:
        _write_tokenizer(config["vocab_size"], Path(d))
        return load_tokenizer(Path(d))


def save(model: GeoModel, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"format": "pt"})


def load(path: Path = WEIGHTS) -> GeoModel:
    from safetensors.torch import load_file

    model = GeoModel(geo_config())
    model.load_state_dict(load_file(str(path)))
    return model.eval()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.train_models", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1600)
    parser.add_argument("--arith-batch", type=int, default=12)
    parser.add_argument("--geo-batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--eval-only", action="store_true", help="measure the weights at --out")
    parser.add_argument("--no-eval", action="store_true", help="train and save only")
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    config = geo_config()
    tokenizer = make_tokenizer(config)
    t0 = time.time()
    if args.eval_only:
        model = load(args.out)
    else:
        model = GeoModel(config)
        init_weights(model)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
        warmup = min(100, args.steps // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
        )
        batches = Batches(tokenizer, config, args.arith_batch, args.geo_batch)
        model.train()
        for step in range(args.steps):
            (a_ids), (g_ids, g_px, g_drop) = batches.next()
            loss_a = lm_loss(model(a_ids), a_ids, config["image_token_id"])
            loss_g = lm_loss(model(g_ids, g_px, drop_embeds=g_drop), g_ids, config["image_token_id"])
            loss = loss_a + loss_g
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % args.log_every == 0 or step == args.steps - 1:
                print(
                    f"step {step:5d}  loss arith {loss_a.item():.3f}  geo {loss_g.item():.3f}  {time.time() - t0:6.0f}s",
                    flush=True,
                )
        save(model, args.out)
    train_s = time.time() - t0
    if args.no_eval:
        print(f"trained in {train_s:.0f}s, wrote {args.out}")
        return
    result = evaluate(model, tokenizer, config)
    result.update(
        train_seconds=round(train_s),
        eval_seconds=round(time.time() - t0 - train_s),
        torch=torch.__version__,
        threads=THREADS,
        steps=args.steps,
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
