"""Judge: what a launched run left, held to its reference -> Verdict.

A run whose ranks did not all finish is judged by how it ended (ended.py). Otherwise its
outputs are held to the golden's (harness/run/compare/: the numeric checks, where they first
diverge, whether the engine applied the axes under test) and its eval answers to the
golden's per-item results (harness/run/evals/).
"""

from __future__ import annotations

from harness.contract.outputs import EngineOutputs
from harness.contract.verdict import Verdict
from harness.engines.launch import LaunchOutcome
from harness.inputs.scenarios.scenario import Scenario
from harness.run.compare.outputs import judge_outputs
from harness.run.compare.tolerances import tolerance_for
from harness.run.evals import lm
from harness.run.evals.paired import accuracy_checks
from harness.run.stages.admit import Admitted
from harness.run.stages.ended import launch_verdict
from harness.run.stages.same_layout import LayoutRun
from harness.run.timings import Stopwatch


def judge(
    scenario: Scenario,
    admitted: Admitted,
    outcome: LaunchOutcome,
    watch: Stopwatch | None = None,
    layout: LayoutRun | None = None,
) -> Verdict:
    """The verdict of one launch of an admitted setting held to its golden (admitted.reference),
    and to `layout`, its own layout without its speculative or batch feature, where it has one
    (run/stages/same_layout.py). `watch` books the `evals` and `compare` phases and the engine's own start."""
    watch = watch or Stopwatch()
    prepared, reference = admitted.prepared, admitted.reference
    # admit(golden=False): a golden run, or the API's, judged otherwise
    if reference is None:
        raise ValueError(f"{scenario.id} was admitted without its golden: nothing to judge it by")
    verdict = launch_verdict(scenario.id, outcome, prepared.engine)
    if verdict is None:
        outputs = EngineOutputs.load(prepared.brief.output_dir)
        watch.engine_start = (outputs.meta.get("timings") or {}).get("engine_start") or {}
        also = []
        if prepared.evals:
            results = lm.score_evals(prepared.evals, outputs)
            also = accuracy_checks(scenario.suite.evals, reference.evals, results)
            watch.lap("evals")
        tol = tolerance_for(scenario.suite.dtype, scenario.suite.tolerances.model_dump())
        if layout is not None:
            also += layout.checks(outputs, prepared.brief.workloads, tol)
        verdict = judge_outputs(
            scenario.id,
            reference.outputs,
            outputs,
            prepared.brief.workloads,
            tol,
            also=also,
            logs=outcome.log_record(),
            settings=scenario.engine_settings,
            golden_settings=dict(scenario.suite.golden),
        )
        watch.lap("compare")
    verdict.golden = {"dir": str(reference.directory), "version_drift": reference.version_drift}
    verdict.versions = prepared.manifest["versions"]
    return verdict
