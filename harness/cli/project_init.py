"""`harness init`: make a directory (an engine's repository) a harness project.

Writes the project config (a `[tool.harness]` table appended to an existing
pyproject.toml, else a harness.toml) and a first scenario file for the user's own model,
checked by the same rules as any scenario file before it is written. Nothing existing is
overwritten: a config already there is kept, a scenario file already there is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.contract.settings.project import CONFIG_FILE, PYPROJECT, find_config, project
from harness.inputs.scenarios.loading import parse_suite
from harness.inputs.scenarios.scenario import expand
from harness.inputs.scenarios.schema import FEATURE_AXES, ID_PART, ScenarioError

CONFIG_TABLE = """\
# The harness's project config (harness/contract/roots.py of the harness): paths are relative to this file.
scenarios = ["scenarios"]   # scenario files or directories: `harness list`, `harness run`, `pytest`
golden = "golden"           # goldens (`harness golden SUITE`): commit them
reports = "reports"         # run directories: summary.md, report.html, junit.xml
builtin_suites = false      # true: list and run the harness's own suites (llama-tiny, vllm-*) beside these
"""

# Two workloads every engine serves: teacher-forced logprobs (a failure names its layer)
# and greedy decoding through the KV cache.
WORKLOADS = [
    {"name": "logits", "kind": "logprobs", "prompts": "gsm8k-test", "num_prompts": 4, "top_k": 20, "capture_hidden": True},
    {"name": "greedy", "kind": "greedy", "prompts": "gsm8k-test", "num_prompts": 4, "max_new_tokens": 16, "top_k": 20},
]


class InitError(ValueError):
    """What `harness init` cannot do, and what to give it instead."""


@dataclass
class Written:
    # None: the directory already had a config, kept as it was
    config: Path | None
    scenario_file: Path
    suite: str
    gitignore: Path | None = None  # None: every entry was there already
    ignored: tuple[str, ...] = ()  # the entries init added to it
    # axis -> why the installed engine's values of it are not written
    left_out: dict[str, str] | None = None


def model_entry(model: str) -> str | dict:
    """The scenario file's `model:` for what the user typed: an existing checkpoint
    directory, `arch:CLASS` (a tiny random checkpoint), `ORG/NAME@REVISION` (a hub model
    at a pinned revision) or a zoo name."""
    if model.startswith("arch:"):
        return {"arch": model.removeprefix("arch:"), "seed": 0}
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InitError(f"{path} has no config.json: give a Hugging Face checkpoint directory")
        return {"path": str(path.resolve())}
    hub = model.removeprefix("hub:")
    if re.fullmatch(r"[\w.-]+/[\w.-]+(@\S+)?", hub):
        name, _, revision = hub.partition("@")
        if not revision:
            raise InitError(f"pin the hub model's revision, so the golden stays what it was made on: {name}@<commit>")
        return {"hub": name, "revision": revision}
    from harness.inputs import zoo

    if zoo.has_model(model):
        return model
    raise InitError(
        f"'{model}' is no checkpoint directory, arch:CLASS, ORG/NAME@REVISION or zoo model ({', '.join(zoo.model_names())})"
    )


def suite_name(model: str) -> str:
    text = model.removeprefix("arch:").removeprefix("hub:").split("@")[0].rstrip("/")
    name = re.sub(r"[^a-z0-9.-]+", "-", Path(text).name.lower()).strip(".-")
    return name if ID_PART.fullmatch(name) else "my-model"


def suite_raw(suite: str, model: str | dict, engine: str, axes: dict[str, tuple | None]) -> dict:
    """A first scenario file: the golden is the engine unparallelised and eager; the
    matrix is tp and pp at 1 and 2 (as far as the engine allows) and every boolean
    switch the engine declares (compile, sp), but the feature axes (FEATURE_AXES), which
    need a model or workloads made for them."""
    matrix: dict[str, list] = {}
    for axis in ("tp", "pp"):
        allowed = axes.get(axis)
        matrix[axis] = [v for v in (1, 2) if allowed is None or v in allowed]
    for axis, allowed in axes.items():
        if axis not in matrix and axis not in FEATURE_AXES and allowed is not None and set(allowed) == {False, True}:
            matrix[axis] = [False, True]
    raw = {
        "suite": suite,
        "description": f"{suite} on {engine}: parallel settings against the engine unparallelised (written by harness init)",
        "engine": engine,
        "model": model,
        "dtype": "float32",
        "timeout_s": 600,
        "workloads": WORKLOADS,
        "golden": {axis: values[0] for axis, values in matrix.items()},
        "matrix": matrix,
    }
    if len(matrix.get("sp", [])) > 1 and 2 in matrix["tp"]:
        raw["exclude"] = [{"tp": 1, "sp": True}]  # sequence parallelism shards over TP ranks
    return raw


def _gates(raw: dict, where: Path) -> dict:
    """The PR gate: the golden's own setting and each setting that changes one axis from
    it; the nightly: every setting."""
    scenarios = _check(raw, where)
    golden = raw["golden"]
    one_change = [s.name for s in scenarios if sum(s.settings.get(a) != v for a, v in golden.items()) <= 1]
    return {"pr": one_change, "nightly": ["*"]}


def runnable_axes(engine_name: str, say=lambda line: None) -> tuple[dict[str, tuple | None], dict[str, str]]:
    """The axes and values the engine as installed here runs, and why each cut axis was cut
    (vLLM 0.32: no SP pass). An engine that cannot be asked gives every declared value,
    saying so: its scenarios then say what they cannot run when they run."""
    from harness.engines import EngineUnavailable, get_engine

    try:
        engine = get_engine(engine_name)
    except EngineUnavailable:
        raise InitError(f"engine '{engine_name}' cannot be loaded here (`harness list --engines` shows the engines)") from None
    try:
        return engine.installed_axes(say)
    except Exception as exc:  # noqa: BLE001 - not installed yet, or its probe failed: the declaration stands
        say(
            f"the installed {engine_name} could not be asked what it runs ({type(exc).__name__}: {exc}); "
            "writing every value it declares"
        )
        return dict(engine.axes), {}


def init_project(
    directory: Path, model: str, engine: str = "reference", suite: str | None = None, say=lambda line: None
) -> Written:
    if not directory.is_dir():
        raise InitError(f"{directory} is not a directory: create it first (`mkdir -p {directory}`), or give --dir DIR")
    directory = directory.resolve()
    axes, left_out = runnable_axes(engine, say)
    suite = suite or suite_name(model)
    if not ID_PART.fullmatch(suite):
        raise InitError(f"suite name '{suite}': lower-case letters, digits, '.' and '-' (it starts every scenario id)")
    builtin = _builtin_suite_names()
    # the project's file would be refused beside the built-in one of that name
    if suite in builtin:
        raise InitError(
            f"'{suite}' is the name of a built-in suite ({', '.join(sorted(builtin))}); "
            "give another --suite name (nothing was written)"
        )
    scenario_file = scenario_dir(directory) / f"{suite}.yaml"
    if scenario_file.exists():
        raise InitError(f"{scenario_file} exists; give another --suite name (nothing was written)")
    entry = model_entry(model)
    _check_engine_runs(engine, entry, model)
    raw = suite_raw(suite, entry, engine, axes)
    raw["gates"] = _gates(raw, scenario_file)
    _check(raw, scenario_file)
    text = yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=120)
    config = _write_config(directory)
    scenario_file.parent.mkdir(parents=True, exist_ok=True)
    scenario_file.write_text(text)
    added = ignore_entries(directory, engine)
    return Written(config, scenario_file, suite, directory / GITIGNORE if added else None, added, left_out)


def scenario_dir(directory: Path) -> Path:
    """Where the project's config reads scenario files from: the first directory its
    `scenarios` names (an existing one first; made if missing); scenarios/ when the directory
    has no config of its own yet (the one init writes names it). A config that names only
    files is refused: a new file beside them would never be read."""
    found = find_config(directory)
    if not found or found[0].parent != directory:
        return directory / "scenarios"
    here = project(directory)
    existing = [p for p in here.scenarios if p.is_dir()]
    missing = [p for p in here.scenarios if not p.exists() and p.suffix not in (".yaml", ".yml")]
    if existing or missing:
        return (existing or missing)[0]
    named = ", ".join(str(p.relative_to(directory)) if p.is_relative_to(directory) else str(p) for p in here.scenarios)
    raise InitError(
        f"the project config {here.config_file} reads scenario files only from {named or 'nothing'}: a new "
        'file would never be read. Add a directory to its `scenarios` (e.g. "scenarios") and run again '
        "(nothing was written)"
    )


def _check_engine_runs(engine_name: str, entry: str | dict, model: str) -> None:
    """A suite for an engine that cannot run its model would end every scenario
    `unsupported` and pass forever: refused before anything is written, naming the engines
    that can (from what each declares; engines that decide per model are named as such)."""
    from pydantic import TypeAdapter, ValidationError

    from harness.engines import engines_text, get_engine
    from harness.inputs.models import ModelRef, model_type_of

    kinds = get_engine(engine_name).model_types()
    if kinds is None:
        return
    try:
        kind = model_type_of(TypeAdapter(ModelRef).validate_python(entry))
    except ValidationError:
        # the scenario file's own check says what is wrong with the entry
        return
    if kind is not None and kind not in kinds:
        raise InitError(
            f"engine '{engine_name}' runs {', '.join(sorted(kinds))} models, not {kind} ({model}): every "
            f"scenario would be unsupported, a suite that tests nothing. Engines for {kind}: "
            f"{engines_text(kind)}; give --engine NAME (nothing was written)"
        )


def _builtin_suite_names() -> set[str]:
    from harness.contract.roots import builtin_scenarios
    from harness.inputs.scenarios.loading import load_catalog

    return {s.suite.suite for s in load_catalog([builtin_scenarios()]).scenarios}


def _check(raw: dict, where: Path) -> list:
    """The file is held to the rules of any scenario file before it is written: the YAML it
    would hold, read back as the harness reads a scenario file."""
    try:
        return expand(parse_suite(yaml.safe_load(yaml.safe_dump(raw, sort_keys=False)), where), where)
    except ScenarioError as exc:
        raise InitError(f"the scenario file would not be valid: {exc}") from None


GITIGNORE = ".gitignore"


def ignore_entries(directory: Path, engine_name: str) -> tuple[str, ...]:
    """Append to the directory's .gitignore (made if missing) what the harness puts there that
    must not be committed: the reports directory and the engine's own environment (vLLM's
    .venv-vllm, GBs), so that `git add .` takes the goldens and scenario files and nothing
    else. Entries already there (spelled with or without the slashes) are not repeated."""
    wanted = [
        f"/{p.relative_to(directory).as_posix()}/"
        for p in _generated_dirs(directory, engine_name)
        if p.is_relative_to(directory) and p != directory
    ]
    path = directory / GITIGNORE
    text = path.read_text() if path.is_file() else ""
    present = {line.strip().strip("/") for line in text.splitlines()}
    added = tuple(entry for entry in dict.fromkeys(wanted) if entry.strip("/") not in present)
    if added:
        lead = "" if not text or text.endswith("\n") else "\n"
        path.write_text(
            text
            + lead
            + "# written by `harness init`: run output and the engine's environment\n"
            + "".join(f"{entry}\n" for entry in added)
        )
    return added


def _generated_dirs(directory: Path, engine_name: str) -> list[Path]:
    """The reports directory the project's config names, and the environment the engine
    installs itself into (`harness install ENGINE`), when it has one of its own."""
    from harness.engines import get_engine

    env_dir = get_engine(engine_name).env_dir
    return [project(directory).reports.resolve(), *([directory / env_dir] if env_dir else [])]


def _write_config(directory: Path) -> Path | None:
    found = find_config(directory)
    if found and found[0].parent == directory:
        return None
    pyproject = directory / PYPROJECT
    if pyproject.is_file():
        with pyproject.open("a") as f:
            f.write("\n[tool.harness]\n" + CONFIG_TABLE)
        return pyproject
    config = directory / CONFIG_FILE
    config.write_text(CONFIG_TABLE)
    return config
