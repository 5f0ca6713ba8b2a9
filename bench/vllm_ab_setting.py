"""One setting started as vLLM's own tests start it, for bench/vllm_ab.py ("vLLM's way").

    .venv-vllm/bin/python bench/vllm_ab_setting.py BRIEF.json      (PYTHONPATH: the checkout)

A fresh interpreter that imports vLLM, calls `vllm.LLM(...)` once, runs the brief's
workloads and writes EngineOutputs to the brief's output_dir, then shuts vLLM down. Nothing
of the harness's launch path runs here: no rank-pool zygote, no fork of vLLM's engine core
and workers (vLLM's default start method stays: spawn on CPU), no worker extension (evidence,
faults, the AOT cache fix), no harness compile-cache root. What is reused are the driver's
pieces that define what a scenario runs and reads back, so both ways run the same thing: the
`vllm.LLM` arguments (driver.engine_kwargs), the CPU rank binding, and the workload runners
that turn vLLM's outputs into the harness's output contract.

A data-parallel setting (`dp: N`) is run as vLLM's offline data-parallel example runs it:
one process per DP rank, each with the VLLM_DP_* variables and its share of the prompts
(harness/contract/replicas.py), merged by the first; a DP rank that fails stops the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.contract import replicas  # noqa: E402
from harness.contract.outputs import EngineOutputs  # noqa: E402
from harness.contract.runbrief import RunBrief  # noqa: E402
from harness.engines.launch.attempt import free_port  # noqa: E402
from harness.engines.vllm.driver import (  # noqa: E402
    RUNNERS,
    Submitter,
    dp_environment,
    engine_kwargs,
    exchange_replicas,
    shutdown,
)
from harness.engines.vllm.repro_script import cpu_binding  # noqa: E402

# The harness's hook inside vLLM's workers: not part of how vLLM's own tests start vLLM.
HARNESS_ONLY_KWARGS = ("worker_extension_cls",)


def vllm_kwargs(brief: RunBrief) -> dict:
    """The driver's vllm.LLM arguments for this setting, less the harness's own hooks."""
    kwargs = engine_kwargs(brief)
    for key in HARNESS_ONLY_KWARGS:
        kwargs.pop(key, None)
    return kwargs


def run(brief: RunBrief, dp_rank: int = 0) -> None:
    """The setting's outputs in brief.output_dir; under dp, this DP rank's share handed to
    DP rank 0, which merges them (the driver's exchange_replicas: no DP engine stops while
    another still runs)."""
    dp = int(brief.settings.get("dp", 1))
    # vLLM's `auto` binding fails with several ranks on a one-NUMA-node machine: a vLLM CI
    # job on CPU sets this variable too. Set by the caller, it wins.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(dp * brief.axes.tp * brief.axes.pp, os.cpu_count() or 1))
    import vllm

    kwargs = vllm_kwargs(brief)
    llm = vllm.LLM(**kwargs)
    submit = Submitter(str(brief.settings.get("batch", "all")))
    results = {w["name"]: RUNNERS[w["kind"]](llm, w, submit) for w in replicas.replica_workloads(brief.workloads, dp, dp_rank)}
    Path(brief.output_dir).mkdir(parents=True, exist_ok=True)
    parts = exchange_replicas(brief.output_dir, dp, dp_rank, results)
    if dp_rank == 0:
        out = EngineOutputs()
        for name, fields in replicas.merge(brief.workloads, parts, dp).items():
            out.put(name, **fields)
        out.describe_run(
            brief,
            "vllm",
            vllm=vllm.__version__,
            started_by="vLLM's default start method",
            engine_kwargs={k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")},
        )
        out.save(brief.output_dir)
    shutdown(llm)


def run_data_parallel(brief_path: str, dp: int) -> int:
    """One process per DP rank, as vLLM's data-parallel example starts them; the first
    non-zero exit stops the rest (a DP rank left alone would wait for its peer forever)."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, brief_path, str(r)], env={**os.environ, **dp_environment(dp, r, r, "127.0.0.1", port)}
        )
        for r in range(dp)
    ]
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed or all(c == 0 for c in codes):
                return failed[0] if failed else 0
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: python bench/vllm_ab_setting.py BRIEF.json [DP_RANK]")
    brief = RunBrief.load(sys.argv[1])
    dp = int(brief.settings.get("dp", 1))
    if dp > 1 and len(sys.argv) == 2:
        raise SystemExit(run_data_parallel(sys.argv[1], dp))
    run(brief, int(sys.argv[2]) if len(sys.argv) == 3 else 0)


if __name__ == "__main__":
    main()
