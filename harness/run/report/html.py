"""report.html: one self-contained page per run (no server, images inlined).

Top to bottom: what regressed since the previous run of the gate; the matrix as a
heat map per suite and the scenario table (for the PR gate the table first, and
suites in which nothing was tested folded away); one section per scenario (open for the ones
that need a look) with its checks, divergence plot, localization, crash traceback,
hang stacks, accuracy items; and the trend of every metric over the gate's runs.
Verdict fields this page does not know yet (added by later engines or checks) are
rendered generically: dicts as key/value tables, lists of dicts as tables.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import pandas as pd

from harness.contract.jsonfile import JSONObject
from harness.contract.verdict import Verdict
from harness.inputs.scenarios.scenario import split_id
from harness.run import timings
from harness.run.report import plots
from harness.run.report.history import metric_columns
from harness.run.report.markdown import key_metric, where_diverged
from harness.run.report.versions import cell, version_matrix

if TYPE_CHECKING:
    from harness.run.report.run import RunReport

TEMPLATES = Path(__file__).parent / "templates"
# rows of an item table (flipped accuracy items, ...) shown inline
MAX_ITEM_ROWS = 50
# Check fields the page renders itself; every other field is shown generically.
KNOWN_CHECK_FIELDS = {"name", "kind", "passed", "summary", "metrics", "tolerance", "first_divergence", "per_position"}


def anchor(scenario: str) -> str:
    return "s-" + scenario.replace("/", "__")


def _table(frame: pd.DataFrame) -> str:
    """In a box that scrolls sideways: a check with many metrics makes a table wider
    than the page, which would otherwise scroll the whole page."""
    html: str = frame.to_html(index=False, border=0, classes="tbl", escape=True, na_rep="")
    return '<div class="scroll">' + html + "</div>"


def _key_values(d: JSONObject) -> str:
    rows = [
        {"key": k, "value": v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v)} for k, v in d.items()
    ]
    return _table(pd.DataFrame(rows))


def _check_extras(check: JSONObject) -> list[tuple[str, str]]:
    """Tables for check fields this page has no special view of (e.g. an accuracy
    check's flipped items)."""
    extras = []
    for key, value in check.items():
        if key in KNOWN_CHECK_FIELDS or not value:
            continue
        if isinstance(value, list) and all(isinstance(x, dict) for x in value):
            more = f" (first {MAX_ITEM_ROWS} of {len(value)})" if len(value) > MAX_ITEM_ROWS else f" ({len(value)})"
            extras.append((f"{check['name']}: {key}{more}", _table(pd.DataFrame(value[:MAX_ITEM_ROWS]))))
        elif isinstance(value, dict):
            extras.append((f"{check['name']}: {key}", _key_values(value)))
        else:
            extras.append((f"{check['name']}: {key}", _key_values({key: value})))
    return extras


def _checks_table(v: Verdict) -> str:
    if not v.checks:
        return ""
    rows = [
        {"check": c["name"], "kind": c["kind"], "result": "ok" if c["passed"] else "FAIL", "summary": c["summary"]}
        for c in v.checks
    ]
    return _table(pd.DataFrame(rows))


def _metrics_table(v: Verdict) -> str:
    rows = [{"check": c["name"], **c.get("metrics", {})} for c in v.checks if c.get("metrics")]
    return _table(pd.DataFrame(rows)) if rows else ""


def _plotted_bound(check: JSONObject) -> float | None:
    """The bound the per-position deltas are held to: the check's own field; verdicts
    written before it existed carry it only in the tolerance text."""
    if check.get("bound") is not None:
        bound: float = check["bound"]
        return bound
    found = re.search(r"\|dlogprob\|<=(\S+),", check.get("tolerance", ""))
    return float(found.group(1)) if found else None


# Drawn plots by (scenario, check, bound, values): a plot drawn ahead, while the next
# scenario ran (draw_ahead), is not drawn again when the report is written.
_drawn: dict[tuple[object, ...], str | None] = {}
_drawn_lock = threading.Lock()
_drawer: ThreadPoolExecutor | None = None


def _divergence_plots(v: Verdict) -> list[str]:
    found = []
    for c in v.checks:
        if c["kind"] == "logprobs" and c.get("per_position"):
            bound = _plotted_bound(c)
            key = (v.scenario, c["name"], bound, tuple(c["per_position"]))
            with _drawn_lock:
                uri = _drawn.get(key)
            if uri is None:
                uri = plots.divergence_plot(c, bound)
                with _drawn_lock:
                    _drawn[key] = uri
            if uri:
                found.append(uri)
    return found


def draw_ahead(v: Verdict) -> None:
    """Draw a finished scenario's plots in a background thread, while the next scenario
    runs (its engine is other processes): most of a report's writing time is these
    plots, drawn then off the run's critical path. report_html finds them drawn."""
    global _drawer
    with _drawn_lock:
        if _drawer is None:
            _drawer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report-plots")
    _drawer.submit(_divergence_plots, v)


def _drift_plots(report: RunReport, scenario: str) -> list[tuple[str, str]]:
    drifts = [d for d in (report.comparison.drifted if report.comparison else []) if d.scenario == scenario]
    rows = report.trend_rows()
    found = []
    for d in drifts:
        mine = rows[rows["scenario"] == scenario]
        uri = plots.trend_plot(mine, "metric." + d.metric, report.meta["run_id"], d.band)
        if uri:
            found.append((d.metric, uri))
    return found


def scenario_section(report: RunReport, v: Verdict) -> JSONObject:
    drifted = {d.scenario for d in report.comparison.drifted} if report.comparison else set()
    return {
        "v": v,
        "anchor": anchor(v.scenario),
        "label": plots.verdict_label(v),
        "color": plots.COLORS[plots.verdict_label(v)],
        "open": (not v.as_expected) or v.scenario in drifted or v.verdict == "expected-failure",
        "new": v.scenario in report.new_failure_ids,
        "checks": _checks_table(v),
        "metrics": _metrics_table(v),
        "divergence": _divergence_plots(v) if v.verdict in ("pass", "fail", "expected-failure") else [],
        "first_divergences": [(c["name"], c["first_divergence"]) for c in v.checks if c.get("first_divergence")],
        "extras": [x for c in v.checks for x in _check_extras(c)],
        "localization": _key_values(v.localization) if v.localization else "",
        "drift_plots": _drift_plots(report, v.scenario),
        "time": timings.compact(v.timings),
    }


def trend_section(report: RunReport) -> tuple[list[tuple[str, str]], list[str]]:
    """One trend plot per metric that moved over the gate's runs; the constant ones by name."""
    rows = report.trend_rows()
    if rows.empty or rows["run_id"].nunique() < 2:
        return [], []
    trends, constant = [], []
    for column in sorted(metric_columns(rows)):
        values = rows[column].dropna()
        if values.nunique() <= 1:
            constant.append(f"{column.split('.', 1)[1]} = {values.iloc[0]:g}" if len(values) else column)
            continue
        uri = plots.trend_plot(rows, column, report.meta["run_id"])
        if uri:
            trends.append((column.split(".", 1)[1], uri))
    return trends, constant


def _versions_table(verdicts: list[Verdict]) -> JSONObject | None:
    """Scenario x engine version -> verdict, coloured as the heat maps (None: one version)."""
    labels, rows = version_matrix(verdicts)
    if not labels:
        return None
    shown = []
    for base, by_label in rows:
        cells = []
        for label in labels:
            v = by_label.get(label)
            cells.append(
                {
                    "text": cell(v),
                    "color": plots.COLORS[plots.verdict_label(v)] if v else "#eeeeee",
                    "anchor": anchor(v.scenario) if v else "",
                }
            )
        shown.append((base, cells))
    return {"labels": labels, "rows": shown}


# its template cache keeps report.html.j2 compiled for a run's second report
@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["anchor"] = anchor
    return env


def heatmap_sections(report: RunReport) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """One heat map per suite, and per engine version (harness/inputs/engine_envs.py): those of the
    suites in which something was tested, and those of the suites in which every
    scenario was unsupported (grey blocks that would push the verdicts down the page)."""
    suites: dict[str, list[Verdict]] = {}
    for v in report.verdicts:
        base, label = split_id(v.scenario)
        suites.setdefault(base.split("/", 1)[0] + (f" @ {label}" if label else ""), []).append(v)
    tested: list[tuple[str, str]] = []
    untested: list[tuple[str, str]] = []
    for suite, items in sorted(suites.items()):
        uri = plots.heatmap(items, report.new_failure_ids)
        if uri:
            (untested if all(v.verdict == "unsupported" for v in items) else tested).append((suite, uri))
    return tested, untested


def report_html(report: RunReport) -> str:
    heatmaps, untested = heatmap_sections(report)
    trends, constant = trend_section(report)
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            meta=report.meta,
            report=report,
            counts=sorted(report.meta.get("counts", {}).items()),
            colors=plots.COLORS,
            comparison=report.comparison,
            heatmaps=heatmaps,
            untested=untested,
            # a PR's reader looks for the scenarios that broke: the table before the pictures
            table_first=report.meta.get("gate") == "pr",
            rows=[
                {"v": v, "label": plots.verdict_label(v), "metric": key_metric(v), "where": where_diverged(v)}
                for v in report.verdicts
            ],
            sections=[scenario_section(report, v) for v in report.verdicts],
            trends=trends,
            constant=constant,
            versions_table=_versions_table(report.verdicts),
        )
    )
