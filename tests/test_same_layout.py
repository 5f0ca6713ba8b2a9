"""The same-layout check (harness/run/stages/same_layout.py, run/compare/outputs.py same_layout_checks):
which scenarios get one and what it is held to, on synthetic outputs and the shipped suites.
The real runs (shared layout run, a fault caught by it) are in tests/test_bug_classes.py."""

from __future__ import annotations

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.compare.outputs import SAME_LAYOUT, same_layout_checks, verdict_of_checks
from harness.run.compare.tolerances import tolerance_for
from harness.run.stages.context import RunContext
from tests.kit.handmade import suite_scenarios

TOL = tolerance_for("float32")
WORKLOADS = [{"name": "logits", "kind": "logprobs"}, {"name": "greedy", "kind": "greedy"}]


def outputs(noise: float = 0.0, flip: bool = False, seed: int = 0) -> EngineOutputs:
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(12, 32, generator=g)
    steps = 3 * torch.randn(2, 6, 32, generator=g)
    if noise:
        logits = logits + noise * torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
        steps = steps + noise * torch.randn(steps.shape, generator=torch.Generator().manual_seed(2))
    lp, slp = logits.log_softmax(-1), steps.log_softmax(-1)
    values, ids = lp.topk(8, -1)
    svalues, sids = slp.topk(8, -1)
    tokens = sids[..., 0].clone()
    if flip:  # a decisive different token at step 3 of prompt 1
        tokens[1, 3] = sids[1, 3, 5]
    out = EngineOutputs()
    out.put("logits", topk_ids=ids, topk_logprobs=values, offsets=torch.tensor([0, 5, 12]))
    out.put("greedy", tokens=tokens, topk_ids=sids, topk_logprobs=svalues)
    return out


def test_identical_runs_pass_and_say_bit_identical():
    checks = same_layout_checks(outputs(), "same layout tp2-pp2", outputs(), WORKLOADS, TOL)
    assert [c["name"] for c in checks] == ["logits vs same layout tp2-pp2", "greedy vs same layout tp2-pp2"]
    assert all(c["passed"] and c["kind"] == SAME_LAYOUT and c["metrics"]["bit_identical"] for c in checks)
    assert all(c["summary"].startswith("bit-identical: ") for c in checks)


def test_noise_passes_the_tolerance_but_not_the_exact_rule():
    noisy = outputs(noise=1e-6)
    checks = same_layout_checks(outputs(), "x", noisy, WORKLOADS, TOL)
    assert all(c["passed"] and not c["metrics"]["bit_identical"] for c in checks), checks
    assert all(c["summary"].startswith("not bit-identical: ") for c in checks)
    exact = same_layout_checks(outputs(), "x", noisy, WORKLOADS, TOL, exact=True)
    assert not any(c["passed"] for c in exact)  # a batch-invariant mode promises every bit


def test_a_decisive_token_change_fails_and_the_verdict_says_so_without_blaming_the_golden():
    checks = same_layout_checks(outputs(), "same layout tp2-pp1", outputs(flip=True), WORKLOADS, TOL)
    greedy = checks[1]
    assert not greedy["passed"] and greedy["first_divergence"]["prompt"] == 1 and greedy["first_divergence"]["step"] == 3
    verdict = verdict_of_checks("s/x", checks, TOL)
    assert verdict.verdict == "fail" and "greedy vs same layout tp2-pp1" in verdict.reason
    assert verdict.localization is None  # the golden's layer capture does not locate a same-layout difference


def test_generate_workloads_are_left_to_the_evals():
    checks = same_layout_checks(outputs(), "x", outputs(), WORKLOADS + [{"name": "gsm8k", "kind": "generate"}], TOL)
    assert len(checks) == 2


@pytest.fixture(scope="module")
def shipped():
    return {s.id: s for s in load_scenarios()}


@pytest.mark.parametrize(
    "sid, layout",
    [
        ("llama-spec/tp2-pp2-spec-ngram", "llama-spec/tp2-pp2"),
        ("llama-spec/tp1-pp1-spec-ngram-compile", "llama-spec/tp1-pp1-compile"),
        ("llama-batch/tp2-pp1-batch-mixed", "llama-batch/tp2-pp1"),
        ("llama-features/tp2-pp1-chunked_prefill32-prefix_cache", "llama-features/tp2-pp1"),
        ("vllm-features/arch-qwen3-tp2-pp1-batch-mixed", "vllm-features/arch-qwen3-tp2-pp1"),
        ("vllm-features/arch-llama-tp1-pp2-compile-batch-one-spec-draft", "vllm-features/arch-llama-tp1-pp2-compile"),
        # several features at once: the layout without all of them
        (
            "vllm-features/arch-qwen3-tp1-pp1-compile-prefix_cache-chunked_prefill32-batch-mixed-spec-draft",
            "vllm-features/arch-qwen3-tp1-pp1-compile",
        ),
        ("vllm-features/arch-llama-tp1-pp1-batch-mixed", None),  # tp1 eager: the golden is its layout
        (
            "vllm-features/arch-qwen3-moe-tp2-pp1-compile-prefix_cache-chunked_prefill32-spec-ngram",
            "vllm-features/arch-qwen3-moe-tp2-pp1-compile",
        ),
        # under the batch-invariant mode the layout keeps the mode: the two must agree to the bit
        (
            "vllm-features/arch-qwen3-tp1-pp2-compile-batch-one-batch_invariant",
            "vllm-features/arch-qwen3-tp1-pp2-compile-batch_invariant",
        ),
    ],
)
def test_a_feature_scenario_is_held_to_its_own_layout_without_the_feature(shipped, sid, layout):
    if layout is None:
        assert shipped[sid].same_layout() is None
        return
    assert shipped[sid].same_layout().id == layout
    assert shipped[sid].same_layout().expectations == ()  # the layout run is a reference, not a scenario of the file


@pytest.mark.parametrize(
    "sid",
    [
        "llama-spec/tp1-pp1-spec-ngram",  # its golden is that layout: the golden check is the same-layout check
        "vllm-features/arch-qwen3-moe-tp1-pp1-batch-one-spec-draft",
        "vllm-features/arch-llama-tp2-pp1-batch_invariant",  # no feature of the list: it is the layout
        "llama-tiny/tp2-pp1",  # a suite without same_layout
    ],
)
def test_no_second_run_where_the_golden_or_the_scenario_is_the_layout(shipped, sid):
    assert shipped[sid].same_layout() is None


def test_a_same_layout_axis_outside_the_matrix_is_the_files_error(tmp_path):
    with pytest.raises(ScenarioError, match=r"same_layout names axes not in the matrix: \['spec'\]"):
        suite_scenarios(
            tmp_path,
            "suite: s\nmodel: tiny-llama\nworkloads: [{name: g, kind: greedy}]\n"
            "golden: {tp: 1}\nmatrix: {tp: [1, 2]}\nsame_layout: [spec]\n",
        )


class FakeEngine:
    def root_cause(self, text):
        return None


def test_the_layout_run_is_made_once_a_run_and_shared(shipped, tmp_path, monkeypatch):
    """Two scenarios of one layout (llama-batch tp2-pp1, batch one and mixed): one admit and
    one launch of tp2-pp1; the second reads what the first left."""
    from types import SimpleNamespace

    from harness.engines.launch import LaunchOutcome
    from harness.run.stages import same_layout

    launched = []

    def admit(scenario, settings, directory, opts, gate=None, **kw):
        launched.append((scenario.id, settings))
        return SimpleNamespace(prepared=SimpleNamespace(engine=FakeEngine()))

    def execute(admitted, directory, scenario, opts, lease=None):
        outputs().save(directory / "outputs")
        return LaunchOutcome("ok", 1.0)

    monkeypatch.setattr(same_layout, "admit", admit)
    monkeypatch.setattr(same_layout, "execute", execute)
    ok = LaunchOutcome("ok", 1.0)
    for sid in ("llama-batch/tp2-pp1-batch-one", "llama-batch/tp2-pp1-batch-mixed"):
        layout = same_layout.layout_reference(shipped[sid], ok, tmp_path, RunContext())
        assert isinstance(layout, same_layout.LayoutRun), layout
        assert layout.label == "same layout tp2-pp1" and "greedy.tokens" in layout.outputs.tensors
    assert launched == [("llama-batch/tp2-pp1", {"tp": 2, "pp": 1, "batch": "all", "compile": False})]
    assert (tmp_path / "same-layout" / "llama-batch__tp2-pp1" / "done").exists()
    # nothing to run: the scenario's own launch crashed (that is its verdict), or its golden is its layout
    assert (
        same_layout.layout_reference(
            shipped["llama-batch/tp2-pp1-batch-one"], LaunchOutcome("crash", 1.0), tmp_path, RunContext()
        )
        is None
    )
    assert same_layout.layout_reference(shipped["llama-batch/tp1-pp1-batch-one"], ok, tmp_path, RunContext()) is None
    assert len(launched) == 1


def test_a_layout_run_that_crashes_is_the_scenarios_crash_says_whose_and_is_not_run_again(shipped, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from harness.engines.launch import LaunchOutcome
    from harness.engines.launch.outcome import RankFailure
    from harness.run.stages import same_layout

    monkeypatch.setattr(same_layout, "admit", lambda *a, **k: SimpleNamespace(prepared=SimpleNamespace(engine=FakeEngine())))
    died = RankFailure(1, None, "SIGSEGV", None, "Segmentation fault", "")
    launches = []

    def execute(*args, **kwargs):
        launches.append(1)
        return LaunchOutcome("crash", 1.0, failure=died)

    monkeypatch.setattr(same_layout, "execute", execute)
    for sid in ("llama-spec/tp2-pp2-spec-ngram",) * 2:  # the layout asked for again, as its next scenario would
        verdict = same_layout.layout_reference(shipped[sid], LaunchOutcome("ok", 1.0), tmp_path, RunContext())
        assert isinstance(verdict, Verdict) and verdict.crash is not None, verdict
        assert verdict.verdict == "crash" and verdict.scenario == sid
        assert verdict.reason.startswith(
            "its same-layout reference llama-spec/tp2-pp2 (the layout without spec, run to hold it to): "
        )
        assert verdict.crash["rank"] == 1
    assert launches == [1]  # the crash is remembered for the run: the layout is not launched again
    assert not (tmp_path / "same-layout" / "llama-spec__tp2-pp2" / "done").exists()


@pytest.mark.parametrize(
    "sid, exact",
    [
        ("vllm-features/arch-qwen3-tp1-pp2-compile-batch-one-batch_invariant", True),
        ("vllm-features/arch-llama-tp1-pp2-compile-batch-one-spec-draft", False),
    ],
)
def test_under_a_batch_invariant_mode_the_layout_must_agree_to_the_bit(shipped, tmp_path, monkeypatch, sid, exact):
    """The rule goes with the layout run the judge is given: noise of 1e-6 passes the dtype's
    bound, and fails where the scenario runs the engine's batch-invariant mode."""
    from types import SimpleNamespace

    from harness.engines.launch import LaunchOutcome
    from harness.run.stages import same_layout

    def execute(admitted, directory, scenario, opts, lease=None):
        outputs().save(directory / "outputs")
        return LaunchOutcome("ok", 1.0)

    monkeypatch.setattr(same_layout, "admit", lambda *a, **k: SimpleNamespace(prepared=SimpleNamespace(engine=FakeEngine())))
    monkeypatch.setattr(same_layout, "execute", execute)
    layout = same_layout.layout_reference(shipped[sid], LaunchOutcome("ok", 1.0), tmp_path, RunContext())
    assert isinstance(layout, same_layout.LayoutRun), layout
    assert layout.exact is exact
    checks = layout.checks(outputs(noise=1e-6), WORKLOADS, TOL)
    assert all(c["passed"] is not exact for c in checks), checks
