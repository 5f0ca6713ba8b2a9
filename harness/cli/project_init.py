"""`harness init`: make a directory (an engine's repository) a harness project.

Writes the project config (a `[tool.harness]` table appended to an existing
pyproject.toml where that stays valid TOML, else a harness.toml), a first scenario file for
the user's own model, checked by the same rules as any scenario file, and .gitignore entries.
Nothing existing is overwritten: a config already there is kept, a scenario file already
there is an error. Every write is planned and checked before the first is made, and a
failure on the way puts back what was written: a project is made whole or not at all.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.contract.axes import AXES, LAYOUT_AXES, RULES, SIZE
from harness.contract.jsonfile import JSONObject
from harness.contract.settings.project import CONFIG_FILE, PYPROJECT, find_config, project
from harness.inputs.scenarios.loading import parse_suite
from harness.inputs.scenarios.scenario import Scenario, expand
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
    # why the config is a harness.toml beside a pyproject.toml that could not take the table
    config_why: str | None = None


def model_entry(model: str) -> str | JSONObject:
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


def suite_raw(suite: str, model: str | JSONObject, engine: str, axes: dict[str, tuple[object, ...] | None]) -> JSONObject:
    """A first scenario file: the golden is the engine unparallelised and eager; the
    matrix is tp and pp at 1 and 2 (as far as the engine allows) and every boolean
    switch the engine declares (compile, sp), but the feature axes (FEATURE_AXES), which
    need a model or workloads made for them."""
    matrix: dict[str, list[object]] = {}
    for axis in (a for a in LAYOUT_AXES if AXES[a].kind == SIZE):
        allowed = axes.get(axis)
        matrix[axis] = [v for v in (1, 2) if allowed is None or v in allowed]
    for axis, allowed in axes.items():
        if axis not in matrix and axis not in FEATURE_AXES and allowed is not None and set(allowed) == {False, True}:
            matrix[axis] = [False, True]
    raw: JSONObject = {
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
    exclude = rule_exclusions(matrix)
    if exclude:
        raw["exclude"] = exclude  # sequence parallelism shards over TP ranks: sp needs tp >= 2
    return raw


def rule_exclusions(matrix: dict[str, list[object]]) -> list[dict[str, object]]:
    """The settings of `matrix` a rule between axes (RULES) forbids, as `exclude` selectors;
    a rule none of whose settings could run is left to refuse its scenarios with its reason."""
    selectors = []
    for rule in RULES:
        if not all(axis in matrix for axis in rule.axes):
            continue
        settings = [dict(zip(rule.axes, values)) for values in itertools.product(*(matrix[a] for a in rule.axes))]
        if any(rule.when.holds(s) and not rule.broken(s) for s in settings):
            selectors += [s for s in settings if rule.broken(s)]
    return selectors


def _gates(raw: JSONObject, where: Path) -> dict[str, list[str]]:
    """The PR gate: the golden's own setting and each setting that changes one axis from
    it; the nightly: every setting."""
    scenarios = _check(raw, where)
    golden = raw["golden"]
    one_change = [s.name for s in scenarios if sum(s.settings.get(a) != v for a, v in golden.items()) <= 1]
    return {"pr": one_change, "nightly": ["*"]}


def runnable_axes(
    engine_name: str, say: Callable[[str], object] = lambda line: None
) -> tuple[dict[str, tuple[object, ...] | None], dict[str, str]]:
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
    directory: Path,
    model: str,
    engine: str = "reference",
    suite: str | None = None,
    say: Callable[[str], object] = lambda line: None,
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
    # every write planned and checked before the first is made: never half a project
    config, config_why, reports = _plan_config(directory)
    ignore, added = _plan_gitignore(directory, engine, reports)
    _write_all([_Write(scenario_file, text.encode()), *([ignore] if ignore else []), *([config] if config else [])])
    return Written(
        config.path if config else None,
        scenario_file,
        suite,
        ignore.path if ignore else None,
        added,
        left_out,
        config_why,
    )


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


def _check_engine_runs(engine_name: str, entry: str | JSONObject, model: str) -> None:
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


def _check(raw: JSONObject, where: Path) -> list[Scenario]:
    """The file is held to the rules of any scenario file before it is written: the YAML it
    would hold, read back as the harness reads a scenario file."""
    try:
        return expand(parse_suite(yaml.safe_load(yaml.safe_dump(raw, sort_keys=False)), where), where)
    except ScenarioError as exc:
        raise InitError(f"the scenario file would not be valid: {exc}") from None


GITIGNORE = ".gitignore"
IGNORE_HEADER = "# written by `harness init`: run output and the engine's environment"


@dataclass(frozen=True)
class _Write:
    """One file init writes: `content` as a new file, or (`before` not None) the existing
    file's bytes with an addition at its end, appended in place (its owner, mode and links kept)."""

    path: Path
    content: bytes
    before: bytes | None = None
    # what the user can do instead where the file cannot be written
    by_hand: str = ""


def _plan_config(directory: Path) -> tuple[_Write | None, str | None, Path]:
    """The project config init writes (None: the directory has its own, kept as it is), why it
    is a harness.toml beside a pyproject.toml, and the reports directory the project will have.

    A [tool.harness] table is appended to a pyproject.toml only where the result is valid TOML
    that reads as the file did plus the table; elsewhere (an inline `tool = {...}`, which TOML
    lets no [tool.X] section extend; a read-only file) the config is a harness.toml, the other
    form a project config takes, and the user's pyproject.toml stays byte for byte."""
    found = find_config(directory)
    if found and found[0].parent == directory:
        return None, None, project(directory).reports
    reports = directory / tomllib.loads(CONFIG_TABLE)["reports"]
    own = _Write(directory / CONFIG_FILE, CONFIG_TABLE.encode())
    pyproject = directory / PYPROJECT
    if not pyproject.is_file():
        return own, None, reports
    before = pyproject.read_bytes()
    text = before.decode("utf-8", "surrogateescape")
    appended = _appended(text, ["", "[tool.harness]", *CONFIG_TABLE.splitlines()])
    why = "it is read-only" if _read_only(pyproject) else _why_not_appendable(text, appended)
    if why is None:
        return _Write(pyproject, appended.encode("utf-8", "surrogateescape"), before), None, reports
    return (
        own,
        f"{PYPROJECT} is left as it is: {why}; {CONFIG_FILE} is read before it "
        "(for one file, move its keys into that `tool` as `harness = {...}`)",
        reports,
    )


def _why_not_appendable(text: str, appended: str) -> str | None:
    """Why `appended` (a pyproject.toml with [tool.harness] after it) would be no valid TOML,
    or would read as other than the file's data plus that table; None: it is both."""
    try:
        data = tomllib.loads(appended)
    except (tomllib.TOMLDecodeError, UnicodeError) as exc:
        if re.search(r"""(?m)^[ \t]*(tool|"tool"|'tool')[ \t]*=[ \t]*\{""", text):
            return "its `tool` is an inline table (`tool = {...}`), which no [tool.harness] section may extend"
        return f"a [tool.harness] table appended to it would not be valid TOML ({exc})"
    expected = tomllib.loads(text)
    expected.setdefault("tool", {})["harness"] = tomllib.loads(CONFIG_TABLE)
    return None if data == expected else "a [tool.harness] table appended to it would change what the file says"


def _plan_gitignore(directory: Path, engine_name: str, reports: Path) -> tuple[_Write | None, tuple[str, ...]]:
    """What to append to the directory's .gitignore (made if missing), and the entries: what the
    harness puts there that must not be committed, the reports directory and the engine's own
    environment (vLLM's .venv-vllm, GBs), so that `git add .` takes the goldens and scenario
    files and nothing else. Entries already there (spelled with or without the slashes) are not
    repeated; None: every one is there."""
    wanted = [
        f"/{p.relative_to(directory).as_posix()}/"
        for p in _generated_dirs(directory, engine_name, reports)
        if p.is_relative_to(directory) and p != directory
    ]
    path = directory / GITIGNORE
    if path.exists() and not path.is_file():
        raise InitError(f"{path} is not a file: the entries `harness init` adds go into a .gitignore file (nothing was written)")
    before = path.read_bytes() if path.is_file() else None
    # bytes that are no UTF-8 kept as they were
    text = (before or b"").decode("utf-8", "surrogateescape")
    present = {line.strip().strip("/") for line in text.splitlines()}
    added = tuple(entry for entry in dict.fromkeys(wanted) if entry.strip("/") not in present)
    if not added:
        return None, ()
    content = _appended(text, [IGNORE_HEADER, *added]).encode("utf-8", "surrogateescape")
    return _Write(path, content, before, by_hand=f"add {', '.join(added)} to it yourself"), added


def _generated_dirs(directory: Path, engine_name: str, reports: Path) -> list[Path]:
    """The reports directory the project's config names, and the environment the engine
    installs itself into (`harness install ENGINE`), when it has one of its own."""
    from harness.engines import get_engine

    env_dir = get_engine(engine_name).env_dir
    return [reports.resolve(), *([directory / env_dir] if env_dir else [])]


def _appended(text: str, lines: list[str]) -> str:
    """`text` with `lines` after it, in the file's own line ending (its first line's: a CRLF file
    stays CRLF) and with its final-newline state kept (a file that ended without one still does)."""
    eol = "\r\n" if re.match(r"[^\n]*\r\n", text) else "\n"
    block = eol.join(lines)
    if not text:
        return block + eol
    return text + block + eol if text.endswith("\n") else text + eol + block


def _read_only(path: Path) -> bool:
    """No write bit set (a file made read-only on purpose, honoured even by root), or not
    writable by this user."""
    return not path.stat().st_mode & 0o222 or not os.access(path, os.W_OK)


def _write_all(writes: list[_Write]) -> None:
    """Every file written, or none: each is checked first (a new file is not there yet, a file
    appended to is writable); then each new file is staged in full beside its target (a
    directory that cannot be written, a path through a file or a full disk fail here, before
    any target changes); then staged files are renamed into place and additions appended.
    A failure on the way puts back what was written and removes the directories made."""
    for write in writes:
        _check_writable(write)
    made: list[Path] = []  # directories made, deepest first
    staged: dict[Path, Path] = {}
    # the writes begun on their targets, the one under way included (an append may have written part)
    begun: list[_Write] = []
    current = writes[0]
    try:
        for current in writes:
            if current.before is None:
                _make_dirs(current.path.parent, made)
                _stage(current, staged)
        for current in writes:
            begun.append(current)
            if current.before is None:
                os.replace(staged.pop(current.path), current.path)
            else:
                _append(current.path, current.content[len(current.before) :])
    except OSError as exc:
        state = _put_back(begun, made)
        raise InitError(f"cannot write {current.path}: {exc.strerror or exc} ({state})") from None
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def _check_writable(write: _Write) -> None:
    if write.before is None:
        if write.path.exists() or write.path.is_symlink():
            raise InitError(f"{write.path} exists: move it away and run again (nothing was written)")
    elif _read_only(write.path):
        instead = f", or {write.by_hand}" if write.by_hand else ""
        raise InitError(
            f"{write.path} is read-only: make it writable (`chmod u+w {write.path}`) and run again{instead} (nothing was written)"
        )


def _make_dirs(directory: Path, made: list[Path]) -> None:
    """`directory` and the parents it lacks, each put at the front of `made` as it is made."""
    for missing in reversed([d for d in (directory, *directory.parents) if not d.exists()]):
        missing.mkdir()
        made.insert(0, missing)


def _stage(write: _Write, staged: dict[Path, Path]) -> None:
    # a hidden name beside the target: the rename stays on one file system; "x": never another's file
    tmp = write.path.with_name(f".{write.path.name}.{secrets.token_hex(4)}.harness-init")
    with tmp.open("xb") as f:
        staged[write.path] = tmp  # made: removed whatever follows
        f.write(write.content)


def _append(path: Path, addition: bytes) -> None:
    with path.open("ab") as f:
        f.write(addition)


def _put_back(started: list[_Write], made: list[Path]) -> str:
    """Undo the writes begun (new files removed, appended files cut back to their old length)
    and remove the directories made; what to tell the user about the directory's state."""
    left: list[str] = []
    for write in reversed(started):
        try:
            if write.before is None:
                write.path.unlink(missing_ok=True)
            else:
                os.truncate(write.path, len(write.before))
        except OSError as exc:
            left.append(f"{write.path} ({exc.strerror or exc})")
    for directory in made:
        with contextlib.suppress(OSError):  # not empty: someone else's file arrived in it
            directory.rmdir()
    return f"could not put back {', '.join(left)}" if left else "nothing was written"
