"""vllm-mm-evals/tp1-pp1-compile on the releases it was run on (docs/ENGINE_VERSIONS.md):
the torch 2.10-2.11 Inductor CppCompileError expectation covers the releases it was seen
on (0.19.1, 0.20.2) and stays out of the way where the graph compiles: 0.22.1's numeric
failure is a plain `fail`, 0.23.0's pass a plain `pass` (before, `NOT the expected failure`
and `UNEXPECTED`). Fast: the verdicts are written here as the runs wrote them."""

from __future__ import annotations

from harness.contract.expectations import apply_expectations
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from tests.kit import ROOT

EVALS = "vllm-mm-evals/tp1-pp1-compile"
# the 0.22.1 run of 2026-11-28 (harness run ... --engine-env vllm==0.22.1, an empty model cache, no .venv-vllm)
GEO_DROP = (
    "eval:geo: geo3k-synth: flexible-extract 0.055 vs golden 0.680 on 200 items, delta -0.625 [95% CI -0.686, "
    "-0.551], 125 flipped to wrong / 0 to right, McNemar p=4.7e-38"
)


def judged(verdict: str, release: str, reason: str = "", crash: dict | None = None) -> Verdict:
    (scenario,) = [s for s in load_scenarios([ROOT / "scenarios" / "vllm-mm-evals.yaml"]) if s.id == EVALS]
    versions = {"engine": "vllm", "vllm": release, "torch": "2.11.0+cu130", "transformers": "5.5.4", "python": "3.11.7"}
    v = Verdict(f"{EVALS}@vllm-{release}", verdict, reason, versions=versions, crash=crash)
    return apply_expectations(v, scenario.expectations, scenario.known_bugs)


def test_the_compile_error_is_expected_where_it_was_seen_and_not_beyond():
    exception = "torch._inductor.exc.InductorError: CppCompileError: C++ compile error"
    traceback = (
        "c3gfc.main.cpp:147:211: error: no matching function for call to "
        "'at::vec::CPU_CAPABILITY::VecMask<long int, 2>::VecMask(int&)'\n" + exception
    )
    crash = {
        "rank": "EngineCore (vLLM process: pid 1)",
        "exitcode": 1,
        "signal": None,
        "exception": exception,
        "traceback": traceback,
        "log": "rank0.log",
    }
    for release in ("0.19.1", "0.20.2"):
        assert judged("crash", release, f"rank EngineCore crashed: {exception}", dict(crash)).verdict == "expected-failure"
    failed = judged("fail", "0.22.1", GEO_DROP)
    assert failed.verdict == "fail" and "NOT the expected failure" not in failed.reason, failed.reason
    assert (failed.expectation or {}).get("status", "not-applicable") == "not-applicable", failed.expectation
    passed = judged("pass", "0.23.0")
    assert passed.verdict == "pass" and (passed.expectation or {}).get("status", "not-applicable") == "not-applicable"
