"""Engine versions side by side: one row per scenario, one column per engine version
(`harness run --engine-env A --engine-env B`, ids `suite/case@engine-version`)."""

from __future__ import annotations

from harness.contract.verdict import Verdict
from harness.inputs.scenarios.scenario import split_id
from harness.run.report.escape import code, text


def version_matrix(verdicts: list[Verdict]) -> tuple[list[str], list[tuple[str, dict[str, Verdict]]]]:
    """(engine labels in the order first seen, [(scenario, {label: verdict})]); empty
    when no verdict carries an engine version."""
    labels: list[str] = []
    rows: dict[str, dict[str, Verdict]] = {}
    for v in verdicts:
        base, label = split_id(v.scenario)
        if not label:
            continue
        if label not in labels:
            labels.append(label)
        rows.setdefault(base, {})[label] = v
    return _ordered(labels), list(rows.items())


def _ordered(labels: list[str]) -> list[str]:
    """Oldest version first where the labels parse as <engine>-<PEP 440 version>."""
    from packaging.version import InvalidVersion, Version

    def key(label: str) -> tuple[str, int, Version | None, str]:
        engine, _, version = label.rpartition("-")
        try:
            return (engine, 0, Version(version), label)
        except InvalidVersion:
            return (engine, 1, None, label)

    try:
        return sorted(labels, key=key)
    except TypeError:
        # mixed parsable and unparsable within one engine
        return labels


def cell(v: Verdict | None) -> str:
    if v is None:
        return "—"
    if v.unexpected_pass:
        return "pass (unexpected)"
    if v.verdict == "expected-failure":
        return f"expected-failure ({v.observed})" if v.observed else v.verdict
    return v.verdict


def versions_lines(verdicts: list[Verdict]) -> list[str]:
    """A Markdown table scenario x engine version -> verdict (no lines without versions)."""

    labels, rows = version_matrix(verdicts)
    if not labels:
        return []
    lines = [
        "## Engine versions side by side",
        "",
        "| scenario | " + " | ".join(code(lab, cell=True) for lab in labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    for base, by_label in rows:
        lines.append(f"| {code(base, cell=True)} | " + " | ".join(text(cell(by_label.get(lab))) for lab in labels) + " |")
    return lines + [""]


def versions_text(verdicts: list[Verdict]) -> str:
    """The same table for a terminal: aligned columns."""
    labels, rows = version_matrix(verdicts)
    if not labels:
        return ""
    table = [["scenario", *labels]] + [[base, *(cell(by.get(lab)) for lab in labels)] for base, by in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
