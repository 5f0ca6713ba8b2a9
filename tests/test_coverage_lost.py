"""Lost coverage is a regression: a setting no longer tested must not go unnoticed. vLLM
0.32 removed its SP pass and the vllm gate stayed green: the SP scenarios went from `pass`
to `unsupported`, which is as expected, so nobody was told. Now a scenario that passed in
the previous run of its gate and ends `unsupported` is listed first as "coverage lost" in
every report, with the engine's evidence, and the run exits 1, unless an expectation for
the engine version declares the setting unsupported. Real ranks, the real CLI: a gate run,
then the same gate with the reference engine's `sp-switched-off` fault (it accepts
sp=True, runs without SP, and says so in its evidence)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract import exit_codes
from tests.kit import harness_cli, outcomes, run_meta, summary

# One xdist worker runs the whole module (make test's --dist loadgroup): its module-scoped fixture
# (the golden and the first run) is made once, not once on each worker that gets one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("coverage-lost")]

SUITE = """
suite: cov
model: tiny-llama
workloads:
  - {name: logits, kind: logprobs, num_prompts: 1, max_prompt_tokens: 8, top_k: 5}
golden: {tp: 1, pp: 1, sp: false}
matrix: {tp: [2], pp: [1], sp: [true]}
gates: {pr: ["*"]}
"""
DECLARED = """
expected_failures:
  - match: {sp: true}
    verdict: unsupported
    versions: {torch: ">=2.0"}
    message: "did not apply sp=True"
    reason: "this engine build runs without SP (declared)"
"""
SP = "cov/tp2-pp1-sp"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("coverage")
    (root / "scenarios").mkdir()
    (root / "scenarios" / "cov.yaml").write_text(SUITE)
    made = harness_cli(
        "golden",
        "cov",
        "--work-dir",
        str(root / "golden-runs"),
        scenarios=root / "scenarios",
        env={"HARNESS_GOLDEN_DIR": str(root / "golden")},
    )
    assert made.returncode == 0, made.stderr
    return root


def gate(root: Path, reports: Path, run_id: str, *extra: str):
    result = harness_cli(
        "run",
        "--gate",
        "pr",
        "--report-dir",
        str(reports),
        "--run-id",
        run_id,
        *extra,
        scenarios=root / "scenarios",
        env={"HARNESS_GOLDEN_DIR": str(root / "golden")},
    )
    return result, reports / run_id


def test_a_scenario_that_passed_and_is_now_unsupported_is_coverage_lost(project, tmp_path):
    reports = tmp_path / "reports"
    first, first_dir = gate(project, reports, "before")
    assert first.returncode == exit_codes.OK and outcomes(first_dir) == {SP: "pass"}, first.stderr

    lost, lost_dir = gate(project, reports, "after", "--fault", "sp-switched-off")
    assert outcomes(lost_dir) == {SP: "unsupported"}  # as expected on its own: the exit 0 of before
    assert lost.returncode == exit_codes.NOT_AS_EXPECTED, lost.stdout + lost.stderr
    assert f"coverage lost (passed in the previous run of the gate, not tested now): {SP}" in lost.stderr
    assert run_meta(lost_dir)["coverage_lost"] == [SP]
    text = summary(lost_dir)
    assert text.splitlines()[2].startswith("**COVERAGE LOST**")
    section = text.index("**Coverage lost")
    assert section < text.index("| scenario |") and "did not apply sp=True" in text[section:]  # first, with the evidence
    assert f"`{SP}` unsupported (was pass in `before`)" in text
    comment = (lost_dir / "pr-comment.md").read_text()
    assert "**Coverage lost" in comment and "**COVERAGE LOST**" in comment
    html = (lost_dir / "report.html").read_text()
    assert 'id="coverage-lost"' in html and html.index('id="coverage-lost"') < html.index('id="regressions"')
    assert harness_cli("report", str(lost_dir)).returncode == exit_codes.NOT_AS_EXPECTED  # a rebuild judges the same


def test_an_unsupported_the_scenario_file_declares_is_not_coverage_lost(project, tmp_path):
    """As an engine team does once it knows: the gate passed, the new engine version drops
    the setting, and the scenario file now declares it for that version."""
    reports = tmp_path / "reports"
    first, _ = gate(project, reports, "before")
    assert first.returncode == exit_codes.OK, first.stderr
    declared = tmp_path / "declared"
    (declared / "scenarios").mkdir(parents=True)
    (declared / "scenarios" / "cov.yaml").write_text(SUITE + DECLARED)
    (declared / "golden").symlink_to(project / "golden")
    again, again_dir = gate(declared, reports, "after", "--fault", "sp-switched-off")
    assert again.returncode == exit_codes.OK, again.stdout + again.stderr
    assert outcomes(again_dir) == {SP: "unsupported"} and run_meta(again_dir)["coverage_lost"] == []
    assert "**OK**" in summary(again_dir)
