"""The Markdown reports: summary.md (what regressed, the table, then one section per
problem), pr-comment.md (short, for a PR comment) and the text of `harness report --diff`.

CI systems render HTML in Markdown, so every text taken from scenario files, engines or
tracebacks goes through one of `text` (prose), `code` (an inline code span) or `block`
(a fenced code block): none of it can become a tag, close its code span or block, or
split a table cell (report.html and junit.xml escape on their own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from harness.contract.expectations import engine_label
from harness.contract.jsonfile import JSONObject
from harness.contract.verdict import INTERACTION_SEP, Verdict
from harness.run import timings
from harness.run.report.axes import explaining_settings
from harness.run.report.escape import block, code, text
from harness.run.report.regressions import Change, Comparison, Drift
from harness.run.report.versions import versions_lines

if TYPE_CHECKING:
    from harness.run.report.run import RunReport

ICON = {"pass": "✅", "fail": "❌", "crash": "💥", "hang": "⏳", "unsupported": "➖", "expected-failure": "☑️", "error": "⚠️"}
# per list: a PR comment is read, not scrolled
PR_COMMENT_MAX_LINES = 15


def key_metric(v: Verdict) -> str:
    """The numeric metric first, then every eval's score next to the golden's."""
    parts: list[str] = []
    for c in v.checks:
        if c["kind"] == "logprobs" and not parts:
            parts.append(f"max|dlogprob| {c['metrics'].get('max_abs_dlogprob', float('nan')):.1e}")
    for c in v.checks:
        if c["kind"] == "accuracy":
            m = c["metrics"]
            parts.append(
                f"{c['name'].removeprefix('eval:')} {m['score']:.3f} (golden {m['golden_score']:.3f}, p={m['p_value']:.2g})"
            )
    return "; ".join(parts)


def where_diverged(v: Verdict) -> str:
    if v.crash:
        return f"rank {v.crash['rank']}"
    if v.hang:
        return ", ".join(f"rank {r}" for r in sorted(v.hang["stuck_at"]))
    if v.localization and (v.localization.get("layer") is not None or v.localization.get("module_class")):
        loc = v.localization
        place = loc.get("place") or f"layer {loc['layer']}"
        where = place + (f" ({loc['module_class']}, {loc['source']})" if loc.get("module_class") else "")
        where += f", pp stage {loc['pp_stage']}" if loc.get("pp_stage") is not None else ""
        ranks = loc.get("diverging_tp_ranks") or ([loc["tp_rank"]] if "tp_rank" in loc else [])
        return where + (f", tp rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if "tp_rank" in loc else "")
    if v.localization and v.localization.get("compiled") and v.localization.get("recorded"):
        text_: str = v.localization["text"]
        return text_
    accuracy: str | None = next((c["where"] for c in v.checks if c["kind"] == "accuracy" and c.get("where")), None)
    if accuracy:
        return accuracy
    for c in v.checks:
        fd = c.get("first_divergence")
        if fd:
            pos = f"position {fd['position']}" if "position" in fd else f"step {fd['step']}"
            return f"{c['name']}: prompt {fd['prompt']} {pos}"
    return ""


def counts_text(counts: Mapping[str, int], never_ran: list[str]) -> str:
    """`1 fail, 2 pass, 1 never ran`: what every planned scenario came to."""
    parts = [f"{n} {k}" for k, n in sorted(counts.items())]
    if never_ran:
        parts.append(f"{len(never_ran)} never ran")
    return ", ".join(parts) or "no scenarios"


def status_word(report: RunReport) -> str:
    """OK only for a run whose planned scenarios all ended as expected and whose
    rows are in the history store."""
    if report.failing:
        return "FAILED"
    if report.coverage_lost_ids:
        return "COVERAGE LOST"
    if report.never_ran:
        return "INCOMPLETE"
    if report.history_error:
        return "NOT RECORDED"
    if report.meta.get("nothing_tested") and not report.meta.get("allow_empty"):
        return "NOTHING TESTED"
    return "OK"


def counts_line(report: RunReport) -> str:
    total = len(report.verdicts) + len(report.never_ran)
    return f"**{status_word(report)}**: {text(counts_text(report.meta.get('counts', {}), report.never_ran))} of {total} scenarios"


def problems_lines(report: RunReport) -> list[str]:
    """What keeps the report from speaking for the whole run: scenarios that never
    ran, results that were not stored."""
    lines = []
    if report.never_ran:
        shown = ", ".join(code(s) for s in report.never_ran[:PR_COMMENT_MAX_LINES])
        more = f" and {len(report.never_ran) - PR_COMMENT_MAX_LINES} more" if len(report.never_ran) > PR_COMMENT_MAX_LINES else ""
        lines += [
            (
                f"**{not_run_text(report.meta, len(report.never_ran))}**{not_run_why(report.meta, code)}: "
                f"{shown}{more}. Run them again: {code('harness run ' + ' '.join(report.never_ran))}"
            ),
            "",
        ]
    if report.history_error:
        lines += [f"**Not recorded:** {text(report.history_error)}", ""]
    if report.meta.get("nothing_tested") and not report.meta.get("allow_empty"):
        lines += [
            (
                "**Nothing was tested:** every scenario ended `unsupported` (each says why below): the engine "
                "cannot run these settings or this model. `harness list --engines` shows what each engine runs; "
                "`--allow-empty` accepts such a run."
            ),
            "",
        ]
    if report.history_unreadable:
        lines += [history_partial_text(report.history_unreadable), ""]
    # what loading the suites said: an architecture gone from the engine's registry
    for notice in report.meta.get("notices") or []:
        lines += [f"**Note:** {text(notice)}", ""]
    return lines


def unneeded_bug_rows_lines(verdicts: list[Verdict]) -> list[str]:
    """Rows a suite added for known bugs (its lock's bug_rows) that ran where none of those bugs
    stands: said, so that the lock's entry can go once no release in use needs it."""
    by_bugs: dict[tuple[str, str], list[str]] = {}  # by (the bugs, the engine it ran on)
    for v in verdicts:
        if v.for_bugs and not v.for_bugs.get("standing"):
            key = (", ".join(v.for_bugs.get("bugs") or []), engine_label(v.versions))
            by_bugs.setdefault(key, []).append(v.scenario)
    lines = []
    for (bugs, on), ids in by_bugs.items():
        lines += [f"Rows {', '.join(code(i) for i in ids)} are for known bug {text(bugs)}, fixed in {text(on)}: not needed.", ""]
    return lines


def not_run_text(meta: JSONObject, count: int) -> str:
    if meta.get("stopped_after"):
        return f"Not run: {count} planned scenario(s)"
    return f"Incomplete: {count} planned scenario(s) never ran"


def not_run_why(meta: JSONObject, quote: Callable[[str], str] = str) -> str:
    """Why planned scenarios have no verdict: --exitfirst stopped the run at a failure, or
    the run ended (killed, interrupted) before they did."""
    if meta.get("stopped_after"):
        return f" (--exitfirst stopped the run after {quote(meta['stopped_after'])} failed)"
    return " (the run ended before they did)"


def powerless_lines(verdicts: list[Verdict], limit: int | None = None) -> list[str]:
    """Checks that passed where they could not have failed (an eval whose score cannot drop
    detectably on its items): said beside the counts, not only in a collapsed section, so
    a pass there is not read as evidence."""
    found = [(v.scenario, c) for v in verdicts for c in v.checks if c.get("warning") and c.get("passed")]
    if not found:
        return []
    shown = found[:limit] if limit else found
    lines = [f"**Checks that could not fail: {len(found)}** (their pass says nothing of the score)", ""]
    lines += [f"- {code(sid)} {code(c['name'])}: {text(c['warning'])}" for sid, c in shown]
    if len(shown) < len(found):
        lines.append(f"- … and {len(found) - len(shown)} more (see summary.md)")
    return [*lines, ""]


def history_partial_text(unreadable: list[str]) -> str:
    files = text("; ".join(unreadable))
    return (
        f"**History comparison partial:** {len(unreadable)} file(s) of the history store could not be read and were "
        f"skipped, so the runs they hold are left out of what changed: {files}. Copy them again or remove them."
    )


def brief(reason: str, limit: int = 200) -> str:
    """A reason cut to `limit` for a one-line list, keeping its failing interaction whole:
    which axis values the failure needs is what a reader of a PR comment acts on."""
    head, sep, interaction = reason.partition(INTERACTION_SEP)
    cut = head if len(head) <= limit else head[:limit] + "…"
    return f"{cut}{INTERACTION_SEP}{interaction}" if sep else cut


def _change_line(c: Change, reproduce: dict[str, str]) -> str:
    was = f" (was {text(c.before)} in {code(c.before_run)})" if c.before else ""
    how = f" — {code(reproduce[c.scenario])}" if reproduce.get(c.scenario) else ""
    return f"- {ICON.get(c.verdict.split()[0], '')} {code(c.scenario)} {text(c.verdict)}{was}: {text(brief(c.reason))}{how}"


def _drift_line(d: Drift) -> str:
    return (
        f"- {code(d.scenario)} {text(d.metric)} = {d.value:.3g} (was {d.before:.3g}; band {d.band.low:.3g} .. {d.band.high:.3g} "
        f"from {d.band.samples} passing runs)"
    )


def changes_lines(comparison: Comparison | None, verdicts: list[Verdict], limit: int | None = None) -> list[str]:
    """What changed since the previous run of the gate, regressions first."""
    if comparison is None:
        return []
    if comparison.previous_run is None:
        return ["No earlier run of this gate in the history: nothing to compare with yet.", ""]
    reproduce = {v.scenario: v.reproduce for v in verdicts}
    lines = [f"Compared with the previous run {code(comparison.previous_run)}:", ""]
    groups = [
        (
            "Coverage lost (passed before, the engine no longer applies the setting; its evidence)",
            [_change_line(c, reproduce) for c in comparison.coverage_lost],
        ),
        ("New failures (regressions)", [_change_line(c, reproduce) for c in comparison.new_failures]),
        ("Drifted beyond the noise band (still passing)", [_drift_line(d) for d in comparison.drifted]),
        ("Still failing", [_change_line(c, reproduce) for c in comparison.still_failing]),
        ("Failing, no earlier result", [_change_line(c, reproduce) for c in comparison.first_seen]),
        ("Fixed", [_change_line(c, {}) for c in comparison.fixed]),
    ]
    if not any(items for _, items in groups):
        return lines + ["No change: no new failures, nothing fixed, no metric left its noise band.", ""]
    for title, items in groups:
        if items:
            shown = items[:limit] if limit else items
            more = [f"- … and {len(items) - len(shown)} more (see summary.md)"] if len(shown) < len(items) else []
            lines += [f"**{title}: {len(items)}**", "", *shown, *more, ""]
    return lines


def summary_markdown(report: RunReport) -> str:
    meta, verdicts = report.meta, report.verdicts
    lines = [f"# Harness run {text(meta.get('run_id', ''))}", "", counts_line(report), ""]
    explained = explaining_settings(verdicts)
    if explained:
        lines += [explained, ""]
    if meta.get("interrupted"):
        lines += ["**The run was interrupted; this report covers the scenarios that finished.**", ""]
    lines += problems_lines(report)
    lines += unneeded_bug_rows_lines(verdicts)
    lines += powerless_lines(verdicts)
    lines += changes_lines(report.comparison, verdicts)
    versions = meta.get("versions")
    if versions:
        lines += ["Versions: " + ", ".join(f"{text(k)} {text(v)}" for k, v in sorted(versions.items())), ""]
    lines += versions_lines(verdicts)
    lines += ["| scenario | verdict | key metric | where | time |", "|---|---|---|---|---|"]
    for v in verdicts:
        tag = "pass (unexpected)" if v.unexpected_pass else v.verdict
        wait = float((v.timings or {}).get("wait_s") or 0.0)
        waited = f" ({wait:.0f}s waiting for devices)" if wait >= 1 else ""
        lines.append(
            f"| {code(v.scenario, cell=True)} | {ICON.get(v.verdict, '')} {tag} | {text(key_metric(v))} | {text(where_diverged(v))} "
            f"| {v.duration_s:.1f}s{waited} |"
        )
    for v in report.failing + [v for v in verdicts if v.verdict in ("expected-failure", "unsupported")]:
        lines += ["", f"## {code(v.scenario)}: {v.verdict}", "", text(v.reason), ""]
        lines += expectation_lines(v)
        if v.tolerance:
            lines.append(f"Tolerance: {text(v.tolerance)}")
        for c in v.checks:
            lines.append(f"- {'ok' if c['passed'] else '**FAIL**'} {code(c['name'])} ({text(c['kind'])}): {text(c['summary'])}")
        if v.crash and v.crash.get("frame"):
            lines.append(
                f"Raised at {code(v.crash['frame'])}"
                + (f" (surfaced as {code(v.crash['wrapper'])})" if v.crash.get("wrapper") else "")
            )
            # the model's own line, above the engine's helper that raised
            if v.crash.get("model_frame"):
                lines.append(f"From the model's code at {code(v.crash['model_frame'])}")
        if v.crash and v.crash.get("traceback"):
            lines += [
                "",
                f"Rank {text(v.crash['rank'])} traceback (log: {code(v.crash['log'])}):",
                block(v.crash["traceback"].rstrip()[-3000:]),
            ]
        if v.hang:
            lines += [""] + [f"- rank {text(r)} stuck at {code(loc)}" for r, loc in sorted(v.hang["stuck_at"].items())]
        if v.error:
            lines += ["", block((v.error.get("traceback") or v.error.get("exception", "")).rstrip()[-3000:])]
        # verdicts of the Python API on outputs in hand have no command
        if v.reproduce:
            lines.append(f"\nReproduce: {code(v.reproduce)}")
    lines += time_lines(verdicts)
    return "\n".join(lines) + "\n"


def expectation_lines(v: Verdict) -> list[str]:
    """What the scenario file expected beside what happened (harness/contract/expectations.py)."""
    x = v.expectation
    if not x:
        return []
    lines = [
        f"- expected ({text(x['status'])}): {text(x['expected'])}: {text(x['reason'])}",
        f"- happened on {text(x['ran_on'])}: {text(x['happened'][:300])}",
    ]
    if x.get("why"):
        lines.append(f"- why it is not expected: {text(x['why'])}")
    return lines + [""]


def time_lines(verdicts: list[Verdict]) -> list[str]:
    """`Where the time went`: one row per scenario that recorded its phases, the sum,
    and the harness's own share (everything but the engine starting and running)."""
    timed = [v for v in verdicts if v.timings.get("phases")]
    if not timed:
        return []
    columns = [
        (name, label)
        for name, label in timings.COLUMNS
        if name not in timings.OCCASIONAL or any(name in v.timings["phases"] for v in timed)
    ]
    head = [label for _, label in columns] + ["harness other", "total"]
    lines = [
        "",
        "## Where the time went (seconds)",
        "",
        "Rank phases along the slowest rank; `harness other` = prepare, golden load, verdict.",
        "",
        "| scenario | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
    ]
    for label, t in [(code(v.scenario, cell=True), v.timings) for v in timed] + [
        ("**sum**", timings.total([v.timings for v in timed]))
    ]:
        phases = t["phases"]
        cells = [f"{phases[name]:.1f}" if name in phases else "" for name, _ in columns]
        cells += [f"{timings.harness_other(t):.1f}", f"{t['engine_s'] + t['harness_s'] + t['wait_s']:.1f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    gate = timings.total([v.timings for v in timed])
    share = gate["harness_s"] / max(gate["engine_s"] + gate["harness_s"], 1e-9)
    lines += [
        "",
        (
            f"The harness's own share: {gate['harness_s']:.1f}s of {gate['engine_s'] + gate['harness_s']:.1f}s "
            f"({100 * share:.1f}%); waiting for devices: {gate['wait_s']:.1f}s."
        ),
    ]
    return lines


def pr_comment_markdown(report: RunReport) -> str:
    """Short, for a PR comment: counts, regressions first, one line per failing scenario
    with the command that reproduces it locally."""
    meta = report.meta
    gate = f" (gate {text(meta['gate'])})" if meta.get("gate") else ""
    lines = [f"### Harness run {code(meta.get('run_id', ''))}{gate}", "", counts_line(report), ""]
    if meta.get("interrupted"):
        lines += ["⚠️ The run was interrupted: this covers only the scenarios that finished.", ""]
    lines += problems_lines(report)
    lines += powerless_lines(report.verdicts, limit=PR_COMMENT_MAX_LINES)
    lines += changes_lines(report.comparison, report.verdicts, limit=PR_COMMENT_MAX_LINES)
    comparison = report.comparison
    listed = (
        {c.scenario for c in comparison.new_failures + comparison.still_failing + comparison.first_seen}
        if comparison is not None and comparison.previous_run is not None
        else set()
    )
    others = [v for v in report.failing if v.scenario not in listed]
    if others:
        lines += [f"**Failing: {len(report.failing)}**", ""]
        lines += [
            f"- {ICON.get(v.verdict, '')} {code(v.scenario)} {'pass (unexpected)' if v.unexpected_pass else v.verdict}: "
            f"{text(brief(v.reason))} — {code(v.reproduce)}"
            for v in others[:PR_COMMENT_MAX_LINES]
        ]
        lines.append("")
    lines.append("Full report: `report.html` and `summary.md` in the run directory.")
    return "\n".join(lines) + "\n"


def diff_markdown(old_meta: JSONObject, new_meta: JSONObject, comparison: Comparison, verdicts: list[Verdict]) -> str:
    """`harness report --diff OLD NEW`: what changed from one run to the other."""
    lines = [f"# Harness diff: {code(old_meta.get('run_id'))} -> {code(new_meta.get('run_id'))}", ""]
    lines += changes_lines(comparison, verdicts)
    return "\n".join(lines)
