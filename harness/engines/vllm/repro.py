"""The vllm engine's `harness repro` hook: the standalone script of one scenario.

The script is repro_script.py (standard library in the parent, vllm in the children; no
harness import) with its CASE filled in: per setting the vllm.LLM arguments the driver
would pass (driver.plain_kwargs, so the script and the harness cannot drift apart), plus
whether to compile and the SP pass config, which the script builds with vLLM's own
CompilationMode where it runs.
"""

from __future__ import annotations

import pprint
from pathlib import Path

from harness.contract.axes import RunAxes
from harness.contract.batching import compose
from harness.engines.vllm.driver import plain_kwargs, sp_pass_config

TEMPLATE = Path(__file__).with_name("repro_script.py")
PLACEHOLDER = "CASE: dict = {}  # the scenario, written in by `harness repro`\n"
# What the driver's launch plan sets for every run (engines/vllm/__init__.py launch_plan),
# less the harness's own compile cache: the script uses vLLM's default cache.
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}


class CannotReproduce(ValueError):
    """The scenario has something the script cannot do; the message says what."""


def submissions(prompts: list[list[int]], mode: str) -> list[list]:
    """The LLM.generate calls that carry a workload's prompts under the `batch` axis, as
    the driver makes them (harness/contract/batching.py compose, shared with every
    engine): per call, each entry a workload prompt's index or a filler's token ids."""
    return [[i if i is not None else list(p) for p, i in zip(sub.prompts, sub.origin)] for sub in compose(prompts, mode)]


def render(case: dict, sp_support=None) -> str:
    """The script's text. `case`: harness/run/repro.py's engine-neutral description of the
    scenario; `sp_support`: a callable giving the probe's SP answer (asked only for a
    setting with sp on)."""
    settings = {}
    for name, setting in case["settings"].items():
        args = plain_kwargs("model", case["dtype"], case.get("seed", 0), setting, case["workloads"])
        del args["model"], args["tokenizer"]  # the script points them at its checkpoint
        axes = RunAxes.of(setting)
        entry = {"axes": setting, "engine_args": args, "compile": axes.compile, "ranks": axes.tp * axes.pp, "dp": axes.dp}
        mode = axes.batch
        if mode != "all" and axes.dp > 1:
            raise CannotReproduce(
                f"setting {name} has batch={mode} under dp={axes.dp}: the script submits whole "
                "workloads as one batch plan, not a DP rank's share of them"
            )
        if mode != "all":
            entry["submissions"] = {w["name"]: submissions(w["prompts"], mode) for w in case["workloads"]}
        if axes.sp:
            try:
                support = sp_support() if sp_support else {"reason": "the installed vLLM was not asked"}
            except Exception as exc:  # noqa: BLE001 - no vLLM here to ask (EngineUnavailable), or its probe failed
                raise CannotReproduce(
                    f"setting {name} has sp on, and the installed vLLM cannot be asked for its SP switch: {exc}"
                ) from None
            if "reason" in support:
                raise CannotReproduce(f"setting {name} has sp on, which vLLM cannot run here: {support['reason']}")
            entry["pass_config"] = sp_pass_config(support)
        settings[name] = entry
    filled = {**case, "settings": settings, "env": {**ENV, **case.get("env", {})}}
    text = TEMPLATE.read_text()
    if PLACEHOLDER not in text:
        raise RuntimeError(f"{TEMPLATE} has lost its CASE placeholder line")
    header = (
        f"# {case['scenario']}: `{case['failing']}` against the reference `{case['reference']}`, "
        f"written by `harness repro {case['scenario']}`.\n"
    )
    literal = "CASE: dict = " + pprint.pformat(filled, width=120, sort_dicts=False, compact=True) + "\n"
    first, rest = text.split("\n", 1)  # after the #! line
    return first + "\n" + header + rest.replace(PLACEHOLDER, literal)
