"""One rank of the reference engine: `python -m harness.engines.reference.worker BRIEF.json`.

The launcher starts tp*pp of these with torchrun-style env vars. Each rank joins the
process group, builds its stage on the meta device, parallelises it, loads its shard,
warms up (compile captures here), runs every workload of the brief, and the driver
rank (TP rank 0 of the last stage) writes EngineOutputs to brief.output_dir.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.contract import replicas
from harness.contract.axes import RunAxes

# ranks import torch lazily, after the launcher set their env
if TYPE_CHECKING:
    import torch

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def build_stage(brief, ctx):
    """Meta-device stage for this rank's layers -> TP modules -> this rank's weights."""
    import torch

    from harness.engines.reference.loader import load_stage
    from harness.engines.reference.model import LlamaStage, ModelConfig, pp_layer_split
    from harness.engines.reference.parallel import parallelize

    cfg = ModelConfig.from_model_dir(brief.model_dir)
    layer_ids = pp_layer_split(cfg.num_hidden_layers, ctx.pp)[ctx.pp_rank]
    with torch.device("meta"):
        stage = LlamaStage(cfg, layer_ids, ctx.is_first_stage, ctx.is_last_stage)
    stage.faults = frozenset(ctx.faults)
    parallelize(stage, ctx)
    load_stage(stage, brief.model_dir, ctx, getattr(torch, DTYPES[brief.dtype]))
    return stage.eval()


def run_workloads(runner, workloads: list[dict], batch: str = "all"):
    """All workloads, in order, every rank in lockstep, each submitted as the `batch`
    mode composes it (harness/contract/batching.py). Returns {name: fields} on the last
    stage (None entries elsewhere), in each workload's own prompt order."""
    from harness.contract import batching

    results = {}
    for w in workloads:
        if w["kind"] not in ("logprobs", "greedy", "generate"):
            raise ValueError(f"unknown workload kind {w['kind']!r} in workload {w['name']!r}")
        if batch == "all" or not w["prompts"]:
            results[w["name"]] = _run_one(runner, w)
            continue
        submissions = batching.compose(w["prompts"], batch)
        runs = [_run_one(runner, _submitted(w, sub)) for sub in submissions]
        runner.batch_stats["submissions"] += len(submissions)
        runner.batch_stats["fillers"] += sum(i is None for sub in submissions for i in sub.origin)
        if runs[0] is not None:  # the last stage holds outputs
            per_prompt = [replicas.per_prompt(w["kind"], fields) for fields in runs]
            results[w["name"]] = replicas.joined(w["kind"], batching.restore(per_prompt, submissions, len(w["prompts"])))
        else:
            results[w["name"]] = None
    return results


def submitted_workloads(workloads: list[dict], mode: str) -> list[dict]:
    """The workloads as the batch axis submits them (fillers and all): what the KV cache
    is sized for."""
    from harness.contract import batching

    return [{**w, "prompts": sub.prompts} for w in workloads for sub in batching.compose(w["prompts"], mode)]


def _misordered_share(count: int, dp: int, dp_rank: int) -> list[int]:
    """The dp-merge-misorders fault: a replica's outputs taken for a contiguous block of
    prompts of its share's size, though it served every dp-th."""
    start = sum(len(replicas.share(count, dp, r)) for r in range(dp_rank))
    return list(range(start, start + len(replicas.share(count, dp, dp_rank))))


def merged_replicas(ctx, results: dict, workloads: list[dict]) -> dict:
    """Every replica driver's outputs, merged on the writer in each workload's prompt order
    (the other ranks get {})."""
    import torch.distributed as dist

    from harness.engines.reference import faults

    if ctx.dp == 1:
        return results
    # (dp rank, results) from each replica's driver
    pieces: list[tuple[int, dict] | None] = [None] * ctx.world_size
    dist.all_gather_object(pieces, (ctx.dp_rank, results) if ctx.rank == ctx.driver_rank else None)
    if ctx.rank != ctx.writer_rank:
        return {}
    by_replica = dict(piece for piece in pieces if piece is not None)
    shares = _misordered_share if faults.active(ctx.faults, "dp-merge-misorders") else replicas.share
    return replicas.merge(workloads, by_replica, ctx.dp, shares)


def _run_one(runner, w: dict):
    from harness.contract.runbrief import generate_params

    top_k = min(int(w.get("top_k", 20)), runner.stage.cfg.vocab_size)
    images = w.get("images")
    if w["kind"] == "logprobs":
        return runner.run_logprobs(w["prompts"], top_k, images, bool(w.get("capture_hidden")))
    if w["kind"] == "greedy":
        return runner.run_greedy(w["prompts"], int(w["max_new_tokens"]), top_k, images)
    return runner.run_generate(w["prompts"], *generate_params(w), images)


def _submitted(w: dict, sub) -> dict:
    """The workload as one submission carries it: its prompts, their images (none for a
    filler). No per-layer capture: its rows are those of the golden's first batch, which
    another composition does not have."""
    images = w.get("images")
    return {
        **w,
        "prompts": sub.prompts,
        "capture_hidden": False,
        "images": None if images is None else [None if i is None else images[i] for i in sub.origin],
    }


def assemble_hidden_states(captures: list[list[dict]], num_layers: int, sp: bool) -> dict[str, torch.Tensor]:
    """Every rank's captured stream -> the captured step's sampled token rows at every
    place: embed_states [rows, H] (the embedding's output, before layer 0),
    hidden_states [layers, rows, H] (after each layer), hidden_rows [rows] (their index in
    the batch) and hidden_owner [rows] (the TP rank whose SP shard held each row; 0
    without SP). Without SP every TP rank holds a full replica of the stream, and a fault
    may touch only one, so replica_states [tp, 1 + layers, rows, H] keeps each rank's."""
    import torch

    pieces = [c for rank_captures in captures for c in rank_captures if c["rows"]]
    rows = sorted({r for c in pieces for r in c["rows"]})
    index = {r: i for i, r in enumerate(rows)}
    tp = 1 + max(c["tp_rank"] for c in pieces)
    by_tp = torch.zeros(tp, 1 + num_layers, len(rows), len(pieces[0]["states"][0][0]))
    owner = torch.zeros(len(rows), dtype=torch.int64)
    for c in pieces:
        at = torch.tensor([index[r] for r in c["rows"]])
        by_tp[c["tp_rank"], torch.tensor(c["places"])[:, None], at[None, :]] = torch.tensor(c["states"])
        if sp:
            owner[at] = c["tp_rank"]
    stream = by_tp[owner, :, torch.arange(len(rows))].transpose(0, 1)  # each row as its owner saw it
    fields = {
        "embed_states": stream[0],
        "hidden_states": stream[1:],
        "hidden_rows": torch.tensor(rows, dtype=torch.int64),
        "hidden_owner": owner,
    }
    if tp > 1 and not sp:
        fields["replica_states"] = by_tp
    return fields


def _compile_stats() -> dict:
    from torch._dynamo.utils import counters

    # inductor's persistent caches (harness/engines/compile_cache.py): a warm cache shows
    # hits and no misses, i.e. graphs loaded, not compiled
    return {
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "frames_ok": int(counters["frames"]["ok"]),
        "fxgraph_cache_hit": int(counters["inductor"]["fxgraph_cache_hit"]),
        "fxgraph_cache_miss": int(counters["inductor"]["fxgraph_cache_miss"]),
        "autograd_cache_hit": int(counters["aot_autograd"]["autograd_cache_hit"]),
        "autograd_cache_miss": int(counters["aot_autograd"]["autograd_cache_miss"]),
    }


def rank_threads(cpus: int, axes) -> int:
    """A rank's share of the host's cores: every rank of the run, each DP replica's too."""
    return max(1, cpus // axes.world)


def run(brief) -> None:
    """The whole life of one rank. Callable in-process (world size 1) for tests."""
    import torch
    import torch.distributed as dist

    from harness.contract.phases import PhaseMarks

    phases = PhaseMarks(brief.output_dir)
    phases.mark("start")
    if brief.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # Ranks share the host's cores; without this each rank runs a full pool. Set
        # here, not as OMP_NUM_THREADS in the launch plan: the environment then is the
        # same for runs of every size, and one rank-pool zygote serves them all.
        torch.set_num_threads(rank_threads(os.cpu_count() or 1, brief.axes))
    axes = _axes_run(brief)
    ctx = _join(brief, axes)
    phases.mark("rendezvous")
    workloads = replicas.replica_workloads(brief.workloads, axes.dp, ctx.dp_rank)
    try:
        with torch.inference_mode():
            served = _serve(brief, ctx, workloads, axes, phases)
        served.runner.prompts_served = sum(len(w["prompts"]) for w in workloads)
        served.results = merged_replicas(ctx, served.results, brief.workloads)
        _write_outputs(brief, ctx, served, axes.compile)
        dist.barrier()
        phases.mark("write")
    finally:
        dist.destroy_process_group()


def _axes_run(brief) -> RunAxes:
    """The brief checked (dtype, sp's TP ranks, fault names: each rank fails alike) and its
    axes as this rank runs them: a fault switch may turn sp or compile off."""
    from harness.engines.reference import faults

    if brief.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {brief.dtype!r} (known: {', '.join(DTYPES)})")
    axes = brief.axes
    if axes.sp and axes.tp < 2:
        raise ValueError("sp needs tp >= 2")
    # unknown fault names fail here, on every rank
    faults.parse(brief.faults)
    sp = axes.sp and not faults.active(brief, "sp-switched-off")
    compile_on = axes.compile and not faults.active(brief, "compile-switched-off")
    return replace(axes, sp=sp, compile=compile_on)


def _join(brief, axes: RunAxes):
    """This rank's place in the run's process groups (its ParallelCtx), after the rendezvous."""
    from harness.engines.reference.parallel import init_parallel

    ctx = init_parallel(axes.tp, axes.pp, axes.sp, brief.device, dp=axes.dp)
    ctx.faults = tuple(brief.faults)
    ctx.ep = axes.ep
    return ctx


@dataclass
class Served:
    """What one rank's run of its workloads leaves for its outputs and its evidence."""

    stage: Any
    runner: Any
    results: dict
    timings: dict  # load_s, warmup_s, run_s
    after_warmup: dict  # Dynamo's counters (_compile_stats) once warm, and after the run
    after_run: dict


def _serve(brief, ctx, workloads: list[dict], axes: RunAxes, phases) -> Served:
    """Load this rank's stage, warm it up, run its workloads: each step timed and marked."""
    t0 = time.perf_counter()
    stage = build_stage(brief, ctx)
    runner = _model_runner(brief, ctx, stage, workloads, axes)
    t1 = time.perf_counter()
    phases.mark("load")
    runner.warmup()
    after_warmup = _compile_stats()
    t2 = time.perf_counter()
    phases.mark("warmup")
    results = _run_capturing(runner, ctx, stage, workloads, axes.batch, axes.sp)
    t3 = time.perf_counter()
    after_run = _compile_stats()
    phases.mark("workloads")
    timings = {"load_s": t1 - t0, "warmup_s": t2 - t1, "run_s": t3 - t2}
    return Served(stage, runner, results, timings, after_warmup, after_run)


def _model_runner(brief, ctx, stage, workloads: list[dict], axes: RunAxes):
    import torch

    from harness.engines.reference.pipeline import ModelRunner

    kv_store = str(Path(brief.output_dir).parent / "kv-store") if axes.kvc else None
    dtype = getattr(torch, brief.dtype)
    return ModelRunner(stage, ctx, dtype, submitted_workloads(workloads, axes.batch), axes, brief.faults, kv_store)


def _run_capturing(runner, ctx, stage, workloads: list[dict], batch: str, sp: bool) -> dict:
    """Every workload's results; a workload that captures hidden states gets every rank's
    captures, gathered after it (captures are per workload)."""
    import torch.distributed as dist

    results: dict = {}
    for w in workloads:
        runner.captured = []
        results.update(run_workloads(runner, [w], batch))
        if w.get("capture_hidden"):
            captures: list[Any] = [None] * ctx.world_size  # all_gather_object fills every slot
            dist.all_gather_object(captures, runner.captured)
            if results[w["name"]] is not None:
                results[w["name"]].update(assemble_hidden_states(captures, stage.cfg.num_hidden_layers, sp))
    return results


def _write_outputs(brief, ctx, served: Served, compile_on: bool) -> None:
    """Each rank's stage I/O and evidence of what it applied, gathered so the writer rank
    records every stage's; the writer rank writes the run's outputs."""
    import torch.distributed as dist

    from harness.contract.outputs import EngineOutputs
    from harness.engines.reference import evidence
    from harness.engines.reference.parallel import COLLECTIVES

    runner = served.runner
    gathered: list[Any] = [None] * ctx.world_size
    own = evidence.rank_evidence(ctx, served.stage, served.after_warmup, COLLECTIVES, runner)
    dist.all_gather_object(gathered, (runner.stage_io, own))
    if ctx.rank != ctx.writer_rank:
        return
    out = EngineOutputs()
    for name, fields in served.results.items():
        out.put(name, **fields)
    out.describe_run(
        brief,
        "reference",
        world_size=ctx.world_size,
        timings=served.timings,
        stage_io=[io for io, _ in gathered],
        kv_connector=None if runner.connector is None else {**runner.connector.counts, "wait_steps": runner.connector_wait_steps},
        applied=evidence.summarize(brief.settings, [e for _, e in gathered]),
        compile={
            "enabled": compile_on,
            "after_warmup": served.after_warmup,
            "after_run": served.after_run,
            "graphs_compiled_during_run": served.after_run["unique_graphs"] - served.after_warmup["unique_graphs"],
        },
    )
    out.save(brief.output_dir)


def main() -> None:
    from harness.contract.runbrief import RunBrief

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness.engines.reference.worker BRIEF.json")
    run(RunBrief.load(sys.argv[1]))


if __name__ == "__main__":
    from harness.engines.launch.rankside import run_rank

    # the whole package is the engine: its model's exception (a fault switch's too) is a crash
    run_rank(main, engine_code=("harness.engines.reference",))
