"""One rank of the tp-plan engine: `python -m harness_tp_plan.worker BRIEF.json`.

The harness's launcher starts tp of these with torchrun-style variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Each rank joins the process group,
loads its shard of the checkpoint through transformers' tensor parallelism, runs every
workload of the brief in lockstep with the others (each forward all-reduces inside
transformers' TP layers), and rank 0 writes EngineOutputs to brief.output_dir.

Imports only stdlib, torch, transformers and the harness's engine-side contract
(harness.contract, harness.engines.launch.rankside).
"""

from __future__ import annotations

import os
import sys
import time

DTYPES = ("float32", "bfloat16", "float16")


def init_distributed(brief):
    """Join the process group (gloo on CPU, NCCL on CUDA); returns this rank's device.
    On CUDA the rank uses its LOCAL_RANK-th visible GPU (the harness sets
    CUDA_VISIBLE_DEVICES to the GPUs it leased for the run)."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if brief.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    elif brief.device == "cpu":
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        raise ValueError(f"unknown device {brief.device!r} (cpu or cuda)")
    if dist.get_world_size() != brief.axes.tp:
        raise RuntimeError(f"launched with WORLD_SIZE={dist.get_world_size()} for tp={brief.axes.tp}")
    return device


def load_model(brief, device):
    """The checkpoint, split over the tp ranks by transformers' own TP plan (tp=1: whole)."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(brief.model_dir)
    model_cls = getattr(transformers, config.architectures[0])
    kwargs = {"dtype": getattr(torch, brief.dtype), "attn_implementation": "eager"}
    if brief.axes.tp == 1:
        return model_cls.from_pretrained(brief.model_dir, **kwargs).to(device).eval()
    from transformers.distributed import DistributedConfig

    # Builds the ("pp", "fsdp", "tp") device mesh on the process group joined above,
    # replaces each planned weight by a DTensor shard (Shard(0) colwise, Shard(1) rowwise)
    # and reads only this rank's slice from the safetensors.
    model = model_cls.from_pretrained(brief.model_dir, distributed_config=DistributedConfig(tp_size=brief.axes.tp), **kwargs)
    return model.eval()


def sharding_report(model) -> dict:
    """What transformers really split: the plan it applied and the count of DTensor
    parameters by placement. A model whose plan split nothing would run replicated on
    every rank and prove nothing, so that is an error, not a pass."""
    from torch.distributed.tensor import DTensor

    placements: dict[str, int] = {}
    for _, param in model.named_parameters():
        key = str(tuple(param.placements)) if isinstance(param, DTensor) else "local"
        placements[key] = placements.get(key, 0) + 1
    return {"tp_plan": dict(model.tp_plan), "parameters_by_placement": placements}


class Forward:
    """The model's forward, eager or compiled once (dynamic shapes) at warm-up."""

    def __init__(self, model, compile: bool):
        import torch

        self.model = model
        self.fn = torch.compile(model, dynamic=True) if compile else model

    def __call__(self, **inputs):
        import torch

        with torch.no_grad():
            return self.fn(**inputs)


def logprobs(logits):
    import torch

    return torch.log_softmax(logits.float(), dim=-1)


def agree(token: int, device) -> int:
    """Rank 0's choice, on every rank: the ranks feed the same token to the next step
    whatever their own logits say (as an engine's driver broadcasts what it sampled)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([token], dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


def run_logprobs(forward, w: dict, device) -> dict:
    """Teacher-forced top-k next-token logprobs at every position of every prompt."""
    import torch

    k = int(w["top_k"])
    ids, lps, offsets = [], [], [0]
    for prompt in w["prompts"]:
        top = logprobs(forward(input_ids=torch.tensor([prompt], device=device)).logits[0]).topk(k, dim=-1)
        ids.append(top.indices.cpu())
        lps.append(top.values.cpu())
        offsets.append(offsets[-1] + len(prompt))
    return {"topk_ids": torch.cat(ids).long(), "topk_logprobs": torch.cat(lps).float(), "offsets": torch.tensor(offsets)}


def decode(forward, prompt: list[int], steps: int, device, stop=None):
    """Greedy decoding through transformers' KV cache (its cache holds this rank's heads):
    a prefill of the prompt, then one token per step. Yields (token, step logprobs)."""
    import torch

    past, inputs = None, {"input_ids": torch.tensor([prompt], device=device)}
    generated: list[int] = []
    while len(generated) < steps and not (stop and stop(generated)):
        out = forward(**inputs, past_key_values=past, use_cache=True)
        past, lp = out.past_key_values, logprobs(out.logits[0, -1])
        token = agree(int(lp.argmax()), device)
        generated.append(token)
        yield token, lp
        inputs = {"input_ids": torch.tensor([[token]], device=device)}


def run_greedy(forward, w: dict, device) -> dict:
    import torch

    k, n = int(w["top_k"]), int(w["max_new_tokens"])
    tokens, ids, lps = [], [], []
    for prompt in w["prompts"]:
        steps = list(decode(forward, list(prompt), n, device))
        tops = [lp.topk(k) for _, lp in steps]
        tokens.append([t for t, _ in steps])
        ids.append(torch.stack([t.indices.cpu() for t in tops]))
        lps.append(torch.stack([t.values.cpu() for t in tops]))
    return {"tokens": torch.tensor(tokens), "topk_ids": torch.stack(ids).long(), "topk_logprobs": torch.stack(lps).float()}


def run_generate(forward, w: dict, device) -> dict:
    """Greedy generation with the `generate` stop rule of the run-brief contract."""
    from harness.contract.outputs import EngineOutputs
    from harness.contract.runbrief import generate_params, stop_reached

    n, stop, eos = generate_params(w)
    sequences = [
        [t for t, _ in decode(forward, list(prompt), n, device, lambda g: stop_reached(g, stop, eos))] for prompt in w["prompts"]
    ]
    return EngineOutputs.generate_fields(sequences, n)


def applied_evidence(brief, sharding: dict, after_warmup: dict) -> dict:
    """Per axis, what this run really applied (EngineOutputs meta `applied`; docs/ENGINES.md):
    the harness calls a tested setting that did not take effect `unsupported`, never `pass`."""
    split = {k: n for k, n in sharding["parameters_by_placement"].items() if k != "local"}
    applied = {
        "tp": {
            "applied": brief.axes.tp == 1 or bool(split),
            "evidence": f"{sum(split.values())} parameters sharded ({', '.join(f'{n} {k}' for k, n in split.items()) or 'none'}) "
            f"over {brief.axes.tp} ranks",
        }
    }
    if brief.axes.compile:
        graphs = after_warmup["unique_graphs"]
        applied["compile"] = {"applied": graphs > 0, "evidence": f"Dynamo captured {graphs} graph(s) at warm-up"}
    return applied


def compile_stats() -> dict:
    """Dynamo's counts so far: graphs captured and frames compiled (a report shows whether
    the workloads ran what warm-up compiled, or compiled more: decode steps with a KV cache)."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": int(counters["stats"]["unique_graphs"]), "frames_ok": int(counters["frames"]["ok"])}


RUNNERS = {"logprobs": run_logprobs, "greedy": run_greedy, "generate": run_generate}


def check_brief(brief) -> None:
    """What this engine cannot do fails here, on every rank, before any collective."""
    if brief.axes.pp != 1 or brief.axes.sp:
        raise ValueError(f"the tp-plan engine runs tensor parallelism only (got settings {brief.settings})")
    if brief.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {brief.dtype!r} (known: {', '.join(DTYPES)})")
    if brief.faults:
        raise ValueError(f"the tp-plan engine has no fault switches (got {', '.join(brief.faults)})")
    for w in brief.workloads:
        if w["kind"] not in RUNNERS:
            raise ValueError(f"unknown workload kind {w['kind']!r} in workload {w['name']!r}")
        if any(w.get("images") or []):
            raise ValueError(f"workload {w['name']!r} has images: the tp-plan engine runs text prompts only")


def run(brief) -> None:
    import torch
    import torch.distributed as dist
    import transformers

    from harness.contract.outputs import EngineOutputs
    from harness.contract.phases import PhaseMarks

    phases = PhaseMarks(brief.output_dir)
    phases.mark("start")
    check_brief(brief)
    torch.manual_seed(brief.seed)
    device = init_distributed(brief)
    phases.mark("rendezvous")
    try:
        t0 = time.perf_counter()
        model = load_model(brief, device)
        sharding = sharding_report(model)
        if brief.axes.tp > 1 and set(sharding["parameters_by_placement"]) == {"local"}:
            raise RuntimeError(
                f"transformers split no weight of {type(model).__name__} over tp={brief.axes.tp} "
                f"(plan: {sharding['tp_plan']}): every rank would run the whole model"
            )
        forward = Forward(model, brief.axes.compile)
        t1 = time.perf_counter()
        phases.mark("load")
        if brief.axes.compile:  # capture now: a prefill and decode steps through the KV cache
            for _ in decode(forward, [0, 1, 2, 3], 3, device):
                pass
        after_warmup = compile_stats()
        t2 = time.perf_counter()
        phases.mark("warmup")
        results = {w["name"]: RUNNERS[w["kind"]](forward, w, device) for w in brief.workloads}
        after_run = compile_stats()
        t3 = time.perf_counter()
        phases.mark("workloads")
        if dist.get_rank() == 0:
            out = EngineOutputs()
            for name, fields in results.items():
                out.put(name, **fields)
            out.describe_run(
                brief,
                "tp-plan",
                transformers=transformers.__version__,
                world_size=brief.axes.tp,
                sharding=sharding,
                applied=applied_evidence(brief, sharding, after_warmup),
                compile={"enabled": brief.axes.compile, "after_warmup": after_warmup, "after_run": after_run},
                timings={"load_s": t1 - t0, "warmup_s": t2 - t1, "run_s": t3 - t2},
            )
            out.save(brief.output_dir)
        dist.barrier()
        phases.mark("write")
    finally:
        dist.destroy_process_group()


def main() -> None:
    from harness.contract.runbrief import RunBrief

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness_tp_plan.worker BRIEF.json")
    run(RunBrief.load(sys.argv[1]))


if __name__ == "__main__":
    from harness.engines.launch.rankside import run_rank

    run_rank(main)
