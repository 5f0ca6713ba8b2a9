"""What changed since the last run: new failures, fixed, still failing, drift.

A scenario is *failing* when it is not as expected (`Verdict.as_expected`: fail,
crash, hang, error, or an expected failure that now passes), the same rule the
gate stops on. Each scenario of a run is compared with its own latest result in an
earlier run of the same gate (usually the previous run; for a shard or a run that
skipped it, the last run that had it):

  new failures    failing now, not failing then
  fixed           failing then, not failing now
  still failing   failing both times
  first seen      failing now with no earlier result to compare with
  coverage lost   passed then, `unsupported` now (the engine stopped applying the
                  setting), and no expectation for this engine version declares it
                  unsupported: nothing fails, but the setting is no longer tested, so
                  the run stops as for a new failure (exit 1)

Drift: a passing scenario's metric that left its noise band. The band is built from
the same scenario's and metric's values in earlier *passing* runs of the gate (the
last BAND_WINDOW of them): centre = median, half-width =
max(BAND_SIGMAS x 1.4826 x MAD, BAND_REL_FLOOR x |median|, BAND_ABS_FLOOR).
1.4826 x MAD estimates the standard deviation robustly (one bad run does not widen
the band); the floors keep a metric that was bit-identical run after run (MAD = 0)
from flagging a change in its last printed digit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.contract.jsonfile import JSONObject
from harness.run.plan.priority import Suspects
from harness.run.report.history import metric_columns, read_history

BAND_WINDOW = 20
BAND_SIGMAS = 4.0
BAND_REL_FLOOR = 0.10
BAND_ABS_FLOOR = 1e-6


@dataclass(frozen=True)
class Band:
    center: float
    half_width: float
    samples: int

    @property
    def low(self) -> float:
        return self.center - self.half_width

    @property
    def high(self) -> float:
        return self.center + self.half_width

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def noise_band(past: pd.Series) -> Band:
    values = past.dropna().astype(float)
    center = float(values.median())
    mad = float((values - center).abs().median())
    half = max(BAND_SIGMAS * 1.4826 * mad, BAND_REL_FLOOR * abs(center), BAND_ABS_FLOOR)
    return Band(center, half, len(values))


@dataclass(frozen=True)
class Change:
    scenario: str
    verdict: str  # now
    reason: str  # now
    before: str = ""  # the earlier verdict ("" when none)
    before_run: str = ""


@dataclass(frozen=True)
class Drift:
    scenario: str
    metric: str  # "<check>.<name>"
    value: float
    band: Band
    before: float  # the latest earlier passing value


@dataclass
class Comparison:
    # the latest earlier run of the gate, None when there is none
    previous_run: str | None
    new_failures: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    still_failing: list[Change] = field(default_factory=list)
    first_seen: list[Change] = field(default_factory=list)
    drifted: list[Drift] = field(default_factory=list)
    coverage_lost: list[Change] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.drifted or self.coverage_lost)

    def to_dict(self) -> JSONObject:
        """As run.json keeps it: ids only; the report files have the details."""
        return {
            "previous_run": self.previous_run,
            "new_failures": [c.scenario for c in self.new_failures],
            "fixed": [c.scenario for c in self.fixed],
            "still_failing": [c.scenario for c in self.still_failing],
            "first_seen_failing": [c.scenario for c in self.first_seen],
            "coverage_lost": [c.scenario for c in self.coverage_lost],
            "drifted": [
                {
                    "scenario": d.scenario,
                    "metric": d.metric,
                    "value": d.value,
                    "band": [d.band.low, d.band.high],
                    "samples": d.band.samples,
                }
                for d in self.drifted
            ],
        }


def _verdict_text(row: pd.Series) -> str:  # a history row
    if row["verdict"] == "pass" and not row["as_expected"]:
        return "pass (unexpected)"
    verdict: str = row["verdict"]
    return verdict


def compare_with_history(current: pd.DataFrame, earlier: pd.DataFrame) -> Comparison:
    """`current`: this run's history rows; `earlier`: rows of earlier runs of its gate."""
    earlier = earlier.sort_values("started") if not earlier.empty else earlier
    result = Comparison(previous_run=str(earlier.iloc[-1]["run_id"]) if not earlier.empty else None)
    if current.empty:
        return result
    for _, now in current.sort_values("scenario").iterrows():
        past = earlier[earlier["scenario"] == now["scenario"]] if not earlier.empty else earlier
        _classify(result, now, past.iloc[-1] if len(past) else None)
        if now["verdict"] == "pass" and now["as_expected"] and len(past):
            result.drifted += _drifts(now, past[past["verdict"] == "pass"])
    return result


def _classify(result: Comparison, now: pd.Series, before: pd.Series | None) -> None:  # history rows
    failing_now = not now["as_expected"]
    if before is None:
        if failing_now:
            result.first_seen.append(Change(now["scenario"], _verdict_text(now), now["reason"]))
        return
    change = Change(now["scenario"], _verdict_text(now), now["reason"], _verdict_text(before), str(before["run_id"]))
    if _lost_coverage(now, before):
        result.coverage_lost.append(change)
        return
    failing_before = not before["as_expected"]
    if failing_now and not failing_before:
        result.new_failures.append(change)
    elif failing_now:
        result.still_failing.append(change)
    elif failing_before:
        result.fixed.append(change)


def _lost_coverage(now: pd.Series, before: pd.Series) -> bool:
    """Passed before, not tested now, and not declared unsupported for this engine version."""
    passed_before = before["verdict"] == "pass" and bool(before["as_expected"])
    declared = bool(now.get("declared_unsupported", False))
    return passed_before and now["verdict"] == "unsupported" and not declared


def _drifts(now: pd.Series, past_passing: pd.DataFrame) -> list[Drift]:
    found = []
    recent = past_passing.tail(BAND_WINDOW)
    for column in metric_columns(recent):
        value = now.get(column)
        past = recent[column].dropna()
        if value is None or pd.isna(value) or past.empty:
            continue
        band = noise_band(past)
        if not band.contains(float(value)):
            found.append(Drift(now["scenario"], column.split(".", 1)[1], float(value), band, float(past.iloc[-1])))
    return found


def gate_suspects(history: Path, gate: str | None) -> Suspects:
    """What a gate run should start with (harness/run/plan/priority.py): from the history store,
    whose unreadable files are skipped here (the report names them)."""
    if not gate:
        return Suspects()
    return suspects_from_history(read_history(history)[0], gate)


def suspects_from_history(rows: pd.DataFrame, gate: str) -> Suspects:
    """The scenarios whose latest result in `gate`'s history failed or drifted. "Latest"
    includes runs that did not end whole (interrupted, or stopped by --exitfirst: such a
    run's failure must lead the next run too), which the report's comparison leaves out."""
    if rows.empty or "gate" not in rows.columns:
        return Suspects()
    rows = rows[rows["gate"] == gate].sort_values(["started", "recorded"] if "recorded" in rows.columns else ["started"])
    latest = rows.drop_duplicates("scenario", keep="last")
    failed = frozenset(latest.loc[~latest["as_expected"].astype(bool), "scenario"])
    # the report's own drift rule, with each scenario's latest row as "now"
    drifted = frozenset(d.scenario for d in compare_with_history(latest, rows.drop(latest.index)).drifted)
    return Suspects(failed, drifted - failed)
