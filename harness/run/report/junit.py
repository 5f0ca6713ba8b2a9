"""JUnit XML, one testsuite per scenario suite, one testcase per scenario.

Mapping (the one pytest uses, so CI dashboards read both alike):
pass -> passed; fail/crash/hang/unexpected pass -> <failure>; error -> <error>;
unsupported and expected-failure -> <skipped> with the reason.
A planned scenario that never ran (the run was killed or interrupted first) is an
<error>: a CI dashboard must not read an incomplete run as a green one.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from harness.contract.jsonfile import JSONObject
from harness.contract.verdict import Verdict


def _never_ran(scenario: str, meta: JSONObject) -> Verdict:
    why = (
        f"not run: --exitfirst stopped the run after {meta['stopped_after']} failed"
        if meta.get("stopped_after")
        else "never ran: the run ended (killed or interrupted) before this scenario did"
    )
    return Verdict(scenario, "error", why, reproduce=f"harness run {scenario}")


def junit_xml(verdicts: list[Verdict], meta: JSONObject) -> str:
    by_suite: dict[str, list[Verdict]] = defaultdict(list)
    for v in [*verdicts, *(_never_ran(s, meta) for s in meta.get("never_ran") or [])]:
        by_suite[v.scenario.split("/", 1)[0]].append(v)
    root = ET.Element("testsuites", name=f"harness {meta.get('run_id', '')}".strip())
    for suite, items in sorted(by_suite.items()):
        node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(items)))
        counts = {"failures": 0, "errors": 0, "skipped": 0}
        for v in items:
            case = ET.SubElement(node, "testcase", classname=suite, name=v.scenario.split("/", 1)[1], time=f"{v.duration_s:.2f}")
            if v.verdict == "error":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=v.reason).text = v.explain()
            elif not v.as_expected:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=v.headline(), type=v.verdict).text = v.explain()
            elif v.verdict in ("unsupported", "expected-failure"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{v.verdict}: {v.reason}")
        for k, n in counts.items():
            node.set(k, str(n))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
