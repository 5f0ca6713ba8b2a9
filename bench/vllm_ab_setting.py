"""One setting started as vLLM's own tests start it, for bench/vllm_ab.py ("vLLM's way").

    .venv-vllm/bin/python bench/vllm_ab_setting.py SPEC.json      (PYTHONPATH: the checkout)

A fresh interpreter that imports vLLM, calls `vllm.LLM(...)` once, runs the spec's
workloads and writes EngineOutputs to the spec's output_dir, then shuts vLLM down. Nothing
of the harness's launch path runs here: no rank-pool zygote, no fork of vLLM's engine core
and workers (vLLM's default start method stays: spawn on CPU), no worker extension (evidence,
faults, the AOT cache fix), no harness compile-cache root. What is reused are the driver's
pieces that define what a scenario runs and reads back, so both ways run the same thing: the
`vllm.LLM` arguments (driver.engine_kwargs), the CPU rank binding, and the workload runners
that turn vLLM's outputs into the harness's output contract.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.contract.outputs import EngineOutputs  # noqa: E402
from harness.contract.runspec import RunSpec  # noqa: E402
from harness.engines.vllm.driver import RUNNERS, Submitter, engine_kwargs, shutdown  # noqa: E402
from harness.engines.vllm.repro_script import cpu_binding  # noqa: E402

# The harness's hook inside vLLM's workers: not part of how vLLM's own tests start vLLM.
HARNESS_ONLY_KWARGS = ("worker_extension_cls",)


def vllm_kwargs(spec: RunSpec) -> dict:
    """The driver's vllm.LLM arguments for this setting, less the harness's own hooks."""
    kwargs = engine_kwargs(spec)
    for key in HARNESS_ONLY_KWARGS:
        kwargs.pop(key, None)
    return kwargs


def run(spec: RunSpec) -> None:
    # vLLM's `auto` binding fails with several ranks on a one-NUMA-node machine: a vLLM CI
    # job on CPU sets this variable too. Set by the caller, it wins.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(spec.tp * spec.pp, os.cpu_count() or 1))
    import vllm

    kwargs = vllm_kwargs(spec)
    llm = vllm.LLM(**kwargs)
    out = EngineOutputs()
    submit = Submitter(str(spec.settings.get("batch", "all")))
    for w in spec.workloads:
        out.put(w["name"], **RUNNERS[w["kind"]](llm, w, submit))
    out.describe_run(spec, "vllm", vllm=vllm.__version__, started_by="vLLM's default start method",
                     engine_kwargs={k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")})
    out.save(spec.output_dir)
    shutdown(llm)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/vllm_ab_setting.py SPEC.json")
    run(RunSpec.load(sys.argv[1]))


if __name__ == "__main__":
    main()
