"""The evals of one scenario, as the runner sees them: prepare, score, judge, store.

  prepare_evals   lm-eval's requests of every eval of the suite -> `generate` workloads
  score_evals     the engine's tokens -> per-item correctness (lm-eval's filters + metric)
  accuracy_checks golden vs scenario, paired per item (paired.py) -> one check per eval:
                  the score (McNemar) and each item's response against the golden's
  check_pairing   before the launch: the items pair with the golden, and the check can fail

lm-eval itself is only touched through lm.py, and only in the harness process.
"""

from __future__ import annotations

from pathlib import Path

# PairingError, PowerlessCheckError: the runner catches them
from harness.evals.paired import PairingError, PowerlessCheckError, compare_paired  # noqa: F401

MAX_FLIPPED_ROWS = 200  # flipped items kept in a verdict (all are counted)


def prepare_evals(eval_defs, model_dir: Path, work_dir: Path, gate: str | None) -> list:
    if not eval_defs:
        return []  # suites without evals never import lm-eval (it is heavy)
    from harness.evals import lm

    return [lm.collect(e, Path(model_dir), Path(work_dir) / "evals" / e.name, gate) for e in eval_defs]


def score_evals(prepared: list, outputs, model_dir: Path) -> dict[str, dict]:
    """{eval name: EvalResult dict} from the engine outputs of the eval workloads."""
    from harness.evals import lm
    from harness.zoo import load_tokenizer

    tokenizer = load_tokenizer(Path(model_dir))
    results = {}
    for p in prepared:
        fields = outputs.workload(p.workload["name"])
        if "tokens" not in fields:
            raise RuntimeError(f"the engine wrote no tokens for eval workload '{p.workload['name']}'")
        results[p.workload["name"].removeprefix("eval_")] = lm.score(p, fields["tokens"], tokenizer).to_dict()
    return results


def accuracy_checks(eval_defs, golden: dict[str, dict], results: dict[str, dict]) -> list[dict]:
    """One `accuracy` check per eval. The items were paired with the golden before the
    launch (check_pairing), so a PairingError here would be a harness bug."""
    checks = []
    for e in eval_defs:
        g, r = golden[e.name], results[e.name]
        cmp = compare_paired(e.name, g["items"], r["items"], e.filter, e.max_drop, e.alpha, e.max_differing_responses)
        other = {f"score_{f}": s for f, s in r["scores"].items()}
        other.update({f"golden_score_{f}": s for f, s in g["scores"].items()})
        checks.append({
            "name": f"eval:{e.name}",
            "kind": "accuracy",
            "passed": cmp.passed,
            "summary": f"{e.task}: " + cmp.summary(),
            "metrics": {
                "score": cmp.score, "golden_score": cmp.golden_score, "delta": cmp.delta,
                "ci95_low": cmp.ci95[0], "ci95_high": cmp.ci95[1], "p_value": cmp.p_value, "n": cmp.n,
                "flipped_to_wrong": len(cmp.flipped_to_wrong), "flipped_to_right": len(cmp.flipped_to_right),
                "smallest_detectable_drop": cmp.smallest_detectable_drop,
                "differing_responses": len(cmp.differing_responses), "max_differing_responses": e.max_differing_responses,
                **other,
            },
            "tolerance": (f"fail when drop > {e.max_drop:g} and McNemar p < {e.alpha:g} ({e.filter}), "
                          f"or more than {e.max_differing_responses} responses differ from the golden's"),
            "flipped": _flipped_rows(cmp, g["items"], r["items"], e.filter),
            "differing_responses": _differing_rows(cmp, g["items"], r["items"]),
            "warning": cmp.accuracy_powerless and f"the score cannot fail here: {cmp.accuracy_powerless}",
        })
        checks[-1]["where"] = _where(checks[-1])
    return checks


def _where(check: dict) -> str | None:
    """`eval:geo: items 3, 7, 12 flipped to wrong`: the report's where column for a failed
    accuracy check (reports read it, they do not rebuild it)."""
    if check["passed"]:
        return None
    ids = [r["doc_id"] for r in check["flipped"] if r["flipped"] == "to wrong"]
    what = "flipped to wrong"
    if not ids:  # the score held; the responses are what failed
        ids, what = [r["doc_id"] for r in check["differing_responses"]], "responded otherwise than the golden"
    more = "..." if len(ids) > 8 else ""
    return f"{check['name']}: items {', '.join(map(str, ids[:8]))}{more} {what}"


def _differing_rows(cmp, golden_items: list[dict], items: list[dict]) -> list[dict]:
    """Where the responses first part: the item, the golden's and this run's text."""
    gold = {it["doc_id"]: it for it in golden_items}
    here = {it["doc_id"]: it for it in items}
    rows = []
    for d in cmp.differing_responses[:MAX_FLIPPED_ROWS]:
        a, b = gold[d].get("response") or "", here[d].get("response") or ""
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        rows.append({"doc_id": d, "first_differing_char": at, "golden_response": a[max(0, at - 40):at + 80],
                     "response": b[max(0, at - 40):at + 80]})
    return rows


def _flipped_rows(cmp, golden_items: list[dict], items: list[dict], filter: str) -> list[dict]:
    """The flipped items with what each side answered: where an accuracy failure is."""
    gold = {it["doc_id"]: it for it in golden_items}
    here = {it["doc_id"]: it for it in items}
    rows = [(d, "to wrong") for d in cmp.flipped_to_wrong] + [(d, "to right") for d in cmp.flipped_to_right]
    return [{"doc_id": d, "flipped": way, "target": here[d].get("target"),
             "golden_answer": gold[d].get("answers", {}).get(filter), "answer": here[d].get("answers", {}).get(filter),
             "response": (here[d].get("response") or "")[:200]}
            for d, way in rows[:MAX_FLIPPED_ROWS]]


def check_pairing(prepared: list, golden: dict[str, dict]) -> None:
    """Before launching: every item about to be scored must be in the golden with the
    same prompt (raises PairingError), so a stale golden costs no engine start."""
    from harness.evals.paired import pair_items

    for p in prepared:
        name = p.workload["name"].removeprefix("eval_")
        pairs = pair_items(golden[name]["items"], p.items)
        refuse_powerless(p.eval_def, [g for g, _ in pairs])


def refuse_powerless(eval_def, golden_items: list[dict]) -> None:
    """A check that cannot fail is no check: when the score cannot drop detectably on
    these items and the scenario file lets every response differ, raise
    PowerlessCheckError (an `error` before launch) instead of a pass that proves nothing."""
    from harness.evals.paired import accuracy_power_problem

    n = len(golden_items)
    right = sum(int(g["correct"][eval_def.filter]) for g in golden_items)
    problem = accuracy_power_problem(n, right, eval_def.alpha, eval_def.max_drop)
    if problem and eval_def.max_differing_responses >= n:
        raise PowerlessCheckError(
            f"eval '{eval_def.name}' cannot fail on these {n} items: {problem}, and the scenario file lets all of "
            f"their responses differ (max_differing_responses: {eval_def.max_differing_responses}); lower "
            f"max_differing_responses, give it more items or a task the model scores on, or take the scenario "
            f"out of this gate")
