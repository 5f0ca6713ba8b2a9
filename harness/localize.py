"""Where a numeric failure starts: the first layer whose hidden states leave the golden's.

Engines that capture per-layer hidden states on request (workload `capture_hidden`,
fields `hidden_states` [layers, rows, H] of sampled token rows, `hidden_rows` [rows]
their index in the batch, `hidden_owner` [rows] the TP rank whose SP shard held each) let a failing verdict name the first diverging layer,
the pipeline stage that runs it (from the engine's `stage_io`), and under SP the TP
rank whose shard diverged first. The bound is relative to each layer's scale and far
above float noise: it only locates a failure the logprob checks already found.
"""

from __future__ import annotations

from harness.contract.outputs import EngineOutputs

HIDDEN_RTOL = 1e-3  # |delta| / max |golden| of the layer; float32 TP/compile noise is ~1e-6


def _stage_of(layer: int, stage_io: list) -> int | None:
    for s in stage_io or []:
        if s and s["layers"][0] <= layer < s["layers"][1]:
            return s["pp_rank"]
    return None


def first_divergence(golden: EngineOutputs, scenario: EngineOutputs, workloads: list[dict]) -> dict | None:
    """The first diverging layer of the first captured workload, or None if nothing was captured."""
    for w in workloads:
        if w.get("kind") == "generate":  # eval generations capture nothing; the evals judge them
            continue
        g, s = golden.workload(w["name"]), scenario.workload(w["name"])
        if "hidden_states" not in g or "hidden_states" not in s:
            continue
        gh, sh = g["hidden_states"].float(), s["hidden_states"].float()
        if gh.shape != sh.shape:
            return {"workload": w["name"], "note": f"captured hidden states {tuple(sh.shape)} != golden {tuple(gh.shape)}"}
        scale = gh.abs().amax(dim=(1, 2)).clamp(min=1.0)
        delta = (sh - gh).abs().amax(dim=-1)  # [layers, tokens]
        bad = delta > HIDDEN_RTOL * scale[:, None]
        if not bad.any():
            return {"workload": w["name"], "layer": None,
                    "note": "every layer's hidden states agree: the divergence starts after the last layer "
                            "(final norm / lm_head) or outside the captured batch"}
        layer = int(bad.any(dim=1).nonzero()[0, 0])
        row = int(bad[layer].nonzero()[0, 0])
        token_row = int(s["hidden_rows"][row]) if "hidden_rows" in s else row
        found = {"workload": w["name"], "layer": layer, "pp_stage": _stage_of(layer, scenario.meta.get("stage_io")),
                 "token_row": token_row, "max_abs_delta": delta[layer].max().item()}
        if scenario.meta.get("settings", {}).get("sp") and "hidden_owner" in s:
            owners = s["hidden_owner"][bad[layer].nonzero().flatten()].unique().tolist()
            found["tp_rank"] = int(s["hidden_owner"][row])
            found["diverging_tp_ranks"] = owners
        return found
    return None


def describe(found: dict) -> str:
    """One phrase for a verdict's reason."""
    if found.get("layer") is None:
        return found.get("note", "")
    text = f"first diverging layer {found['layer']}"
    if found.get("pp_stage") is not None:
        text += f" (pp stage {found['pp_stage']})"
    if "tp_rank" in found:
        text += f", SP shard of tp rank {found['tp_rank']}"
    return text + f" [{found['workload']}: token row {found['token_row']}, |delta| {found['max_abs_delta']:.3g}]"
