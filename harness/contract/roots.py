"""Where the harness finds what it ships, what a project keeps, and what it builds.

Three kinds of place:
- **shipped** with the harness: `DATA_DIR` (vendored GSM8K, eval sets) and the built-in
  suites (`builtin_scenarios()`, `builtin_golden()`): inside the installed package
  (harness/builtin/, copied there when the wheel is built: setup.py), or this source
  checkout's scenarios/ and golden/ when the harness runs from its checkout.
- **the project's**: an engine team keeps its own scenario files, goldens and reports in
  its own repository. The project is found as pytest finds its rootdir: the nearest
  directory, from the working directory upward, holding a `harness.toml` or a
  `pyproject.toml` with a `[tool.harness]` table (`harness init` writes one). Paths in
  it are relative to that directory; flags and $HARNESS_* variables override them.
  Without a config the project root is the working directory. Nothing is ever written
  into the installed package.
- **the cache** ($HARNESS_CACHE, the project's `cache`, else ~/.cache/harness): what is
  built on demand and safe to delete: model checkpoints, digests, engine probes, images.
  Every entry is content-addressed or keyed by what made it, so concurrent runs and
  ranks may share it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.contract.settings.project import PYPROJECT, Project, ProjectConfigError, project
from harness.contract.settings.variables import CACHE, GOLDEN_DIR, REPORTS_DIR

PACKAGE_DIR = Path(__file__).resolve().parents[1]
DATA_DIR = PACKAGE_DIR / "inputs" / "data"
# the wheel's copy of the built-in suites (setup.py)
BUILTIN_DIR = PACKAGE_DIR / "builtin"


def source_checkout() -> Path | None:
    """The source checkout this harness runs from (its scenarios/ beside the package),
    or None for an installed wheel."""
    root = PACKAGE_DIR.parent
    return root if (root / PYPROJECT).is_file() and (root / "scenarios").is_dir() and not BUILTIN_DIR.is_dir() else None


def _shipped(name: str) -> Path:
    checkout = source_checkout()
    return checkout / name if checkout else BUILTIN_DIR / name


def builtin_scenarios() -> Path:
    """The directory of the built-in scenario files (llama-tiny, the vllm suites ...)."""
    return _shipped("scenarios")


def builtin_golden() -> Path:
    """The goldens of the built-in suites."""
    return _shipped("golden")


def shipped_docs() -> dict[str, Path]:
    """`harness docs TOPIC`'s pages: topic (`engines`, `readme`) -> the Markdown file,
    from the checkout or the wheel's copy."""
    pages = {p.stem.lower().replace("_", "-"): p for p in sorted(_shipped("docs").glob("*.md"))}
    readme = _shipped("README.md")
    return {"readme": readme, **pages} if readme.is_file() else pages


def scenario_paths() -> list[Path]:
    """Where `harness list/run` and the pytest plugin read scenario files by default: the
    project's (those that exist), then the built-in suites unless the project turned them
    off; a directory named twice (this checkout is both) is read once."""
    here = project()
    paths = [p for p in here.scenarios if _readable(p, here)]
    if here.builtin_suites:
        paths.append(builtin_scenarios())
    unique: dict[Path, Path] = {}
    for p in paths:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def _readable(path: Path, here: Project) -> bool:
    """Whether a scenarios entry can be read. One the config names must be: a typo there
    would silently drop its suites from every gate (a green run that tested nothing)."""
    try:
        os.stat(path)
        if path.is_dir():
            os.listdir(path)
        return True
    except OSError as exc:
        if not here.scenarios_configured:
            # the default scenarios/ of a project that has none yet
            return False
        raise ProjectConfigError(
            f"{here.config_file}: scenarios entry '{path}' cannot be read: "
            f"{exc.strerror or exc}; fix the path (relative to {here.root})"
        ) from None


def shipped_only(path: Path) -> bool:
    """Whether a scenario file is one of the built-in suites and not also the project's
    own (in this checkout they are both)."""
    shipped = builtin_scenarios().resolve()
    own = {p.resolve() for p in project().scenarios}
    return shipped not in own and Path(path).resolve().is_relative_to(shipped)


# A caller's own golden root for what it runs in this process (the conformance kit keeps
# its goldens in its work dir): it wins over $HARNESS_GOLDEN_DIR and the project's.
# Process-wide (not a ContextVar): the runner's worker threads must see it too.
_golden_override: list[Path] = []


@contextmanager
def goldens_in(path: Path) -> Iterator[None]:
    """Read and write every golden under `path` while the block runs."""
    _golden_override.append(Path(path))
    try:
        yield
    finally:
        _golden_override.pop()


def _overridden_golden_root() -> Path | None:
    return _golden_override[-1] if _golden_override else None


def golden_root() -> Path:
    """Where goldens are written: goldens_in()'s, else $HARNESS_GOLDEN_DIR, else the project's golden dir."""
    return _overridden_golden_root() or GOLDEN_DIR.path() or project().golden


def golden_dir(suite: str) -> Path:
    """Where the golden of `suite` is read from: the project's, else a built-in suite's
    shipped golden (unless $HARNESS_GOLDEN_DIR names the only place to look)."""
    own = golden_root() / suite
    if own.exists() or _overridden_golden_root() or GOLDEN_DIR.raw():
        return own
    shipped = builtin_golden() / suite
    return shipped if shipped.exists() else own


def reports_dir(given: Path | str | None = None) -> Path:
    """Where runs are written: the given directory, else $HARNESS_REPORTS_DIR, else the
    project's reports directory."""
    return Path(given or REPORTS_DIR.raw() or project().reports)


def cache_root() -> Path:
    """The harness's whole cache (models, engine environments, compile artefacts, ...):
    $HARNESS_CACHE, else the project's, else ~/.cache/harness. One part of it: cache_dir."""
    return CACHE.path() or project().cache or Path.home() / ".cache" / "harness"


def cache_dir(kind: str) -> Path:
    """`<cache root>/<kind>`, e.g. cache_dir("models")."""
    return cache_root() / kind


def export_to_children() -> None:
    """Put the project's cache into the environment, so that ranks and engine processes,
    whatever their working directory, share the harness process's cache."""
    CACHE.set_default(str(cache_root()))


def project_path(path: str | Path) -> Path:
    """A path a user wrote in a scenario or option (an interpreter, a checkpoint),
    relative to the project root."""
    given = Path(path).expanduser()
    return given if given.is_absolute() else project().root / given


def import_root() -> Path:
    """A directory on which `import harness` finds this harness and nothing else: what an
    engine's own interpreter (vLLM's venv, transformers') gets on PYTHONPATH. The
    checkout's root is one; site-packages is not (it would shadow the engine's own torch),
    so an installed harness gets a directory in the cache holding a link to the package."""
    checkout = source_checkout()
    if checkout:
        return checkout
    key = hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:12]
    root = cache_dir("import") / key
    link = root / "harness"
    if not link.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".harness.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(PACKAGE_DIR, target_is_directory=True)
        os.replace(tmp, link)
    return root
