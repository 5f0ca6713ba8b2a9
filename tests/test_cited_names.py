"""What the code and the docs cite of the harness resolves: a `harness/...py` path names a file
of the checkout, and a dotted `harness.x.y` in the package names a module and what it defines.
A file moved or a function renamed leaves no comment or page pointing at the old place (a blanket
rename once turned vLLM's `config/parallel.py` into a path of ours that does not exist)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.contract.plugins import ENGINES_GROUP, MODELS_GROUP
from harness.run.report.writers import REPORTS_GROUP
from tests.kit import ROOT

PATH = re.compile(r"(?<![\w/.])(harness/[\w/]+\.py)\b")
# a path from one of the package's rooms, as its comments write them (inputs/models/tiny.py); an
# engine's own file is cited from its package (vllm/config/parallel.py), so the two cannot be confused
ROOM_PATH = re.compile(r"(?<![\w/.])((?:inputs|engines|run|contract|cli)/[\w/]+\.py)\b")
DOTTED = re.compile(r"(?<![\w/.])(harness(?:\.[A-Za-z_]\w*)+)")
# dotted names that are not module paths: entry-point groups, the project file, a module attribute
NOT_MODULES = {ENGINES_GROUP, MODELS_GROUP, REPORTS_GROUP, "harness.toml", "harness.__file__"}


def cited_in(files, pattern):
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                yield match.group(1), f"{path.relative_to(ROOT)}:{number}"


def defines(module: Path, name: str) -> bool:
    source = module.read_text()
    return bool(re.search(rf"^\s*(?:async def|def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b.*\b{name}\b", source, re.M))


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for depth in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:depth])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            return depth == len(parts) or (base / parts[depth]).is_dir() or defines(module, parts[depth])
    return False


def test_every_harness_path_the_code_and_docs_cite_exists():
    files = [*ROOT.joinpath("harness").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]
    missing = [f"{where}: {path}" for path, where in cited_in(files, PATH) if not (ROOT / path).is_file()]
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_every_path_from_a_room_the_package_cites_is_one_of_its_files():
    files = [*ROOT.joinpath("harness").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]
    missing = [f"{where}: {path}" for path, where in cited_in(files, ROOM_PATH) if not (ROOT / "harness" / path).is_file()]
    said = "cited paths that are no file of harness/ (an engine's own: cite it from its package):\n"
    assert not missing, said + "\n".join(missing)


def test_every_dotted_harness_name_the_package_cites_resolves():
    files = list(ROOT.joinpath("harness").rglob("*.py"))
    unresolved = [f"{where}: {name}" for name, where in cited_in(files, DOTTED) if name not in NOT_MODULES and not resolves(name)]
    assert not unresolved, "dotted names that name no module or definition:\n" + "\n".join(unresolved)


def test_the_check_catches_a_moved_module_and_a_renamed_function():
    assert resolves("harness.run.compare.numeric") and resolves("harness.contract.plugins.ENGINES_GROUP")
    assert not resolves("harness.run.compare.no_such_module")
    assert not resolves("harness.contract.plugins.no_such_function")
