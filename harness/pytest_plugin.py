"""pytest as a way in: every scenario of a scenario file is one test item.

Registered through the `pytest11` entry point: `pytest` in any project with the harness
installed collects that project's scenario files (its harness config, harness/contract/roots.py).

    pytest scenarios/                      every scenario
    pytest scenarios/ -m pr -n 2           the PR gate, two scenarios at a time (pytest-xdist)
    pytest "scenarios/llama-tiny.yaml::tp2-pp2-sp"

Items run through the same runner as the CLI and write into one run directory
(reports/pytest-<id>/), shared by all xdist workers; each scenario has its own
subdirectory and picks its own free port, so concurrent scenarios never share
files or ports. Each item leases its devices (harness/run/plan/devices.py: lock files shared
by every xdist worker; --harness-devices or $HARNESS_DEVICES slots) and items are
collected largest-first, so xdist starts the big ones first. The controller writes
junit.xml and summary.md at the end.
Gates become markers; an expected failure is an xfail, an unsupported scenario a skip, and
a session whose every scenario was unsupported ends 5 (nothing tested), as `harness run`
does. A project whose config turns the built-in suites on collects them beside its own
when the session collects its scenario directory, so `pytest -m pr` is `harness run --gate pr`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.contract.rundir import new_run_id, run_id_problem, scenarios_root
from harness.contract.settings.variables import CLUSTER, PYTEST_RUN_ID, VariableValueError, check_values
from harness.inputs.scenarios.loading import load_suite
from harness.inputs.scenarios.scenario import expand
from harness.inputs.scenarios.schema import ScenarioError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from _pytest._code.code import TerminalRepr, TracebackStyle

    # pytest-xdist ships no type information: its WorkerController is Any to mypy
    from xdist.workermanage import WorkerController

    from harness.contract.verdict import Verdict
    from harness.inputs.scenarios.scenario import Scenario
    from harness.run.request import RunConfig

RUN_ID_ENV = PYTEST_RUN_ID.name
# what the plugin keeps on the session's config, each read or made once per process
_SCENARIO_PATHS = pytest.StashKey[set[Path]]()  # the project's scenario files and directories
_DURATIONS = pytest.StashKey[dict[str, float]]()  # the controller's recorded durations
_REPORT = pytest.StashKey[Path]()  # the run directory the controller wrote the report in
_NOTHING_TESTED = pytest.StashKey[int]()  # the scenarios of a session that tested nothing


def pytest_addoption(parser: pytest.Parser) -> None:
    """The `--harness-*` options: the fields of RunConfig that declare one (harness/run/request.py),
    with the CLI's value types (a bad value is a usage error)."""
    from dataclasses import fields

    from harness.cli.options import argument_of
    from harness.run.request import RunConfig, option_of

    group = parser.getgroup("harness")
    for f in fields(RunConfig):
        if option_of(f).pytest:
            names, kwargs = argument_of(f.name, pytest=True)
            group.addoption(*names, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    from harness.contract.roots import export_to_children

    try:
        # every HARNESS_* value as set, before any item runs, as the CLI does
        check_values()
    except VariableValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    # the project's cache, read once, for every rank and xdist worker (as the CLI does)
    export_to_children()
    for gate in ("pr", "nightly", "vllm"):
        config.addinivalue_line("markers", f"{gate}: scenario is in the {gate} gate")
    # The controller names the run; xdist workers inherit the variable, so all
    # write into the same run directory.
    if not hasattr(config, "workerinput") and PYTEST_RUN_ID.raw() is None:
        PYTEST_RUN_ID.set(new_run_id(prefix="pytest-"))  # two sessions in one second: two runs
    run_id = PYTEST_RUN_ID.raw() or ""
    problem = run_id_problem(run_id)
    # set from outside: a path would put the run outside --harness-report-dir
    if problem:
        raise pytest.UsageError(f"${RUN_ID_ENV}: {problem}")
    _check_run_options(config)
    _check_cluster(config)
    _collect_builtin_suites(config)


def _collect_builtin_suites(config: pytest.Config) -> None:
    """A project whose config turns the built-in suites on (`builtin_suites = true`) runs them
    in `harness run`; a session that collects the project's scenario files collects them too,
    so that `pytest -m pr` and `harness run --gate pr` select the same scenarios. A session
    aimed elsewhere (an engine's unit tests) is left alone."""
    from harness.contract.roots import builtin_scenarios
    from harness.contract.settings.project import project

    here = project(config.invocation_params.dir)
    builtin = builtin_scenarios().resolve()
    own = [p.resolve() for p in here.scenarios]
    if here.config_file is None or not here.builtin_suites or builtin in own:  # no project config: what pytest is given
        return
    asked = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    if any(a == p or a in p.parents for a in asked for p in own):  # a whole scenarios directory, or above it
        config.args.append(str(builtin))


def _check_cluster(config: pytest.Config) -> None:
    """--harness-cluster (or $HARNESS_CLUSTER) readable and Ray installed, before any item runs."""
    cluster = _run_config(config).cluster
    if cluster is None:
        return
    from harness.run.raycluster.connect import ClusterError, cluster_option

    try:
        cluster_option(cluster)
    except ClusterError as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_run_options(config: pytest.Config) -> None:
    """The session's run options checked once, as a RunConfig checks them for every way in: a
    bad one is a usage error (exit 2) before any item runs, never an `error` per scenario."""
    from harness.run.request import RunOptionError

    try:
        _run_config(config)
    except RunOptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_finish(session: pytest.Session) -> None:
    """--harness-fault switches that no engine of the collected scenarios takes (a typo):
    one usage error, as `harness run --fault` is, not an `error` verdict per scenario. Under
    xdist the controller checks what its first worker collected (a worker's usage error
    would be an internal error of the whole session)."""
    if hasattr(session.config, "workerinput"):
        return
    problem = _faults_problem(session.config, {i.scenario.suite.engine for i in session.items if isinstance(i, ScenarioItem)})
    if problem:
        raise pytest.UsageError(problem)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: WorkerController, ids: Sequence[str]) -> None:
    """xdist: the controller's check of the faults, over the scenario files its worker collected."""
    if not _run_config(node.config).faults:
        return
    root = node.config.rootpath
    files = {root / node_id.split("::")[0] for node_id in ids}
    engines = {_engine_of(f) for f in files if f.suffix in (".yaml", ".yml")}
    problem = _faults_problem(node.config, {e for e in engines if e is not None})
    if problem:
        pytest.exit(f"usage error: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)


def _engine_of(scenario_file: Path) -> str | None:
    try:
        return load_suite(scenario_file).engine
    except (ScenarioError, OSError):  # the worker reports its collection error
        return None


def _faults_problem(config: pytest.Config, engines: set[str]) -> str | None:
    from harness.run.request import unknown_faults

    return unknown_faults(_run_config(config).faults, engines, _option("faults"))


def _run_dir(config: pytest.Config) -> Path:
    return _run_config(config).report_dir / (PYTEST_RUN_ID.raw() or "")


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> ScenarioFile | None:
    if file_path.suffix in (".yaml", ".yml") and _is_scenario_file(parent.config, file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def _is_scenario_file(config: pytest.Config, path: Path) -> bool:
    """A YAML file in a directory named scenarios/, or among the scenario files and
    directories of the project's harness config (harness/contract/roots.py). The plugin is loaded
    in every pytest session of an environment the harness is installed in, so it takes
    no other YAML file for a scenario file."""
    if path.parent.name == "scenarios":
        return True
    if _SCENARIO_PATHS not in config.stash:
        from harness.contract.settings.project import project

        config.stash[_SCENARIO_PATHS] = {p.resolve() for p in project(config.invocation_params.dir).scenarios}
    chosen = config.stash[_SCENARIO_PATHS]
    return path.resolve() in chosen or path.parent.resolve() in chosen


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[ScenarioItem]:
        try:
            scenarios = expand(load_suite(self.path), self.path)
        except ScenarioError as exc:
            raise self.CollectError(str(exc)) from None
        for scenario in scenarios:
            item = ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)
            for gate in sorted(scenario.gates):
                item.add_marker(gate)
            yield item


class ScenarioFailed(Exception):
    pass


class ScenarioItem(pytest.Item):
    # kwargs: pytest's node arguments (name, parent, ...), as from_parent passes them
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario

    def runtest(self) -> None:
        from harness.run.plan.devices import DevicePool, configured_count
        from harness.run.plan.nodes import cluster_from_env
        from harness.run.runner import RunContext, run_scenario

        config = _run_config(self.config)
        ctx = RunContext(
            config, DevicePool(configured_count(config.device, config.devices), config.device), cluster_from_env(None)
        )
        # Ray places it; the connection serves the session's other items too
        if config.cluster:
            from harness.run.raycluster.connect import parse_cluster
            from harness.run.raycluster.driver import run_one_on_ray

            verdict = run_one_on_ray(self.scenario, _run_dir(self.config), ctx, parse_cluster(config.cluster))
        else:
            verdict = run_scenario(self.scenario, _run_dir(self.config), ctx)
        self.user_properties.append(("verdict", verdict.verdict))
        if verdict.verdict == "unsupported":
            pytest.skip(f"unsupported: {verdict.reason}")
        if verdict.verdict == "expected-failure":
            pytest.xfail(verdict.reason)
        if not verdict.as_expected:
            raise ScenarioFailed(verdict)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFailed):
            failed: Verdict = excinfo.value.args[0]
            return failed.explain()
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"scenario {self.scenario.id}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scenario items largest-first (device-seconds, from past runs); other items keep
    their places."""
    from harness.run.plan.schedule import costs, largest_first

    slots = [i for i, item in enumerate(items) if isinstance(item, ScenarioItem)]
    if len(slots) < 2:
        return
    in_slots = [item for item in items if isinstance(item, ScenarioItem)]  # the items of `slots`, in order
    scenario_items = {item.scenario.id: item for item in in_slots}
    scenarios = [item.scenario for item in in_slots]
    ordered = largest_first(scenarios, costs(scenarios, _durations(config)))
    for i, scenario in zip(slots, ordered):
        items[i] = scenario_items[scenario.id]


def _durations(config: pytest.Config) -> dict[str, float]:
    """Read once, by the controller: xdist workers must collect in the same order, so
    they take the controller's numbers (a run finishing meanwhile could change them)."""
    from harness.run.plan.schedule import recorded_durations

    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None and "harness_durations" in worker_input:
        given: dict[str, float] = worker_input["harness_durations"]
        return given
    if _DURATIONS not in config.stash:
        config.stash[_DURATIONS] = recorded_durations(_run_dir(config).parent)
    return config.stash[_DURATIONS]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerController) -> None:
    """xdist: hand the controller's durations to each worker."""
    node.workerinput["harness_durations"] = _durations(node.config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
    if hasattr(session.config, "workerinput"):
        # workers: the controller writes the report once
        return
    run_dir = _run_dir(session.config)
    if scenarios_root(run_dir).exists():
        from harness.run.report import write_report
        from harness.run.report.history import history_dir

        gate = _gate(session.config)
        allow_empty = _run_config(session.config).allow_empty
        # `-m pr` is the PR gate: its history and comparison are the CLI's `--gate pr` ones.
        meta = write_report(
            run_dir,
            {"run_id": run_dir.name, "via": "pytest", "gate": gate, "allow_empty": allow_empty},
            history_dir(run_dir.parent),
        )
        session.config.stash[_REPORT] = run_dir
        if meta.get("nothing_tested") and not allow_empty and session.exitstatus == pytest.ExitCode.OK:
            # every harness item skipped as unsupported: `harness run`'s exit 5, never a green session
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
            session.config.stash[_NOTHING_TESTED] = sum(meta["counts"].values())


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int | pytest.ExitCode, config: pytest.Config
) -> None:
    run_dir = config.stash.get(_REPORT, None)
    if run_dir:
        terminalreporter.write_line(f"harness report: {run_dir / 'summary.md'} and {run_dir / 'report.html'}")
    nothing = config.stash.get(_NOTHING_TESTED, 0)
    if nothing:
        from harness.contract.exit_codes import nothing_tested_text

        terminalreporter.write_line(f"harness: {nothing_tested_text(nothing, _option('allow_empty'))}", red=True)


def _run_config(config: pytest.Config) -> RunConfig:
    """The session's options as a RunConfig: its --harness-* options, the gate of its `-m`,
    the cluster of $HARNESS_CLUSTER when not given (the others' defaults are RunConfig's own)."""
    from harness.run.request import RunConfig

    return RunConfig.from_pytest(
        config.getoption,
        gate=_gate(config),
        cluster=config.getoption(_option("cluster")) or CLUSTER.raw() or None,
    )


def _option(name: str) -> str:
    """The plugin's option of the RunConfig field `name` (faults: --harness-fault), as
    its declaration names it: the name a message or a lookup uses, never written out again."""
    from dataclasses import fields

    from harness.run.request import RunConfig, option_of

    flag = next(option_of(f).pytest for f in fields(RunConfig) if f.name == name)
    assert flag, f"RunConfig.{name} has no pytest option"
    return flag


def _gate(config: pytest.Config) -> str | None:
    """`-m pr` is the PR gate (eval slices, history, comparison), as the CLI's `--gate pr`."""
    expr: str = config.getoption("markexpr")
    return expr if expr in ("pr", "nightly", "vllm") else None
