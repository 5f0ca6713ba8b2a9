"""One rank of the reference engine: `python -m harness.engines.reference.worker SPEC.json`.

The launcher starts tp*pp of these with torchrun-style env vars. Each rank joins the
process group, builds its stage on the meta device, parallelises it, loads its shard,
warms up (compile captures here), runs every workload of the spec, and the driver
rank (TP rank 0 of the last stage) writes EngineOutputs to spec.output_dir.
"""

from __future__ import annotations

import sys
import time

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def build_stage(spec, ctx):
    """Meta-device stage for this rank's layers -> TP modules -> this rank's weights."""
    import torch

    from harness.engines.reference.loader import load_stage
    from harness.engines.reference.model import LlamaStage, ModelConfig, pp_layer_split
    from harness.engines.reference.parallel import parallelize

    cfg = ModelConfig.from_model_dir(spec.model_dir)
    layer_ids = pp_layer_split(cfg.num_hidden_layers, ctx.pp)[ctx.pp_rank]
    with torch.device("meta"):
        stage = LlamaStage(cfg, layer_ids, ctx.is_first_stage, ctx.is_last_stage)
    parallelize(stage, ctx)
    load_stage(stage, spec.model_dir, ctx, getattr(torch, DTYPES[spec.dtype]))
    return stage.eval()


def run_workloads(runner, workloads: list[dict]):
    """All workloads, in order, every rank in lockstep. Returns {name: fields} on the
    last stage (None entries elsewhere)."""
    results = {}
    for w in workloads:
        top_k = min(int(w.get("top_k", 20)), runner.stage.cfg.vocab_size)
        if w["kind"] == "logprobs":
            results[w["name"]] = runner.run_logprobs(w["prompts"], top_k)
        elif w["kind"] == "greedy":
            results[w["name"]] = runner.run_greedy(w["prompts"], int(w["max_new_tokens"]), top_k)
        else:
            raise ValueError(f"unknown workload kind {w['kind']!r} in workload {w['name']!r}")
    return results


def _compile_stats() -> dict:
    from torch._dynamo.utils import counters

    return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
            "frames_ok": int(counters["frames"]["ok"])}


def run(spec) -> None:
    """The whole life of one rank. Callable in-process (world size 1) for tests."""
    import torch
    import torch.distributed as dist

    from harness.engines.reference import faults
    from harness.engines.reference.parallel import init_parallel
    from harness.engines.reference.pipeline import ModelRunner
    from harness.outputs import EngineOutputs

    if spec.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {spec.dtype!r} (known: {', '.join(DTYPES)})")
    if spec.sp and spec.tp < 2:
        raise ValueError("sp needs tp >= 2")
    faults.parse(spec.faults)  # unknown fault names fail here, on every rank
    ctx = init_parallel(spec.tp, spec.pp, spec.sp, spec.device)
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            stage = build_stage(spec, ctx)
            runner = ModelRunner(stage, ctx, getattr(torch, spec.dtype), spec.workloads, spec.compile, spec.faults)
            t1 = time.perf_counter()
            runner.warmup()
            after_warmup = _compile_stats()
            t2 = time.perf_counter()
            results = run_workloads(runner, spec.workloads)
            t3 = time.perf_counter()
            after_run = _compile_stats()
        # Each rank's stage I/O, collected so the driver can record all stages.
        stage_io = [None] * ctx.world_size
        dist.all_gather_object(stage_io, runner.stage_io)
        if ctx.rank == ctx.driver_rank:
            out = EngineOutputs()
            for name, fields in results.items():
                out.put(name, **fields)
            out.meta = {
                "engine": "reference",
                "torch": torch.__version__,
                "python": sys.version.split()[0],
                "scenario_id": spec.scenario_id,
                "settings": dict(spec.settings),
                "dtype": spec.dtype,
                "device": spec.device,
                "world_size": ctx.world_size,
                "faults": list(spec.faults),
                "workloads": {w["name"]: {"kind": w["kind"]} for w in spec.workloads},
                "timings": {"load_s": t1 - t0, "warmup_s": t2 - t1, "run_s": t3 - t2},
                "stage_io": stage_io,
                "compile": {"enabled": spec.compile, "after_warmup": after_warmup, "after_run": after_run,
                            "graphs_compiled_during_run": after_run["unique_graphs"] - after_warmup["unique_graphs"]},
            }
            out.save(spec.output_dir)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    from harness.runspec import RunSpec

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness.engines.reference.worker SPEC.json")
    run(RunSpec.load(sys.argv[1]))


if __name__ == "__main__":
    from harness.launch.rankside import run_rank

    run_rank(main)
