"""An engine's known bugs (harness/contract/known_bugs.py, harness/engines/vllm/known_bugs.yaml):
declared once, they make the failure they describe `expected-failure` naming the bug in every
suite, stay out of the way of other failures and other releases, and report a pass where
they should show as "fixed?". Fast: verdicts are written here, no engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract.expectations import apply_expectations, version_problem
from harness.contract.known_bugs import KnownBug, KnownBugsError, load_known_bugs, load_releases, unbacked_series
from harness.contract.verdict import Verdict
from harness.engines.vllm import VllmEngine
from harness.inputs.scenarios.loading import load_scenarios, load_suite
from tests.kit.present import present

ROOT = Path(__file__).resolve().parent.parent
SUITES = sorted((ROOT / "scenarios").glob("vllm-*.yaml"))


def vllm(release: str) -> dict:
    return {"engine": "vllm", "vllm": release, "torch": "2.13.0+cpu"}


def eager_pp_crash(scenario: str, release: str = "0.32.0") -> Verdict:
    exception = "AssertionError"
    traceback = (
        '  File ".../vllm/v1/worker/gpu_model_runner.py", line 3174, in sync_and_gather_intermediate_tensors\n'
        "    assert self.intermediate_tensors is not None\nAssertionError"
    )
    return Verdict(
        scenario,
        "crash",
        "rank Worker_PP1 (vLLM worker: PP rank 1) crashed: AssertionError",
        versions=vllm(release),
        crash={"rank": "Worker_PP1", "exception": exception, "traceback": traceback},
    )


def scenario(scenario_id: str):
    suite = scenario_id.split("/")[0]
    (found,) = [s for s in load_scenarios([ROOT / "scenarios" / f"{suite}.yaml"]) if s.id == scenario_id]
    return found


def judged(v: Verdict, scenario_id: str) -> Verdict:
    s = scenario(scenario_id)
    return apply_expectations(v, s.expectations, s.known_bugs)


def test_the_shipped_file_loads_and_every_sighting_is_a_shipped_scenario_in_range():
    bugs = VllmEngine().known_bugs()
    assert len(bugs) >= 7
    ids = {s.id for s in load_scenarios(SUITES)}
    for bug in bugs:
        for seen in bug.seen:
            assert seen.scenario in ids, f"{bug.id}: sighting of unknown scenario {seen.scenario}"
            assert seen.verdict != "pass", f"{bug.id}: a sighting is a run that showed the bug"
            assert version_problem(bug, vllm(seen.release)) is None, f"{bug.id}: seen on {seen.release}, out of its range"


def test_a_known_bug_is_expected_in_every_suite_it_shows_in_naming_it():
    # the eager-PP bug is declared once and no suite repeats it any more
    for sid in ("vllm-llama/tp1-pp2", "vllm-qwen3/tp1-pp2", "vllm-gemma4/tp1-pp2", "vllm-mm-audio/arch-qwen2-audio-tp1-pp2"):
        s = scenario(sid)
        assert not any(x.match == {"pp": 2, "compile": False} for x in s.expectations), sid
        v = judged(eager_pp_crash(sid), sid)
        assert v.verdict == "expected-failure" and v.observed == "crash", (sid, v.reason)
        assert "known bug eager-pp-intermediate-tensors" in v.reason
        assert v.expectation is not None
        assert v.expectation["known_bug"] == "eager-pp-intermediate-tensors" and v.expectation["status"] == "matched"


def test_a_known_bug_does_not_show_outside_its_where_nor_its_releases():
    assert "eager-pp-intermediate-tensors" in {b.id for b in scenario("vllm-llama/tp1-pp2").known_bugs}
    assert "eager-pp-intermediate-tensors" not in {b.id for b in scenario("vllm-llama/tp1-pp2-compile").known_bugs}
    v = judged(eager_pp_crash("vllm-llama/tp1-pp2", "0.20.2"), "vllm-llama/tp1-pp2")  # 0.20.2 runs eager PP
    assert v.verdict == "crash"
    assert (
        "the failure of known bug eager-pp-intermediate-tensors, but it is for vllm<0.33,>=0.27; this ran vllm 0.20.2" in v.reason
    )


def test_a_known_bug_of_a_model_class_shows_in_every_suite_that_runs_it():
    """Qwen3-VL's text-config bug (0.28-0.29) by `where: {model_arch: ...}`: the arch axis's tiny
    Qwen3-VL and vllm-mm-evals' trained checkpoint (a path: its config.json) are one model class;
    another arch of the same suite is not where it shows."""
    bug = "qwen3-vl-text-config-without-architectures"
    crash = {
        "rank": "Worker",
        "exception": "IndexError: list index out of range",
        "traceback": '  File ".../vllm/config/model.py", line 1004, in _get_transformers_backend_cls\nIndexError: list index out of range',
    }
    for sid in ("vllm-mm-archs/arch-qwen3-vl-tp1-pp1", "vllm-mm-evals/tp1-pp1"):
        assert bug in {b.id for b in scenario(sid).known_bugs}, sid
        v = judged(Verdict(sid, "crash", "rank Worker crashed: IndexError", versions=vllm("0.29.0"), crash=crash), sid)
        assert v.verdict == "expected-failure" and f"known bug {bug}" in v.reason, (sid, v.reason)
    assert bug not in {b.id for b in scenario("vllm-mm-archs/arch-gemma3-tp1-pp1").known_bugs}


def test_another_failure_where_a_known_bug_shows_is_news_and_says_how_it_differs():
    v = eager_pp_crash("vllm-llama/tp1-pp2")
    v.crash = {**present(v.crash), "rank": "Worker_PP0"}
    v = judged(v, "vllm-llama/tp1-pp2")
    assert v.verdict == "crash"
    assert "NOT known bug eager-pp-intermediate-tensors" in v.reason and "rank Worker_PP0 crashed" in v.reason


def test_a_pass_where_a_known_bug_should_show_is_reported_fixed_without_failing_the_gate():
    sid = "vllm-llama/tp1-pp2"
    v = judged(Verdict(sid, "pass", "all checks passed", versions=vllm("0.32.0")), sid)
    assert v.verdict == "pass" and v.as_expected
    assert v.expectation is not None
    assert v.expectation["status"] == "fixed" and v.expectation["known_bug"] == "eager-pp-intermediate-tensors"
    assert "did not show where it should on vllm 0.32.0 (torch 2.13.0+cpu): fixed?" in v.reason
    v = judged(Verdict(sid, "pass", "all checks passed", versions=vllm("0.33.0")), sid)  # out of range: nothing said
    assert v.expectation is None


@pytest.mark.parametrize(
    "flags, fixed",
    [
        ({"avx2", "avx512f"}, False),  # the grouped GEMM's path: the bug is there, not met
        ({"avx2"}, True),  # the AVX2 build takes the fallback that meets it
        ({"avx2", "avx512f", "amx_tile"}, True),  # AMX with float32 takes it too
    ],
)
def test_a_pass_on_a_cpu_that_cannot_meet_the_bug_says_so_instead_of_fixed(monkeypatch, flags, fixed):
    """cpu-fused-moe-customop-without-config is on the fused-MoE torch fallback only, which an
    AVX-512 CPU without AMX does not take: a pass there is no news of a fix."""
    monkeypatch.setattr("harness.contract.expectations.cpu_flags", lambda: frozenset(flags))
    sid = "vllm-moe/arch-qwen3-moe-tp2-pp1"
    v = judged(Verdict(sid, "pass", "all checks passed", versions=vllm("0.23.0")), sid)
    assert v.verdict == "pass" and v.as_expected
    if fixed:
        assert v.expectation is not None and v.expectation["status"] == "fixed", v.reason
        assert "known bug cpu-fused-moe-customop-without-config did not show where it should" in v.reason
    else:
        assert v.expectation is None and "fixed?" not in v.reason, v.reason
        assert (
            "known bug cpu-fused-moe-customop-without-config is not met on this CPU: it shows where the CPU has !avx512f or amx_tile"
            in v.reason
        )


def test_the_suite_s_own_expectation_comes_first():
    # vllm-gemma4 keeps its own PP bug (particular to Gemma 4); the eager-PP crash is the known bug's
    sid = "vllm-gemma4/tp1-pp2"
    v = judged(eager_pp_crash(sid), sid)
    assert v.verdict == "expected-failure" and "known bug eager-pp-intermediate-tensors" in v.reason
    assert "does not apply" not in v.reason  # the file's entry for 0.19-0.20 left no words behind


def test_a_bad_known_bugs_file_names_the_entry_and_the_problem(tmp_path):
    bad = tmp_path / "known_bugs.yaml"
    bad.write_text(
        "known_bugs:\n  - id: Bad_Id\n    reason: x\n    engine_version: vllm>=0.1\n    verdict: crash\n"
        "    seen: [{release: 0.1.0, scenario: s/x, verdict: crash}]\n"
    )
    with pytest.raises(KnownBugsError, match=r"known bug Bad_Id \(entry 0\): id: .*lower-case words"):
        load_known_bugs(bad)
    bad.write_text(
        "known_bugs:\n  - id: no-runs\n    reason: x\n    engine_version: vllm>=0.1\n    verdict: crash\n    seen: []\n"
    )
    with pytest.raises(KnownBugsError, match=r"known bug no-runs \(entry 0\): seen"):
        load_known_bugs(bad)
    # the signature's own checks, shared with a scenario file's expectations (contract/signature.py)
    bad.write_text(
        "known_bugs:\n  - id: mixed\n    reason: x\n    engine_version: vllm>=0.1\n    verdict: fail\n"
        "    exception: KeyError\n    seen: [{release: 0.1.0, scenario: s/x, verdict: fail}]\n"
    )
    with pytest.raises(KnownBugsError, match="describe a crash, but verdict is 'fail'"):
        load_known_bugs(bad)
    bad.write_text(
        "known_bugs:\n  - id: cpu\n    reason: x\n    engine_version: vllm>=0.1\n    verdict: crash\n"
        "    cpu: [AVX-512]\n    seen: [{release: 0.1.0, scenario: s/x, verdict: crash}]\n"
    )
    with pytest.raises(
        KnownBugsError, match=r"known bug cpu \(entry 0\): cpu: .*'AVX-512' is not a CPU flag as /proc/cpuinfo spells it"
    ):
        load_known_bugs(bad)


# Release series inside an expectation's range with no run that showed it: measure each (a run
# at a release of that series, added to the entry's `seen`) or narrow the range, then drop it
# here. The test fails on a new gap and on a gap closed without this table following.
UNMEASURED = {
    "cpu-fused-moe-customop-without-config": ["0.21", "0.24"],  # AVX2 only: an AVX-512 machine passes (its comment)
}


def expectation_key(suite: str, x) -> str:
    return f"{suite}: " + ", ".join(f"{k}={v}" for k, v in x.match.items())


def test_every_expectation_range_is_backed_by_runs_in_each_release_series():
    engine = VllmEngine()
    releases = load_releases(engine.known_bugs_file)
    assert "0.10.1" in releases and "0.32.0" in releases
    gaps = {b.id: unbacked_series(b, releases, "vllm") for b in engine.known_bugs()}
    for path in SUITES:
        suite = load_suite(path)
        gaps |= {expectation_key(suite.suite, x): unbacked_series(x, releases, "vllm") for x in suite.expected_failures}
    gaps = {k: v for k, v in gaps.items() if v}
    assert gaps == UNMEASURED, (
        "expectations whose range covers release series no recorded run showed them on (measure with "
        "`harness run ID --engine-env vllm==X.Y.Z` and add the run to `seen`, or narrow the range): "
        + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(gaps.items()))
    )


def test_unbacked_series_counts_only_runs_that_showed_the_bug():
    bug = VllmEngine().known_bugs()[0].model_copy(update={"seen": []})
    releases = ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.32.0", "0.33.0")
    assert unbacked_series(bug, releases, "vllm") == ["0.27", "0.28", "0.32"]
    from harness.contract.signature import Sighting

    shown = [
        Sighting(release="0.27.1", scenario="s/x", verdict="crash"),
        Sighting(release="0.28.0", scenario="s/x", verdict="pass"),
    ]
    assert unbacked_series(bug.model_copy(update={"seen": shown}), releases, "vllm") == ["0.28", "0.32"]


def test_a_bug_this_cpu_cannot_meet_does_not_hide_another_that_may_be_fixed(monkeypatch):
    monkeypatch.setattr("harness.contract.expectations.cpu_flags", lambda: frozenset({"avx512f"}))

    def bug(bug_id: str, **extra) -> KnownBug:
        entry = {"id": bug_id, "reason": "x", "engine_version": "vllm>=0.32", "verdict": "crash", "where": {"pp": 2}}
        return KnownBug.model_validate({**entry, **extra, "seen": [{"release": "0.32.0", "scenario": "s/x", "verdict": "crash"}]})

    bugs = (bug("avx2-only", cpu=["!avx512f"]), bug("any-cpu"))
    v = apply_expectations(Verdict("s/x", "pass", "all checks passed", versions=vllm("0.32.0")), (), bugs)
    assert v.expectation is not None and v.expectation["known_bug"] == "any-cpu" and v.expectation["status"] == "fixed"
