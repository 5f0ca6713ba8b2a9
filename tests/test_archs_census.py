"""The census of an engine's architectures (`harness archs`, harness/run/census.py): every text
generator of the registry in exactly one state, with fakes of the registry, the suites, the
history, the builder and the engine's refusal; --engine-env through a fake interpreter; the
table docs/ARCHITECTURES.md holds in the shape the command writes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from harness.cli import main
from harness.contract import exit_codes
from harness.inputs import engine_envs
from harness.inputs.models.attempts import BuildAttempt
from harness.run import census
from harness.run.report.history import load_history, record

ROOT = Path(__file__).resolve().parent.parent

REGISTRY: dict[str, dict] = {
    "SweptForCausalLM": {"supports_pp": True},
    "RefusedForConditionalGeneration": {"reason": "vLLM 9.9 cannot load its RefusedForConditionalGeneration implementation here"},
    "OnlyEngineForCausalLM": {"supports_pp": True},  # no builder route
    "BrokenLMHeadModel": {"supports_pp": True},  # the builder refuses it
    "MlaForCausalLM": {"supports_pp": True},  # built; the engine refuses the checkpoint
    "FineForCausalLM": {"supports_pp": True},  # built, in no suite
    "UntriedForCausalLM": {"supports_pp": True},
    "SomeEncoderModel": {},
    "RewardForSequenceClassification": {},
}
ATTEMPTS = {
    "BrokenLMHeadModel": BuildAttempt("BrokenLMHeadModel", False, "tiny-model: a size field is None"),
    "MlaForCausalLM": BuildAttempt("MlaForCausalLM", True, "/cache/MlaForCausalLM-1"),
    "FineForCausalLM": BuildAttempt("FineForCausalLM", True, "/cache/FineForCausalLM-1"),
}


def inputs(**changed) -> census.CensusInputs:
    given = {
        "engine": "vllm",
        "versions": {"vllm": "9.9", "torch": "2.13.0", "transformers": "5.19.0"},
        "registry": REGISTRY,
        "sweeps": {
            "SweptForCausalLM": {"suite-a": ["suite-a/x-tp2", "suite-a/x-pp2", "suite-a/x-compile"], "suite-b": ["suite-b/y"]}
        },
        "last_verdicts": {"suite-a/x-tp2": "pass", "suite-a/x-pp2": "expected-failure"},
        "buildable_route": lambda arch: arch != "OnlyEngineForCausalLM",
        "known_attempt": ATTEMPTS.get,
        "attempt": None,
        "refusal": lambda directory: "CPU without AMX cannot decode an MLA model" if "Mla" in directory else None,
        "machine": {"AMX": False, "AVX-512": True, "AVX2": True},
    }
    return census.CensusInputs(**{**given, **changed})


def states(found: census.Census) -> dict[str, str]:
    return {line.arch: line.state for line in found.lines}


def test_every_generator_is_in_exactly_one_state_and_the_counts_add_up_to_the_registry():
    found = census.take_census(inputs())
    assert states(found) == {
        "SweptForCausalLM": census.SWEPT,
        "RefusedForConditionalGeneration": census.REFUSED,
        "MlaForCausalLM": census.REFUSED,
        "OnlyEngineForCausalLM": census.CANNOT_BUILD,
        "BrokenLMHeadModel": census.CANNOT_BUILD,
        "FineForCausalLM": census.BUILDABLE,
        "UntriedForCausalLM": census.NOT_TRIED,
    }
    assert found.others == ["RewardForSequenceClassification", "SomeEncoderModel"]
    assert sum(found.counts.values()) == found.generators == 7 and found.registered == 9
    # the lines come in the order of the states
    assert [line.state for line in found.lines] == sorted((line.state for line in found.lines), key=census.STATES.index)
    said = census.summary(found)
    assert "7 text-generating architectures of 9 registered (2 not a text generator)" in said
    assert "swept: 1; refused by the engine here: 2; cannot be built: 2; buildable, not swept: 1; not tried: 1; total: 7" in said


def test_each_state_says_why_in_the_words_of_whoever_said_it():
    lines = {line.arch: line for line in census.take_census(inputs()).lines}
    assert lines["RefusedForConditionalGeneration"].detail == REGISTRY["RefusedForConditionalGeneration"]["reason"]
    assert "without AMX" in lines["MlaForCausalLM"].detail
    assert lines["OnlyEngineForCausalLM"].detail == census.NO_ROUTE.format(engine="vLLM")
    assert lines["BrokenLMHeadModel"].detail == "tiny-model: a size field is None"
    assert "--try-build" in lines["UntriedForCausalLM"].detail


def test_a_refusal_with_a_known_remedy_says_what_it_would_take():
    arch = "NemotronForCausalLM"
    found = census.take_census(
        inputs(registry={arch: {}}, known_attempt=lambda a: BuildAttempt(a, False, "tiny-model: None * int"))
    )
    assert found.lines[0].detail == f"tiny-model: None * int; it would take: {census.BUILD_HINTS[arch]}"


def test_a_swept_arch_shows_each_suites_last_verdicts_or_that_none_ran():
    (line,) = [x for x in census.take_census(inputs()).lines if x.state == census.SWEPT]
    assert line.detail == "suite-a: 1 expected-failure, 1 pass, 1 of 3 not run yet; suite-b: not run yet (1 scenarios)"
    assert line.suites["suite-a"] == {"scenarios": 3, "verdicts": {"expected-failure": 1, "pass": 1}, "not_run": 1}


def test_the_last_verdicts_come_from_the_history_store_per_engine_environment(tmp_path):
    def rows(run_id: str, started: float, verdicts: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "run_id": run_id,
                    "gate": "nightly",
                    "started": pd.Timestamp(started, unit="s", tz="UTC"),
                    "merged_from": "",
                    "scenario": scenario,
                    "verdict": verdict,
                }
                for scenario, verdict in verdicts.items()
            ]
        )

    history = tmp_path / "history"
    record(history, rows("r1", 100, {"s/a": "fail", "s/b": "pass", "s/a@vllm-0.22.1": "crash"}))
    record(history, rows("r2", 200, {"s/a": "pass"}))
    frame = load_history(history)
    assert census.latest_verdicts(frame) == {"s/a": "pass", "s/b": "pass"}
    assert census.latest_verdicts(frame, "vllm-0.22.1") == {"s/a": "crash"}
    assert census.latest_verdicts(pd.DataFrame()) == {}


def test_try_build_attempts_what_was_never_tried_and_what_timed_out_and_nothing_else():
    asked = []

    def attempt(arch: str) -> BuildAttempt:
        asked.append(arch)
        return BuildAttempt(arch, True, f"/cache/{arch}")

    timed_out = {**ATTEMPTS, "FineForCausalLM": BuildAttempt("FineForCausalLM", False, "did not finish", timed_out=True)}
    found = census.take_census(inputs(attempt=attempt, known_attempt=timed_out.get))
    assert sorted(asked) == ["FineForCausalLM", "UntriedForCausalLM"]
    assert census.NOT_TRIED not in states(found).values()
    assert found.counts[census.BUILDABLE] == 2


def test_only_narrows_the_lines_and_says_so_but_not_the_registrys_count():
    found = census.take_census(inputs(only=["*ForCausalLM"]))
    assert all(line.arch.endswith("ForCausalLM") for line in found.lines) and len(found.lines) == 5
    assert found.generators == 7
    assert census.summary(found).startswith("5 of the 7 text-generating architectures (--only *ForCausalLM)")


def test_all_lists_the_architectures_that_are_no_text_generators():
    found = census.take_census(inputs())
    assert "SomeEncoderModel" not in census.text(found)
    assert re.search(r"^SomeEncoderModel +not a text generator$", census.text(found, show_all=True), re.M)
    assert found.as_json()["not_a_text_generator"] == 2


def test_the_markdown_region_is_rewritten_in_place_and_a_file_without_one_is_refused():
    table = census.markdown(census.take_census(inputs()), "2026-12-01")
    doc = f"# Title\n\nbefore\n\n{census.BEGIN}\nold table\n{census.END}\n\nafter\n"
    rewritten = census.rewrite_region(doc, table)
    assert rewritten.startswith("# Title\n\nbefore\n\n" + census.BEGIN) and rewritten.endswith(census.END + "\n\nafter\n")
    assert "old table" not in rewritten and "| SweptForCausalLM | swept |" in rewritten
    assert census.rewrite_region(rewritten, table) == rewritten
    try:
        census.rewrite_region("# no region\n", table)
    except ValueError as exc:
        assert census.BEGIN in str(exc)
    else:
        raise AssertionError("a document without the region was rewritten")


def region_shape_problems(document: str) -> list[str]:
    """What in the document's census region is not in the shape census.markdown writes."""
    start, end = document.find(census.BEGIN), document.find(census.END)
    if start < 0 or end < start:
        return ["no census region"]
    lines = document[start:end].splitlines()[1:]
    if len(lines) < 6:
        return [f"only {len(lines)} lines"]
    problems = []
    if not re.fullmatch(r"Measured \d{4}-\d\d-\d\d: \S+ \S+ \(.*\); this machine: AMX \w+, AVX-512 \w+, AVX2 \w+\.", lines[0]):
        problems.append(f"heading: {lines[0]}")
    counted = re.fullmatch(
        r"\*\*(\d+) text-generating architectures of (\d+) registered \((\d+) not a text generator\): (.*); total: (\d+)\*\*",
        lines[2],
    )
    if not counted:
        return [*problems, f"summary: {lines[2]}"]
    by_state = dict(part.rsplit(": ", 1) for part in counted[4].split("; "))
    if list(by_state) != list(census.STATES):
        problems.append(f"states: {list(by_state)}")
    rows = [line for line in lines[6:] if line.startswith("| ")]
    if lines[4:6] != ["| architecture | state | detail |", "|---|---|---|"]:
        problems.append(f"table head: {lines[4:6]}")
    row_states = [line.split(" | ")[1] for line in rows]
    if any(state not in census.STATES for state in row_states):
        problems.append(f"unknown states: {sorted(set(row_states) - set(census.STATES))}")
    if sum(int(n) for n in by_state.values()) != int(counted[5]) or int(counted[5]) != int(counted[1]) != len(rows):
        problems.append(f"counts: {counted[0]} for {len(rows)} rows")
    for state, n in by_state.items():
        if row_states.count(state) != int(n):
            problems.append(f"{state}: {n} counted, {row_states.count(state)} rows")
    return problems


def test_the_table_the_command_writes_has_the_shape_the_doc_is_checked_for():
    assert region_shape_problems(census.markdown(census.take_census(inputs()), "2026-12-01")) == []
    assert region_shape_problems(f"{census.BEGIN}\nMeasured yesterday\n{census.END}") != []


# --- the command ---------------------------------------------------------------------

FAKE_VLLM = """#!{python}
# a stand-in for another release's interpreter: answers the harness's probes as vLLM 0.22.1 would
import json, sys
args = sys.argv[sys.argv.index("harness.engines.vllm.probe") + 1:]
if args[:1] == ["--registry"]:
    answer = {{"vllm": "0.22.1", "archs": ["LlamaForCausalLM", "OldOnlyForCausalLM", "OldEncoderModel"],
              "support": {{"LlamaForCausalLM": {{"arch": "LlamaForCausalLM", "supports_pp": True}},
                          "OldOnlyForCausalLM": {{"arch": "OldOnlyForCausalLM", "supports_pp": False}}}}}}
else:
    answer = {{"vllm": "0.22.1", "torch": "2.9.0+cpu", "transformers": "4.57.1", "python": "3.11.7", "platform": "cpu"}}
print("HARNESS-PROBE " + json.dumps(answer))
"""


def fake_release(tmp_path: Path) -> Path:
    python = tmp_path / "vllm-0.22.1" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_VLLM.format(python=sys.executable))
    python.chmod(0o755)
    return python


def census_json(capsys, *argv: str) -> dict:
    assert main(["archs", "--json", *argv]) == exit_codes.OK
    return json.loads(capsys.readouterr().out)


def test_engine_env_takes_that_interpreters_registry_and_its_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    python = fake_release(tmp_path)
    history = tmp_path / "reports" / "history"
    started = pd.Timestamp(100, unit="s", tz="UTC")
    record(
        history,
        pd.DataFrame(
            [
                {"run_id": "r", "gate": "nightly", "started": started, "merged_from": "", "scenario": s, "verdict": v}
                for s, v in [("vllm-archs/arch-llama-tp1-pp1", "pass"), ("vllm-archs/arch-llama-tp1-pp1@vllm-0.22.1", "fail")]
            ]
        ),
    )
    found = census_json(capsys, "--engine-env", str(python), "--report-dir", str(tmp_path / "reports"))
    assert found["versions"]["vllm"] == "0.22.1" and found["registered"] == 3 and found["generators"] == 2
    lines = {line["arch"]: line for line in found["archs"]}
    assert lines["OldOnlyForCausalLM"]["state"] == census.CANNOT_BUILD
    # a path to an environment the harness did not build has a label of its own: none of the tagged runs are its
    assert lines["LlamaForCausalLM"]["suites"]["vllm-archs"]["verdicts"] == {}

    # the release form: the installed release's interpreter (none is installed here: a stand-in)
    monkeypatch.setattr(engine_envs, "installed_python", lambda engine, version: python)
    monkeypatch.setattr(engine_envs, "ensure_installed", lambda engine, name, version, say=print: python)
    found = census_json(capsys, "--engine-env", "vllm==0.22.1", "--report-dir", str(tmp_path / "reports"))
    lines = {line["arch"]: line for line in found["archs"]}
    assert found["versions"]["vllm"] == "0.22.1"
    assert lines["LlamaForCausalLM"]["suites"]["vllm-archs"]["verdicts"] == {"fail": 1}


def test_an_engine_that_is_not_installed_is_exit_2_saying_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(tmp_path / "no-such" / "python"))
    assert main(["archs"]) == exit_codes.USAGE
    said = capsys.readouterr().err
    assert "engine 'vllm' is not installed here" in said and "harness install vllm" in said


def test_an_engine_without_a_model_registry_is_exit_2(capsys):
    assert main(["archs", "--engine", "reference"]) == exit_codes.USAGE
    assert "has no model registry" in capsys.readouterr().err


def test_out_rewrites_only_the_marked_region_of_a_doc(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    python = fake_release(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Doc\n\n{census.BEGIN}\nstale\n{census.END}\n\nmore\n")
    assert main(["archs", "--engine-env", str(python), "--markdown", "--out", str(doc)]) == exit_codes.OK
    text = doc.read_text()
    assert text.startswith("# Doc\n\n") and text.endswith("\n\nmore\n") and "stale" not in text
    assert region_shape_problems(text) == []
    plain = tmp_path / "plain.md"
    plain.write_text("# no region\n")
    assert main(["archs", "--engine-env", str(python), "--markdown", "--out", str(plain)]) == exit_codes.USAGE
    assert plain.read_text() == "# no region\n" and "no region marked" in capsys.readouterr().err


def test_the_subcommand_is_listed_in_help_and_the_readme(capsys):
    try:
        main(["--help"])
    except SystemExit:
        pass
    assert "archs" in capsys.readouterr().out
    assert "harness archs" in (ROOT / "README.md").read_text()


def test_the_architectures_doc_holds_the_census_table_in_the_commands_shape():
    """Its shape, not its freshness: the table is of the vLLM it was measured on."""
    assert region_shape_problems((ROOT / "docs" / "ARCHITECTURES.md").read_text()) == []


def test_an_arch_a_registry_suite_leaves_out_is_in_the_state_its_reason_names():
    """`exclude: {Arch: {refused: ...}}` / `{cannot_build: ...}` puts the arch in that state with the
    suite's reason; a plain sentence keeps the arch's own state and adds the reason."""
    from harness.inputs.scenarios.registry import LeftOut

    left_out = {
        "FineForCausalLM": ("vllm-registry", LeftOut(refused="needs Triton here")),
        "UntriedForCausalLM": ("vllm-registry", LeftOut(cannot_build="a sub-config field cannot be set")),
        "MlaForCausalLM": ("vllm-registry", "a draft head"),
    }
    lines = {line.arch: line for line in census.take_census(inputs(left_out=left_out)).lines}
    assert (lines["FineForCausalLM"].state, lines["FineForCausalLM"].detail) == (
        census.REFUSED,
        "needs Triton here (vllm-registry leaves it out)",
    )
    assert lines["UntriedForCausalLM"].state == census.CANNOT_BUILD
    assert lines["MlaForCausalLM"].state == census.REFUSED
    assert lines["MlaForCausalLM"].detail.endswith("; vllm-registry leaves it out: a draft head")


def test_a_left_out_entry_gives_exactly_one_state():
    import pytest
    from pydantic import ValidationError

    from harness.inputs.scenarios.registry import LeftOut

    with pytest.raises(ValidationError, match="exactly one"):
        LeftOut(refused="a", cannot_build="b")
    with pytest.raises(ValidationError, match="exactly one"):
        LeftOut()


def test_a_recorded_load_that_failed_is_the_engines_refusal_and_one_that_worked_is_none(tmp_path, monkeypatch):
    """bench/vllm_only_builds.py loads each vLLM-only architecture's tiny checkpoint and keeps the
    answer per vLLM version: a checkpoint the generic route builds that vLLM does not load is
    'refused by the engine here' in vLLM's words, without the census loading anything."""
    from harness.cli.archs import _load_refusal
    from harness.inputs.models import attempts

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    refused, loaded = "/cache/models/tiny/AForCausalLM-1", "/cache/models/tiny/BForCausalLM-1"
    attempts.record_load(refused, "9.9", "RuntimeError: Unsupported block size: 16")
    attempts.record_load(loaded, "9.9", None)
    assert attempts.recorded_load(loaded, "9.9") == (True, "")
    assert _load_refusal(refused, "vllm", {"vllm": "9.9"}) == (
        "vLLM 9.9 does not load its tiny checkpoint: RuntimeError: Unsupported block size: 16"
    )
    assert _load_refusal(loaded, "vllm", {"vllm": "9.9"}) is None
    # another release, or a checkpoint never loaded: nothing is known
    assert _load_refusal(refused, "vllm", {"vllm": "9.10"}) is None and attempts.recorded_load("/x/C-1", "9.9") is None
