"""The package's layering: every import runs down the flow, none back up, no cycles.

Each room (a top-level module or folder of harness/) has a layer; a room may import
only rooms of lower layers. An import that runs back up (a part reaching into what
orchestrates it) is how the golden <-> evals cycle and the launcher's import from the
engines package crept in; this test fails on the next one. Imports inside functions
count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness"

# bottom (0) to top: what a room may import is below it
LAYERS = {
    # what every part shares: settings, the rank contract, verdicts, run dirs, failure signatures
    "contract": 0,
    "engines": 2,
    # what a scenario is made of: scenario files, models, prompts, media, engine environments
    "inputs": 3,
    # running and judging scenarios: planning, the stages, the runner, sessions, reports
    "run": 4,
    "project_init": 4,  # `harness init`: a project's config and first scenario file, checked as any scenario file
    "cli": 9,
    "pytest_plugin": 10, "__main__": 10,
    # the Python API for engine developers' tests: runs and comparisons through the runner and judge
    "api": 10,
}


def room_of(path: Path) -> str:
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py")


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(room imported, line) of every harness import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if node.module == "harness" else node.module for a in node.names]
        found += [(n.split(".")[1], node.lineno) for n in names if n.startswith("harness.")]
    return found


def test_every_room_has_a_layer():
    rooms = {room_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert rooms <= set(LAYERS), f"rooms without a layer in tests/test_layers.py: {sorted(rooms - set(LAYERS))}"


def test_no_import_runs_back_up_the_flow():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = room_of(path)
        if me == "__init__":
            continue
        for other, line in imports_of(path):
            if other != me and other in LAYERS and LAYERS[other] >= LAYERS[me]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {me} (layer {LAYERS[me]}) "
                              f"imports {other} (layer {LAYERS[other]})")
    assert not upward, "imports that run back up the flow:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check itself can fail: a lazy import of the runner from a judge module is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from harness.run.runner import run_scenario\n")
    assert imports_of(probe) == [("run", 2)]
