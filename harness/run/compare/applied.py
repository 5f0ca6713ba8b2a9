"""Did the setting under test really take effect?

An engine may accept a setting and quietly run another one: vLLM 0.20.2 switched
sequence parallelism off itself for a small hidden size ("hidden_size too small for
the SP threshold heuristic, disabling") and its SP scenarios then compared plain TP2
with the golden and called it a pass. So every engine reports, per axis, what it
applied and the evidence (EngineOutputs meta `applied`, written by the ranks):

    {"sp": {"applied": false, "evidence": "0 token reduce-scatters ran (24 all-reduces)"},
     "compile": {"applied": true, "evidence": "3 graphs compiled"}, ...}

An axis whose value differs from the golden setting (the thing the scenario tests) and
whose evidence says it was not applied makes the scenario `unsupported` with that
evidence, never `pass`. An axis the engine gives no evidence for is shown as "not
reported" (an engine plugin outside the harness may not report any).
"""

from __future__ import annotations

from collections.abc import Mapping

NOT_REPORTED = "not reported by the engine"


def axes_under_test(settings: Mapping[str, object], golden_settings: Mapping[str, object]) -> dict[str, object]:
    """The axes this scenario changes from the golden setting: what it exists to test.
    A missing golden axis counts as off (False / 1)."""

    def baseline(axis: str, value: object) -> object:
        if axis in golden_settings:
            return golden_settings[axis]
        return 1 if isinstance(value, int) and not isinstance(value, bool) else False

    return {axis: value for axis, value in settings.items() if value != baseline(axis, value)}


def evidence_table(
    settings: Mapping[str, object], golden_settings: Mapping[str, object], applied: Mapping[str, object] | None
) -> dict[str, dict[str, object]]:
    """{axis: {"value", "applied" (True / False / None when not reported), "evidence"}}
    for every tested axis: what the verdict records and the report shows."""
    applied = applied or {}
    table: dict[str, dict[str, object]] = {}
    for axis, value in axes_under_test(settings, golden_settings).items():
        entry = applied.get(axis)
        if isinstance(entry, dict) and "applied" in entry:
            table[axis] = {"value": value, "applied": bool(entry["applied"]), "evidence": str(entry.get("evidence", ""))}
        else:
            table[axis] = {"value": value, "applied": None, "evidence": NOT_REPORTED}
    return table


def unapplied_reason(table: Mapping[str, Mapping[str, object]]) -> str | None:
    """Why the run did not test its setting (an accepted axis the engine did not apply),
    or None when every reported axis took effect."""
    missed = [f"{axis}={entry['value']!r} ({entry['evidence']})" for axis, entry in table.items() if entry["applied"] is False]
    if not missed:
        return None
    return (
        "the engine accepted but did not apply "
        + "; ".join(missed)
        + ": this run tested another setting, so it proves nothing about this one"
    )
