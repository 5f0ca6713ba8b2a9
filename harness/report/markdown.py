"""summary.md: the table a person reads first, then one section per problem."""

from __future__ import annotations

from pathlib import Path

from harness.report.axes import explaining_settings
from harness.verdict import Verdict

ICON = {"pass": "✅", "fail": "❌", "crash": "💥", "hang": "⏳", "unsupported": "➖", "expected-failure": "☑️", "error": "⚠️"}


def key_metric(v: Verdict) -> str:
    for c in v.checks:
        if c["kind"] == "logprobs":
            return f"max\\|dlogprob\\| {c['metrics'].get('max_abs_dlogprob', float('nan')):.1e}"
    return ""


def where_diverged(v: Verdict) -> str:
    if v.crash:
        return f"rank {v.crash['rank']}"
    if v.hang:
        return ", ".join(f"rank {r}" for r in sorted(v.hang["stuck_at"]))
    if v.localization and v.localization.get("layer") is not None:
        loc = v.localization
        where = f"layer {loc['layer']}, pp stage {loc['pp_stage']}"
        return where + (f", tp rank {loc['tp_rank']}" if "tp_rank" in loc else "")
    for c in v.checks:
        fd = c.get("first_divergence")
        if fd:
            pos = f"position {fd['position']}" if "position" in fd else f"step {fd['step']}"
            return f"{c['name']}: prompt {fd['prompt']} {pos}"
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_markdown(path: Path, verdicts: list[Verdict], meta: dict) -> None:
    counts = meta.get("counts", {})
    bad = [v for v in verdicts if not v.as_expected]
    lines = [
        f"# Harness run {meta.get('run_id', '')}",
        "",
        f"{'**FAILED**' if bad else '**OK**'}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" of {len(verdicts)} scenarios",
        "",
    ]
    explained = explaining_settings(verdicts)
    if explained:
        lines += [explained, ""]
    if meta.get("interrupted"):
        lines += ["**The run was interrupted; this report covers the scenarios that finished.**", ""]
    versions = meta.get("versions")
    if versions:
        lines += ["Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())), ""]
    lines += ["| scenario | verdict | key metric | where | time |", "|---|---|---|---|---|"]
    for v in verdicts:
        tag = "pass (unexpected)" if v.unexpected_pass else v.verdict
        lines.append(f"| `{v.scenario}` | {ICON.get(v.verdict, '')} {tag} | {key_metric(v)} | {_cell(where_diverged(v))} | {v.duration_s:.1f}s |")
    for v in bad + [v for v in verdicts if v.verdict in ("expected-failure", "unsupported")]:
        lines += ["", f"## `{v.scenario}`: {v.verdict}", "", _cell(v.reason), ""]
        if v.tolerance:
            lines.append(f"Tolerance: {v.tolerance}")
        for c in v.checks:
            lines.append(f"- {'ok' if c['passed'] else '**FAIL**'} `{c['name']}` ({c['kind']}): {c['summary']}")
        if v.crash and v.crash.get("traceback"):
            lines += ["", f"Rank {v.crash['rank']} traceback (log: `{v.crash['log']}`):", "```", v.crash["traceback"].rstrip()[-3000:], "```"]
        if v.hang:
            lines += [""] + [f"- rank {r} stuck at `{loc}`" for r, loc in sorted(v.hang["stuck_at"].items())]
        if v.error:
            lines += ["", "```", (v.error.get("traceback") or v.error.get("exception", "")).rstrip()[-3000:], "```"]
        lines.append(f"\nReproduce: `{v.reproduce}`")
    path.write_text("\n".join(lines) + "\n")
