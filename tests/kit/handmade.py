"""Run directories made of hand-written verdicts, for the report tests (no ranks launched)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.contract.rundir import scenarios_root, verdict_path
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.scenario import Scenario

TOL = "|dlogprob|<=0.0002, KL<=1e-06, top1>=1, near-tie<=0.001"


def logits_check(max_dlogprob: float, passed: bool = True, per_position: list[float] | None = None) -> dict:
    return {
        "name": "logits",
        "kind": "logprobs",
        "passed": passed,
        "summary": f"max|dlogprob|={max_dlogprob:.2e}",
        "metrics": {"max_abs_dlogprob": max_dlogprob, "positions": 40},
        "tolerance": TOL,
        "first_divergence": None if passed else {"prompt": 1, "position": 7, "dlogprob": max_dlogprob},
        "per_position": per_position if per_position is not None else [max_dlogprob / 2] * 39 + [max_dlogprob],
    }


def settings_of(scenario: str) -> dict:
    axes = scenario.split("/", 1)[1].split("-")
    settings = {"tp": 1, "pp": 1, "sp": False}
    for axis in axes:
        if axis == "sp":
            settings["sp"] = True
        else:
            settings[axis[:2]] = int(axis[2:])
    return settings


def passing(scenario: str, max_dlogprob: float = 1e-5) -> Verdict:
    return Verdict(
        scenario,
        "pass",
        "logits ok",
        settings=settings_of(scenario),
        tolerance=TOL,
        checks=[logits_check(max_dlogprob)],
        reproduce=f"make {scenario}",
        duration_s=3.0,
    )


def failing(scenario: str, max_dlogprob: float = 0.3) -> Verdict:
    return Verdict(
        scenario,
        "fail",
        f"logits: max|dlogprob|={max_dlogprob:.2e}",
        settings=settings_of(scenario),
        tolerance=TOL,
        checks=[logits_check(max_dlogprob, passed=False)],
        reproduce=f"make {scenario}",
        duration_s=3.0,
    )


def crashed(scenario: str, rank: int = 1) -> Verdict:
    return Verdict(
        scenario,
        "crash",
        f"rank {rank} crashed: RuntimeError: injected",
        settings=settings_of(scenario),
        crash={
            "rank": rank,
            "exception": "RuntimeError: injected",
            "traceback": f"Traceback (most recent call last):\nRuntimeError: injected failure on rank {rank}",
            "log": f"logs/rank{rank}.log",
        },
        reproduce=f"harness run {scenario} --fault rank-raise@{rank}",
        duration_s=2.0,
    )


def make_run(base: Path, run_id: str, verdicts: list[Verdict], gate: str | None = "pr", started: float = 1000.0, **meta) -> Path:
    run_dir = Path(base) / run_id
    for v in verdicts:
        v.save(verdict_path(run_dir, v.scenario))
    scenarios_root(run_dir).mkdir(parents=True, exist_ok=True)
    info = {
        "run_id": run_id,
        "gate": gate,
        "started": started,
        "finished": started + 60,
        "scenarios": sorted(v.scenario for v in verdicts),
        "versions": {"torch": "2.13.0", "harness_commit": "abc1234"},
        **meta,
    }
    (run_dir / "run.json").write_text(json.dumps(info))
    return run_dir


# A suite of the reference engine's tiny model with six settings of different sizes (1-8
# devices), for tests of ordering, packing and selection; `gates:` and `changes:` are the
# test's own.
BIG_SUITE = """
suite: big
model: tiny-llama
workloads: [{name: logits, kind: logprobs, num_prompts: 1}]
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2, 4], pp: [1, 2]}
"""


def suite_scenarios(tmp_path: Path, text: str, name: str = "big.yaml") -> list[Scenario]:
    """The scenarios of the suite file `text`, written as tmp_path/name."""
    path = tmp_path / name
    path.write_text(text)
    return load_scenarios([path])
