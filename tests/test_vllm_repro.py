"""`harness repro` on real vLLM: the written script, run on its own (no harness on its
path), fails on the known vLLM 0.32 CPU eager-PP crash naming the crashed worker, and
passes where that bug is absent (PP with compile on, whose warm-up allocates the
buffer). Slow (vLLM engine starts: ~1 + 2 minutes on an idle 2-core machine):
`make test-vllm` sets HARNESS_TEST_VLLM=1 (docs/REPRO.md)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from harness.engines.vllm import VllmEngine
from tests.kit import harness_cli, run_process

pytestmark = pytest.mark.skipif(not os.environ.get("HARNESS_TEST_VLLM"), reason="real vLLM engine starts: run `make test-vllm`")


def write(tmp_path: Path, scenario_id: str) -> Path:
    out = tmp_path / "repro"
    result = harness_cli("repro", scenario_id, "--out", str(out), "--report-dir", str(tmp_path / "reports"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "BUG.md").is_file() and (out / "model" / "config.json").is_file()
    return out / "repro.py"


def run_script(script: Path, tmp_path: Path, python: str, *args: str):
    # no PYTHONPATH: the script must stand alone (the harness is not importable there)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return run_process(
        [python, str(script), "--work-dir", str(tmp_path / "work"), *args],
        900,
        f"python {script.name}",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_eager_pp_repro_exits_1_naming_the_crashed_worker(tmp_path):
    """Run by the harness's own interpreter (no vllm in it): `--python` gives the settings' one."""
    script = write(tmp_path, "vllm-llama/tp1-pp2")
    done = run_script(script, tmp_path, sys.executable, "--python", str(VllmEngine().python()))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RESULT: bug present: tp1-pp2 crash: Worker_PP1 (pid " in done.stdout, done.stdout
    assert "AssertionError at v1/worker/gpu_model_runner.py:" in done.stdout
    assert "in sync_and_gather_intermediate_tensors" in done.stdout
    assert "== tp1-pp1" not in done.stdout  # a crash needs no reference run


def test_compiled_pp_repro_exits_0_where_the_bug_is_absent(tmp_path):
    script = write(tmp_path, "vllm-llama/tp1-pp2-compile")
    done = run_script(script, tmp_path, str(VllmEngine().python()))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok] logits (logprobs)" in done.stdout and "[ok] greedy (greedy)" in done.stdout
    assert "RESULT: bug absent: tp1-pp2-compile matches tp1-pp1 within the tolerance" in done.stdout


def test_expert_parallel_repro_exits_1_naming_the_worker_that_died(tmp_path):
    """vLLM 0.32 CPU: EP hands global expert ids to a kernel holding the rank's 2 local
    experts (cpu_moe.py:303): TP rank 0's worker dies of SIGSEGV, no traceback of its own;
    the script names it by the executor's "died unexpectedly", not its peer's gloo error."""
    script = write(tmp_path, "vllm-moe/arch-qwen3-moe-tp2-pp1-ep")
    assert "'enable_expert_parallel': True" in script.read_text()
    done = run_script(script, tmp_path, str(VllmEngine().python()))
    assert done.returncode == 1, done.stdout + done.stderr
    # either EP rank's worker may fault first (both get global expert ids past their 2 local experts)
    assert re.search(r"RESULT: bug present: tp2-pp1-ep crash: Worker_TP[01]_EP[01] \(pid \d+\): ", done.stdout), done.stdout
    assert "== tp1-pp1" not in done.stdout


def test_spec_pp_repro_exits_1_naming_the_missing_drafter(tmp_path):
    """vLLM 0.32: only the last PP rank has a drafter (gpu_model_runner.py:590), every rank
    reads it (:7017): AttributeError on PP rank 0 at engine start."""
    script = write(tmp_path, "vllm-features/arch-llama-tp1-pp2-compile-spec-ngram")
    assert "'speculative_config': {'method': 'ngram'" in script.read_text()
    done = run_script(script, tmp_path, str(VllmEngine().python()))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RESULT: bug present: tp1-pp2-compile-spec-ngram crash: Worker_PP0 (pid " in done.stdout, done.stdout
    assert "AttributeError: 'CPUModelRunner' object has no attribute 'drafter'" in done.stdout
    assert "in initialize_kv_cache_tensors" in done.stdout
