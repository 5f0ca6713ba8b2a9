"""A setting the engine accepted is not proof that it was applied.

vLLM 0.20.2 switched SP off itself for a small hidden size and its SP scenarios passed
as plain TP2. The engine now reports, per axis, what it applied and the evidence; a
tested axis that did not take effect makes the scenario `unsupported` with that
evidence, never `pass`. The reference engine's `sp-switched-off` and
`compile-switched-off` faults accept the setting and run without it, as vLLM did: on
the main before this change both scenarios below ended `pass`.
"""

from __future__ import annotations

import json

import pytest

from harness.contract import rundir
from harness.contract.verdict import Verdict
from harness.engines.reference import evidence
from harness.run.compare.applied import NOT_REPORTED, axes_under_test, evidence_table, unapplied_reason
from tests.kit import harness_cli

GOLDEN = {"tp": 1, "pp": 1, "sp": False, "compile": False}


def test_the_axes_under_test_are_the_ones_that_differ_from_the_golden_setting():
    assert axes_under_test({"tp": 2, "pp": 1, "sp": True, "compile": False}, GOLDEN) == {"tp": 2, "sp": True}
    assert axes_under_test(GOLDEN, GOLDEN) == {}


def test_an_axis_reported_as_not_applied_is_named_with_its_evidence():
    table = evidence_table(
        {"tp": 2, "sp": True},
        GOLDEN,
        {"tp": {"applied": True, "evidence": "2 of 4 heads"}, "sp": {"applied": False, "evidence": "0 token reduce-scatters"}},
    )
    assert table["tp"]["applied"] is True and table["sp"]["applied"] is False
    reason = unapplied_reason(table)
    assert reason is not None
    assert reason.startswith("the engine accepted but did not apply sp=True (0 token reduce-scatters)")
    assert "tp=" not in reason


def test_a_run_of_another_setting_is_unsupported_even_when_its_numbers_fail():
    """vLLM 0.20.2 on CPU ran no SP in its SP scenarios, and its numbers failed (the SP flag
    padded batches and its CPU attention wrote the pad into a live cached row): that run says
    nothing about SP. unsupported, the failed checks kept in the record and the reason."""
    from harness.run.compare.outputs import verdict_of_checks
    from harness.run.compare.tolerances import Tolerance

    checks = [
        {"name": "greedy", "kind": "greedy", "passed": False, "summary": "2/3 identical"},
        {"name": "logits", "kind": "logprobs", "passed": True, "summary": "max diff 0"},
    ]
    table = evidence_table(
        {"tp": 2, "sp": True},
        GOLDEN,
        {"tp": {"applied": True, "evidence": "2 of 4 heads"}, "sp": {"applied": False, "evidence": "compile mode NONE"}},
    )
    v = verdict_of_checks("x", checks, Tolerance(0.01, 0.01, 0.9, 0.01), applied=table)
    assert v.verdict == "unsupported"
    assert v.reason.startswith("the engine accepted but did not apply sp=True (compile mode NONE)")
    assert "its outputs also differ from the reference: greedy: 2/3 identical" in v.reason
    assert v.checks == checks
    table["sp"]["applied"] = True
    assert verdict_of_checks("x", checks, Tolerance(0.01, 0.01, 0.9, 0.01), applied=table).verdict == "fail"


def test_an_engine_that_reports_nothing_is_shown_as_not_reported_and_not_blamed():
    table = evidence_table({"tp": 2}, GOLDEN, None)
    assert table == {"tp": {"value": 2, "applied": None, "evidence": NOT_REPORTED}}
    assert unapplied_reason(table) is None


def _rank(pp_rank, layers, heads, collectives, graphs=0):
    return {
        "rank": 0,
        "tp_rank": 0,
        "pp_rank": pp_rank,
        "layers": layers,
        "heads": heads,
        "total_heads": 4,
        "collectives": collectives,
        "graphs": graphs,
        "cache_hits": 0,
    }


def test_reference_evidence_tells_a_real_sp_run_from_plain_tp():
    settings = {"tp": 2, "pp": 1, "sp": True, "compile": False}
    sp_run = [_rank(0, [0, 1], 2, {"reduce_scatter_tokens": 10, "all_reduce": 2})] * 2
    tp_run = [_rank(0, [0, 1], 2, {"all_reduce": 12})] * 2
    assert evidence.summarize(settings, sp_run)["sp"]["applied"] is True
    assert evidence.summarize(settings, tp_run)["sp"]["applied"] is False
    assert evidence.summarize(settings, tp_run)["tp"]["applied"] is True


def test_reference_evidence_checks_the_layer_split_and_the_head_split():
    pp2 = [_rank(0, [0, 1], 4, {}), _rank(1, [2, 3], 4, {})]
    assert evidence.summarize({"pp": 2}, pp2)["pp"] == {"applied": True, "evidence": "stage 0: layers 0-1; stage 1: layers 2-3"}
    one_stage = [_rank(0, [0, 1, 2, 3], 4, {})]
    assert evidence.summarize({"pp": 2}, one_stage)["pp"]["applied"] is False
    unsplit = [_rank(0, [0, 1], 4, {"all_reduce": 3})] * 2  # tp=2 but every rank holds all heads
    assert evidence.summarize({"tp": 2}, unsplit)["tp"]["applied"] is False
    assert evidence.summarize({"compile": True}, [_rank(0, [0], 4, {}, graphs=0)])["compile"]["applied"] is False


def _worker(pp_rank, layers, sp=None, **compile_counts):
    return {
        "tp_rank": 0,
        "tp_size": 2,
        "pp_rank": pp_rank,
        "pp_size": 2,
        "layers": layers,
        "num_layers": 4,
        "heads": 2,
        "total_heads": 4,
        "compile_counter": {"num_graphs_seen": 0, "num_aot_compiles": 0, **compile_counts},
        "compile_mode": "DYNAMO_TRACE_ONCE",
        "sp_flag": sp,
    }


def test_vllm_evidence_reads_the_workers_layers_heads_counters_and_sp_switch():
    from harness.engines.vllm import evidence as vllm_evidence

    settings = {"tp": 2, "pp": 2, "sp": True, "compile": True}
    workers = [_worker(0, [0, 1], sp=False, num_aot_compiles=1), _worker(1, [2, 3], sp=False, num_aot_compiles=1)]
    applied = vllm_evidence.summarize(settings, workers)
    assert applied["tp"]["applied"] and applied["pp"]["applied"] and applied["compile"]["applied"]
    assert "aot_compiles 1" in applied["compile"]["evidence"]
    # vLLM 0.20.2's SP heuristic: the switch was asked for and is off in the effective config
    assert applied["sp"]["applied"] is False and "switched the SP pass off" in applied["sp"]["evidence"]
    eager = [_worker(0, [0, 1]), _worker(1, [2, 3])]
    assert vllm_evidence.summarize({"compile": True}, eager)["compile"] == {
        "applied": False,
        "evidence": "vLLM's compilation counter on worker 0: every counter 0 (mode DYNAMO_TRACE_ONCE)",
    }


@pytest.mark.e2e
def test_settings_the_engine_skipped_are_unsupported_and_applied_ones_pass(tmp_path):
    ids = ["llama-tiny/tp2-pp1-sp", "llama-tiny/tp1-pp1-compile"]
    common = ["run", *ids, "--report-dir", str(tmp_path)]
    # the skipped run goes first: after a run where these passed, unsupported is lost coverage (exit 1,
    # tests/test_coverage_lost.py); on its own it is not a gate failure, but a run that tested nothing (exit 5)
    skipped = harness_cli(
        *common, "--run-id", "skipped", "--fault", "sp-switched-off", "--fault", "compile-switched-off", timeout=1200
    )
    clean = harness_cli(*common, "--run-id", "clean", timeout=1200)
    assert skipped.returncode == 5 and "NOTHING TESTED" in skipped.stderr, skipped.stdout + skipped.stderr
    assert clean.returncode == 0, clean.stdout + clean.stderr

    def verdict(run, sid):
        return Verdict.load(rundir.verdict_path(tmp_path / run, sid))

    sp, compiled = verdict("clean", ids[0]), verdict("clean", ids[1])
    assert sp.verdict == "pass" and sp.applied["sp"]["applied"] and sp.applied["tp"]["applied"]
    assert compiled.verdict == "pass" and compiled.applied["compile"]["applied"]

    sp, compiled = verdict("skipped", ids[0]), verdict("skipped", ids[1])
    assert sp.verdict == "unsupported", sp.reason
    assert "did not apply sp=True (0 token reduce-scatters" in sp.reason
    assert sp.applied["tp"]["applied"] is True  # TP itself ran
    assert compiled.verdict == "unsupported", compiled.reason
    assert "did not apply compile=True (Dynamo compiled 0 graph(s)" in compiled.reason
    assert json.loads(rundir.verdict_path(tmp_path / "skipped", ids[0]).read_text())["applied"]["sp"]["applied"] is False
