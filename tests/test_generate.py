"""The `generate` workload kind (task evals): the stop rule, its output fields, and the
same tokens from every setting of the reference engine, from the hf engine and (with
HARNESS_TEST_VLLM=1) from vLLM, on the zoo's tiny-llama."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.runbrief import (
    RunBrief,
    cut_generation,
    generate_params,
    stop_reached,
)

# --- the stop rule -----------------------------------------------------------------


def test_stop_reached_eos_and_sequences():
    assert not stop_reached([], [[5]], 1)
    assert stop_reached([4, 1], [], 1)
    assert not stop_reached([1, 4], [], 1)  # only the last token counts
    assert not stop_reached([4, 1], [], None)  # null: no EOS stop
    assert stop_reached([7, 8, 9], [[8, 9]], None)
    assert not stop_reached([8, 9, 7], [[8, 9]], None)  # must END with it
    assert stop_reached([9], [[8, 9], [9]], 1)
    assert not stop_reached([3, 4], [[]], None)  # an empty stop sequence never fires
    assert not stop_reached([9], [[8, 9]], None)  # shorter than the stop sequence
    assert stop_reached([7, 8, 9, 5], [[8, 9]], None, end=3)  # a prefix generated[:end]
    assert not stop_reached([7, 8, 9, 5], [[8, 9]], None, end=2)


def test_cut_generation():
    assert cut_generation([3, 8, 9, 4, 8, 9], [[8, 9]], 1, 10) == [3, 8, 9]  # first stop, kept
    assert cut_generation([3, 1, 8, 9], [[8, 9]], 1, 10) == [3, 1]
    assert cut_generation([3, 4, 5, 6], [[8, 9]], 1, 3) == [3, 4, 5]  # at most N
    assert cut_generation([], [[8, 9]], 1, 3) == []


def test_generate_params_defaults():
    w: dict[str, object] = {"name": "g", "kind": "generate", "prompts": [[1]], "max_new_tokens": "4"}  # as its JSON has it
    assert generate_params(w) == (4, [], None)
    w.update(stop=[[13, 13], [], [5]], eos_token_id=1)
    assert generate_params(w) == (4, [[13, 13], [5]], 1)


def test_generate_fields():
    f = EngineOutputs.generate_fields([[5, 6], [], [7, 8, 9]], 3)
    assert f["tokens"].tolist() == [[5, 6, -1], [-1, -1, -1], [7, 8, 9]]
    assert f["tokens"].dtype == torch.int64 and f["lengths"].dtype == torch.int64
    assert f["lengths"].tolist() == [2, 0, 3]
    with pytest.raises(ValueError):
        EngineOutputs.generate_fields([[1, 2, 3, 4]], 3)


def test_generate_groups_and_cache_shape():
    from harness.engines.reference.pipeline import (
        MAX_GEN_CACHE_TOKENS,
        MAX_GEN_SEQS_PER_BATCH,
        cache_shape_for,
        generate_groups,
    )

    groups = generate_groups([[1] * 10] * (MAX_GEN_SEQS_PER_BATCH + 1), 5)
    assert [len(g) for g in groups] == [MAX_GEN_SEQS_PER_BATCH, 1]
    long = MAX_GEN_CACHE_TOKENS // 4 - 6
    groups = generate_groups([[1] * 10, [1] * long] * 3, 6)
    assert all(len(g) * (long + 6) <= MAX_GEN_CACHE_TOKENS for g in groups)
    assert sum(len(g) for g in groups) == 6 and len(groups) == 2
    assert generate_groups([], 4) == []
    w = {"name": "g", "kind": "generate", "prompts": [[1] * 30] * 20, "max_new_tokens": 7}
    assert cache_shape_for([w]) == (20, 37)


def test_compare_and_localize_skip_generate():
    from harness.run.compare.localize import first_divergence
    from harness.run.compare.numeric import check_workloads
    from harness.run.compare.tolerances import tolerance_for

    w = {"name": "eval_x", "kind": "generate", "prompts": [[1, 2]], "max_new_tokens": 2}
    a = EngineOutputs()
    a.put("eval_x", **EngineOutputs.generate_fields([[3]], 2))
    b = EngineOutputs()
    b.put("eval_x", **EngineOutputs.generate_fields([[4, 5]], 2))
    assert check_workloads(a, b, [w], tolerance_for("float32")) == []
    assert first_divergence(a, b, [w]) is None


# --- engines, end to end -----------------------------------------------------------

MAX_NEW = 12


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from harness.inputs.zoo import model_dir

    return model_dir("tiny-llama")


@pytest.fixture(scope="module")
def workload(model_dir) -> dict:
    """Prompts whose greedy continuations (reference engine, tp1 eager, no stop) hold a
    token pair that becomes the stop sequence: it fires for some prompts, not others."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 512, (n,), generator=g).tolist() for n in (7, 15, 4, 22, 11, 9)]
    return {
        "name": "eval_test",
        "kind": "generate",
        "prompts": prompts,
        "max_new_tokens": MAX_NEW,
        "stop": [[500, 501]],
        "eos_token_id": 1,
    }


def _brief(model_dir, out: Path, workloads, engine="reference", **settings) -> RunBrief:
    settings = {"tp": 1, "pp": 1, "sp": False, "compile": False, **settings}
    return RunBrief("test/generate", engine, str(model_dir), "float32", settings, workloads, str(out))


def _with_stop(workload: dict, free: list[list[int]]) -> dict:
    """The workload with a stop sequence picked from free-running tokens (no stop, no
    EOS): a pair generated by prompt 1 (so it fires there, mid-way) and by as few
    others as can be; an EOS id never generated. `free` rides along for _expected."""
    assert all(len(t) == MAX_NEW and -1 not in t for t in free)
    pairs = [tuple(free[1][i : i + 2]) for i in range(2, MAX_NEW - 4)]

    def fires(pair):
        return sum(any(tuple(t[i : i + 2]) == pair for i in range(MAX_NEW - 1)) for t in free)

    pair = min(pairs, key=fires)
    assert fires(pair) < len(free)
    eos = next(t for t in range(3, 512) if all(t not in s for s in free))
    return {**workload, "stop": [list(pair), [99999]], "eos_token_id": eos, "free": free}


@pytest.fixture(scope="module")
def stop_workload(model_dir, workload, tmp_path_factory) -> dict:
    from tests.kit.ranks import run_in_process

    free = {**workload, "stop": [], "eos_token_id": None}
    out = run_in_process(_brief(model_dir, tmp_path_factory.mktemp("free") / "out", [free]))
    return _with_stop(workload, out.workload("eval_test")["tokens"].tolist())


def _expected(stop_workload) -> list[list[int]]:
    return [cut_generation(t, stop_workload["stop"], stop_workload["eos_token_id"], MAX_NEW) for t in stop_workload["free"]]


def _run(model_dir, tmp_path, stop_workload, **settings) -> EngineOutputs:
    from tests.kit.ranks import explain, launch_ranks

    w = {k: v for k, v in stop_workload.items() if k != "free"}
    greedy = {"name": "greedy", "kind": "greedy", "prompts": w["prompts"][:2], "max_new_tokens": 3, "top_k": 4}
    brief = _brief(model_dir, tmp_path / "out", [greedy, w], **settings)
    outcome = launch_ranks(brief, tmp_path)  # the harness's launcher, under a scaled budget
    if outcome.status != "ok":
        pytest.fail(explain(outcome))
    return EngineOutputs.load(tmp_path / "out")


def _assert_generated(out: EngineOutputs, expected: list[list[int]]) -> None:
    f = out.workload("eval_test")
    assert f["lengths"].tolist() == [len(e) for e in expected]
    assert f["tokens"].tolist() == EngineOutputs.generate_fields(expected, MAX_NEW)["tokens"].tolist()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "settings",
    [{}, {"tp": 2}, {"pp": 2}, {"compile": True}, {"tp": 2, "sp": True}],
    ids=["tp1", "tp2", "pp2", "tp1-compile", "tp2-sp"],
)
def test_reference_settings_give_the_same_tokens(settings, model_dir, stop_workload, tmp_path):
    expected = _expected(stop_workload)
    lengths = [len(e) for e in expected]
    assert any(n < MAX_NEW for n in lengths) and MAX_NEW in lengths  # the stop fires for some only
    out = _run(model_dir, tmp_path, stop_workload, **settings)
    _assert_generated(out, expected)
    assert out.meta["workloads"]["eval_test"] == {"kind": "generate"}
    if settings.get("compile"):
        assert out.meta["compile"]["graphs_compiled_during_run"] == 0, out.meta["compile"]


@pytest.mark.e2e
def test_hf_engine_gives_the_same_tokens(model_dir, stop_workload, tmp_path):
    pytest.importorskip("transformers")
    from harness.engines.hf.worker import run

    w = {k: v for k, v in stop_workload.items() if k != "free"}
    run(_brief(model_dir, tmp_path / "out", [w], engine="hf"))
    _assert_generated(EngineOutputs.load(tmp_path / "out"), _expected(stop_workload))


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("HARNESS_TEST_VLLM"), reason="real vLLM engine starts: run `make test-vllm`")
def test_vllm_engine_matches_hf(workload, tmp_path):
    """On tiny-llama-hf (vLLM's CPU attention has no head_dim 16): the stop picked from
    the hf engine's free-running tokens, vLLM against hf's tokens cut at it."""
    from harness.engines.hf.worker import run
    from harness.engines.vllm import VllmEngine
    from harness.inputs.zoo import model_dir
    from tests.kit import run_process

    hf_model = model_dir("tiny-llama-hf")
    free = {**workload, "stop": [], "eos_token_id": None}
    run(_brief(hf_model, tmp_path / "free", [free], engine="hf"))
    stop_workload = _with_stop(workload, EngineOutputs.load(tmp_path / "free").workload("eval_test")["tokens"].tolist())
    w = {k: v for k, v in stop_workload.items() if k != "free"}
    brief = _brief(hf_model, tmp_path / "out", [w], engine="vllm")
    brief.save(tmp_path / "spec.json")
    plan = VllmEngine().launch_plan(brief, str(tmp_path / "spec.json"))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, **plan.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    result = run_process(plan.argv, 600, "the vLLM engine run", env=env, cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    _assert_generated(EngineOutputs.load(tmp_path / "out"), _expected(stop_workload))
