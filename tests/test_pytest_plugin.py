"""The pytest plugin (harness/pytest_plugin.py), in-process with pytester: a scenario file
collects one item per scenario (gates as markers, largest first), a bad file is a
collection error naming its field, each verdict maps to a pytest outcome (pass, fail
with the verdict's own text, expected-failure -> xfail, unsupported -> skip with the
reason), the plugin's options reach the runner, and the controller writes the report.

The runner is replaced in-process by one that returns the verdict each test asks for,
so these tests start nothing; the one test that runs real ranks is marked e2e.
"""

from __future__ import annotations

import os
import shutil

import pytest

from harness.contract.rundir import scenario_dir_name
from harness.contract.verdict import Verdict
from harness.pytest_plugin import RUN_ID_ENV, ScenarioItem
from tests.kit import ROOT, summary, verdicts
from tests.kit.handmade import TOL, failing, logits_check, make_run, passing

pytest_plugins = ["pytester"]

DEMO = """
suite: demo
model: tiny-llama
workloads:
  - {name: logits, kind: logprobs, num_prompts: 1, max_prompt_tokens: 8, top_k: 5}
golden: {tp: 1, pp: 1}
matrix: {tp: [1, 2], pp: [1, 2]}
gates: {pr: [tp1-pp1, tp2-pp1]}
expected_failures:
  - {match: {tp: 1, pp: 2}, reason: "known bug: pp2 drops the residual"}
"""
PLUGIN = ["-p", "harness.pytest_plugin", "-p", "no:cacheprovider"]


@pytest.fixture(scope="module", autouse=True)
def plugin_imports_loaded(tmp_path_factory):
    """pytester puts sys.modules back as it was after each in-process session, and a C
    extension imported during one (torch by the runner, pyarrow by the history store,
    matplotlib by the HTML report) crashes the interpreter when the next session imports
    it again. Everything the plugin imports lazily is loaded here first, for good."""
    import harness.run.plan.devices
    import harness.run.plan.nodes
    import harness.run.plan.schedule
    import harness.run.runner  # noqa: F401
    from harness.run.report import write_report
    from harness.run.report.history import history_dir

    base = tmp_path_factory.mktemp("report-libraries")
    write_report(make_run(base, "warm-up", [passing("s/tp1-pp1"), failing("s/tp2-pp1")]), history_dir=history_dir(base))


@pytest.fixture
def demo(pytester, monkeypatch):
    """pytester's directory with scenarios/demo.yaml; the outer session's run id left out,
    so the inner session names a run of its own."""
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the plugin under test, not every one installed
    pytester.makeini("[pytest]\n")  # the rootdir: node ids start at scenarios/
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "demo.yaml").write_text(DEMO)
    return pytester


class StandIn:
    """The runner, replaced: each scenario ends with the verdict given for its name; what
    the plugin passed in is kept. With `write_verdicts`, the verdicts go where the runner
    writes them, and the session's end writes the report (a second or two)."""

    def __init__(self):
        self.given: dict[str, Verdict] = {}
        self.calls: list[tuple] = []
        self.write_verdicts = False

    def run_scenario(self, scenario, run_dir, opts, lease=None):
        self.calls.append((scenario.id, run_dir, opts))
        v = self.given[scenario.name]
        v.scenario, v.expected_failure = scenario.id, scenario.expected_failure
        if self.write_verdicts:
            v.save(run_dir / "scenarios" / scenario_dir_name(scenario.id) / "verdict.json")
        return v


@pytest.fixture
def runner(monkeypatch) -> StandIn:
    stand_in = StandIn()
    monkeypatch.setattr("harness.run.runner.run_scenario", stand_in.run_scenario)
    return stand_in


def test_a_scenario_file_collects_one_item_per_scenario_largest_first_with_its_gates(demo, tmp_path):
    recorded = demo.inline_run(*PLUGIN, "--collect-only", f"--harness-report-dir={tmp_path}")
    items = recorded.getcall("pytest_collection_finish").session.items  # as ordered for the run
    assert all(isinstance(i, ScenarioItem) for i in items)
    assert [i.name for i in items] == ["tp2-pp2", "tp1-pp2", "tp2-pp1", "tp1-pp1"]  # 4, 2, 2, 1 devices
    assert {i.name: sorted(m.name for m in i.iter_markers()) for i in items} == {
        "tp1-pp1": ["nightly", "pr"],
        "tp2-pp1": ["nightly", "pr"],
        "tp1-pp2": ["nightly"],
        "tp2-pp2": ["nightly"],
    }
    assert items[0].nodeid == "scenarios/demo.yaml::tp2-pp2"
    assert items[0].reportinfo()[2] == "scenario demo/tp2-pp2"


def test_a_gate_is_a_marker_expression(demo, tmp_path):
    result = demo.runpytest_inprocess(*PLUGIN, "--collect-only", "-q", "-m", "pr", f"--harness-report-dir={tmp_path}")
    result.stdout.fnmatch_lines(["scenarios/demo.yaml::tp2-pp1", "scenarios/demo.yaml::tp1-pp1", "2/4 tests collected*"])


def test_a_bad_scenario_file_is_a_collection_error_naming_file_and_field(demo, tmp_path):
    bad = demo.path / "scenarios" / "bad.yaml"
    bad.write_text(DEMO.replace("suite: demo", "suite: bad").replace("golden: {tp: 1, pp: 1}", "golden: {tp: 1, pp: 1, ep: 4}"))
    result = demo.runpytest_inprocess(*PLUGIN, "--collect-only", f"--harness-report-dir={tmp_path}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting scenarios/bad.yaml*",
            "*bad.yaml: invalid scenario file:",
            "*golden names axes not in the matrix: ?'ep'?*",
        ]
    )


def test_each_verdict_becomes_its_pytest_outcome(demo, runner, tmp_path):
    given = runner.given
    given["tp1-pp1"] = Verdict("", "pass", "logits: max|dlogprob|=1.00e-06")
    given["tp2-pp1"] = Verdict(
        "",
        "fail",
        "first diverging layer 1 (pp stage 0); logits: max|dlogprob|=3.00e-01",
        tolerance=TOL,
        checks=[logits_check(0.3, passed=False)],
        reproduce="make demo/tp2-pp1",
    )
    given["tp1-pp2"] = Verdict("", "expected-failure", "crash as expected: rank 1 crashed: KeyError: 'residual'")
    given["tp2-pp2"] = Verdict("", "unsupported", "needs 4 devices, this machine has 2")
    result = demo.runpytest_inprocess(*PLUGIN, "-rsx", f"--harness-report-dir={tmp_path}")
    assert result.parseoutcomes() == {"passed": 1, "failed": 1, "skipped": 1, "xfailed": 1}
    # a failure shows the verdict's own explanation, not a Python traceback
    result.stdout.fnmatch_lines(
        [
            "*_ scenario demo/tp2-pp1 _*",
            "demo/tp2-pp1: fail - first diverging layer 1 (pp stage 0); logits: max|dlogprob|=3.00e-01",
            f"tolerance: {TOL}",
            "  [[]FAIL[]] logits (logprobs): max|dlogprob|=3.00e-01",
            "reproduce: make demo/tp2-pp1",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] *: unsupported: needs 4 devices, this machine has 2",
            "XFAIL scenarios/demo.yaml::tp1-pp2 - crash as expected: rank 1 crashed: KeyError: 'residual'",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_pass_marked_as_expected_failure_and_a_harness_error_fail_the_session(demo, runner, tmp_path):
    given = runner.given
    given["tp1-pp2"] = Verdict("", "pass", "logits ok")  # marked as a known bug in the file: the fix is noticed
    given["tp1-pp1"] = Verdict("", "error", "no golden for suite 'demo'; regenerate it with `harness golden demo`")
    result = demo.runpytest_inprocess(
        *PLUGIN, "scenarios/demo.yaml::tp1-pp2", "scenarios/demo.yaml::tp1-pp1", f"--harness-report-dir={tmp_path}"
    )
    assert result.parseoutcomes() == {"failed": 2} and result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["demo/tp1-pp2: pass (UNEXPECTED: marked as expected failure) - logits ok"])
    result.stdout.fnmatch_lines(["demo/tp1-pp1: error - no golden for suite 'demo'*harness golden demo*"])


def test_the_plugins_options_reach_the_runner(demo, runner, tmp_path):
    given, calls = runner.given, runner.calls
    runner.write_verdicts = True
    given["tp1-pp1"] = Verdict("", "pass", "ok")
    given["tp2-pp1"] = Verdict("", "pass", "ok")
    result = demo.runpytest_inprocess(
        *PLUGIN,
        "-m",
        "pr",
        "--harness-timeout",
        "7.5",
        "--harness-fault",
        "rank-raise@1",
        "--harness-fault",
        "rank-hang@0",
        "--harness-devices",
        "3",
        "--harness-interaction-trials",
        "0",
        f"--harness-report-dir={tmp_path / 'reports'}",
    )
    assert result.ret == pytest.ExitCode.OK
    assert sorted(sid for sid, _, _ in calls) == ["demo/tp1-pp1", "demo/tp2-pp1"]
    for _, run_dir, ctx in calls:
        config = ctx.config
        assert (config.timeout_s, config.faults, ctx.devices.count, config.gate) == (
            7.5,
            ("rank-raise@1", "rank-hang@0"),
            3,
            "pr",
        )
        assert config.interaction_trials == 0
        assert run_dir.parent == tmp_path / "reports" and run_dir.name.startswith("pytest-")
    (run_dir,) = {r for _, r, _ in calls}  # every item of the session writes into one run directory
    assert set(verdicts(run_dir)) == {"demo/tp1-pp1", "demo/tp2-pp1"} and "**OK**" in summary(run_dir)
    result.stdout.fnmatch_lines([f"harness report: {run_dir / 'summary.md'} and {run_dir / 'report.html'}"])


@pytest.mark.parametrize("option", ["--harness-timeout=-5", "--harness-timeout=0", "--harness-devices=0"])
def test_a_bad_option_value_is_a_usage_error(demo, option):
    result = demo.runpytest_inprocess(*PLUGIN, option, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option.split('=')[0]}*expected*"])


@pytest.mark.e2e
def test_a_real_scenario_runs_in_process(demo, tmp_path, monkeypatch):
    """No stand-in: llama-tiny/tp1-pp1 against its stored golden, one real rank."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )  # the ranks' harness
    shutil.copy(ROOT / "scenarios" / "llama-tiny.yaml", demo.path / "scenarios")
    result = demo.runpytest_inprocess(*PLUGIN, "scenarios/llama-tiny.yaml::tp1-pp1", f"--harness-report-dir={tmp_path}")
    assert result.parseoutcomes() == {"passed": 1}, result.stdout.str()[-3000:]
    (run_dir,) = tmp_path.glob("pytest-*")
    assert verdicts(run_dir)["llama-tiny/tp1-pp1"]["verdict"] == "pass"


def _pr_ids_both_ways(pytester, capsys, tmp_path) -> tuple[list[str], list[str]]:
    """(the ids `harness list --gate pr` selects, the scenarios `pytest -m pr` collects), sorted."""
    from harness.cli import main

    capsys.readouterr()  # what an earlier session printed
    assert main(["list", "--gate", "pr", "--ids-only"]) == 0
    listed = sorted(capsys.readouterr().out.split())
    recorded = pytester.inline_run(*PLUGIN, "--collect-only", "-m", "pr", f"--harness-report-dir={tmp_path}")
    return listed, sorted(i.scenario.id for i in recorded.getcall("pytest_collection_finish").session.items)


def test_harness_run_and_pytest_select_the_same_pr_gate_in_a_project_made_by_init(pytester, monkeypatch, capsys, tmp_path):
    """`harness run --gate pr` ran 31 scenarios in an engine's repository (its 4 and the built-in
    27) while `pytest -m pr` collected its 4: init now leaves the built-in suites out, and a
    project that turns them on gets them both ways."""
    from harness.cli.project_init import init_project

    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.chdir(pytester.path)
    init_project(pytester.path, "tiny-llama", suite="mine")
    listed, collected = _pr_ids_both_ways(pytester, capsys, tmp_path)
    assert listed == collected and {i.split("/")[0] for i in listed} == {"mine"}, (listed, collected)
    config = pytester.path / "harness.toml"
    config.write_text(config.read_text().replace("builtin_suites = false", "builtin_suites = true"))
    listed, collected = _pr_ids_both_ways(pytester, capsys, tmp_path)
    assert listed == collected and {"mine", "llama-tiny"} <= {i.split("/")[0] for i in listed}, (listed, collected)


def test_a_session_whose_scenarios_were_all_unsupported_tested_nothing(demo, runner, tmp_path):
    """`harness run` exits 5 when every scenario ended unsupported; pytest said 0 with 4
    skipped. The session now ends 5 with harness run's words, unless allowed."""
    runner.write_verdicts = True
    for name in ("tp1-pp1", "tp2-pp1", "tp1-pp2", "tp2-pp2"):
        runner.given[name] = Verdict("", "unsupported", "sp: vLLM 0.32 has no sequence-parallel pass")
    result = demo.runpytest_inprocess(*PLUGIN, f"--harness-report-dir={tmp_path / 'reports'}")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(
        ["harness: NOTHING TESTED: all 4 scenarios ended unsupported *exit 5*--harness-allow-empty accepts this"]
    )
    allowed = demo.runpytest_inprocess(*PLUGIN, "--harness-allow-empty", f"--harness-report-dir={tmp_path / 'reports'}")
    assert allowed.ret == pytest.ExitCode.OK and "NOTHING TESTED" not in allowed.stdout.str()
    runner.given["tp1-pp1"] = Verdict("", "pass", "ok")  # one scenario tested: skips are then only skips
    assert demo.runpytest_inprocess(*PLUGIN, f"--harness-report-dir={tmp_path / 'reports'}").ret == pytest.ExitCode.OK
