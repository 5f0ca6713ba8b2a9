"""Which setting explains a run's failures, read off the matrix.

A setting (`sp=true`, or a pair such as `suite=llama-vl, compile=true`) explains the
failures when every judged scenario that has it failed and no scenario without it did.
The suite counts as a setting, so a failure confined to one model shows as such.
Unsupported scenarios and harness errors are left out: they say nothing of the engine.
"""

from __future__ import annotations

import itertools

from harness.contract.verdict import FAILED, Verdict
from harness.inputs.scenarios.scenario import split_id
from harness.run.report.escape import code, text


def _features(v: Verdict) -> set[tuple[str, object]]:
    # an engine version is a setting too (harness/inputs/engine_envs.py)
    base, label = split_id(v.scenario)
    found = {("suite", base.split("/", 1)[0])} | {(k, val) for k, val in v.settings.items()}
    return found | {("engine", label)} if label else found


def _failed(v: Verdict) -> bool:
    return v.verdict in FAILED or (v.verdict == "expected-failure")


def _switched_off(feature: tuple[str, object]) -> bool:
    """A feature left off (`sp=false`, `chunked_prefill=0`): the absence of a cause."""
    value = feature[1]
    return value is False or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def _label(features: tuple[tuple[str, object], ...]) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in features)


def explaining_settings(verdicts: list[Verdict]) -> str | None:
    """One sentence naming the smallest setting(s) that separate failures from passes, or
    the closest one and its exceptions; None when nothing failed or everything did."""

    judged = [v for v in verdicts if v.verdict not in ("unsupported", "error")]
    failed = {v.scenario for v in judged if _failed(v)}
    if not failed or len(failed) == len(judged):
        return None
    features = sorted(set().union(*(_features(v) for v in judged)), key=repr)
    # A setting switched on is a cause, one left off only a coincidence of the matrix: a
    # pair of switched-on settings explains before a single switched-off one does.
    switched_on = [f for f in features if not _switched_off(f)]
    for candidates, size in ((switched_on, 1), (switched_on, 2), (features, 1), (features, 2)):
        hits = []
        for combo in itertools.combinations(candidates, size):
            having = {v.scenario for v in judged if set(combo) <= _features(v)}
            if having == failed:
                hits.append(_label(combo))
        if hits:
            return (
                f"Failures explained by {code(hits[0])}: every scenario with it failed ({len(failed)}), "
                "none without it did" + (f" (equally: {'; '.join(code(h) for h in hits[1:4])})" if len(hits) > 1 else "") + "."
            )
    return _closest(judged, failed)


def _closest(judged: list[Verdict], failed: set[str]) -> str:
    """No exact explanation: the setting every failure shares with the fewest passes."""

    common = set.intersection(*(_features(v) for v in judged if v.scenario in failed))
    if not common:
        return f"No setting is shared by all {len(failed)} failing scenarios."
    passing = {f: sorted(v.scenario for v in judged if f in _features(v) and v.scenario not in failed) for f in common}
    best = min(sorted(common, key=repr), key=lambda f: len(passing[f]))
    return (
        f"No single setting or pair separates the failures: all {len(failed)} have {code(_label((best,)))}, "
        f"but so do {len(passing[best])} that pass: {text(', '.join(passing[best][:5]))}."
    )
