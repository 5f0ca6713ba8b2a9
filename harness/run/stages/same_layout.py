"""Same layout: a feature scenario's second reference, its own layout without the feature.

Speculative decoding, batch composition, prefix caching and chunked prefill must not change
what the model computes: a speculative step must give exactly the tokens plain greedy gives,
a prompt's outputs must not depend on its neighbours, a cached or chunked prefill must give a
whole one's logits. The golden is another layout (TP1 eager), so a scenario such
as `llama-spec/tp2-pp2-spec-ngram` is also held to `llama-spec/tp2-pp2` (the suite's
`same_layout` axes at the golden's values), run by the same engine with the same faults.
That run is made once per run directory and shared by every scenario of its layout
(`<run>/same-layout/<id>/`, under a lock: with --jobs two of them may want it at once).

How close is close enough (harness/run/compare/outputs.py, same_layout_checks): the dtype's
tolerance and near-tie rule (docs/TOLERANCES.md), and exact (not one bit, no near-tie
excuse) under the engine's batch-invariant mode, whose promise that is.
"""

from __future__ import annotations

import dataclasses
import fcntl
from pathlib import Path

from harness.contract.axes import RunAxes
from harness.contract.jsonfile import JSONObject
from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import OUTPUTS, scenario_dir_name
from harness.contract.verdict import Verdict
from harness.engines.launch import LaunchOutcome
from harness.inputs.scenarios.scenario import Scenario
from harness.run.compare.outputs import same_layout_checks
from harness.run.compare.tolerances import Tolerance
from harness.run.plan.devices import Lease
from harness.run.stages.admit import admit
from harness.run.stages.context import RunContext
from harness.run.stages.ended import launch_verdict
from harness.run.stages.execute import execute
from harness.run.timings import Stopwatch

SAME_LAYOUT_DIR = "same-layout"
# written when the run's outputs are whole: a later scenario reuses them
DONE = "done"
# the verdict of a layout run that gave no outputs: a later scenario reuses it
ENDED = "ended.json"


@dataclasses.dataclass(frozen=True)
class LayoutRun:
    """The same-layout run's outputs, what it is called in the checks, and whether they
    must agree to the bit (a batch-invariant mode promises that, not only the same tokens)."""

    outputs: EngineOutputs
    # `same layout tp2-pp2`: the checks are `<workload> vs <label>`
    label: str
    exact: bool = False

    def checks(self, candidate: EngineOutputs, workloads: list[JSONObject], tol: Tolerance) -> list[JSONObject]:
        return same_layout_checks(self.outputs, self.label, candidate, workloads, tol, exact=self.exact)


def layout_reference(
    scenario: Scenario,
    outcome: LaunchOutcome,
    run_dir: Path,
    ctx: RunContext,
    lease: Lease | None = None,
    watch: Stopwatch | None = None,
) -> LayoutRun | Verdict | None:
    """The outputs of the scenario's layout without its `same_layout` features, run here
    or reused from an earlier scenario of this run; None when there is nothing to run
    (no such feature set, the golden is that layout, or the scenario's own launch did not
    finish: how it ended is its verdict). A Verdict when that run could not give outputs."""
    layout = scenario.same_layout()
    if layout is None or outcome.status != "ok":
        return None
    watch = watch or Stopwatch()
    directory = Path(run_dir) / SAME_LAYOUT_DIR / scenario_dir_name(layout.id)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        # one run of a layout; the others wait for it and read it
        fcntl.flock(lock, fcntl.LOCK_EX)
        ended = _outputs(layout, directory, ctx, lease)
    watch.lap("same-layout")
    if isinstance(ended, Verdict):
        without = "/".join(scenario.suite.same_layout)
        return Verdict(
            scenario.id,
            ended.verdict,
            f"its same-layout reference {layout.id} (the layout without {without}, run to hold it to): {ended.reason}",
            crash=ended.crash,
            hang=ended.hang,
            error=ended.error,
            logs=ended.logs,
        )
    return LayoutRun(ended, f"same layout {layout.name}", exact=RunAxes.of(scenario.engine_settings).batch_invariant)


def _outputs(layout: Scenario, directory: Path, ctx: RunContext, lease: Lease | None) -> EngineOutputs | Verdict:
    if (directory / DONE).exists():
        return EngineOutputs.load(directory / OUTPUTS)
    # it could not run for an earlier scenario: it would not now
    if (directory / ENDED).exists():
        return Verdict.load(directory / ENDED)
    ended = _run(layout, directory, ctx, lease)
    if ended is not None:
        ended.save(directory / ENDED)
        return ended
    (directory / DONE).write_text(f"{layout.id} ran to its end\n")
    return EngineOutputs.load(directory / OUTPUTS)


def _run(layout: Scenario, directory: Path, ctx: RunContext, lease: Lease | None) -> Verdict | None:
    """The layout's launch; None when it wrote its outputs, else why not (refused, crash, hang)."""
    admitted = admit(layout, layout.engine_settings, directory, ctx, ctx.config.gate, golden=False)
    # refused: the engine's reason, or the input's error
    if isinstance(admitted, Verdict):
        return admitted
    outcome = execute(admitted, directory, layout, ctx, lease)
    return launch_verdict(layout.id, outcome, admitted.prepared.engine)
