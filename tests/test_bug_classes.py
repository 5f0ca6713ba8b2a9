"""The mutation suite: each bug-class fault of the reference engine (docs/DESIGN.md's
five vLLM bugs, and the bug classes of expert parallelism, chunked prefill and prefix
caching) is caught in the scenarios that run its code path, with a verdict that
points at the cause, and every scenario that does not run that path still passes. With
no fault, all of them pass. Real ranks, the repository's scenario files and goldens, the
CLI. The table in docs/BUG_CLASSES.md is this suite's expectations, measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kit import harness_cli, outputs_meta, scaled, summary, verdict_of

pytestmark = pytest.mark.e2e


def passes(v: dict) -> None:
    assert v["verdict"] == "pass", v["reason"]


def crash(rank: int, exception: str):
    def check(v: dict) -> None:
        assert v["verdict"] == "crash", v["reason"]
        assert v["crash"]["rank"] == rank and exception in v["crash"]["exception"], v["reason"]

    return check


def fails_at(layer: int, stage: int, tp_rank: int | None = None, workload: str | None = None, clean: tuple = ()):
    """A numeric failure localised to `layer` on pp `stage` (and the SP shard of `tp_rank`);
    the workloads in `clean` still pass inside the same scenario."""

    def check(v: dict) -> None:
        assert v["verdict"] == "fail", v["reason"]
        loc = v["localization"]
        assert (loc["layer"], loc["pp_stage"]) == (layer, stage), v["reason"]
        assert loc.get("tp_rank") == tp_rank, v["reason"]
        if workload:
            assert loc["workload"] == workload, v["reason"]
        checks = {c["name"]: c["passed"] for c in v["checks"]}
        assert all(checks[w] for w in clean), checks

    return check


def fails_in(workload: str, clean: tuple = ()):
    """A numeric failure of `workload` (a decode: no per-layer capture to localise it);
    the workloads in `clean` still pass inside the same scenario."""

    def check(v: dict) -> None:
        assert v["verdict"] == "fail", v["reason"]
        checks = {c["name"]: c["passed"] for c in v["checks"]}
        assert checks[workload] is False and all(checks[w] for w in clean), checks

    return check


def and_its_layout(expect, label: str, workload: str):
    """`expect`, and the scenario's same-layout check of `workload` (held to `label`, its own
    layout without the feature: harness/run/stages/same_layout.py) fails too."""

    def check(v: dict) -> None:
        expect(v)
        checks = {c["name"]: c for c in v["checks"]}
        same = checks[f"{workload} vs {label}"]
        assert same["kind"] == "same-layout" and not same["passed"], same

    return check


# fault -> {scenario: expectation}: the scenarios that run the fault's code path, and
# neighbours that differ in the one setting (or model) that keeps them off it.
EXPECTED = {
    None: {
        "llama-tiny/tp1-pp1": passes,
        "llama-tiny/tp1-pp2": passes,
        "llama-tiny/tp2-pp1": passes,
        "llama-tiny/tp2-pp1-sp": passes,
        "llama-pli/tp1-pp2": passes,
        "llama-vl/tp1-pp1-compile": passes,
        "llama-kvc/tp1-pp2-kvc": passes,
        "llama-moe/tp2-pp1-ep": passes,
        "llama-features/tp1-pp2-chunked_prefill32": passes,
        "llama-features/tp1-pp2-prefix_cache": passes,
        "llama-spec/tp2-pp2-spec-ngram": passes,
        "llama-dp/tp1-pp1-dp2": passes,
    },
    "pp-buffer-missing-key": {
        "llama-tiny/tp1-pp2": crash(1, "KeyError: 'residual'"),  # only the non-first stage reads the buffer
        "llama-tiny/tp1-pp1": passes,
        "llama-pli/tp1-pp2": passes,  # its boundary carries no residual
    },
    "pp-drop-kv-connector-output": {
        "llama-kvc/tp1-pp2-kvc": crash(1, "KVConnectorStall: KV connector: 'saved' of prefix"),
        "llama-kvc/tp1-pp1-kvc": passes,  # no stage boundary to lose the reports at
        "llama-tiny/tp1-pp2": passes,  # no connector
    },
    "pp-drop-per-layer-inputs": {
        "llama-pli/tp1-pp2": fails_at(layer=2, stage=1),  # the first layer of the second stage
        "llama-pli/tp1-pp1": passes,
        "llama-tiny/tp1-pp2": passes,  # no per-layer inputs
    },
    "sp-residual-first-shard": {
        # rank 0's shard is the right one; the wrong slice is taken as the embedding enters the stream
        "llama-tiny/tp2-pp1-sp": fails_at(layer=-1, stage=0, tp_rank=1),
        "llama-tiny/tp2-pp1": passes,
    },
    "compile-warmup-without-images": {
        "llama-vl/tp1-pp1-compile": fails_at(layer=0, stage=0, workload="images", clean=("text",)),
        "llama-vl/tp1-pp1": passes,  # eager runs what it is given
    },
    "ep-expert-map-ignored": {
        # rank 1 runs experts 2-3 for the tokens routed to experts 0-1: the first MoE is layer 0's;
        # the all-reduce hands the wrong sum to every TP replica, the first of which is named
        "llama-moe/tp2-pp1-ep": fails_at(layer=0, stage=0, tp_rank=0),
        "llama-moe/tp2-pp1": passes,  # every rank holds every expert: no map to skip
    },
    "ep-dispatch-drop-token": {
        "llama-moe/tp2-pp1-ep": fails_at(layer=0, stage=0, tp_rank=0),
        "llama-moe/tp2-pp1": passes,  # no dispatch without EP
    },
    "chunked-prefill-drops-kv": {
        "llama-features/tp1-pp2-chunked_prefill32": and_its_layout(fails_at(layer=0, stage=0), "same layout tp1-pp2", "logits"),
        "llama-features/tp1-pp2-prefix_cache": passes,  # every prefill in one step
    },
    "prefix-cache-skips-stage": {
        # only the greedy workload reads the cache; the second stage's layers miss the prefix
        "llama-features/tp1-pp2-prefix_cache": and_its_layout(
            fails_in("greedy", clean=("logits",)), "same layout tp1-pp2", "greedy"
        ),
        "llama-features/tp1-pp1-prefix_cache": passes,  # one stage: the hit is restored
        "llama-features/tp1-pp2-chunked_prefill32": passes,  # no prefix cache
    },
    "dp-merge-misorders": {
        # prompts 1 and 2 swap outputs: the greedy check names the first prompt that differs
        "llama-dp/tp1-pp1-dp2": fails_in("greedy"),
        "llama-tiny/tp1-pp1": passes,  # one replica: nothing to merge
    },
    "spec-accepts-unverified-draft": {
        # a wrong draft becomes a token: against the golden and against plain greedy in the same layout
        "llama-spec/tp2-pp2-spec-ngram": and_its_layout(fails_in("greedy"), "same layout tp2-pp2", "greedy"),
        "llama-tiny/tp2-pp2": passes,  # plain decoding drafts nothing
    },
}


def run(run_dir: Path, ids: list[str], fault: str | None) -> dict[str, dict]:
    args = [
        "run",
        *ids,
        "--report-dir",
        str(run_dir.parent),
        "--run-id",
        run_dir.name,
        "--timeout",
        f"{scaled(300):.0f}",
    ]  # the scenario files' timeout_s, scaled for this machine
    args += ["--fault", fault] if fault else []
    result = harness_cli(*args, timeout=1200, what=f"harness run --fault {fault}")
    assert result.returncode == (0 if fault is None else 1), result.stdout[-3000:] + result.stderr[-3000:]
    return {sid: verdict_of(run_dir, sid) for sid in ids}


@pytest.mark.parametrize("fault", list(EXPECTED), ids=lambda f: f or "no-fault")
def test_fault_is_caught_only_where_its_code_runs(fault, tmp_path):
    verdicts = run(tmp_path / "run", list(EXPECTED[fault]), fault)
    for sid, expect in EXPECTED[fault].items():
        expect(verdicts[sid])
    text = summary(tmp_path / "run")
    if fault is not None:  # the run summary names the setting behind the failures
        assert "Failures explained by" in text, text
    else:  # the clean runs really took the paths the faults break
        meta = outputs_meta(tmp_path / "run", "llama-kvc/tp1-pp2-kvc")
        assert meta["kv_connector"]["loaded"] == 4 and meta["kv_connector"]["wait_steps"] == 0, meta["kv_connector"]
        meta = outputs_meta(tmp_path / "run", "llama-vl/tp1-pp1-compile")
        assert meta["compile"]["graphs_compiled_during_run"] == 0, meta["compile"]  # the warm-up capture served images
        for sid, axis in (
            ("llama-moe/tp2-pp1-ep", "ep"),
            ("llama-features/tp1-pp2-chunked_prefill32", "chunked_prefill"),
            ("llama-features/tp1-pp2-prefix_cache", "prefix_cache"),
            ("llama-spec/tp2-pp2-spec-ngram", "spec"),
            ("llama-dp/tp1-pp1-dp2", "dp"),
        ):
            applied = outputs_meta(tmp_path / "run", sid)["applied"][axis]
            assert applied["applied"], (sid, applied)  # experts split, prefills chunked, cache hits
        # the features are held to their own layout too, each layout run once for the run
        layouts = sorted(p.name for p in (tmp_path / "run" / "same-layout").iterdir())
        assert layouts == ["llama-features__tp1-pp2", "llama-spec__tp2-pp2"], layouts
        for sid, label, names in (
            ("llama-features/tp1-pp2-chunked_prefill32", "same layout tp1-pp2", ["logits", "greedy"]),
            ("llama-features/tp1-pp2-prefix_cache", "same layout tp1-pp2", ["logits", "greedy"]),
            ("llama-spec/tp2-pp2-spec-ngram", "same layout tp2-pp2", ["greedy"]),
        ):
            same = [c["name"] for c in verdicts[sid]["checks"] if c["kind"] == "same-layout"]
            assert same == [f"{n} vs {label}" for n in names], (sid, same)
