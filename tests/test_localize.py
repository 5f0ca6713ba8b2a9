"""Localisation of a numeric failure: the first place (the embedding's output, or the
stream after a layer) whose hidden states leave the golden's by more than float noise.

Unit tests on synthetic captures, then end to end: the reference engine's
tp-allreduce-perturb fault on llama-tiny/tp2-pp1 is named at the embedding on TP rank
1 (where the first perturbed value is), and clean PR-gate settings localise nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.contract.outputs import EngineOutputs
from harness.contract.rundir import outputs_dir
from harness.run.compare.localize import EMBEDDING, describe, first_divergence
from harness.run.compare.tolerances import hidden_rtol
from tests.kit import ROOT, harness_cli, scaled, verdict_of
from tests.kit.present import present

LAYERS, ROWS, H = 4, 6, 64
WORKLOADS = [{"name": "logits", "kind": "logprobs"}]


def stream(seed: int = 0) -> torch.Tensor:
    """[1 + layers, rows, H]: the embedding's output, then the stream after each layer."""
    return torch.randn(1 + LAYERS, ROWS, H, generator=torch.Generator().manual_seed(seed))


def golden_of(places: torch.Tensor, with_embedding: bool = True) -> EngineOutputs:
    out = EngineOutputs(meta={"dtype": "float32", "settings": {"tp": 1, "sp": False}})
    fields = {"hidden_states": places[1:], "hidden_rows": torch.arange(ROWS)}
    out.put("logits", **({"embed_states": places[0], **fields} if with_embedding else fields))
    return out


def tp2_run(replicas: torch.Tensor) -> EngineOutputs:
    """A tp2 run without SP: every TP rank's copy of the stream, rank 0's as the main view."""
    out = EngineOutputs(
        meta={"dtype": "float32", "settings": {"tp": 2, "sp": False}, "stage_io": [{"pp_rank": 0, "layers": [0, LAYERS]}]}
    )
    out.put(
        "logits",
        embed_states=replicas[0, 0],
        hidden_states=replicas[0, 1:],
        hidden_rows=torch.arange(ROWS),
        hidden_owner=torch.zeros(ROWS, dtype=torch.int64),
        replica_states=replicas,
    )
    return out


def signs() -> torch.Tensor:
    return 1 - 2 * (torch.arange(H) % 2)


def test_a_small_error_in_one_replica_is_named_at_the_embedding():
    places = stream()
    replicas = torch.stack([places, places]).clone()
    replicas[1, 0] += 1e-4 * signs()  # tp rank 1's embedding all-reduce, as the fault does
    replicas[:, 1:] += 1e-3 * torch.randn(LAYERS, ROWS, H)  # and everything after it moved more
    found = present(first_divergence(golden_of(places), tp2_run(replicas), WORKLOADS))
    assert (found["layer"], found["place"], found["pp_stage"], found["tp_rank"]) == (-1, EMBEDDING, 0, 1)
    assert found["diverging_tp_ranks"] == [1]
    assert describe(found).startswith("first diverging place: the embedding (before layer 0) (pp stage 0), replica of tp rank 1")


def test_the_bound_is_relative_to_each_rows_magnitude():
    places = stream()
    places[2, 0] *= 100  # a loud token after layer 1: its float noise is loud too
    noisy = places.clone()
    noisy[2, 0] *= 1 + 1e-7  # relative noise on the loud row: not a divergence
    assert present(first_divergence(golden_of(places), tp2_run(torch.stack([noisy, noisy])), WORKLOADS))["layer"] is None
    quiet = places.clone()
    quiet[1:, 3] *= 1e-3
    moved = quiet.clone()
    moved[3, 3] += 1e-5 * signs()  # tiny in absolute terms, 1e-2 of this quiet row: diverged
    found = present(first_divergence(golden_of(quiet), tp2_run(torch.stack([moved, moved])), WORKLOADS))
    assert (found["layer"], found["token_row"]) == (2, 3)


def test_noise_at_the_measured_floor_localises_nothing():
    places = stream()
    noisy = places * (1 + 6e-7 * torch.randn(places.shape, generator=torch.Generator().manual_seed(1)).sign())
    found = present(first_divergence(golden_of(places), tp2_run(torch.stack([places, noisy])), WORKLOADS))
    assert found["layer"] is None and found["max_rel_delta"] < hidden_rtol("float32")


def test_a_golden_without_the_embedding_is_compared_layer_by_layer():
    places = stream()
    moved = places.clone()
    moved[0] += 1.0  # the embedding moved, but an older golden has no embedding to compare
    moved[2] += 1.0
    found = present(first_divergence(golden_of(places, with_embedding=False), tp2_run(torch.stack([moved, moved])), WORKLOADS))
    assert (found["layer"], found["place"]) == (1, "layer 1")


# --- end to end ---------------------------------------------------------------------------


def harness_run(run_dir: Path, ids: list[str], *args: str) -> dict[str, dict]:
    per_scenario = scaled(300)  # the scenario file's timeout_s, scaled for this machine
    result = harness_cli(
        "run",
        *ids,
        "--report-dir",
        str(run_dir.parent),
        "--run-id",
        run_dir.name,
        "--history",
        str(run_dir.parent / "history"),
        "--timeout",
        f"{per_scenario:.0f}",
        *args,
        timeout=300 * (len(ids) + 1),
        what="harness run " + " ".join(ids),
    )
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    return {sid: verdict_of(run_dir, sid) for sid in ids}


@pytest.mark.e2e
@pytest.mark.parametrize("eps", ["1e-4", "1e-3"])
def test_perturbed_all_reduce_is_localised_at_the_embedding_of_tp_rank_1(eps, tmp_path):
    v = harness_run(tmp_path / "run", ["llama-tiny/tp2-pp1"], "--fault", f"tp-allreduce-perturb@{eps}")["llama-tiny/tp2-pp1"]
    assert v["verdict"] == "fail", v["reason"]
    loc = v["localization"]
    assert (loc["layer"], loc["pp_stage"], loc["tp_rank"]) == (-1, 0, 1), v["reason"]
    assert v["reason"].startswith("first diverging place: the embedding (before layer 0)"), v["reason"]


PR_GATE_CHEAP = ["llama-tiny/tp2-pp1", "llama-tiny/tp1-pp2", "llama-tiny/tp2-pp2-sp"]


@pytest.mark.e2e
def test_clean_runs_localise_nothing(tmp_path):
    """No false alarm: the localiser, run on clean outputs of TP, PP and PP+SP settings
    (it runs only after a failed check; here it is asked directly), finds no divergence."""
    run_dir = tmp_path / "run"
    verdicts = harness_run(run_dir, PR_GATE_CHEAP)
    golden = EngineOutputs.load(ROOT / "golden" / "llama-tiny")
    for sid, v in verdicts.items():
        assert v["verdict"] == "pass", v["reason"]
        outputs = EngineOutputs.load(outputs_dir(run_dir, sid))
        found = present(first_divergence(golden, outputs, WORKLOADS))
        assert found["layer"] is None, (sid, found)
        assert found["max_rel_delta"] < hidden_rtol("float32") / 5, (sid, found)  # measured: <= 6e-7
