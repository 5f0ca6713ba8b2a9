"""The tables of the docs read from run directories (verdict.json files written here, no
engine): bench/release_table.py (docs/ENGINE_VERSIONS.md's release x suite table) and
bench/feature_table.py (docs/ARCHITECTURES.md's feature and MoE table)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def release_table():
    spec = importlib.util.spec_from_file_location("release_table", ROOT / "bench" / "release_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(run: Path, scenario: str, verdict: str, vllm: str, **extra) -> None:
    d = run / "scenarios" / scenario.replace("/", "__")
    d.mkdir(parents=True)
    body = {
        "scenario": scenario,
        "verdict": verdict,
        "reason": extra.pop("reason", "r"),
        "duration_s": 12.3,
        "versions": {"vllm": vllm, "torch": "2.11.0", "transformers": "5.5.4"},
        "checks": [],
        **extra,
    }
    (d / "verdict.json").write_text(json.dumps(body))


def test_one_column_per_release_oldest_first_and_one_note_per_cause(tmp_path):
    rt = release_table()
    old, new = tmp_path / "old", tmp_path / "new"
    logits = [{"kind": "logprobs", "metrics": {"max_abs_dlogprob": 1.5e-5}}]
    write(old, "s/a@vllm-0.9.0", "pass", "0.9.0", checks=logits)
    bug = {"observed": "crash", "expected_failure": "vLLM's bug X (file.py:1)", "reason": "crash as expected: ..."}
    write(old, "s/a@vllm-0.20.2", "expected-failure", "0.20.2", **bug)
    write(old, "s/b@vllm-0.20.2", "expected-failure", "0.20.2", **bug)
    write(new, "s/a", "fail", "0.32.0", reason="logits: max|dlogprob|=1.06e-02")  # the pinned engine: no @ in the id
    lines = rt.table(rt.load([old, new]))
    assert lines[0] == "| scenario | `0.9.0` | `0.20.2` | `0.32.0` |"  # PEP 440 order, not text order
    assert lines[2] == "| `s/a` | pass, 1.50e-05, 12 s | expected-failure (crash) [1], 12 s | fail [2], 12 s |"
    assert lines[3] == "| `s/b` | - | expected-failure (crash) [1], 12 s | - |"
    assert "[1] vLLM's bug X (file.py:1)" in lines and "[2] logits: max\\|dlogprob\\|=1.06e-02" in lines


def test_one_cause_worded_apart_by_pids_ranks_releases_and_lines_is_one_note(tmp_path):
    rt = release_table()
    run = tmp_path / "run"
    said = (
        "rank Worker_DP{r} (vLLM worker: DP rank {r}, pid {pid}) crashed: NotImplementedError at x/base.py:{line} in all_gatherv"
    )
    write(run, "m/dp2@vllm-0.21.0", "crash", "0.21.0", reason=said.format(r=0, pid=11281, line=215))
    write(run, "m/dp2@vllm-0.28.0", "crash", "0.28.0", reason=said.format(r=1, pid=18298, line=260))
    write(run, "m/ep@vllm-0.28.0", "crash", "0.28.0", reason="rank VllmWorker-1 (vLLM worker) crashed: Fatal Python error")
    lines = rt.table(rt.load([run]))
    assert lines[2] == "| `m/dp2` | crash [1], 12 s | crash [1], 12 s |"
    assert lines[3] == "| `m/ep` | - | crash [2], 12 s |"  # another cause, another note
    notes = [line for line in lines if line.startswith("[")]
    assert len(notes) == 2 and notes[0].startswith("[1] rank Worker_DP0 (vLLM worker: DP rank 0, pid 11281)")
    assert notes[0].endswith("(as 2 cells word it; the others differ only in pids, ranks, releases or line numbers)")


def feature_table():
    spec = importlib.util.spec_from_file_location("feature_table", ROOT / "bench" / "feature_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_feature_table_says_how_a_scenario_compared_with_its_own_layout():
    ft = feature_table()
    same = {"kind": "same-layout", "passed": True, "metrics": {"bit_identical": True, "max_abs_dlogprob": 0.0}}
    assert ft.vs_layout({"checks": [{"kind": "logprobs", "metrics": {"max_abs_dlogprob": 1e-6}}]}) == "-"  # golden is its layout
    assert ft.vs_layout({"checks": [same, dict(same)]}) == "bit-identical"
    noisy = {"kind": "same-layout", "passed": True, "metrics": {"bit_identical": False, "max_step_dlogprob": 9.5e-7}}
    assert ft.vs_layout({"checks": [same, noisy]}) == "9.50e-07 (held)"
    assert ft.vs_layout({"checks": [same, {**noisy, "passed": False}]}) == "9.50e-07 (FAILED)"


def test_the_release_table_measures_scenarios_that_exist_and_one_of_each_newer_axis():
    """`--ids` feeds `harness run`: a renamed scenario would make every release's run an error."""
    from harness.contract.axes import AXES, default, same_value
    from harness.inputs.scenarios.loading import load_scenarios

    rt = release_table()
    ids = {s.id: s for s in load_scenarios()}
    missing = [i for i in (*rt.TABLE_IDS, *rt.AXIS_IDS) if i not in ids]
    assert missing == [], missing
    switched = {a for i in rt.AXIS_IDS for a, v in ids[i].settings.items() if a in AXES and not same_value(v, default(a))}
    assert {"prefix_cache", "chunked_prefill", "spec", "batch_invariant", "ep", "dp"} <= switched, switched
