"""The package's layering: every import runs down the flow, none back up, no cycles.

The package has a few rooms (its top-level folders and the ways in); each room has a
layer, and a room may import only rooms of lower layers. Inside each room the same holds
for its sub-rooms (its modules and folders). An import that runs back up (a part reaching
into what orchestrates it) is how the golden <-> evals cycle and the launcher's import
from the engines package crept in; this test fails on the next one. Imports inside
functions count too: a lazy import is still a dependency.

docs/DESIGN.md's rooms table names the same rooms and sub-rooms (checked below).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness"
DESIGN = PACKAGE.parent / "docs" / "DESIGN.md"

# bottom (0) to top: what a room may import is below it
LAYERS = {
    # what every part shares: the harness's settings, the contract with an engine's ranks,
    # verdicts, exit codes, run directories, where things are, failure signatures
    "contract": 0,
    # the engines (registry, base class, built-ins) and the launcher they start ranks through
    "engines": 1,
    # what a scenario is made of: scenario files, models, prompts, media, engine environments
    "inputs": 2,
    # running and judging scenarios: planning, the stages, the runner, sessions, reports
    "run": 3,
    # the `harness` command
    "cli": 4,
    # the ways in: `python -m harness`, pytest, the Python API for engine developers' tests
    "__main__": 5,
    "pytest_plugin": 5,
    "api": 5,
}

# inside each room, bottom (0) to top; `__init__` is the room's own module
SUBLAYERS = {
    "contract": {
        "__init__": 0,
        # the harness's own settings: every HARNESS_* variable (variables.py, stdlib only: ranks read
        # it in an engine's interpreter) and the project config (project.py)
        "settings": 0,
        "jsonfile": 0,  # reading back the JSON files the harness writes, their shapes checked
        "yamlfile": 0,  # reading a user's YAML file within bounds (scenario files, known-bugs files)
        "exit_codes": 0,
        "provenance": 0,
        "plugins": 0,
        "rundir": 0,
        # torchvision's C-op imports answered when the ops cannot load (stdlib only: `import
        # harness` installs it, the tiny-model builder loads it by path)
        "torchvision_guard": 0,
        # what an engine's ranks import: the run brief, the outputs, the launch plan, the axes
        "axes": 0,
        "batching": 0,
        "phases": 0,
        "plain": 0,
        "storage": 0,
        # the evidence pieces every engine shares, its per-axis summaries keyed by the declared axes
        "applied": 1,
        # this machine's CPU flags, which a known bug's code path may depend on (stdlib only)
        "cpu": 0,
        "roots": 1,
        "verdict": 1,
        "launchplan": 1,
        "outputs": 1,
        "runbrief": 1,
        "replicas": 2,
        # a failure as a scenario file expects it or an engine's known bug describes it
        "expectations": 2,
        "signature": 3,
        "known_bugs": 4,
    },
    "engines": {
        "launch": 0,  # one process group per run: rank pool, crash blame, stall detector, node agent
        "compile_cache": 0,
        "envdir": 0,
        "base": 1,
        "__init__": 2,  # the registry
        "reference": 3,
        "vllm": 3,
        "hf": 3,
    },
    "inputs": {
        "__init__": 0,
        "data": 0,
        "chat": 0,
        "images": 0,
        "zoo": 0,
        "media": 1,
        "models": 1,
        "scenarios": 2,  # scenario files read, checked, bound to the engines and expanded
        "workloads": 3,
        "engine_envs": 3,  # engine environments (--engine-env): asks the engines, installs releases, versions scenarios
    },
    "run": {
        "__init__": 0,
        # what a user asked a run to do (RunConfig): read by planning, the stages, the ways in
        "request": 0,
        "timings": 1,
        "golden": 1,
        "compare": 1,
        "evals": 1,
        "plan": 1,  # what a run runs and where
        "repro": 2,  # `harness repro`: a scenario as a standalone script (below what runs or bisects)
        "stages": 2,  # admit -> execute -> judge
        "runner": 3,
        "raycluster": 4,  # scenarios as Ray work on a cluster: each through the runner on the node Ray chose
        "conformance": 4,  # the kit runs single scenarios through the runner
        "bisect": 4,  # runs one scenario per step through the runner
        "session": 5,
        "report": 6,
        "census": 7,  # `harness archs`: the engine's registry against the suites, their history and the builder
    },
    "cli": {
        "options": 0,  # options several subcommands take, and value types, declared once
        "suites": 0,
        "docs": 0,
        "variables": 0,
        "install": 0,
        "project_init": 0,  # `harness init`: a project's config and first scenario file, checked as any scenario file
        # one module per subcommand
        "archs": 1,
        "bisect": 1,
        "conformance": 1,
        "durations": 1,
        "golden": 1,
        "init": 1,
        "listing": 1,
        "report": 1,
        "repro": 1,
        "run": 2,  # `harness run` ends with `harness report`'s summary
        "__init__": 3,  # the parser: every subcommand
    },
}


def parts_of(path: Path) -> tuple[str, str | None]:
    """(room, sub-room) of a file of the package; the sub-room None for a room that is a module."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0].removesuffix(".py"), (parts[1].removesuffix(".py") if len(parts) > 1 else None)


def target(module: str) -> tuple[str, str | None]:
    """(room, sub-room) an imported module `harness.a.b...` is in: the room's own module
    (`__init__`) where `b` is a name defined there rather than a module or folder of it."""
    names = module.split(".")[1:]
    room = names[0]
    if not (PACKAGE / room).is_dir():
        return room, None
    sub = names[1] if len(names) > 1 else "__init__"
    if not ((PACKAGE / room / sub).is_dir() or (PACKAGE / room / f"{sub}.py").is_file()):
        sub = "__init__"
    return room, sub


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(module imported, line) of every harness import in the file, at any depth; for
    `from harness.x import y`, `harness.x.y`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [(n, node.lineno) for n in names if n.startswith("harness.")]
    return found


def test_every_room_and_sub_room_has_a_layer():
    rooms, subs = set(), set()
    for path in PACKAGE.rglob("*.py"):
        room, sub = parts_of(path)
        rooms.add(room)
        if sub is not None:
            subs.add((room, sub))
    rooms -= {"__init__"}
    assert rooms <= set(LAYERS), f"rooms without a layer in tests/test_layers.py: {sorted(rooms - set(LAYERS))}"
    missing = sorted(f"{r}/{s}" for r, s in subs if s not in SUBLAYERS.get(r, {}))
    assert not missing, f"sub-rooms without a layer in tests/test_layers.py: {missing}"


def test_no_import_runs_back_up_the_flow():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me, my_sub = parts_of(path)
        if me == "__init__":
            continue
        for module, line in imports_of(path):
            other, other_sub = target(module)
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if other != me:
                if other in LAYERS and LAYERS[other] >= LAYERS[me]:
                    upward.append(f"{where}: {me} (layer {LAYERS[me]}) imports {other} (layer {LAYERS[other]})")
            elif my_sub is not None and other_sub is not None and other_sub != my_sub:
                inside = SUBLAYERS.get(me, {})
                if other_sub in inside and my_sub in inside and inside[other_sub] >= inside[my_sub]:
                    upward.append(
                        f"{where}: {me}/{my_sub} (layer {inside[my_sub]}) imports {me}/{other_sub} (layer {inside[other_sub]})"
                    )
    assert not upward, "imports that run back up the flow:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check itself can fail: a lazy import of the runner from a judge module is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from harness.run.runner import run_scenario\n")
    assert imports_of(probe) == [("harness.run.runner.run_scenario", 2)]
    assert target("harness.run.runner.run_scenario") == ("run", "runner")
    assert target("harness.engines.EngineUnavailable") == ("engines", "__init__")
    assert SUBLAYERS["run"]["runner"] > SUBLAYERS["run"]["compare"]


def design_rooms() -> dict[str, set[str]]:
    """The rooms of docs/DESIGN.md's rooms table ({room: its sub-rooms named there})."""
    text = DESIGN.read_text().split("## The rooms of the package", 1)[1].split("\n## ", 1)[0]
    rooms: dict[str, set[str]] = {}
    for row in re.findall(r"^\| `([^`|]+)` \|([^|]*)\|", text, re.M):
        name, subs = row[0].strip("/").removesuffix(".py"), row[1]
        rooms[name] = {s.strip("/").removesuffix(".py") for s in re.findall(r"`([\w.]+/?)`", subs)}
    return rooms


def test_the_design_doc_names_the_rooms_of_this_table():
    """DESIGN.md's rooms table and LAYERS name the same rooms, and each room's row names
    every sub-room of SUBLAYERS (and no other): the table is the one map of the package."""
    rooms = design_rooms()
    assert set(rooms) == set(LAYERS), (
        f"in DESIGN.md, not in LAYERS: {sorted(set(rooms) - set(LAYERS))}; "
        f"in LAYERS, not in DESIGN.md: {sorted(set(LAYERS) - set(rooms))}"
    )
    for room, subs in SUBLAYERS.items():
        named = set(subs) - {"__init__"}
        assert rooms[room] == named, (
            f"DESIGN.md's row for {room}/: not in SUBLAYERS {sorted(rooms[room] - named)}; "
            f"not in the row {sorted(named - rooms[room])}"
        )
