"""The pipeline-parallel boundary contract, checked on what an engine reports of its
stage I/O (outputs meta `stage_io`: one entry per rank, see the reference engine).

For every boundary stage i -> i+1 and every TP rank: the keys and shapes stage i sent
must be those stage i+1 expects (its model's declaration), and the buffer stage i+1
allocated and received into must hold exactly what was sent. A key that one side has
and the other lacks is the bug class of vLLM PRs 37622 (a key missing from the empty
buffer) and 38031 (a field dropped when the inter-stage object was rebuilt), caught
even where the mistake happens not to crash or change the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.contract.jsonfile import JSONObject
from harness.run.compare.numeric import CheckResult

CHECK_NAME = "pp_contract"


def _differences(a: Mapping[str, object], b: Mapping[str, object], a_name: str, b_name: str) -> list[str]:
    problems = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            problems.append(f"'{key}' {a_name} but not {b_name}")
        elif key not in a:
            problems.append(f"'{key}' {b_name} but not {a_name}")
        elif a[key] != b[key]:
            problems.append(f"'{key}' {a_name} as {a[key]}, {b_name} as {b[key]}")
    return problems


def check_pp_contract(stage_io: list[JSONObject] | None) -> CheckResult | None:
    """The contract check of one run, or None when the engine reports no PP boundary."""
    ranks = {(s["pp_rank"], s["tp_rank"]): s for s in (stage_io or []) if s}
    if len({pp for pp, _ in ranks}) < 2:
        return None
    problems, boundaries = [], 0
    for (pp, tp), sender in sorted(ranks.items()):
        receiver = ranks.get((pp + 1, tp))
        if receiver is None:
            continue
        boundaries += 1
        where = f"stage {pp} -> {pp + 1} (tp rank {tp})"
        expects = receiver.get("expects") or receiver["received"]
        problems += [f"{where}: {p}" for p in _differences(sender["sent"], expects, "sent", "expected by the receiver")]
        problems += [f"{where}: {p}" for p in _differences(sender["sent"], receiver["received"], "sent", "in the receive buffer")]
    summary = (
        f"{boundaries} stage boundary crossings (per tp rank): keys and shapes agree" if not problems else "; ".join(problems[:4])
    )
    return CheckResult(CHECK_NAME, "contract", not problems, summary, {"boundaries": boundaries, "problems": problems})
